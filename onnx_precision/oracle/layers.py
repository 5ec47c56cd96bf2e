"""What an FP16 node computes on its target: one op that rounds its outputs, or TensorRT's layers.

The generic target assumes every op computes internally in FP32 and stores FP16 outputs. TensorRT's
ONNX parser builds some ops from several layers (ReduceL2 as x*x, a sum and a square root), each of
which stores FP16 when the network runs in FP16; under the ``tensorrt`` target the emulation spells
such a node as those layers with FP16 rounding between them (:mod:`onnx_precision.trt.ops`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np
import onnx

from ..graph import graphs, is_onnx_domain, onnx_opset
from ..storage import read_array
from ..trt.ops import decompose
from ..trt.spell import DecompositionError
from ..trt.versions import TrtVersion

log = logging.getLogger(__name__)

SMALL_CONSTANT = 64  # elements: the constants an importer reads at build time (axes) are small


class TargetLayers:
    """Spells FP16 nodes of one model as its target computes them."""

    def __init__(self, model: onnx.ModelProto, trt: TrtVersion | None, base_dir: str,
                 types: Mapping[str, onnx.TypeProto], fresh: Callable[[str], str]) -> None:
        self.trt = trt
        self.opset = onnx_opset(model, 13)
        self.types = types
        self.fresh = fresh
        self.constants: dict[str, np.ndarray] = {}
        if trt is not None:
            for graph in graphs(model.graph):
                for init in graph.initializer:
                    if int(np.prod(init.dims, dtype=np.int64)) <= SMALL_CONSTANT:
                        self.constants[init.name] = np.asarray(read_array(init, base_dir))
                for node in graph.node:
                    if node.op_type == "Constant" and node.output and node.attribute:
                        attribute = node.attribute[0]
                        if attribute.type == onnx.AttributeProto.TENSOR:
                            self.constants[node.output[0]] = onnx.numpy_helper.to_array(attribute.t)

    def spell(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The nodes that compute FP16 ``node`` (inputs already rounded; outputs rounded by the caller)."""
        if self.trt is None or not is_onnx_domain(node.domain):
            return [node]
        shape = self.types.get(node.input[0]) if node.input else None
        rank = (len(shape.tensor_type.shape.dim) if shape is not None and shape.HasField("tensor_type")
                and shape.tensor_type.HasField("shape") else None)
        try:
            spelled = decompose(node, opset=self.opset, fp16=True, version=self.trt, fresh=self.fresh,
                                constants=self.constants, rank=rank)
        except DecompositionError as e:  # an axis or rank not known here: emulate it as one op
            log.debug("%s: emulated as one op (%s)", node.name, e)
            return [node]
        return [node] if spelled is None else list(spelled.nodes)
