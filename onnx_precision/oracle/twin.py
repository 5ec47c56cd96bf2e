"""The twin graph: the FP32 model and one plan's emulation in ONE graph, compared inside it.

Inspecting a plan (:mod:`.inspection`) needs, for every float tensor, its FP32 range and the plan's
error against it. Exposing every intermediate as a graph output makes onnxruntime hold them all
until the run ends (a decoder at seq 1024: tens of GB), and capturing them a chunk at a time costs
two full runs per chunk. Here the graph computes the FP32 model and its baked plan
(:mod:`.baked`, every produced name renamed) node by node, and right after each node reduces
its output and the plan's to a few numbers (:func:`summary_nodes`: max |x|, smallest nonzero |x|,
counts of finite, infinite, nonzero and FP16-flushable values, the largest error where both are
finite). Small tensors are still fetched whole (fewer nodes, and numpy reduces them as before):
:meth:`.emulator.Emulator.twin` takes as many as its byte budget holds, smallest first. Run with
onnxruntime's priority-based order, the interleaved node order is kept, so each FP32 tensor dies
as soon as its twin has been compared: the peak is about one run's (scripts/bench_twin.py order: a
40-tensor chain peaks at 0.13 GB, against 1.41 GB in the default order, which runs one copy first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..float_types import LowPrecision
from ..graph import graphs, has_subgraphs, onnx_opset, subgraphs
from ..typing_rules import WIDE
from .baked import BakedBuilder
from .rounding import FLOAT, Names, elem_types, round_nodes
from .switch_builder import EmulationSource, assemble
from .switch_graph import captured
from .weights import without_initializers

MIN_OPSET = 11  # every op summary_nodes uses exists from here on (Equal takes floats from 11)
INT = TensorProto.INT32
FLOAT32_MAX = np.finfo(np.float32).max
# The numbers summary_nodes computes, in the order of its two outputs.
FLOATS = ("max_finite_abs", "min_nonzero_abs", "max_abs_err", "err_scale")
INTS = ("finite", "inf", "nonzero", "above_flush", "size", "plan_finite", "both_finite", "plan_size")
# Ops whose output is a decision taken on float values: a rounding to a whole number, a comparison, a
# choice of indices (and a Cast of a float to an integer type). An error far within tolerance flips one
# (3.4995 rounds to 3, its FP16 value 3.5 to 4), and the flip changes values, or the shape of what
# follows (the length of a Range over rounded durations), by whole units.
DECISIONS = frozenset({"Round", "Ceil", "Floor", "ArgMax", "ArgMin", "TopK", "NonZero", "NonMaxSuppression",
                       "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"})
# Ops whose output shape float values may set (a Range over floats, Resize's scales), besides decisions and
# ops with bodies (a branch or a trip count a flipped decision chose).
_SIZED_BY_VALUES = frozenset({"Range", "Resize", "Upsample"})
_INTEGERS = frozenset({TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                       TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                       TensorProto.BOOL})


class TwinUnavailable(Exception):
    """This model cannot be twinned (its opset predates the summary ops, or a subgraph shadows
    a graph input): inspect it by capturing intermediates instead."""


@dataclass(frozen=True)
class TwinModel:
    model: onnx.ModelProto
    outputs: tuple[str, ...]                  # the FP32 graph outputs, by their own names
    compared: tuple[str, ...]                 # float graph outputs, then main-graph float tensors
    plan_outputs: Mapping[str, str]           # graph output -> the plan's value of it (with a plan)
    whole: Mapping[str, str | None]           # tensor fetched whole -> the plan's copy (or None)
    summaries: Mapping[str, tuple[str, str]]  # tensor reduced in the graph -> (floats, ints) outputs

    def without_weights(self) -> TwinModel:
        """This twin with its main graph's initializers left out (:func:`.weights.without_initializers`):
        what a run of its built session and its readers need, the weights being the session's."""
        return replace(self, model=without_initializers(self.model))

    def fetches(self) -> list[str]:
        names = list(self.outputs) + list(self.plan_outputs.values())
        names += [n for t, twin in self.whole.items() for n in (t, twin) if n is not None]
        return list(dict.fromkeys(names + [n for pair in self.summaries.values() for n in pair]))


