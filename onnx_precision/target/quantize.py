"""A 16-bit QuantizeLinear as the target computes it: the quotient's own rounding, or the reciprocal.

The emulation rounds a 16-bit node's inputs and outputs; for a DequantizeLinear that is all there is
(``(q - zero_point) * scale``: both factors hold in FP16 and their product is rounded once, as
onnxruntime's CUDA kernel and TensorRT's "simply a multiplication" compute it). A QuantizeLinear's
output is integer (or FP8), so its rounding is inside: how the target gets ``x / scale`` decides it.

* Division (onnxruntime's CUDA provider, the generic target): ``quantize_linear.cu``
  (microsoft/onnxruntime, ``onnxruntime/core/providers/cuda/tensor/``, commit
  0376cb23385dca89fae78a453391293db0d5df23) computes ``RoundStd<half, int8_t>``:
  ``int value = __half2int_rn(v / scale) + zero_point;`` and for FP8
  ``__nv_cvt_halfraw_to_fp8(v / scale, ...)``: ``half / half`` is CUDA's ``__hdiv``, an FP32 quotient
  stored in FP16, then rounded to the integer. So the quotient is rounded to the 16-bit type first
  (a double rounding; a quotient past 65504 is inf, which saturates).
* Reciprocal (TensorRT): "quantization uses the reciprocal scale, followed by clamping and rounding"
  (:attr:`.base.Target.quantizes_by_reciprocal`). ``1/scale`` is held in the 16-bit type: a scale
  below 1/65504 = 1.53e-5 gives inf, and ``0 * inf = NaN`` at every zero of the input, what an FP8
  output keeps (torchao's FP16 -> FP8 cast, pytorch/ao issue 1766). The product is stored in the
  16-bit type too.

Either way the node becomes: the scale broadcast to the input's shape (a DequantizeLinear of ones, with
the node's ``axis`` and ``block_size``: per-tensor, per-axis and blocked scales alike), the quotient or
product rounded, and the QuantizeLinear itself with a unit scale (its integer rounding, zero point and
saturation as the specification says).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..float_types import FP16, LowPrecision
from .emulation import Fresh, Spelling

FLOAT = onnx.TensorProto.FLOAT
QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
_BROADCAST_ATTRIBUTES = ("axis", "block_size")  # those a DequantizeLinear shares with its QuantizeLinear


class Quantizing(Spelling):
    """``inner``'s spelling, with each 16-bit QuantizeLinear computed as the target does (see the module
    docstring); ``reciprocal``: :attr:`.base.Target.quantizes_by_reciprocal`."""

    def __init__(self, inner: Spelling, reciprocal: bool, fresh: Fresh) -> None:
        self.inner = inner
        self.reciprocal = reciprocal
        self.fresh = fresh

    def spell(self, node: onnx.NodeProto, low: LowPrecision = FP16) -> list[onnx.NodeProto]:
        if node.op_type != "QuantizeLinear" or node.domain not in QDQ_DOMAINS or len(node.input) < 2:
            return self.inner.spell(node, low)
        nodes: list[onnx.NodeProto] = []

        def add(op: str, inputs: list[str], **attrs: Any) -> str:
            out = self.fresh(f"{node.output[0]}__{op.lower()}")
            nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"{node.name}__{op.lower()}"),
                                          **attrs))
            return out

        def rounded(value: str) -> str:
            return add("Cast", [add("Cast", [value], to=low.elem_type)], to=FLOAT)

        x, scale = node.input[0], node.input[1]
        broadcast = {a.name: helper.get_attribute_value(a) for a in node.attribute
                     if a.name in _BROADCAST_ATTRIBUTES}
        ones = add("ConstantOfShape", [add("Shape", [x])],
                   value=numpy_helper.from_array(np.ones(1, np.int8)))
        if self.reciprocal:
            inverse = add("DequantizeLinear", [ones, rounded(add("Reciprocal", [scale]))], **broadcast)
            scaled = rounded(add("Mul", [x, inverse]))
        else:
            scaled = rounded(add("Div", [x, add("DequantizeLinear", [ones, scale], **broadcast)]))
        unit = add("ConstantOfShape", [add("Shape", [scale])],
                   value=numpy_helper.from_array(np.ones(1, np.float32)))
        quantize = onnx.NodeProto()
        quantize.CopyFrom(node)
        quantize.input[0], quantize.input[1] = scaled, unit
        return nodes + self.inner.spell(quantize, low)

    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        return self.inner.layer_kinds(node)
