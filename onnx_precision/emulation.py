"""FP16 emulation graphs: FP32 graphs that round where FP16 would store.

onnxruntime's CPU provider computes FP16 nodes in FP32 and drops the rounding between them, so it
hides FP16 overflow. Emulation keeps every op in FP32 and rounds each tensor that FP16 would store
through ``Cast(to=FLOAT16) -> Cast(to=FLOAT)``: values above 65504 become Inf, values below 2**-25
become 0, the rest lose their low bits, exactly as on a GPU whose kernels accumulate in FP32.

Two builders:

* :func:`build_switch_model` (the search's oracle): ONE graph in which each node that could be FP16
  has a boolean scalar input, its *switch*. Every convertible float output ``o`` of node N becomes
  ``o = Where(switch_N, round(o_exact), o_exact)``; every convertible float input ``t`` of N
  becomes ``Where(switch_N, round(t), t)``. ``round(t)`` is computed once per tensor and shared by
  all FP16 consumers (it is also correct after an FP16 producer, since rounding is idempotent).
  Any precision plan is then a run of the same session with the switches set; all switches off
  is the FP32 model exactly, because ``Where`` copies the exact operand.
* :func:`emulate_model` (verifying what is written): an FP16/mixed model turned into the FP32
  graph that rounds at each of its FP16 tensors, so any candidate model can be checked on CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .model_io import initializer_array, subgraphs
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


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for _, sub in subgraphs(node):
            yield from _graphs(sub)


class _Names:
    """Fresh tensor names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        taken: set[str] = set()
        for graph in _graphs(model.graph):
            taken.update(vi.name for vi in list(graph.input) + list(graph.output))
            taken.update(init.name for init in graph.initializer)
            for node in graph.node:
                taken.update(node.input)
                taken.update(node.output)
        self.taken = taken

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


def _round_nodes(src: str, dst: str, names: _Names) -> list[onnx.NodeProto]:
    half = names.fresh(src + "__fp16")
    return [helper.make_node("Cast", [src], [half], to=FLOAT16, name=names.fresh(half + "__cast")),
            helper.make_node("Cast", [half], [dst], to=FLOAT, name=names.fresh(dst + "__cast"))]


