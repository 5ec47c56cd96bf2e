"""FP16 emulation graphs: FP32 graphs that round where FP16 would store.

onnxruntime's CPU provider computes FP16 nodes in FP32 and drops the rounding between them, so it
hides FP16 overflow. Emulation keeps every op in FP32 and rounds each tensor that FP16 would store
through ``Cast(to=FLOAT16) -> Cast(to=FLOAT)``: magnitudes of 65520 and above become Inf, those of
2**-25 and below become 0, the rest lose their low bits, exactly as on a GPU whose kernels
accumulate in FP32.

Two builders:

* :func:`build_switch_model` (the search's oracle): ONE graph in which each node that could be FP16
  has a boolean scalar input, its *switch*, and becomes ``If(switch_N)``: the then-branch runs N on
  rounded convertible inputs and rounds its convertible outputs, the else-branch runs N as it is.
  Any precision plan is then a run of the same session with the switches set; all switches off
  runs exactly the FP32 model's kernels on the same values, so it is bit-identical to it. Rounded
  copies of initializers held in the proto are computed once at build time and of graph inputs
  (and of tensors of nodes without a switch) once per run, shared by every FP16 consumer; a tensor
  whose producer has a switch is rounded again inside each FP16 consumer (idempotent if the
  producer was FP16, and cheaper than selecting a shared copy at run time: onnxruntime's Where
  and If-of-Identity copy the tensor on every run, several times slower than a Cast pair).
  Runs of up to GROUP_SIZE consecutive switched nodes are grouped (:class:`SwitchGroup`): a plan
  that turns a group all FP16 or all FP32 runs it in one branch of two nested Ifs, and only a
  mixed group runs one If per node. The switches are the elements of ONE boolean graph input,
  split into one-element tensors by the graph's first node (onnxruntime's cost per graph input
  grows with their number).
  Weights stored as external data are rounded inside each FP16 consumer too, only on the runs
  that make it FP16: a precomputed copy would hold the weights twice, and inline it would push a
  large model's proto past protobuf's 2 GB. Control-flow nodes,
  whose bodies carry their own switches, select each rounded tensor instead of being wrapped.
* :func:`emulate_model` (verifying what is written): an FP16/mixed model turned into the FP32
  graph that rounds at each of its FP16 tensors, so any candidate model can be checked on CPU.
  Its FP16 weights stored as external data stay there, each followed by a ``Cast(to=FLOAT)``
  (exact), so the emulation of a model over 2 GB is as small as the model's proto.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Iterable, List, Mapping, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .model_io import external_location, fresh_name, graphs, initializer_array, model_names, subgraphs
from .typing_rules import is_tensor, tensor_types

log = logging.getLogger(__name__)

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16


@dataclass(frozen=True)
class SwitchGroup:
    """Consecutive switched nodes of one graph behind one pair of extra boolean inputs: ``mixed``
    (the plan differs among them: each runs its own If on its own switch) and, when not mixed,
    ``on`` (all FP16, else all FP32)."""

    nodes: tuple[str, ...]
    mixed: str
    on: str


@dataclass(frozen=True)
class SwitchModel:
    """The switch graph and how to drive it."""

    model: onnx.ModelProto
    switches: Mapping[str, str]          # node name -> the switch (an element of switch_input)
    outputs: tuple[str, ...]             # the original graph outputs, in order
    intermediates: tuple[str, ...]       # main-graph float tensors exposed as extra outputs
    producers: Mapping[str, str]         # main-graph tensor -> the node that produces it
    groups: tuple[SwitchGroup, ...] = ()  # their switches follow from the nodes' (switch_vector)
    switch_input: str = ""               # the one boolean graph input holding every switch, in
    switch_order: tuple[str, ...] = ()   # this order (node switches, then each group's mixed, on)

    @cached_property
    def _positions(self) -> tuple[dict[str, int], list[tuple[np.ndarray, int, int]]]:
        at = {s: i for i, s in enumerate(self.switch_order)}
        nodes = {node: at[s] for node, s in self.switches.items()}
        groups = [(np.array([nodes[n] for n in g.nodes]), at[g.mixed], at[g.on]) for g in self.groups]
        return nodes, groups

    def switch_vector(self, fp16: Iterable[str]) -> np.ndarray:
        """The value of ``switch_input`` that turns the nodes ``fp16`` FP16 (all others FP32)."""
        nodes, groups = self._positions
        vector = np.zeros(len(self.switch_order), dtype=bool)
        vector[[nodes[n] for n in fp16 if n in nodes]] = True
        for members, mixed, on in groups:
            count = int(np.count_nonzero(vector[members]))
            vector[on] = count == len(members)
            vector[mixed] = 0 < count < len(members)
        return vector


def elem_types(model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto] | None = None) -> dict[str, int]:
    """Element type of every *tensor* whose type is known (sequences and optionals are left out:
    Cast cannot round them, so the emulation leaves them exact)."""
    types = tensor_types(model) if types is None else types
    return {name: tp.tensor_type.elem_type for name, tp in types.items() if is_tensor(tp)}


class _Names:
    """Fresh tensor names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taken = model_names(model)

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)


