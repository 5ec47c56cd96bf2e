"""What an FP16 node computes on its target: one op that rounds its outputs, or TensorRT's layers.

The generic target assumes every op computes internally in FP32 and stores FP16 outputs. TensorRT's
ONNX parser builds some ops from several layers (ReduceL2 as x*x, a sum and a square root), each of
which stores FP16 when the network runs in FP16; under the ``tensorrt`` target the emulation spells
such a node as those layers with FP16 rounding between them (:mod:`onnx_precision.trt.ops`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import onnx

from ..context import ModelContext
from ..graph import is_onnx_domain, onnx_opset
from ..plan import PrecisionPlan, Reason
from ..trt.ops import decompose
from ..trt.spell import DecompositionError
from ..trt.versions import TrtVersion
from ..typing_rules.constants import small_constant_arrays

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
        self.constants = small_constant_arrays(model, base_dir, SMALL_CONSTANT) if trt is not None else {}

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

    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        """The computing layers TensorRT builds for ``node`` (one entry: it is not split)."""
        if self.trt is None or not is_onnx_domain(node.domain):
            return [node.op_type]
        try:
            spelled = decompose(node, opset=self.opset, fp16=True, version=self.trt, constants=self.constants)
        except DecompositionError:
            return [node.op_type]
        if spelled is None:
            return [node.op_type]
        return [layer.kind for layer, _ in spelled.layers if layer.computes]


def target_reasons(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with a ``target`` reason on each measured FP32 pin whose op the target builds from
    several layers: the pin may be there because of those layers (a generic run may not need it)."""
    if ctx.trt is None:
        return plan
    layers = TargetLayers(ctx.model, ctx.trt, ctx.base_dir, ctx.types, lambda base: base)
    measured = ("search", "range", "rule", "headroom")
    for ref in ctx.nodes:
        decision = plan.decisions.get(ref.name)
        if decision is None or plan.is_fp16(ref.name):
            continue
        if not any(r.source in measured for r in decision.reasons):
            continue
        kinds = layers.layer_kinds(ref.node)
        if len(kinds) > 1:
            plan = plan.with_fp32([ref.name], Reason(
                "target", f"TensorRT {ctx.trt} builds this {ref.node.op_type} from {len(kinds)} layers "
                          f"({', '.join(kinds)}), each storing FP16; the emulation followed them"))
    return plan