def build_twin_model(source: EmulationSource, lows: Mapping[str, LowPrecision] | None,
                     fp16_io: bool, whole: Callable[[tuple[str, ...], bool], frozenset[str]],
                     ) -> TwinModel:
    """``source.model`` and, unless ``lows`` is None, its plan baked as :func:`.baked.build_baked_model`
    bakes it, each node of ``lows`` in its 16-bit type (``fp16_io``: with graph inputs and outputs in
    the target's type), every main-graph float tensor compared; ``whole(tensors, twinned)`` picks
    those fetched whole, the others are summarised in the graph."""
    model, types, target = source.model, source.types, source.target
    if onnx_opset(model) < MIN_OPSET:
        raise TwinUnavailable(f"opset {onnx_opset(model)} < {MIN_OPSET}")
    spans: list[int] = [0] * len(model.graph.node)  # per node, where its twin's nodes end
    if lows is None:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        names = Names(out)
    else:
        def builder(out: onnx.ModelProto, type_protos: Mapping[str, onnx.TypeProto], keep: tuple[str, ...],
                    ) -> BakedBuilder:
            built.append(BakedBuilder(out, source, type_protos, lows, keep))
            return built[0]

        built: list[BakedBuilder] = []
        out = assemble(source, False, builder).model
        names, spans = built[0].names, built[0].spans
    outputs = tuple(o.name for o in model.graph.output)
    elems = elem_types(model, types)
    tensors = captured(model, elems, outputs, True)
    floats = {o.name for o in model.graph.output if o.type.tensor_type.elem_type in WIDE}
    compared = tuple(o for o in outputs if o in floats) + tensors
    # a float64 tensor is fetched whole: the summary's float32 arithmetic would make its values past
    # float32's range Inf, and the reference non-finite
    fetched = whole(tensors, lows is not None) | {t for t in tensors if elems[t] == TensorProto.DOUBLE}
    intermediate = set(tensors)
    may_resize = resizable(model.graph, elems) if lows is not None else frozenset()
    consts = _Constants(out, names)
    nodes: list[onnx.NodeProto] = []
    rename: dict[str, str] = {}
    if lows is not None and fp16_io:
        initializers = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.type.tensor_type.elem_type == FLOAT and vi.name not in initializers:
                rename[vi.name] = names.fresh(vi.name + "__twin")
                nodes.extend(round_nodes(vi.name, rename[vi.name], names, target.low))
    twin_nodes = _twin(out.graph, names, rename) if lows is not None else []
    summaries: dict[str, tuple[str, str]] = {}
    whole_pairs: dict[str, str | None] = {}
    start = 0
    for node, end in zip(model.graph.node, spans):
        nodes.append(node)
        nodes.extend(twin_nodes[start:end])
        start = end
        for o in node.output:
            if o not in intermediate:
                continue
            plan_value = rename.get(o, o) if lows is not None else None
            if o in fetched:
                whole_pairs[o] = plan_value
            else:
                made, summaries[o] = summary_nodes(o, plan_value, names, consts, target.low.flush,
                                                   o in may_resize)
                nodes.extend(made)
    plan_outputs: dict[str, str] = {}
    if lows is not None:
        for o in outputs:
            plan_outputs[o] = rename.get(o, o)
            if fp16_io and o in floats:
                plan_outputs[o] = names.fresh(o + "__twin_fp16")
                nodes.extend(round_nodes(rename.get(o, o), plan_outputs[o], names, target.low))
    for o in outputs:
        if o in floats:
            whole_pairs[o] = plan_outputs.get(o)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    graph_outputs = {o.name: o for o in model.graph.output}
    del out.graph.output[:]
    out.graph.output.extend(graph_outputs.values())
    exposed = set(graph_outputs)
    for o, name in plan_outputs.items():
        if name not in exposed:
            exposed.add(name)
            out.graph.output.append(_renamed(graph_outputs[o], name))
    typed = [(n, elems.get(o, FLOAT)) for o, twin in whole_pairs.items() for n in (o, twin) if n is not None]
    typed += [(n, elem) for pair in summaries.values() for n, elem in zip(pair, (FLOAT, INT))]
    for name, elem in typed:
        if name not in exposed:
            exposed.add(name)
            out.graph.output.append(helper.make_tensor_value_info(name, elem, None))
    return TwinModel(out, outputs, compared, plan_outputs, whole_pairs, summaries)