def _round_nodes(src: str, dst: str, names: _Names) -> list[onnx.NodeProto]:
    half = names.fresh(src + "__fp16")
    return [helper.make_node("Cast", [src], [half], to=FLOAT16, name=names.fresh(half + "__cast")),
            helper.make_node("Cast", [half], [dst], to=FLOAT, name=names.fresh(dst + "__cast"))]


# External tensors up to this size are read into the emulation graph: onnxruntime's shape
# inference inside If branches needs the values of shape-like constants and cannot read them from
# an external file; weights stay external.
INLINE_EXTERNAL_BYTES = 1 << 16
PROTO_LIMIT = 2_000_000_000 - (64 << 20)  # protobuf's 2 GB, with room for the graph itself


def inline_small_external(model: onnx.ModelProto, base_dir: str | None) -> None:
    """Read external tensors up to INLINE_EXTERNAL_BYTES into ``model`` (in place)."""
    for graph in graphs(model.graph):
        for i, init in enumerate(graph.initializer):
            if external_location(init) is None:
                continue
            n = int(np.prod(init.dims, dtype=np.int64)) if init.dims else 1
            if n * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize <= INLINE_EXTERNAL_BYTES:
                values = np.asarray(initializer_array(init, base_dir or "."))
                graph.initializer[i].CopyFrom(numpy_helper.from_array(np.array(values), init.name))


Scopes = List[Dict[str, Optional[str]]]  # rounded copy of each tensor, per enclosing graph