def round_fp16(a: np.ndarray) -> np.ndarray:
    """float32 values as FP16 stores them (overflow to Inf, flush to zero, low bits dropped)."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(np.float16).astype(np.float32)


class _SwitchBuilder:
    def __init__(self, model: onnx.ModelProto, typing: Mapping, types: Mapping[str, int],
                 base_dir: str | None) -> None:
        self.model = model
        self.typing = typing
        self.types = types
        self.base_dir = base_dir or "."
        self.names = _Names(model)
        self.switches: dict[str, str] = {}
        self.main_inputs = {vi.name for vi in model.graph.input}
        self.init_graph: dict[str, onnx.GraphProto] = {}
        for graph in _graphs(model.graph):
            for init in graph.initializer:
                if not (graph is model.graph and init.name in self.main_inputs):
                    self.init_graph[init.name] = graph

    def is_float(self, name: str) -> bool:
        return bool(name) and self.types.get(name) == FLOAT

    def switch(self, node: onnx.NodeProto) -> str | None:
        t = self.typing.get(node.name)
        if t is None or t.fp16_blocker is not None:
            return None
        ins = [i for i in t.convertible_inputs if i < len(node.input) and self.is_float(node.input[i])]
        outs = [i for i in t.convertible_outputs if i < len(node.output) and self.is_float(node.output[i])]
        if not ins and not outs:
            return None
        name = self.names.fresh(f"__fp16_switch__{node.name}")
        self.switches[node.name] = name
        return name

    def rounded(self, tensor: str, scopes: list[dict[str, str | None]], out: list[onnx.NodeProto]) -> str | None:
        """Name of round(tensor), creating it in the innermost scope if needed; None if exact."""
        for scope in reversed(scopes):
            if tensor in scope:
                return scope[tensor]
        owner = self.init_graph.get(tensor)
        if owner is not None:
            result = self._rounded_initializer(tensor, owner)
            scopes[0 if owner is self.model.graph else -1][tensor] = result
            return result
        dst = self.names.fresh(tensor + "__rounded")
        out.extend(_round_nodes(tensor, dst, self.names))
        scopes[-1][tensor] = dst
        return dst

    def _rounded_initializer(self, name: str, graph: onnx.GraphProto) -> str | None:
        init = next(i for i in graph.initializer if i.name == name)
        values = np.asarray(initializer_array(init, self.base_dir))
        rounded = round_fp16(values)
        if np.array_equal(rounded, values):
            return None
        new = self.names.fresh(name + "__rounded")
        graph.initializer.append(numpy_helper.from_array(rounded, new))
        return new

    def rewrite(self, graph: onnx.GraphProto, scopes: list[dict[str, str | None]]) -> None:
        scopes = scopes + [{}]
        new_nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            for _, sub in subgraphs(node):
                self.rewrite(sub, scopes)
            switch = self.switch(node)
            if switch is None:
                new_nodes.append(node)
                continue
            t = self.typing[node.name]
            edges: dict[str, str] = {}
            for i in t.convertible_inputs:
                if i >= len(node.input) or not self.is_float(node.input[i]):
                    continue
                src = node.input[i]
                if src not in edges:
                    r = self.rounded(src, scopes, new_nodes)
                    if r is None:
                        edges[src] = src
                    else:
                        edges[src] = self.names.fresh(f"{src}__to__{node.name}")
                        new_nodes.append(helper.make_node("Where", [switch, r, src], [edges[src]],
                                                          name=self.names.fresh(edges[src] + "__where")))
                node.input[i] = edges[src]
            new_nodes.append(node)
            for i in t.convertible_outputs:
                if i >= len(node.output) or not self.is_float(node.output[i]):
                    continue
                o = node.output[i]
                exact = self.names.fresh(o + "__exact")
                rounded = self.names.fresh(o + "__rounded")
                node.output[i] = exact
                new_nodes.extend(_round_nodes(exact, rounded, self.names))
                new_nodes.append(helper.make_node("Where", [switch, rounded, exact], [o],
                                                  name=self.names.fresh(o + "__where")))
                scopes[-1][o] = rounded
        del graph.node[:]
        graph.node.extend(new_nodes)


def build_switch_model(model: onnx.ModelProto, typing: Mapping, base_dir: str | None = None,
                       capture_intermediates: bool = True,
                       types: Mapping[str, onnx.TypeProto] | None = None) -> SwitchModel:
    """The switch graph of ``model`` (nodes must be named; ``typing`` is model_typing(model))."""
    types = elem_types(model, types)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers = {o: n.name for n in model.graph.node for o in n.output if o}
    builder = _SwitchBuilder(out, typing, types, base_dir)
    builder.rewrite(out.graph, [])
    for node_name, switch in builder.switches.items():
        out.graph.input.append(helper.make_tensor_value_info(switch, TensorProto.BOOL, []))
    outputs = tuple(o.name for o in model.graph.output)
    intermediates: list[str] = []
    if capture_intermediates:
        existing = set(outputs)
        for node in model.graph.node:
            for o in node.output:
                if o and o not in existing and types.get(o) == FLOAT:
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
    names = _Names(out)
    _emulate_graph(out.graph, types, names, base_dir or ".", is_main=True)
    return out


def _to_float(vi: onnx.ValueInfoProto) -> None:
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == FLOAT16:
        vi.type.tensor_type.elem_type = FLOAT


def _float_tensor(t: onnx.TensorProto, base_dir: str) -> onnx.TensorProto:
    values = np.asarray(initializer_array(t, base_dir)).astype(np.float32)
    return numpy_helper.from_array(values, t.name)


def _emulate_graph(graph: onnx.GraphProto, types: Mapping[str, int], names: _Names, base_dir: str,
                   is_main: bool) -> None:
    for vi in list(graph.output) + list(graph.value_info):
        _to_float(vi)
    for i, init in enumerate(graph.initializer):
        if init.data_type == FLOAT16:
            graph.initializer[i].CopyFrom(_float_tensor(init, base_dir))
    new_nodes: list[onnx.NodeProto] = []
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
                new_nodes.append(helper.make_node("Cast", [half], [o], to=FLOAT, name=names.fresh(o + "__cast")))
            else:
                exact = names.fresh(o + "__exact")
                node.output[i] = exact
                new_nodes.extend(_round_nodes(exact, o, names))
    # A graph output that is a renamed FP16 input must still carry its own name.
    del graph.node[:]
    graph.node.extend(new_nodes)


def _retype_attributes(node: onnx.NodeProto) -> None:
    """FP16 tensor attributes become FP32 (exact); outputs are rounded after the node anyway."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT16:
            values = numpy_helper.to_array(attr.t).astype(np.float32)
            attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
        elif attr.name in ("dtype", "to") and attr.type == onnx.AttributeProto.INT and attr.i == FLOAT16 \
                and node.op_type != "Cast":
            attr.i = FLOAT