def is_decision(node: onnx.NodeProto) -> bool:
    """Whether ``node`` decides on values (:data:`DECISIONS`, or a Cast to an integer type)."""
    if node.op_type == "Cast":
        return any(a.name == "to" and a.i in _INTEGERS for a in node.attribute)
    return node.op_type in DECISIONS


def sets_shapes(node: onnx.NodeProto, elems: Mapping[str, int]) -> bool:
    """Whether a plan's rounding can change the shape of what ``node`` and the nodes after it compute: a
    decision on float inputs, an op whose output shape float values set, or an op with bodies."""
    floats_in = any(elems.get(i) in WIDE for i in node.input if i)
    return (floats_in and (is_decision(node) or node.op_type in _SIZED_BY_VALUES)) or has_subgraphs(node)


def resizable(graph: onnx.GraphProto, elems: Mapping[str, int]) -> frozenset[str]:
    """The main-graph tensors whose shape may differ between FP32 and a plan: those downstream of a
    node that :func:`sets_shapes`. Every other tensor's shape follows from the graph inputs' alone, the
    same in both runs."""
    found: set[str] = set()
    for node in graph.node:
        if any(i in found for i in node.input) or sets_shapes(node, elems):
            found.update(o for o in node.output if o)
    return frozenset(found)


def _renamed(vi: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(vi)
    copy.name = name
    return copy


def _twin(graph: onnx.GraphProto, names: Names, rename: dict[str, str]) -> list[onnx.NodeProto]:
    """Copies of the baked graph's nodes with every name they produce renamed (subgraphs
    included), so the FP32 model's nodes can sit beside them; ``rename`` (filled in) may already
    redirect graph inputs."""
    produced: set[str] = set()
    for node in graph.node:
        produced.update(o for o in node.output if o)
        for _, sub in subgraphs(node):
            for g in graphs(sub):
                produced.update(v.name for v in g.input)
                produced.update(t.name for t in g.initializer)
                produced.update(o for n in g.node for o in n.output if o)
    shadowed = produced & ({v.name for v in graph.input} | {t.name for t in graph.initializer})
    if shadowed:
        raise TwinUnavailable(f"a subgraph shadows the graph's {sorted(shadowed)[0]!r}")
    rename.update((name, names.fresh(name + "__twin")) for name in sorted(produced))
    nodes = []
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        _rename_node(copy, rename, names)
        nodes.append(copy)
    return nodes


def _rename_node(node: onnx.NodeProto, rename: Mapping[str, str], names: Names) -> None:
    if node.name:
        node.name = names.fresh(node.name + "__twin")
    node.input[:] = [rename.get(i, i) for i in node.input]
    node.output[:] = [rename.get(o, o) for o in node.output]
    for _, sub in subgraphs(node):
        for field in (sub.input, sub.output, sub.value_info):
            for vi in field:
                vi.name = rename.get(vi.name, vi.name)
        for t in sub.initializer:
            t.name = rename.get(t.name, t.name)
        for inner in sub.node:
            _rename_node(inner, rename, names)


class _Constants:
    """The few scalars the summaries share, made once as initializers."""

    def __init__(self, model: onnx.ModelProto, names: Names) -> None:
        self.graph = model.graph
        self.names = names
        self.ir_version = model.ir_version
        self._made: dict[str, str] = {}

    def __call__(self, key: str, value: np.ndarray) -> str:
        if key not in self._made:
            name = self.names.fresh(f"__twin_{key}")
            self.graph.initializer.append(numpy_helper.from_array(value, name))
            if self.ir_version < 4:
                self.graph.input.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
            self._made[key] = name
        return self._made[key]


class _Emitter:
    """Appends nodes named after the tensor they summarise."""

    def __init__(self, ref: str, names: Names) -> None:
        self.ref = ref
        self.names = names
        self.nodes: list[onnx.NodeProto] = []

    def __call__(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.names.fresh(f"{self.ref}__{op.lower()}")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.names.fresh(out), **attrs))
        return out

    def count(self, mask: str) -> str:
        return self("ReduceSum", [self("Cast", [mask], to=INT)], keepdims=1)

    def branch(self, outputs: Sequence[tuple[str, int, int]]) -> onnx.GraphProto:
        """The nodes so far as an If branch with ``outputs`` (name, element type, length)."""
        return helper.make_graph(self.nodes, self.names.fresh(f"{self.ref}__branch"), [],
                                 [helper.make_tensor_value_info(n, t, [k]) for n, t, k in outputs])