def round_fp16(a: np.ndarray) -> np.ndarray:
    """float32 values as FP16 stores them (overflow to Inf, flush to zero, low bits dropped)."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(np.float16).astype(np.float32)


# Ops whose outputs only move, select or sign-flip input values (and constants that are rounded as
# inputs): on FP16 inputs their outputs are FP16 values already, so rounding them again changes no
# bit. Skipping that Cast pair is a speed-up of the switch graph only; what is emulated is the same.
_VALUE_PRESERVING = frozenset({
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Slice",
    "Gather", "GatherElements", "GatherND", "Concat", "Split", "Pad", "DepthToSpace", "SpaceToDepth",
    "Relu", "Neg", "Abs", "Max", "Min", "ReduceMax", "ReduceMin", "MaxPool", "Where", "Clip",
})

# Up to this many consecutive switched nodes share one group (see _SwitchBuilder._group). Each
# If costs onnxruntime a fixed few microseconds per run, up to ~6 us once a graph holds hundreds
# of them (cache misses over their branch states), many times a small node's own compute; a group
# runs a plan that is uniform over it with two Ifs instead of one per node, and a mixed one with
# one If more. Chosen with scripts/bench_oracle.py --group.
GROUP_SIZE = 16


class _SwitchBuilder:
    def __init__(self, model: onnx.ModelProto, typing: Mapping, type_protos: Mapping[str, onnx.TypeProto],
                 base_dir: str | None, fixed: Iterable[str] = (), group_size: int | None = None,
                 keep: Iterable[str] = ()) -> None:
        self.model = model
        self.typing = dict(typing)  # copies of nodes in group branches are added under their names
        self.fixed = frozenset(fixed)
        self.group_size = GROUP_SIZE if group_size is None else group_size
        self.keep = frozenset(keep)  # tensors that must stay visible outside any group (captured)
        self.groups: list[SwitchGroup] = []
        self.type_protos = dict(type_protos)  # tensors renamed in group branches are added
        self.types = elem_types(model, type_protos)
        self.base_dir = base_dir or "."
        self.names = _Names(model)
        self.switches: dict[str, str] = {}
        self.switched: set[str] = set()  # tensors produced by a node with a switch
        self.external = {init.name for graph in graphs(model.graph) for init in graph.initializer
                         if external_location(init) is not None}
        # Rounded copies of weights are precomputed while the graph stays under protobuf's 2 GB
        # (it is serialized for onnxruntime); past that, weights are rounded at run time.
        self.copy_budget = PROTO_LIMIT - model.ByteSize()
        # An initializer also listed as a graph input (IR < 4 models) is still a constant here:
        # sample feeds never override it (data.model_inputs leaves it out).
        self.init_graph: dict[str, onnx.GraphProto] = {}
        for graph in graphs(model.graph):
            for init in graph.initializer:
                self.init_graph[init.name] = graph

    def is_float(self, name: str) -> bool:
        return bool(name) and self.types.get(name) == FLOAT

    def switch(self, node: onnx.NodeProto) -> str | None:
        t = self.typing.get(node.name)
        if node.name in self.fixed or t is None or t.fp16_blocker is not None or not (self._inputs(node) or self._outputs(node)):
            return None
        name = self.names.fresh(f"__fp16_switch__{node.name}")
        self.switches[node.name] = name
        return name

    def rounded(self, tensor: str, scopes: Scopes, out: list[onnx.NodeProto]) -> str | None:
        """Name of round(tensor), creating it in the innermost scope if needed; None if exact."""
        for scope in reversed(scopes):
            if tensor in scope:
                return scope[tensor]
        owner = self.init_graph.get(tensor)
        if owner is not None and tensor not in self.external:
            init = next(i for i in owner.initializer if i.name == tensor)
            if init.data_type == FLOAT and 4 * int(np.prod(init.dims, dtype=np.int64)) <= self.copy_budget:
                result = self._rounded_initializer(init, owner)
                scopes[0 if owner is self.model.graph else -1][tensor] = result
                return result
        dst = self.names.fresh(tensor + "__rounded")
        out.extend(_round_nodes(tensor, dst, self.names))
        scopes[-1][tensor] = dst
        return dst

    def _rounded_initializer(self, init: onnx.TensorProto, graph: onnx.GraphProto) -> str | None:
        values = np.asarray(initializer_array(init, self.base_dir))
        rounded = round_fp16(values)
        if np.array_equal(rounded, values):
            return None
        new = self.names.fresh(init.name + "__rounded")
        graph.initializer.append(numpy_helper.from_array(rounded, new))
        if self.model.ir_version < 4 and graph is self.model.graph:
            # IR 3 requires every initializer to be a graph input as well.
            graph.input.append(helper.make_tensor_value_info(new, FLOAT, list(rounded.shape)))
        self.copy_budget -= rounded.nbytes
        return new

    def rewrite(self, graph: onnx.GraphProto, scopes: Scopes) -> None:
        scopes = scopes + [{}]
        new_nodes: list[onnx.NodeProto] = []
        consumers = _consumers(graph)
        visible = self.keep | {vi.name for vi in graph.output}
        run: list[tuple[int, onnx.NodeProto, str]] = []
        for index, node in enumerate(graph.node):
            for _, sub in subgraphs(node):
                self.rewrite(sub, scopes)
            switch = self.switch(node)
            if switch is not None and not any(True for _ in subgraphs(node)):
                # A node reading external weights rounds them in its FP16 branch: in a group's
                # branch onnxruntime may schedule all those Casts first and hold every rounded
                # weight at once (measured: 3.5 GB peak for the 2.2 GB model), so it stays alone.
                alone = any(n in self.external for n in node.input)
                if alone:
                    self._flush(run, consumers, visible, scopes, new_nodes)
                run.append((index, node, switch))
                if alone or len(run) >= self.group_size:
                    self._flush(run, consumers, visible, scopes, new_nodes)
                continue
            self._flush(run, consumers, visible, scopes, new_nodes)
            if switch is None:
                new_nodes.append(node)
            else:
                self._select_tensors(node, switch, scopes, new_nodes)
        self._flush(run, consumers, visible, scopes, new_nodes)
        del graph.node[:]
        graph.node.extend(new_nodes)

    def _flush(self, run: list, consumers: Mapping[str, set], visible: frozenset, scopes: Scopes,
               out: list[onnx.NodeProto]) -> None:
        """Switch the pending run of nodes: one If each when alone, else a group; empties ``run``."""
        if len(run) == 1:
            _, node, switch = run[0]
            out.append(self._branch_on_switch(node, switch, scopes, out))
        elif run:
            self._group(run, consumers, visible, scopes, out)
        del run[:]

    def _copies(self, run: list, tag: str) -> tuple[list[tuple[onnx.NodeProto, onnx.NodeProto, str]],
                                                    dict[str, str]]:
        """Copies of the run's nodes for one branch, writing fresh names (and reading them
        within the run); returns (original, copy, switch) triples and original -> fresh name."""
        renamed: dict[str, str] = {}
        copies = []
        for _, node, switch in run:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = self.names.fresh(f"{node.name}__{tag}")
            self.typing[copy.name] = self.typing[node.name]
            for i, name in enumerate(copy.input):
                copy.input[i] = renamed.get(name, name)
            for i, o in enumerate(copy.output):
                if o:
                    renamed[o] = copy.output[i] = self.names.fresh(f"{o}__{tag}")
                    self._alias(renamed[o], o)
            copies.append((node, copy, switch))
        return copies, renamed

    def _alias(self, name: str, like: str) -> None:
        """``name`` has the type of ``like`` (a copy of a tensor in a group branch)."""
        if like in self.types:
            self.types[name] = self.types[like]
        if like in self.type_protos:
            self.type_protos[name] = self.type_protos[like]

    def _group(self, run: list, consumers: Mapping[str, set], visible: frozenset, scopes: Scopes,
               out: list[onnx.NodeProto]) -> None:
        """``If(mixed, <each node its own If>, If(on, <all FP16>, <all FP32>))`` over the run.

        The branches hold copies of the nodes writing fresh names; the group's outputs are the
        tensors read after it (or captured, or graph outputs). All FP32 runs the nodes as they
        are; all FP16 rounds each convertible input and output as the node's own If would, except
        that a tensor rounded by a node of the group is read as it is (rounding it again changes
        no bit).
        """
        indices = {index for index, _, _ in run}
        produced = [o for _, node, _ in run for o in node.output if o]
        exposed = [o for o in produced
                   if o in visible or any(c not in indices for c in consumers.get(o, ()))] or produced[-1:]
        names = "__".join(node.name for _, node, _ in run[:1])
        mixed_in = self.names.fresh(f"__fp16_group_mixed__{names}")
        on_in = self.names.fresh(f"__fp16_group_on__{names}")
        self.groups.append(SwitchGroup(tuple(node.name for _, node, _ in run), mixed_in, on_in))

        fp32, fp32_names = self._copies(run, "fp32")
        fp32_graph = self._branch_graph([copy for _, copy, _ in fp32], fp32_names, exposed, "fp32")

        fp16, fp16_names = self._copies(run, "fp16")
        fp16_nodes: list[onnx.NodeProto] = []
        fp16_scopes = scopes + [{}]
        local: dict[str, str] = {}
        rounded: set[str] = set()
        for node, copy, _ in fp16:
            self._fp16_nodes(node, copy, fp16_scopes, fp16_nodes, fp16_nodes, local, fp16_names, rounded)
        fp16_graph = self._branch_graph(fp16_nodes, fp16_names, exposed, "fp16")

        uniform_names = {o: self.names.fresh(o + "__uniform") for o in exposed}
        uniform_if = helper.make_node("If", [on_in], [uniform_names[o] for o in exposed],
                                      name=self.names.fresh(f"{names}__uniform"),
                                      then_branch=fp16_graph, else_branch=fp32_graph)
        uniform_graph = self._branch_graph([uniform_if], uniform_names, exposed, "uniform")

        mixed, mixed_names = self._copies(run, "mixed")
        mixed_nodes: list[onnx.NodeProto] = []
        mixed_scopes = scopes + [{}]
        for _, copy, switch in mixed:
            mixed_nodes.append(self._branch_on_switch(copy, switch, mixed_scopes, mixed_nodes))
        mixed_graph = self._branch_graph(mixed_nodes, mixed_names, exposed, "mixed")

        self.switched.update(produced)
        out.append(helper.make_node("If", [mixed_in], exposed, name=self.names.fresh(f"{names}__group"),
                                    then_branch=mixed_graph, else_branch=uniform_graph))

    def _branch_graph(self, nodes: list[onnx.NodeProto], renamed: Mapping[str, str], exposed: list[str],
                      tag: str) -> onnx.GraphProto:
        outputs = [self._value_info(renamed[o], o) for o in exposed]
        return helper.make_graph(nodes, self.names.fresh(f"{exposed[0]}__{tag}"), [], outputs)

    def _inputs(self, node: onnx.NodeProto) -> list[int]:
        t = self.typing[node.name]
        return [i for i in t.convertible_inputs if i < len(node.input) and self.is_float(node.input[i])]

    def _outputs(self, node: onnx.NodeProto) -> list[int]:
        t = self.typing[node.name]
        return [i for i in t.convertible_outputs if i < len(node.output) and self.is_float(node.output[i])]

    def _branch_on_switch(self, node: onnx.NodeProto, switch: str, scopes: Scopes,
                          out: list[onnx.NodeProto]) -> onnx.NodeProto:
        """``If(switch)``: then the node on rounded inputs with rounded outputs, else the node as is.

        An If runs only the branch taken, so the FP32 side costs the node alone (a Where would
        copy every tensor, weights included, on every run: measured 3-5x slower).
        An input from a node with a switch is rounded again on the FP16 side whatever that
        producer did (idempotent); branching again on the producer's switch to skip it was
        measured to cost as much in If overhead as it saves in Casts.
        """
        fp32, else_outs = self._branch_copy(node, "__fp32")
        else_graph = helper.make_graph([fp32], node.name + "__fp32", [], else_outs)
        then_graph = self._fp16_graph(node, scopes, out)
        self.switched.update(o for o in node.output if o)
        return helper.make_node("If", [switch], [o for o in node.output if o], name=node.name,
                                then_branch=then_graph, else_branch=else_graph)

    def _fp16_graph(self, node: onnx.NodeProto, scopes: Scopes, out: list[onnx.NodeProto],
                    ) -> onnx.GraphProto:
        """The node as FP16 computes it: convertible inputs and outputs rounded."""
        fp16, outs = self._branch_copy(node, "__fp16")
        nodes: list[onnx.NodeProto] = []
        self._fp16_nodes(node, fp16, scopes, out, nodes, {}, {}, set())
        return helper.make_graph(nodes, fp16.name, [], outs)

    def _branch_copy(self, node: onnx.NodeProto, suffix: str,
                     ) -> tuple[onnx.NodeProto, list[onnx.ValueInfoProto]]:
        """A copy of ``node`` for one If branch, its name and outputs made fresh with ``suffix``,
        and the branch's graph outputs (typed like the node's)."""
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = self.names.fresh(node.name + suffix)
        outs = []
        for i, o in enumerate(node.output):
            if o:
                copy.output[i] = self.names.fresh(o + suffix)
                outs.append(self._value_info(copy.output[i], o))
        return copy, outs

    def _fp16_nodes(self, node: onnx.NodeProto, fp16: onnx.NodeProto, scopes: Scopes,
                    out: list[onnx.NodeProto], nodes: list[onnx.NodeProto], local: dict[str, str],
                    renamed: Mapping[str, str], rounded: set[str]) -> None:
        """Append ``fp16`` (a copy of ``node``, outputs already named) to ``nodes`` on rounded
        convertible inputs, its convertible outputs rounded into the names it had.

        ``local``: rounded copies made in this branch (filled in); ``renamed``: tensors produced
        earlier in the same branch, by their original names; ``rounded``: those of them that are
        rounded already (filled in).
        """
        for i in self._inputs(node):
            src = node.input[i]
            if src not in local:
                if src in rounded:
                    local[src] = renamed[src]
                elif src in renamed or src in self.switched or src in self.external:
                    local[src] = self.names.fresh(f"{src}__rounded_for__{node.name}")
                    nodes.extend(_round_nodes(renamed.get(src, src), local[src], self.names))
                else:
                    local[src] = self.rounded(src, scopes, out) or src
            fp16.input[i] = local[src]
        nodes.append(fp16)
        convertible = self._outputs(node)
        rounded.update(node.output[i] for i in convertible)
        if node.op_type in _VALUE_PRESERVING and node.domain in ("", "ai.onnx"):
            return
        for i in convertible:
            name = fp16.output[i]
            exact = self.names.fresh(name + "_exact")
            fp16.output[i] = exact
            nodes.extend(_round_nodes(exact, name, self.names))

    def _value_info(self, name: str, like: str) -> onnx.ValueInfoProto:
        """A branch output typed like ``like`` (sequences and optionals included, shape left out)."""
        tp = self.type_protos.get(like)
        if tp is None or is_tensor(tp):
            return helper.make_tensor_value_info(name, self.types.get(like, FLOAT), None)
        return helper.make_value_info(name, tp)

    def _select_tensors(self, node: onnx.NodeProto, switch: str, scopes: Scopes,
                           out: list[onnx.NodeProto]) -> None:
        """A control-flow node (its bodies have their own switches): the switch selects each
        rounded tensor (with an If of two Identities: Where needs opset 9, If any opset)."""
        edges: dict[str, str] = {}
        for i in self._inputs(node):
            src = node.input[i]
            if src not in edges:
                r = self.rounded(src, scopes, out)
                edges[src] = (src if r is None
                              else self._select(switch, r, src, f"{src}__to__{node.name}", out))
            node.input[i] = edges[src]
        out.append(node)
        for i in self._outputs(node):
            o = node.output[i]
            exact = self.names.fresh(o + "__exact")
            rounded = self.names.fresh(o + "__rounded")
            node.output[i] = exact
            out.extend(_round_nodes(exact, rounded, self.names))
            self._select(switch, rounded, exact, o, out, fresh=False)
            self.switched.add(o)

    def _select(self, switch: str, rounded: str, exact: str, name: str, out: list[onnx.NodeProto],
               fresh: bool = True) -> str:
        dst = self.names.fresh(name) if fresh else name
        branches = {}
        for label, src in (("rounded", rounded), ("exact", exact)):
            copy = self.names.fresh(f"{dst}__{label}")
            branches[label] = helper.make_graph(
                [helper.make_node("Identity", [src], [copy], name=self.names.fresh(copy + "__node"))],
                copy, [], [helper.make_tensor_value_info(copy, FLOAT, None)])
        out.append(helper.make_node("If", [switch], [dst], name=self.names.fresh(dst + "__select"),
                                    then_branch=branches["rounded"], else_branch=branches["exact"]))
        return dst


def build_switch_model(model: onnx.ModelProto, typing: Mapping, base_dir: str | None = None,
                       capture_intermediates: bool | Iterable[str] = True,
                       types: Mapping[str, onnx.TypeProto] | None = None, fixed: Iterable[str] = (),
                       group_size: int | None = None) -> SwitchModel:
    """The switch graph of ``model`` (nodes must be named; ``typing`` is model_typing(model)).

    ``capture_intermediates``: True exposes every float tensor produced in the main graph as an
    extra output, a collection of names exposes those, False none. onnxruntime keeps every graph
    output alive for the whole run whether it is fetched or not, so a capturing session holds all
    captured tensors of one run in memory (measured: 1.3 GB at sequence 1024 for the 588-node
    transformer of scripts/bench_oracle.py, against 25 MB without capture).
    ``fixed``: nodes that stay FP32 whatever the plan (no switch). ``group_size`` (default
    GROUP_SIZE; 1: no groups) bounds the runs of consecutive nodes grouped (SwitchGroup).
    """
    type_protos = tensor_types(model) if types is None else types
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers = {o: n.name for n in model.graph.node for o in n.output if o}
    inline_small_external(out, base_dir)
    outputs = tuple(o.name for o in model.graph.output)
    intermediates = _captured(model, elem_types(model, type_protos), outputs, capture_intermediates)
    builder = _SwitchBuilder(out, typing, type_protos, base_dir, fixed, group_size, intermediates)
    builder.rewrite(out.graph, [])
    switch_names = tuple(builder.switches.values()) + tuple(n for g in builder.groups for n in (g.mixed, g.on))
    switch_input = _split_switches(out, switch_names, builder.names) if switch_names else ""
    for o in intermediates:
        out.graph.output.append(helper.make_tensor_value_info(o, FLOAT, None))
    return SwitchModel(out, dict(builder.switches), outputs, intermediates, producers, tuple(builder.groups),
                       switch_input, switch_names)


def _split_switches(model: onnx.ModelProto, switches: tuple[str, ...], names: _Names) -> str:
    """Make ``switches`` the elements of ONE boolean graph input, split first thing in the graph;
    returns its name. onnxruntime's cost per graph input grows with their number (measured: 588
    unused boolean inputs add 4-8 ms to each run of the 2 ms transformer), while one Split into
    588 one-element tensors costs microseconds; If takes any one-element tensor as condition."""
    name = names.fresh("__fp16_switches")
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.BOOL, [len(switches)]))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if opset >= 13:  # the sizes are an input from opset 13 on, an attribute before
        sizes = names.fresh("__fp16_switch_sizes")
        model.graph.initializer.append(numpy_helper.from_array(np.ones(len(switches), np.int64), sizes))
        if model.ir_version < 4:
            model.graph.input.append(helper.make_tensor_value_info(sizes, TensorProto.INT64, [len(switches)]))
        split = helper.make_node("Split", [name, sizes], list(switches), axis=0)
    else:
        split = helper.make_node("Split", [name], list(switches), axis=0, split=[1] * len(switches))
    split.name = names.fresh(name + "__split")
    model.graph.node.insert(0, split)
    return name


def _captured(model: onnx.ModelProto, types: Mapping[str, int], outputs: tuple[str, ...],
              capture_intermediates: bool | Iterable[str]) -> tuple[str, ...]:
    """The main-graph float tensors to expose as extra outputs (see build_switch_model)."""
    if not capture_intermediates:
        return ()
    wanted = None if capture_intermediates is True else set(capture_intermediates)
    existing = set(outputs)
    intermediates: list[str] = []
    for node in model.graph.node:
        for o in node.output:
            if o and o not in existing and types.get(o) == FLOAT and (wanted is None or o in wanted):
                existing.add(o)
                intermediates.append(o)
    return tuple(intermediates)


def _consumers(graph: onnx.GraphProto) -> dict[str, set[int]]:
    """Tensor -> indices of the nodes of ``graph`` that read it, in their subgraphs included."""
    readers: dict[str, set[int]] = {}
    for index, node in enumerate(graph.node):
        for name in _reads(node):
            readers.setdefault(name, set()).add(index)
    return readers


def _reads(node: onnx.NodeProto) -> set[str]:
    names = {n for n in node.input if n}
    for _, sub in subgraphs(node):
        for inner in sub.node:
            names |= _reads(inner)
    return names


# --- emulating a written FP16/mixed model --------------------------------------------------------

def emulate_model(model: onnx.ModelProto, base_dir: str | None = None) -> onnx.ModelProto:
    """The FP32 graph of an FP16/mixed ``model`` that rounds every FP16 tensor.

    FP16 graph inputs become FP32 inputs rounded on entry; FP16 initializers and constants become
    FP32 (exactly); every node output that was FP16 is rounded where it is produced; a Cast to
    FLOAT16 becomes a round trip. Graph outputs that were FP16 are FP32 holding FP16 values.
    """
    types = elem_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inline_small_external(out, base_dir)
    names = _Names(out)
    _emulate_graph(out.graph, types, names, base_dir or ".", is_main=True)
    return out


def _to_float(vi: onnx.ValueInfoProto) -> None:
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == FLOAT16:
        vi.type.tensor_type.elem_type = FLOAT


def _float_tensor(t: onnx.TensorProto, base_dir: str) -> onnx.TensorProto:
    values = np.asarray(initializer_array(t, base_dir)).astype(np.float32)
    return numpy_helper.from_array(values, t.name)


def _float_initializers(graph: onnx.GraphProto, names: _Names, base_dir: str) -> list[onnx.NodeProto]:
    """Make ``graph``'s FP16 initializers FP32 (exact), in place; returns the Casts to run first.

    An external one keeps its FP16 data where it is, renamed, and a ``Cast(to=FLOAT)`` produces
    the original name: an FP32 copy in the proto would double the weights and, for a model over
    1 GB of FP16, pass protobuf's 2 GB. One that is also a graph input (IR < 4) cannot become a
    node output, so it is converted in the proto.
    """
    inputs = {vi.name for vi in graph.input}
    casts = []
    for init in graph.initializer:
        if init.data_type != FLOAT16:
            continue
        if external_location(init) is None or init.name in inputs:
            init.CopyFrom(_float_tensor(init, base_dir))
            continue
        name = init.name
        init.name = names.fresh(name + "__fp16")
        casts.append(helper.make_node("Cast", [init.name], [name], to=FLOAT,
                                      name=names.fresh(name + "__cast")))
    return casts


def _emulate_graph(graph: onnx.GraphProto, types: Mapping[str, int], names: _Names, base_dir: str,
                   is_main: bool) -> None:
    for vi in list(graph.output) + list(graph.value_info):
        _to_float(vi)
    new_nodes: list[onnx.NodeProto] = _float_initializers(graph, names, base_dir)
    renamed_inputs: dict[str, str] = {}
    # FP16 graph inputs: the caller feeds FP32; round on entry (a subgraph's inputs are already
    # rounded by whoever produced them).
    for vi in graph.input:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == FLOAT16:
            vi.type.tensor_type.elem_type = FLOAT
            if is_main:
                dst = names.fresh(vi.name + "__rounded")
                new_nodes.extend(_round_nodes(vi.name, dst, names))
                renamed_inputs[vi.name] = dst
    for node in graph.node:
        for _, sub in subgraphs(node):
            _emulate_graph(sub, types, names, base_dir, is_main=False)
        for i, name in enumerate(node.input):
            if name in renamed_inputs:
                node.input[i] = renamed_inputs[name]
        _retype_attributes(node)
        new_nodes.append(node)
        for i, o in enumerate(node.output):
            if not o or types.get(o) != FLOAT16:
                continue
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
                # The Cast itself rounds to FP16; only the way back to FP32 is added.
                half = names.fresh(o + "__fp16")
                node.output[i] = half
                back = helper.make_node("Cast", [half], [o], to=FLOAT, name=names.fresh(o + "__cast"))
                new_nodes.append(back)
            else:
                exact = names.fresh(o + "__exact")
                node.output[i] = exact
                new_nodes.extend(_round_nodes(exact, o, names))
    # A graph output that is itself an FP16 graph input passes through unrounded: rounding it would
    # need a node writing that name, which SSA forbids, and the value is exactly what was fed.
    del graph.node[:]
    graph.node.extend(new_nodes)


# Attributes that choose an output's element type (the window ops' output_datatype included:
# left FLOAT16 onnxruntime would compute the window in FP16 arithmetic, not FP32 then round).
_OUTPUT_TYPE_ATTRS = ("dtype", "to", "output_datatype", "output_dtype")


def _retype_attributes(node: onnx.NodeProto) -> None:
    """FP16 tensor attributes become FP32 (exact); outputs are rounded after the node anyway."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT16:
            values = numpy_helper.to_array(attr.t).astype(np.float32)
            attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
        elif attr.name in _OUTPUT_TYPE_ATTRS and attr.type == onnx.AttributeProto.INT and attr.i == FLOAT16 \
                and node.op_type != "Cast":
            attr.i = FLOAT
