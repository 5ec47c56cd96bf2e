"""Reference graphs: one node spelled out as its TensorRT layers, with FP16 rounding between them.

:func:`layer_model` builds a standalone model for one node: its float graph inputs rounded to FP16,
its layers (:func:`.ops.decompose`) each rounding its output, its outputs rounded. That is what
TensorRT computes for the node in an FP16 network, written independently of any emulation switch
graph, so an emulation of the same node under a TensorRT target can be asserted bit-identical to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .ops import decompose
from .spell import default_fresh, round_graph
from .versions import NEWEST, TrtVersion

FLOAT = TensorProto.FLOAT


def layer_model(node: onnx.NodeProto, inputs: Sequence[onnx.ValueInfoProto],
                outputs: Sequence[onnx.ValueInfoProto],
                *, opset: int, fp16: bool = True, version: TrtVersion = NEWEST,
                initializers: Sequence[TensorProto] = (), ir_version: int = 8) -> onnx.ModelProto:
    """A model computing ``node`` layer by layer as TensorRT ``version`` does.

    ``inputs``/``outputs`` type the node's graph inputs (those not in ``initializers``) and outputs.
    With ``fp16`` every float tensor is rounded to FP16 where the FP16 network stores it: graph
    inputs, float initializers, each layer's output, the node's outputs. A node that is one layer is
    kept as it is (rounded around). Constant inputs the importer needs (axes) come from
    ``initializers``.
    """
    fresh = default_fresh(node)
    inner = onnx.NodeProto()
    inner.CopyFrom(node)
    floats = {vi.name for vi in inputs if vi.type.tensor_type.elem_type == FLOAT}
    nodes: list[onnx.NodeProto] = []
    for i, name in enumerate(node.input):
        if fp16 and name in floats:
            inner.input[i] = fresh(f"{name}__rounded_in")
            nodes += round_graph(name, inner.input[i], fresh)
    for i, name in enumerate(node.output):
        inner.output[i] = fresh(f"{name}__layers_out")
    constants = {t.name: numpy_helper.to_array(t) for t in initializers}
    rank = next((len(vi.type.tensor_type.shape.dim) for vi in inputs
                 if node.input and vi.name == node.input[0] and vi.type.tensor_type.HasField("shape")), None)
    spelled = decompose(inner, opset=opset, fp16=fp16, version=version, fresh=fresh, constants=constants,
                        rank=rank)
    nodes += list(spelled.nodes) if spelled is not None else [inner]
    for name, inner_name in zip(node.output, inner.output):
        if fp16:
            nodes += round_graph(inner_name, name, fresh)
        else:
            nodes.append(helper.make_node("Identity", [inner_name], [name], name=fresh(f"{name}__out")))
    used = {name for n in nodes for name in n.input}
    inits = [_rounded(t) if fp16 else t for t in initializers if t.name in used]
    graph = helper.make_graph(nodes, f"{node.op_type}_layers", list(inputs), list(outputs), inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _rounded(tensor: TensorProto) -> TensorProto:
    if tensor.data_type != FLOAT:
        return tensor
    with np.errstate(over="ignore"):
        values = numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)
    return numpy_helper.from_array(values, tensor.name)
