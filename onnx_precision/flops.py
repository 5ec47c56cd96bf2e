"""Estimated FLOPs per node, for the 16-bit share of compute (:class:`FlopShares`) and for weighing pins."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx

from . import policy, quantized
from .float_types import LOW_TYPES
from .format import percent
from .graph import attr, graphs, has_subgraphs, is_onnx_domain, subgraphs, walk_nodes
from .inferred_shapes import Inferred, infer
from .plan import Precision, PrecisionPlan
from .typing_rules import elem_type

if TYPE_CHECKING:
    from .context import ModelContext

_FLOATS = frozenset((*LOW_TYPES, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE))
# A Constant is a value, not a computation; Shape and Size read a tensor's shape, not its values
_NO_FLOAT_COMPUTE = ("Constant", "Shape", "Size")


class NodeFlops(dict[str, float]):
    """Node -> estimated FLOPs (:func:`estimate_flops`), and the nodes whose cost it could not estimate
    (``unknown``: node -> why, in words: its op, or where it runs an unknown number of times), each counted
    1 FLOP. The mapping every share reads; the nodes of unknown cost travel with it, so that what states a
    share can say how much of the model it could not weigh (:meth:`FlopShares.unknown_note`) and the
    share gate refuse to pass on a guess (:meth:`FlopShares.short_of`)."""

    def __init__(self, flops: Mapping[str, float] | None = None, unknown: Mapping[str, str] | None = None):
        super().__init__(flops or {})
        self.unknown: Mapping[str, str] = dict(unknown or {})


def unknown_cost(node_flops: Mapping[str, float]) -> Mapping[str, str]:
    """The nodes of ``node_flops`` whose cost is unknown (:class:`NodeFlops`), with why; {} for any other
    mapping (a report read back from JSON)."""
    return node_flops.unknown if isinstance(node_flops, NodeFlops) else {}


def estimate_flops(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
                   input_values: Mapping[str, np.ndarray] | None = None) -> NodeFlops:
    """FLOPs per node, from the shapes every value has with the graph inputs at ``input_shapes`` (the
    first sample's: symbolic dimensions resolve), inside If branches and Loop and Scan bodies too
    (:func:`..inferred_shapes.infer`; ``input_values``: the first sample's feed, whose small integer
    inputs an If may branch on). A node that computes in no float type has 0 and every other at
    least 1 (:meth:`FlopShares.counted` reads that): a Constant, Shape, Size, and a node that reads and
    writes no float tensor (integer arithmetic on shapes and indices: an int64 Mul computes, but in no
    precision a plan chooses, so it is no part of a 16-bit share). A value whose type inference leaves
    unknown counts as float. A node computing from constants only counts 1: the model holds it, but a
    runtime folds it at load and a run computes nothing of it (:func:`_folded`; Silero VAD slices and joins
    its LSTM weights so, 0.8 of its 2.9 MFLOP counted).

    Per node (:data:`_RULES`): 2*M*N*K for MatMul and Gemm; 2 x output x (C/group x kernel) for Conv
    (ConvTranspose: per input element); for LSTM, GRU and RNN (and a quantized op computing as one,
    :data:`..quantized.INTEGER_OPS`' twin) steps x batch x directions x gates x hidden x (2 x (input +
    hidden) + 3): the two matrix products of every gate at every step, then a bias add, an activation
    and a state update per gate value; 2 x the product of every index's size for an Einsum; the output's
    size for a Slice or Gather (it reads only what it writes; where that depends on data, its input's);
    the larger of the first input's and the output's size for everything else (so a reduction counts what
    it reads).

    A body's nodes count once per run of the body: the branch an If takes on a known condition once and
    the other's 1 FLOP each (nodes the model holds, which the samples do not run), both branches once
    each where the condition is unknown (a static estimate cannot know which runs); a Scan body once per
    step, a Loop body once per iteration of its constant trip count.

    Where a node's cost cannot be estimated it is counted 1 and listed in the result's ``unknown``
    (:class:`NodeFlops`): its shapes are unknown; its op is an attention kernel or from a domain whose
    ops have no rule here; or it runs in a Loop whose trip count is not a constant (counted for one
    iteration). Only for the shares of compute and for weighing pins."""
    found = infer(model, input_shapes, input_values)
    flops: dict[str, float] = {}
    unknown: dict[str, str] = {}
    fed = {value.name for value in model.graph.input}  # an initializer a feed may replace is no constant
    constant = {init.name for g in graphs(model.graph) for init in g.initializer} - fed

    def visit(graph: onnx.GraphProto, runs: float | None, why: str) -> None:
        for node in graph.node:
            folded = _folded(node, constant)
            if folded:
                constant.update(node.output)
            computes = _computes_in_float(node, found.types)
            cost = (1.0 if runs == 0 or folded else _cost(node, found.shapes)) if computes else 0.0
            if cost is None:
                unknown[node.name] = node.op_type
            elif cost > 0 and runs is None:
                unknown[node.name] = f"{node.op_type} {why}"
            flops[node.name] = 0.0 if cost == 0.0 else max(1.0 if cost is None else cost * (runs or 1.0), 1.0)
            for attr_name, body in subgraphs(node):
                visit(body, *_body_runs(node, attr_name, runs, why, found))

    visit(model.graph, 1.0, "")
    return NodeFlops(flops, unknown)


def integer_kernel_flops(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
                         names: Collection[str]) -> dict[str, float]:
    """The FLOPs of the integer kernels ``names`` (the ops of :data:`..quantized.INTEGER_OPS` with a
    float twin, counted as that twin: 2*M*N*K for a MatMul's), which :func:`estimate_flops` counts 0
    where they compute in no float type: what "71% of all FLOPs are INT8" counts
    (:func:`..quantized.shares_text`); nodes of other ops and those whose shapes are unknown are left out."""
    if not names:
        return {}
    shapes = infer(model, input_shapes).shapes
    flops: dict[str, float] = {}
    for ref in walk_nodes(model.graph):
        row = quantized.INTEGER_OPS.get(ref.node.op_type)
        if ref.name in names and row is not None and row.twin:
            cost = _cost(ref.node, shapes)
            if cost is not None:
                flops[ref.name] = cost
    return flops


Shapes = Mapping[str, tuple[int, ...]]
Rule = Callable[[onnx.NodeProto, Shapes], "float | None"]  # a node's FLOPs, None where they are unknown


def _shape(shapes: Shapes, node: onnx.NodeProto, index: int, outputs: bool = False) -> tuple[int, ...] | None:
    names = node.output if outputs else node.input
    return shapes.get(names[index]) if index < len(names) and names[index] else None


def _size(shape: Sequence[int]) -> float:
    return float(np.prod(shape, dtype=np.float64))


def _elementwise(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    """One operation per element read (the first input) or written (the first output), the larger."""
    known = [s for s in (_shape(shapes, node, 0, outputs=True), _shape(shapes, node, 0)) if s is not None]
    return max(_size(s) for s in known) if known else None


def _written(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    """One operation per element written: an op that reads only what it writes (a Slice of a weight reads
    a row of it, not the whole); where the output's size depends on data (a Gather of NonZero's indices),
    what it reads from, its first input."""
    out = _shape(shapes, node, 0, outputs=True)
    return _elementwise(node, shapes) if out is None else _size(out)


def _matmul(weight: int) -> Rule:
    """2*M*N*K: the output's size, times 2 x the inner dimension (the first input's last; else the
    weight's second to last)."""
    def rule(node: onnx.NodeProto, shapes: Shapes) -> float | None:
        out, a, b = _shape(shapes, node, 0, outputs=True), _shape(shapes, node, 0), _shape(shapes, node,
                                                                                             weight)
        inner = a[-1] if a else (b[-2] if b and len(b) > 1 else None)
        return None if out is None or inner is None else 2.0 * _size(out) * inner
    return rule


def _gemm(weight: int) -> Rule:
    def rule(node: onnx.NodeProto, shapes: Shapes) -> float | None:
        out, a, b = _shape(shapes, node, 0, outputs=True), _shape(shapes, node, 0), _shape(shapes, node,
                                                                                             weight)
        if a is not None and len(a) == 2:
            inner: int | None = a[0 if attr(node, "transA", 0) else 1]
        else:
            inner = b[1 if attr(node, "transB", 0) else 0] if b is not None and len(b) == 2 else None
        return None if out is None or inner is None else 2.0 * _size(out) * inner
    return rule


def _conv(weight: int) -> Rule:
    """2 x output x the weight's C/group x kernel."""
    def rule(node: onnx.NodeProto, shapes: Shapes) -> float | None:
        out, w = _shape(shapes, node, 0, outputs=True), _shape(shapes, node, weight)
        return None if out is None or not w else 2.0 * _size(out) * _size(w[1:])
    return rule


def _conv_transpose(weight: int) -> Rule:
    """2 x input x the weight's C_out/group x kernel: every input element is spread over a kernel."""
    def rule(node: onnx.NodeProto, shapes: Shapes) -> float | None:
        x, w = _shape(shapes, node, 0), _shape(shapes, node, weight)
        return None if x is None or not w else 2.0 * _size(x) * _size(w[1:])
    return rule


def _recurrent(gates: int) -> Callable[[int], Rule]:
    """steps x batch x directions x gates x hidden x (2 x (input + hidden) + 3), from X [steps, batch,
    input] (layout 1: [batch, steps, input]), the hidden size (the attribute, else R's smaller dimension:
    R is [directions, gates x hidden, hidden] in ONNX, [directions, hidden, 4 x hidden] in onnxruntime's
    quantized LSTM) and the direction."""
    def with_weight(weight: int) -> Rule:
        def rule(node: onnx.NodeProto, shapes: Shapes) -> float | None:
            x, r = _shape(shapes, node, 0), _shape(shapes, node, weight + 1)
            hidden = attr(node, "hidden_size") or (min(r[1:]) if r is not None and len(r) == 3 else None)
            if x is None or len(x) != 3 or not isinstance(hidden, int):
                return None
            steps, batch = (x[1], x[0]) if attr(node, "layout", 0) == 1 else (x[0], x[1])
            directions = 2 if attr(node, "direction", b"forward") == b"bidirectional" else 1
            return float(steps * batch * directions * gates * hidden * (2 * (x[2] + hidden) + 3))
        return rule
    return with_weight


def _einsum(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    """2 x the product of every index's size (1 x for one operand: a transpose, trace or sum); unknown
    with an ellipsis."""
    equation = attr(node, "equation", b"")
    terms = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")
    operands = terms.partition("->")[0].split(",")
    if "." in terms or len(operands) != len(node.input):
        return None
    sizes: dict[str, int] = {}
    for term, index in zip(operands, range(len(node.input))):
        shape = _shape(shapes, node, index)
        if shape is None or len(shape) != len(term):
            return None
        sizes.update(zip(term, shape))
    return (2.0 if len(operands) > 1 else 1.0) * _size(list(sizes.values()))


def _unknown(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    return None


def _matmul_nbits(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    """2*M*N*K with K the attribute (the 4-bit weight is packed)."""
    out, inner = _shape(shapes, node, 0, outputs=True), attr(node, "K")
    return None if out is None or not isinstance(inner, int) else 2.0 * _size(out) * inner


# The float ops a cost formula is known for, by the weight's input: integer kernels computing as one of
# them (:data:`..quantized.INTEGER_OPS`' twins) take their formula with their own weight input
_TWINS: dict[str, Callable[[int], Rule]] = {
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
    "LSTM": _recurrent(4), "GRU": _recurrent(3), "RNN": _recurrent(1)}
_ATTENTION = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
              "PackedMultiHeadAttention", "DecoderAttention", "DecoderMaskedMultiHeadAttention",
              "DecoderMaskedSelfAttention", "SparseAttention", "LongformerAttention", "PagedAttention")
# (domain, op) -> its rule; ops of these domains without a row count as elementwise (:func:`_elementwise`),
# ops of any other domain as unknown. Attention kernels are unknown: their cost depends on the heads and the
# key length, which no formula here reads yet.
_MICROSOFT = "com.microsoft"
_RULES: dict[tuple[str, str], Rule] = {
    **{("", op): make(1) for op, make in _TWINS.items()},
    ("", "Einsum"): _einsum,
    **{("", op): _written for op in ("Slice", "Gather", "GatherElements", "GatherND")},
    **{(domain, op): _unknown for domain in ("", _MICROSOFT) for op in _ATTENTION},
    (_MICROSOFT, "FusedMatMul"): _matmul(1), (_MICROSOFT, "FusedGemm"): _gemm(1),
    (_MICROSOFT, "FusedConv"): _conv(1), (_MICROSOFT, "MatMulNBits"): _matmul_nbits}


def _rule(node: onnx.NodeProto) -> Rule:
    domain = "" if is_onnx_domain(node.domain) else node.domain
    row = quantized.INTEGER_OPS.get(node.op_type)
    if row is not None and row.twin in _TWINS:
        return _TWINS[row.twin](row.weight_input)
    return _RULES.get((domain, node.op_type), _elementwise if domain in ("", _MICROSOFT) else _unknown)


def _cost(node: onnx.NodeProto, shapes: Shapes) -> float | None:
    """``node``'s FLOPs for one run of its graph, None where they cannot be estimated. A node holding
    bodies computes nothing itself (its bodies' nodes are counted): its outputs' size, or 1."""
    if has_subgraphs(node):
        return _elementwise(node, shapes) or 1.0
    return _rule(node)(node, shapes)


def _body_runs(node: onnx.NodeProto, attr_name: str, runs: float | None, why: str, found: Inferred,
               ) -> tuple[float | None, str]:
    """How many times ``node``'s body ``attr_name`` runs per run of the model (None: unknown), and, where
    unknown, why in words ("in Loop 'l', whose trip count is not a constant")."""
    if runs is None:
        return None, why
    op = node.op_type
    if op == "If":
        condition = found.values.get(node.input[0]) if node.input else None
        if condition is None or condition.size != 1:
            return runs, why
        taken = "then_branch" if bool(condition.reshape(())) else "else_branch"
        return (runs if attr_name == taken else 0.0), why
    if op == "Loop":
        trips = found.values.get(node.input[0]) if node.input and node.input[0] else None
        if trips is not None and trips.size == 1:
            return runs * float(trips.reshape(())), why
        return None, f"in Loop '{node.name}', whose trip count is not a constant"
    if op == "Scan":
        count, axes = attr(node, "num_scan_inputs", 0), attr(node, "scan_input_axes") or [0]
        scanned = len(node.input) - count if isinstance(count, int) and count else None
        first = _shape(found.shapes, node, scanned) if scanned is not None else None
        axis = axes[0] if isinstance(axes, list) else 0
        if first is not None and -len(first) <= axis < len(first):
            return runs * first[axis], why
        return None, f"in Scan '{node.name}', whose length is unknown"
    return None, f"in {op} '{node.name}' ({attr_name}), run an unknown number of times"


def _folded(node: onnx.NodeProto, constant: Collection[str]) -> bool:
    """Whether ``node`` computes from constants only (initializers, Constants, what such nodes make): a
    runtime folds it once, at load (a Slice of an LSTM's weight, a Transpose of a MatMul's), so it
    computes nothing in a run. A Constant is a value already; a node holding bodies is never folded, nor a
    Q/DQ node (onnxruntime keeps a weight's DequantizeLinear for its quantized kernel: quantized compute)."""
    if not is_onnx_domain(node.domain) or node.op_type == "Constant" or quantized.is_qdq(node):
        return is_onnx_domain(node.domain) and node.op_type == "Constant"
    read = [name for name in node.input if name]
    return bool(read) and not has_subgraphs(node) and all(name in constant for name in read)


def _computes_in_float(node: onnx.NodeProto, types: Mapping[str, int]) -> bool:
    """Whether ``node`` computes on float values: not a Constant, Shape or Size, and it reads or
    writes a float tensor (or one whose type is unknown)."""
    if is_onnx_domain(node.domain) and node.op_type in _NO_FLOAT_COMPUTE:
        return False
    values = [name for name in [*node.input, *node.output] if name]
    return any(name not in types or types[name] in _FLOATS for name in values)


def counted_nodes(plan: PrecisionPlan, node_flops: Mapping[str, float]) -> tuple[str, ...]:
    """The nodes of ``plan`` that compute in a float type, the ones its counts and shares count: those
    with estimated FLOPs (:func:`estimate_flops` gives the others 0: a Shape or an int64 Mul is
    planned like any node, and its precision changes nothing it computes), every node where no FLOPs
    were estimated."""
    if not node_flops:
        return tuple(plan.decisions)
    return tuple(n for n in plan.decisions if node_flops.get(n, 0.0) > 0)


# counted_as's value for a node that reads a main-graph input as written
GRAPH_INPUT = ""


def flexible_readers(ctx: ModelContext) -> dict[str, str]:
    """Node -> the node whose precision it computes in, for the nodes that take their float input as
    written (no Cast in front: typing's flexible_inputs) and write no float (ArgMax, IsNaN, a Cast to
    an integer): planned 16-bit, such a node reading an FP32 tensor computes in FP32. The node that
    makes that input, or :data:`GRAPH_INPUT` for a graph input (FP32 unless the plan's fp16_io)."""
    inputs = {v.name for v in ctx.model.graph.input} - {i.name for i in ctx.model.graph.initializer}
    found: dict[str, str] = {}
    for ref in ctx.nodes:
        t = ctx.typing[ref.name]
        if not t.flexible_inputs or t.convertible_inputs or t.convertible_outputs:
            continue
        if any(elem_type(ctx.types.get(out)) in LOW_TYPES for out in ref.node.output):
            continue  # a Cast to float16 (a written model's): it computes in the type it writes (a Cast
            # to float64 under --keep-float64 computes in what it reads)
        value = ref.node.input[t.flexible_inputs[0]]
        made = ctx.index.producers.get(value)
        if made is not None:
            found[ref.name] = made.name
        elif value in inputs:
            found[ref.name] = GRAPH_INPUT
    return found


def _counted_in(plan: PrecisionPlan, name: str, counted_as: Mapping[str, str]) -> Precision:
    """The precision node ``name`` of ``plan`` counts in (:attr:`FlopShares.counted_as`)."""
    written = counted_as.get(name, name)
    if written == GRAPH_INPUT:
        return plan.decisions[name].precision if plan.fp16_io else Precision.FP32
    return plan.decisions.get(written, plan.decisions[name]).precision


def counted_precisions(plan: PrecisionPlan, node_flops: Mapping[str, float],
                       counted_as: Mapping[str, str] | None = None) -> dict[str, Precision]:
    """Each node of ``plan`` that its counts and shares count (:func:`counted_nodes`) -> the precision
    it computes in, in the written file (``counted_as``: :attr:`FlopShares.counted_as`). The node counts
    and the shares both read it, so they count each node alike."""
    return {n: _counted_in(plan, n, counted_as or {}) for n in counted_nodes(plan, node_flops)}


def precision_shares(plan: PrecisionPlan, node_flops: Mapping[str, float],
                     apart: Collection[str] = (),
                     counted_as: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each precision's share of the estimated FLOPs of ``plan``'s nodes that compute in a float type
    (:func:`counted_nodes`; where no FLOPs are estimated, by node count), the precisions in the plan
    only, each node in the one it computes in (:func:`counted_precisions`); the nodes ``apart``
    (quantized compute: :attr:`..quantized.Quantization.compute`) are left out, so the shares are the
    remainder's."""
    precisions = {n: p for n, p in counted_precisions(plan, node_flops, counted_as).items() if n not in apart}
    flops = {n: node_flops.get(n, 0.0) for n in precisions}
    total = sum(flops.values())
    shares: dict[str, float] = {}
    for name, precision in precisions.items():
        weight = flops[name] / total if total > 0 else 1 / len(flops)
        shares[precision.value] = shares.get(precision.value, 0.0) + weight
    return shares


@dataclass(frozen=True)
class FlopShares:
    """What every share of compute a run states counts, defined once: the summary's, the trade-off
    points' and the picture's, the JSON's and ``--min-16bit-share``'s. The estimated FLOPs of a
    plan's nodes, but those of quantized compute (``quantized``: node -> "INT8", "FP8", ...,
    :attr:`..quantized.Quantization.compute`), which are counted apart: of a quantized model, the
    16-bit share is the non-quantized remainder's. A node counts where the written file computes it, as
    ``check`` counts that file (``counted_as``: node -> the node whose precision it counts in): the
    nodes of a decomposed LayerNorm written as one LayerNormalization in its precision, the type it
    reads and writes (:func:`..policy.fused_names`; its statistics, FP32 by its stash_type 1 on the
    generic target where the plan keeps them FP32, are computed inside that one node), and a node that
    reads its input as written in that input's (:func:`flexible_readers`)."""

    node_flops: Mapping[str, float] = field(default_factory=dict)
    quantized: Mapping[str, str] = field(default_factory=dict)
    counted_as: Mapping[str, str] = field(default_factory=dict)

    @property
    def of(self) -> str:
        """What the shares are of, as the summary says it ("80.0% of estimated FLOPs")."""
        return "of the non-quantized estimated FLOPs" if self.quantized else "of estimated FLOPs"

    def counted(self, plan: PrecisionPlan) -> tuple[str, ...]:
        """The nodes of ``plan`` its node counts count: those that compute in a float type
        (:func:`counted_nodes`), quantized compute included."""
        return counted_nodes(plan, self.node_flops)

    def precisions(self, plan: PrecisionPlan) -> dict[str, Precision]:
        """Each counted node -> the precision it computes in, in the written file
        (:func:`counted_precisions`)."""
        return counted_precisions(plan, self.node_flops, self.counted_as)

    def low_nodes(self, plan: PrecisionPlan) -> tuple[str, ...]:
        """The counted nodes that compute in a 16-bit type in the written file."""
        return tuple(n for n, p in self.precisions(plan).items() if p.is_low)

    def by_precision(self, plan: PrecisionPlan) -> dict[str, float]:
        """Each precision's share (:func:`precision_shares`)."""
        return precision_shares(plan, self.node_flops, self.quantized, self.counted_as)

    def low(self, plan: PrecisionPlan) -> float:
        """The 16-bit (FP16 and BF16) share."""
        shares = self.by_precision(plan)
        return max(0.0, 1.0 - shares.get("fp32", 0.0)) if shares else 0.0  # an all-FP32 plan's weights
        # may sum past 1 by an ulp: it read '-0.0% of estimated FLOPs'

    def unknown(self, plan: PrecisionPlan) -> dict[str, str]:
        """The nodes the shares of ``plan`` count (quantized compute apart) whose cost could not be
        estimated, each counted 1 FLOP (:class:`NodeFlops`), with why."""
        gaps = unknown_cost(self.node_flops)
        return {n: gaps[n] for n in self.counted(plan) if n in gaps and n not in self.quantized}

    def unknown_note(self, plan: PrecisionPlan) -> str:
        """How much of ``plan``'s compute its shares could not weigh: "the cost of 3 node(s) is unknown
        (2 LSTM, 1 Conv), each counted 1 FLOP"; "" where every cost is estimated."""
        gaps = self.unknown(plan)
        return f"{_unknown_text(gaps)}, each counted 1 FLOP" if gaps else ""

    def short_of(self, plan: PrecisionPlan, minimum: float) -> str:
        """Why ``plan`` does not hold ``--min-16bit-share`` ``minimum`` (percent, as the summary gives the
        share), in one line; "" where it does. A share that counts compute of unknown cost is a guess, and
        the gate is not held to one: it fails, naming those nodes, whatever the guess."""
        share = 100 * self.low(plan)
        gaps = self.unknown(plan)
        if gaps:
            first, why = next(iter(gaps.items()))
            return (f"the 16-bit share cannot be held to --min-16bit-share {minimum:g}: "
                    f"{_unknown_text(gaps)}, e.g. '{first}' ({why}); the share of the rest is "
                    f"{percent(self.low(plan))}")
        if share >= minimum:
            return ""
        digits = 1  # as many as keep the share printed below the bound (49.96% is not "50.0%")
        while digits < 6 and float(f"{share:.{digits}f}") >= minimum:
            digits += 1
        of = "of the non-quantized FLOPs" if self.quantized else "of FLOPs"
        return f"16-bit share {share:.{digits}f}% {of} is below --min-16bit-share {minimum:g}"


def _unknown_text(gaps: Mapping[str, str]) -> str:
    """'the cost of 3 node(s) is unknown (2 LSTM, 1 Conv)': the contractions first (where the compute is),
    then the most frequent reasons, four at most."""
    reasons: dict[str, int] = {}
    for why in gaps.values():
        reasons[why] = reasons.get(why, 0) + 1
    heavy = {*_TWINS, *_ATTENTION, "Einsum"}
    ranked = sorted(reasons.items(), key=lambda item: (item[0].split(" ")[0] not in heavy, -item[1], item[0]))
    listed = ", ".join(f"{count} {why}" for why, count in ranked[:4]) + (", ..." if len(ranked) > 4 else "")
    return f"the cost of {len(gaps)} node(s) is unknown ({listed})"


def flop_shares(ctx: ModelContext, input_shapes: Mapping[str, Sequence[int]],
                input_values: Mapping[str, np.ndarray] | None = None) -> FlopShares:
    """What the shares of ``ctx``'s model count (:class:`FlopShares`), defined once for ``convert``'s
    plans, ``--mode all-fp16``'s and ``check``'s written model (:func:`..check.written_plan`): the
    FLOPs estimated at ``input_shapes`` (and the branches ``input_values`` take: :func:`estimate_flops`),
    its quantized compute apart, each node counted where the written file computes it (a node that reads
    its input as written, a decomposed LayerNorm written as one)."""
    counted_as = {**flexible_readers(ctx), **policy.fused_names(policy.decomposed_layer_norms(ctx))}
    node_flops = (shapeless_flops(ctx) if not input_shapes and input_values is None
                  else estimate_flops(ctx.model, input_shapes, input_values))
    return FlopShares(node_flops, quantized.of(ctx).compute, counted_as)


def shapeless_flops(ctx: ModelContext) -> NodeFlops:
    """:func:`estimate_flops` of ``ctx``'s model with no sample, once per context: a run that measures
    nothing (``--mode all-fp16``) reads it for its notes and its shares, and each estimate infers every
    shape of the model again (a sixth of such a run of deep_cnn)."""
    return ctx.memo(_shapeless_flops)


def _shapeless_flops(ctx: ModelContext) -> NodeFlops:
    return estimate_flops(ctx.model, {})
