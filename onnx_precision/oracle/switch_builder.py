"""FP16 emulation graphs: FP32 graphs that round where FP16 would store.

onnxruntime's CPU provider computes FP16 nodes in FP32 and drops the rounding between them, so it
hides FP16 overflow. Emulation keeps every op in FP32 and rounds each tensor that FP16 would store
through ``Cast(to=FLOAT16) -> Cast(to=FLOAT)``: magnitudes of 65520 and above become Inf, those of
2**-25 and below become 0, the rest lose their low bits, exactly as on a GPU whose kernels
accumulate in FP32.

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
  A node the rewriter writes in another form (``forms``: a decomposed LayerNorm's last Add, written
  as one LayerNormalization, :func:`onnx_precision.policy.written_forms`) is an If on one more
  switch, on for every plan: the form in the plan's precision (its own If), else the node itself,
  so a plan runs as the model written for it computes and the FP32 model stays itself.
(:mod:`.written` emulates a written FP16/mixed model instead.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..float_types import LowPrecision
from ..graph import graphs, is_onnx_domain, reads, subgraphs
from ..storage import external_location, inline_small_external, read_array
from ..target import GENERIC, UNMEASURED, Measured, Target
from ..typing_rules import WIDE, NodeTyping, is_tensor, tensor_types
from .rounding import FLOAT, Names, elem_types, round_nodes, round_wide
from .switch_graph import SwitchGroup, SwitchModel, captured, split_switches

log = logging.getLogger(__name__)


PROTO_LIMIT = 2_000_000_000 - (64 << 20)  # protobuf's 2 GB, with room for the graph itself


# (tensor, the type it is rounded to) -> its rounded copy, per enclosing graph
Scopes = list[dict[tuple[str, int], Optional[str]]]


# inputs): on FP16 inputs their outputs are FP16 values already, so rounding them again changes no
# bit. Skipping that Cast pair is a speed-up of the switch graph only; what is emulated is the same.
_VALUE_PRESERVING = frozenset({
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Slice",
    "Gather", "GatherElements", "GatherND", "Concat", "Split", "Pad", "DepthToSpace", "SpaceToDepth",
    "Relu", "Neg", "Abs", "Max", "Min", "ReduceMax", "ReduceMin", "MaxPool", "Where", "Clip",
})

# Up to this many consecutive switched nodes share one group (see SwitchBuilder._group). Each
# If costs onnxruntime a fixed few microseconds per run, up to ~6 us once a graph holds hundreds
# of them (cache misses over their branch states), many times a small node's own compute; a group
# runs a plan that is uniform over it with two Ifs instead of one per node, and a mixed one with
# one If more. Chosen with scripts/bench_oracle.py --group.
GROUP_SIZE = 16


@dataclass(frozen=True)
class EmulationSource:
    """What an emulation graph is built from: the FP32 model (nodes named), its node typing
    (``model_typing(model)``), the folder of its external data, and what holds for every plan
    emulated on it."""
    model: onnx.ModelProto
    typing: Mapping[str, NodeTyping]
    base_dir: str
    types: Mapping[str, onnx.TypeProto] | None = None  # the model's tensor types (None: inferred)
    fixed: frozenset[str] = frozenset()  # nodes that stay FP32 whatever the plan (no switch)
    target: Target = GENERIC
    measured: Measured = UNMEASURED  # what the run measured of the target's sums (its basis')
    # node -> the node the rewriter writes in its place, which every plan computes
    forms: Mapping[str, onnx.NodeProto] = field(default_factory=dict)
    # DequantizeLinear nodes whose every read in the target's 16-bit type is a copy of the DQ computing
    # in it, as the rewriter writes them (policy.resolution.dequantize_copies)
    dequantized: frozenset[str] = frozenset()

    def type_protos(self) -> Mapping[str, onnx.TypeProto]:
        return tensor_types(self.model) if self.types is None else self.types


class SwitchBuilder:
    def __init__(self, model: onnx.ModelProto, source: EmulationSource,
                 type_protos: Mapping[str, onnx.TypeProto], keep: Iterable[str] = (),
                 group_size: int | None = None) -> None:
        """Rewrites ``model`` (a copy of ``source.model``, whose tensor types are ``type_protos``)."""
        self.model = model
        self.typing = dict(source.typing)  # copies of nodes in group branches are added under their names
        self.forms = dict(source.forms)  # node -> the node written in its place, which a plan computes
        self.written = ""  # the switch on for a plan (off: the model itself), made with the first form
        self.fixed = source.fixed
        self.group_size = GROUP_SIZE if group_size is None else group_size
        # a 16-bit read of one of these DQs' outputs recomputes the DQ in that type (_dequantized_in)
        self.dequantized = {n.output[0]: _copy(n) for n in model.graph.node if n.name in source.dequantized}
        # tensors that must stay visible outside any group (captured; what those DQ copies read)
        self.keep = frozenset(keep) | {n.input[0] for n in self.dequantized.values()}
        self.groups: list[SwitchGroup] = []
        self.type_protos = dict(type_protos)  # tensors renamed in group branches are added
        self.types = elem_types(model, type_protos)
        self.base_dir = base_dir = source.base_dir
        self.names = Names(model)
        self.layers = source.target.emulation.spelling(model, base_dir, self.type_protos, self.names.fresh,
                                                       source.measured)
        self.low = source.target.low
        self.lows: dict[str, LowPrecision] = {}  # node -> its type, where not ``low`` (baked plans)
        self.switches: dict[str, str] = {}
        self.switched: set[str] = set()  # tensors produced by a node with a switch
        self.external = {init.name for graph in graphs(model.graph) for init in graph.initializer
                         if external_location(init) is not None}
        # Rounded copies of weights are precomputed while the graph stays under protobuf's 2 GB
        # (it is serialized for onnxruntime); past that, weights are rounded at run time.
        self.copy_budget = PROTO_LIMIT - model.ByteSize()
        # An initializer also listed as a graph input (IR < 4 models) is still a constant here:
        # sample feeds never override it (data.inputs.model_inputs leaves it out).
        self.init_graph: dict[str, onnx.GraphProto] = {}
        self.inits: dict[str, onnx.TensorProto] = {}  # by name: a scan per weight was quadratic
        for graph in graphs(model.graph):
            for init in graph.initializer:
                self.init_graph[init.name] = graph
                self.inits[init.name] = init

    def is_float(self, name: str) -> bool:
        return bool(name) and self.types.get(name) in WIDE

    def wide(self, name: str) -> int:
        """The element type ``name`` is rounded back to: its own (float32, or float64)."""
        return self.types.get(name, FLOAT)

    def switchable(self, node: onnx.NodeProto) -> bool:
        """Whether the node's precision changes anything (then it has a switch, or is baked)."""
        t = self.typing.get(node.name)
        if node.name in self.fixed or t is None or t.low_blocker is not None:
            return False
        return bool(self._inputs(node) or self._outputs(node))

    def switch(self, node: onnx.NodeProto) -> str | None:
        if not self.switchable(node):
            return None
        name = self.names.fresh(f"__fp16_switch__{node.name}")
        self.switches[node.name] = name
        return name

    def low_for(self, node: str) -> LowPrecision:
        """The type ``node`` computes in when it is not FP32."""
        return self.lows.get(node, self.low)

    def rounded(self, tensor: str, scopes: Scopes, out: list[onnx.NodeProto],
                low: LowPrecision | None = None) -> str | None:
        """Name of ``tensor`` rounded to ``low`` (the target's type by default), creating it in the
        innermost scope if needed; None if exact."""
        low = self.low if low is None else low
        key = (tensor, low.elem_type)
        for scope in reversed(scopes):
            if key in scope:
                return scope[key]
        if tensor in self.dequantized and low.elem_type == self.low.elem_type:
            scopes[-1][key] = self._dequantized_in(tensor, low, scopes, out, out, {})
            return scopes[-1][key]
        owner = self.init_graph.get(tensor)
        if owner is not None and tensor not in self.external:
            init = self.inits[tensor]
            size = 4 if init.data_type == FLOAT else 8  # float32 or float64 (WIDE)
            if init.data_type in WIDE and size * int(np.prod(init.dims, dtype=np.int64)) <= self.copy_budget:
                result = self._rounded_initializer(init, owner, low)
                scopes[0 if owner is self.model.graph else -1][key] = result
                return result
        dst = self.names.fresh(tensor + "__rounded")
        out.extend(round_nodes(tensor, dst, self.names, low, self.wide(tensor)))
        scopes[-1][key] = dst
        return dst

    def _rounded_initializer(self, init: onnx.TensorProto, graph: onnx.GraphProto, low: LowPrecision,
                             ) -> str | None:
        values = np.asarray(read_array(init, self.base_dir))
        rounded = round_wide(values, low)
        if np.array_equal(rounded, values):
            return None
        new = self.names.fresh(init.name + "__rounded")
        graph.initializer.append(numpy_helper.from_array(rounded, new))
        if self.model.ir_version < 4 and graph is self.model.graph:
            # IR 3 requires every initializer to be a graph input as well.
            graph.input.append(helper.make_tensor_value_info(new, init.data_type, list(rounded.shape)))
        self.copy_budget -= rounded.nbytes
        return new

    def rewrite(self, graph: onnx.GraphProto, scopes: Scopes) -> None:
        scopes = scopes + [{}]
        new_nodes: list[onnx.NodeProto] = []
        consumers = _consumers(graph)
        for index, node in enumerate(graph.node):  # a form may read what its node does not
            for name in self.forms[node.name].input if node.name in self.forms else ():
                consumers.setdefault(name, set()).add(index)
        visible = self.keep | {vi.name for vi in graph.output}
        run: list[tuple[int, onnx.NodeProto, str]] = []
        for index, node in enumerate(graph.node):
            for _, sub in subgraphs(node):
                self.rewrite(sub, scopes)
            switch = self.switch(node)
            if node.name in self.forms:
                self._flush(run, consumers, visible, scopes, new_nodes)
                new_nodes.append(self._written_or_model(node, switch, scopes, new_nodes))
                continue
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

        low_copies, low_names = self._copies(run, "fp16")
        low_nodes: list[onnx.NodeProto] = []
        low_scopes = scopes + [{}]
        local: dict[str, str] = {}
        rounded: dict[str, int] = {}
        for node, copy, _ in low_copies:
            self._low_nodes(node, copy, low_scopes, low_nodes, low_nodes, local, low_names, rounded)
        low_graph = self._branch_graph(low_nodes, low_names, exposed, "fp16")

        uniform_names = {o: self.names.fresh(o + "__uniform") for o in exposed}
        uniform_if = helper.make_node("If", [on_in], [uniform_names[o] for o in exposed],
                                      name=self.names.fresh(f"{names}__uniform"),
                                      then_branch=low_graph, else_branch=fp32_graph)
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
        then_graph = self._low_graph(node, scopes, out)
        self.switched.update(o for o in node.output if o)
        return helper.make_node("If", [switch], [o for o in node.output if o], name=node.name,
                                then_branch=then_graph, else_branch=else_graph)

    def _low_graph(self, node: onnx.NodeProto, scopes: Scopes, out: list[onnx.NodeProto],
                    ) -> onnx.GraphProto:
        """The node as FP16 computes it: convertible inputs and outputs rounded."""
        low_copy, outs = self._branch_copy(node, "__fp16")
        nodes: list[onnx.NodeProto] = []
        self._low_nodes(node, low_copy, scopes, out, nodes, {}, {}, {})
        return helper.make_graph(nodes, low_copy.name, [], outs)

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

    def _low_nodes(self, node: onnx.NodeProto, low_copy: onnx.NodeProto, scopes: Scopes,
                    out: list[onnx.NodeProto], nodes: list[onnx.NodeProto], local: dict[str, str],
                    renamed: Mapping[str, str], rounded: dict[str, int]) -> None:
        """Append ``low_copy`` (a copy of ``node``, outputs already named) to ``nodes`` on rounded
        convertible inputs, its convertible outputs rounded into the names it had, all in the
        node's type (:meth:`low_for`).

        ``local``: rounded copies made in this branch (filled in); ``renamed``: tensors produced
        earlier in the same branch, by their original names; ``rounded``: those of them that are
        rounded already, to the element type given (filled in).
        """
        low = self.low_for(node.name)
        for i in self._inputs(node):
            src = node.input[i]
            key = f"{src}\0{low.elem_type}"  # a tensor read in two types has a copy in each
            if key not in local:
                if rounded.get(src) == low.elem_type:
                    local[key] = renamed.get(src, src)
                elif src in self.dequantized and low.elem_type == self.low.elem_type:
                    local[key] = self._dequantized_in(src, low, scopes, out, nodes, renamed)
                elif src in renamed or src in self.switched or src in self.external or src in rounded:
                    local[key] = self.names.fresh(f"{src}__rounded_for__{node.name}")
                    nodes.extend(round_nodes(renamed.get(src, src), local[key], self.names, low,
                                             self.wide(src)))
                else:
                    local[key] = self.rounded(src, scopes, out, low) or src
                # the spelling reads a rank off its input's type (a LayerNormalization's layers
                # under TensorRT): unknown, the node would be emulated as one op, unlike the
                # model written (oracle/written.py spells it on the model's own names)
                self._alias(local[key], src)
            low_copy.input[i] = local[key]
        convertible = self._outputs(node)
        rounded.update((node.output[i], low.elem_type) for i in convertible)
        if node.op_type in _VALUE_PRESERVING and is_onnx_domain(node.domain):
            nodes.append(low_copy)
            return
        rounds: list[onnx.NodeProto] = []
        for i in convertible:
            name = low_copy.output[i]
            exact = self.names.fresh(name + "_exact")
            low_copy.output[i] = exact
            rounds.extend(round_nodes(exact, name, self.names, low, self.wide(node.output[i])))
        # spelled under the node's own name, by which the target knows it (a sum proven in range), and
        # the copy's name given back
        copy_name, low_copy.name = low_copy.name, node.name
        spelled = self.layers.spell(low_copy, low)
        for step in spelled:
            step.name = copy_name if step.name == node.name else step.name
        nodes.extend(spelled + rounds)

    def _dequantized_in(self, tensor: str, low: LowPrecision, scopes: Scopes, out: list[onnx.NodeProto],
                        nodes: list[onnx.NodeProto], renamed: Mapping[str, str]) -> str:
        """``tensor``, the output of a DQ of :attr:`dequantized`, as its copy in ``low`` computes it (the
        rewriter's ``<dq>__fp16``: its scale and output rounded), appended to ``nodes``, reading the DQ's
        input by its name in the branch (``renamed``): not the FP32 DQ's output rounded, which differs."""
        dq = self.dequantized[tensor]
        copy, _ = self._branch_copy(dq, f"__{low.precision}")
        copy.input[0] = renamed.get(dq.input[0], dq.input[0])
        rounded = copy.output[0]
        self._low_nodes(dq, copy, scopes, out, nodes, {}, renamed, {})  # renames the copy's output
        return rounded

    def _form(self, node: onnx.NodeProto, outputs: Sequence[str]) -> onnx.NodeProto:
        """The form written in place of ``node`` (:attr:`forms`), reading the model's tensors and
        writing ``outputs``, every float tensor of it 16-bit where ``node`` computes in 16 bits."""
        form = onnx.NodeProto()
        form.CopyFrom(self.forms[node.name])
        form.name = self.names.fresh(f"{node.name}__written")
        form.output[:] = outputs
        self.typing[form.name] = NodeTyping(tuple(range(len(form.input))), tuple(range(len(outputs))), None)
        if node.name in self.lows:
            self.lows[form.name] = self.lows[node.name]
        return form

    def _written_or_model(self, node: onnx.NodeProto, switch: str | None, scopes: Scopes,
                          out: list[onnx.NodeProto]) -> onnx.NodeProto:
        """``If(written, <its form in the plan's precision>, <the node>)`` for a node of :attr:`forms`:
        a plan runs what the rewriter writes in its place, the model itself (no plan) the node."""
        if not self.written:
            self.written = self.names.fresh("__fp16_written")
        fresh = [self.names.fresh(f"{o}__written") if o else "" for o in node.output]
        for name, like in zip(fresh, node.output):
            self._alias(name, like)
        form = self._form(node, fresh)
        planned = form if switch is None else self._branch_on_switch(form, switch, scopes, out)
        written = helper.make_graph([planned], self.names.fresh(f"{node.name}__written"), [],
                                    [self._value_info(f, o) for f, o in zip(fresh, node.output) if o])
        model, model_outs = self._branch_copy(node, "__model")
        self.switched.update(o for o in node.output if o)
        return helper.make_node("If", [self.written], [o for o in node.output if o], name=node.name,
                                then_branch=written,
                                else_branch=helper.make_graph([model], node.name + "__model", [], model_outs))

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
                              else self._select(switch, r, src, f"{src}__to__{node.name}", out,
                                                               self.wide(src)))
            node.input[i] = edges[src]
        out.append(node)
        for i in self._outputs(node):
            o = node.output[i]
            exact = self.names.fresh(o + "__exact")
            rounded = self.names.fresh(o + "__rounded")
            node.output[i] = exact
            out.extend(round_nodes(exact, rounded, self.names, self.low, self.wide(o)))
            self._select(switch, rounded, exact, o, out, self.wide(o), fresh=False)
            self.switched.add(o)

    def _select(self, switch: str, rounded: str, exact: str, name: str, out: list[onnx.NodeProto],
                elem: int, fresh: bool = True) -> str:
        dst = self.names.fresh(name) if fresh else name
        branches = {}
        for label, src in (("rounded", rounded), ("exact", exact)):
            copy = self.names.fresh(f"{dst}__{label}")
            branches[label] = helper.make_graph(
                [helper.make_node("Identity", [src], [copy], name=self.names.fresh(copy + "__node"))],
                copy, [], [helper.make_tensor_value_info(copy, elem, None)])
        out.append(helper.make_node("If", [switch], [dst], name=self.names.fresh(dst + "__select"),
                                    then_branch=branches["rounded"], else_branch=branches["exact"]))
        return dst


