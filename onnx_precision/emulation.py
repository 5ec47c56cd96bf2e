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
class SwitchModel:
    """The switch graph and how to drive it."""

    model: onnx.ModelProto
    switches: Mapping[str, str]          # node name -> boolean graph input that turns it FP16
    outputs: tuple[str, ...]             # the original graph outputs, in order
    intermediates: tuple[str, ...]       # main-graph float tensors exposed as extra outputs
    producers: Mapping[str, str]         # main-graph tensor -> the node that produces it


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


class _SwitchBuilder:
    def __init__(self, model: onnx.ModelProto, typing: Mapping, type_protos: Mapping[str, onnx.TypeProto],
                 base_dir: str | None) -> None:
        self.model = model
        self.typing = typing
        self.type_protos = type_protos
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
        if t is None or t.fp16_blocker is not None or not (self._inputs(node) or self._outputs(node)):
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
        for node in graph.node:
            for _, sub in subgraphs(node):
                self.rewrite(sub, scopes)
            switch = self.switch(node)
            if switch is None:
                new_nodes.append(node)
            elif any(True for _ in subgraphs(node)):
                self._select_tensors(node, switch, scopes, new_nodes)
            else:
                new_nodes.append(self._branch_on_switch(node, switch, scopes, new_nodes))
        del graph.node[:]
        graph.node.extend(new_nodes)

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
        fp32 = onnx.NodeProto()
        fp32.CopyFrom(node)
        fp32.name = self.names.fresh(node.name + "__fp32")
        else_outs = []
        for i, o in enumerate(node.output):
            if o:
                fp32.output[i] = self.names.fresh(o + "__fp32")
                else_outs.append(self._value_info(fp32.output[i], o))
        else_graph = helper.make_graph([fp32], node.name + "__fp32", [], else_outs)
        then_graph = self._fp16_graph(node, scopes, out)
        self.switched.update(o for o in node.output if o)
        return helper.make_node("If", [switch], [o for o in node.output if o], name=node.name,
                                then_branch=then_graph, else_branch=else_graph)

    def _fp16_graph(self, node: onnx.NodeProto, scopes: Scopes, out: list[onnx.NodeProto],
                    ) -> onnx.GraphProto:
        """The node as FP16 computes it: convertible inputs and outputs rounded."""
        fp16 = onnx.NodeProto()
        fp16.CopyFrom(node)
        fp16.name = self.names.fresh(node.name + "__fp16")
        nodes: list[onnx.NodeProto] = []
        local: dict[str, str] = {}
        for i in self._inputs(node):
            src = node.input[i]
            if src not in local:
                if src in self.switched or src in self.external:
                    local[src] = self.names.fresh(f"{src}__rounded_for__{node.name}")
                    nodes.extend(_round_nodes(src, local[src], self.names))
                else:
                    local[src] = self.rounded(src, scopes, out) or src
            fp16.input[i] = local[src]
        nodes.append(fp16)
        rounded_outputs = set(self._outputs(node))
        if node.op_type in _VALUE_PRESERVING and node.domain in ("", "ai.onnx"):
            rounded_outputs = set()
        outs = []
        for i, o in enumerate(node.output):
            if not o:
                continue
            name = self.names.fresh(o + "__fp16")
            if i in rounded_outputs:
                exact = self.names.fresh(o + "__fp16_exact")
                fp16.output[i] = exact
                nodes.extend(_round_nodes(exact, name, self.names))
            else:
                fp16.output[i] = name
            outs.append(self._value_info(name, o))
        return helper.make_graph(nodes, fp16.name, [], outs)

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
                       types: Mapping[str, onnx.TypeProto] | None = None) -> SwitchModel:
    """The switch graph of ``model`` (nodes must be named; ``typing`` is model_typing(model)).

    ``capture_intermediates``: True exposes every float tensor produced in the main graph as an
    extra output, a collection of names exposes those, False none. onnxruntime keeps every graph
    output alive for the whole run whether it is fetched or not, so a capturing session holds all
    captured tensors of one run in memory (measured: 1.3 GB at sequence 1024 for the 588-node
    transformer of scripts/bench_oracle.py, against 25 MB without capture).
    """
    type_protos = tensor_types(model) if types is None else types
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers = {o: n.name for n in model.graph.node for o in n.output if o}
    inline_small_external(out, base_dir)
    builder = _SwitchBuilder(out, typing, type_protos, base_dir)
    builder.rewrite(out.graph, [])
    for node_name, switch in builder.switches.items():
        out.graph.input.append(helper.make_tensor_value_info(switch, TensorProto.BOOL, []))
    outputs = tuple(o.name for o in model.graph.output)
    intermediates: list[str] = []
    if capture_intermediates:
        wanted = None if capture_intermediates is True else set(capture_intermediates)
        existing = set(outputs)
        for node in model.graph.node:
            for o in node.output:
                capturable = builder.types.get(o) == FLOAT and (wanted is None or o in wanted)
                if o and o not in existing and capturable:
                    existing.add(o)
                    intermediates.append(o)
                    out.graph.output.append(helper.make_tensor_value_info(o, FLOAT, None))
    return SwitchModel(out, dict(builder.switches), outputs, tuple(intermediates), producers)


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
    # A graph output that is a renamed FP16 input must still carry its own name.
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