def summary_nodes(ref: str, plan: str | None, names: Names, consts: _Constants, flush: float,
                  may_resize: bool = False) -> tuple[list[onnx.NodeProto], tuple[str, str]]:
    """Nodes reducing the FP32 tensor ``ref`` (and the plan's ``plan``) to two small vectors: floats
    in the order of FLOATS, int32 counts in the order of INTS (the last three, and the last two
    floats, only with a plan). Every value is exact but the error, the float32 difference (what
    numpy's float64 difference rounds to).

    Where every value is finite (then the sum of x*0 is exactly 0) an If takes a short path: no
    masks of non-finite values, and counts (a Cast and an integer ReduceSum each) only where a
    value may flush. scripts/bench_twin.py twin --profile shows where a twin run's time goes.

    ``may_resize``: the plan's tensor may hold another number of elements than FP32's (:func:`resizable`).
    Then the short path runs only where the sizes agree, the long path pairs elements only then (its
    error and the count of elements finite in both left 0 otherwise), and ``plan_size`` tells it (the
    caller compares it with ``size``). The check costs four nodes a tensor, a third more time in a
    twin run where every tensor had them (scripts/bench_twin.py), so only such tensors have it."""
    main = _Emitter(ref, names)
    flat = consts("flat", np.array([-1], np.int64))
    zero, inf = consts("zero", np.array(0, np.float32)), consts("inf", np.array(np.inf, np.float32))
    flush_at = consts("flush", np.array(flush, np.float32))
    no_counts = consts("no_counts", np.zeros(2, np.int32))
    r = main("Reshape", [ref, flat])
    c = None if plan is None else main("Reshape", [plan, flat])
    # x * 0 is 0 where x is finite, NaN where it is not: the sum is 0 exactly when all are finite
    total = main("ReduceSum", [main("Mul", [r, zero])], keepdims=1)
    if c is not None:
        total = main("Add", [total, main("ReduceSum", [main("Mul", [c, zero])], keepdims=1)])
    short = all_finite = main("Equal", [total, zero])
    same_size = None
    if c is not None and may_resize:
        # elementwise comparisons of tensors of different sizes cannot broadcast: they run only where
        # the sizes are equal
        same_size = main("Equal", [main("Size", [r]), main("Size", [c])])
        short = main("And", [all_finite, same_size])
    k = 2 if c is None else 4
    floats, ints = names.fresh(f"{ref}__floats"), names.fresh(f"{ref}__ints")
    outputs = ((floats, FLOAT, k), (ints, INT, k + 3 + (c is not None)))

    fast = _Emitter(ref, names)
    a = fast("Abs", [r])
    top = fast("ReduceMax", [a], keepdims=1)
    # Zeros lifted to the largest float (a little cheaper than Where: scripts/bench_twin.py ops):
    # the least is the smallest nonzero |x|, unless every value is zero (top 0; see _summarised).
    zeros = fast("Cast", [fast("Equal", [a, zero])], to=FLOAT)
    least = fast("ReduceMin", [fast("Add", [a, fast("Mul", [zeros, consts("big", np.array(FLOAT32_MAX))])])],
                 keepdims=1)
    may_flush = fast("Not", [fast("Greater", [least, flush_at])])
    counting = _Emitter(ref, names)
    positive, above = counting("Greater", [a, zero]), counting("Greater", [a, flush_at])
    counted = counting("Concat", [counting.count(positive), counting.count(above)], axis=0)
    skipped = _Emitter(ref, names)
    kept = skipped("Identity", [no_counts])
    counts = names.fresh(f"{ref}__counts")
    fast.nodes.append(helper.make_node("If", [may_flush], [counts], name=names.fresh(counts),
                                       then_branch=counting.branch([(counted, INT, 2)]),
                                       else_branch=skipped.branch([(kept, INT, 2)])))
    size = fast("Cast", [fast("Shape", [r])], to=INT)
    fast_floats = [top, least]
    fast_ints = [size, consts("no_inf", np.zeros(1, np.int32)), counts, size]
    if c is not None:
        fast_floats += [fast("ReduceMax", [fast("Abs", [fast("Sub", [c, r])])], keepdims=1), top]
        fast_ints += [size, size, size]
    fast_out = (fast("Concat", fast_floats, axis=0), fast("Concat", fast_ints, axis=0))

    slow = _Emitter(ref, names)
    a = slow("Abs", [r])
    finite = slow("Less", [a, inf])
    positive = slow("Greater", [a, zero])
    slow_floats = [slow("ReduceMax", [slow("Where", [finite, a, zero])], keepdims=1),
                   slow("ReduceMin", [slow("Where", [positive, a, inf])], keepdims=1)]
    slow_ints = [slow.count(finite), slow.count(slow("IsInf", [r])), slow.count(positive),
                 slow.count(slow("Greater", [a, flush_at])), slow("Cast", [slow("Shape", [r])], to=INT)]
    if c is not None:
        plan_finite = slow("Less", [slow("Abs", [c]), inf])

        def paired(into: _Emitter) -> tuple[str, str]:
            """The largest error and |x| where both are finite, and their count."""
            both = into("And", [finite, plan_finite])
            error = into("Abs", [into("Sub", [c, r])])
            return (into("Concat", [into("ReduceMax", [into("Where", [both, e, zero])], keepdims=1)
                                    for e in (error, a)], axis=0), into.count(both))

        if same_size is None:
            pair_floats, pair_both = paired(slow)
            plan_size = slow_ints[-1]
        else:
            same, other = _Emitter(ref, names), _Emitter(ref, names)
            pair_floats, pair_both = names.fresh(f"{ref}__errors"), names.fresh(f"{ref}__both")
            slow.nodes.append(helper.make_node(
                "If", [same_size], [pair_floats, pair_both], name=names.fresh(f"{ref}__paired"),
                then_branch=same.branch(list(zip(paired(same), (FLOAT, INT), (2, 1)))),
                else_branch=other.branch([(other("Identity", [consts("no_errors", np.zeros(2, np.float32))]),
                                           FLOAT, 2),
                                          (other("Identity", [consts("none_both", np.zeros(1, np.int32))]),
                                           INT, 1)])))
            plan_size = slow("Cast", [slow("Shape", [c])], to=INT)
        slow_floats.append(pair_floats)
        slow_ints += [slow.count(plan_finite), pair_both, plan_size]
    slow_out = (slow("Concat", slow_floats, axis=0), slow("Concat", slow_ints, axis=0))

    main.nodes.append(helper.make_node(
        "If", [short], [floats, ints], name=names.fresh(f"{ref}__summary"),
        then_branch=fast.branch([(n, t, k) for n, (_, t, k) in zip(fast_out, outputs)]),
        else_branch=slow.branch([(n, t, k) for n, (_, t, k) in zip(slow_out, outputs)])))
    return main.nodes, (floats, ints)