def build_switch_model(source: EmulationSource, capture_intermediates: bool | Iterable[str] = True,
                       group_size: int | None = None) -> SwitchModel:
    """The switch graph of ``source.model``.

    ``capture_intermediates``: True exposes every float tensor produced in the main graph as an
    extra output, a collection of names exposes those, False none. onnxruntime keeps every graph
    output alive for the whole run whether it is fetched or not, so a capturing session holds all
    captured tensors of one run in memory (measured: 1.3 GB at sequence 1024 for the 588-node
    transformer of scripts/bench_oracle.py, against 25 MB without capture).
    ``group_size`` (default GROUP_SIZE; 1: no groups) bounds the runs of consecutive
    nodes grouped (SwitchGroup).
    """
    def builder(out: onnx.ModelProto, type_protos: Mapping[str, onnx.TypeProto], keep: tuple[str, ...],
                ) -> SwitchBuilder:
        return SwitchBuilder(out, source, type_protos, keep, group_size)

    return assemble(source, capture_intermediates, builder)


def assemble(source: EmulationSource, capture_intermediates: bool | Iterable[str],
             make_builder: Callable[[onnx.ModelProto, Mapping[str, onnx.TypeProto], tuple[str, ...]],
                                    SwitchBuilder]) -> SwitchModel:
    """A copy of ``source.model`` rewritten by the builder ``make_builder(copy, types, captured)``
    makes, its switches gathered into one input and the captured tensors exposed."""
    model, base_dir = source.model, source.base_dir
    type_protos = source.type_protos()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers = {o: n.name for n in model.graph.node for o in n.output if o}
    inline_small_external(out, base_dir)
    outputs = tuple(o.name for o in model.graph.output)
    elems = elem_types(model, type_protos)
    intermediates = captured(model, elems, outputs, capture_intermediates)
    builder = make_builder(out, type_protos, intermediates)
    builder.rewrite(out.graph, [])
    group_switches = tuple(n for g in builder.groups for n in (g.mixed, g.on))
    written = (builder.written,) if builder.written else ()
    switch_names = tuple(builder.switches.values()) + group_switches + written
    switch_input = split_switches(out, switch_names, builder.names) if switch_names else ""
    for o in intermediates:
        out.graph.output.append(helper.make_tensor_value_info(o, elems[o], None))
    return SwitchModel(out, dict(builder.switches), outputs, intermediates, producers, tuple(builder.groups),
                       switch_input, switch_names, builder.written)


def _consumers(graph: onnx.GraphProto) -> dict[str, set[int]]:
    """Tensor -> indices of the nodes of ``graph`` that read it, in their subgraphs included."""
    readers: dict[str, set[int]] = {}
    for index, node in enumerate(graph.node):
        for name in reads(node):
            readers.setdefault(name, set()).add(index)
    return readers


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy
