"""What a model quantizes: the integer kernels its Q/DQ nodes mark, and its quantized ops.

A ``DequantizeLinear -> Conv/MatMul/Gemm <- DequantizeLinear`` group (and the ``QuantizeLinear``
its output feeds, if any) is an integer kernel on TensorRT's explicit quantization and a fused one
on onnxruntime: its compute is INT8 (or FP8, INT4), whatever float type the graph names around it.
So it is no 16-bit candidate: the plan keeps the group in one type (a Cast inside it stops the
fusion: the op then runs in float and the quantization's speed is lost), and the shares the tool
prints count its FLOPs apart from the float remainder. The other quantized ops are recognised by
op type: ``QLinear*``, ``MatMulInteger``/``ConvInteger`` and ``DynamicQuantizeLinear`` (integer
compute), and ``MatMulNBits`` (4-bit weights, computing in its activations' float type: a 16-bit
candidate like any float op).

Q/DQ are those of ai.onnx (INT8/UINT8, INT4/UINT4 from opset 21, FP8 E4M3FN/E5M2 from 19;
per-tensor, per-axis or blocked) and of com.microsoft.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from .context import ModelContext
from .graph import GraphIndex

QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
KERNEL_OPS = frozenset({"Conv", "MatMul", "Gemm"})
# ops whose compute is integer, by (domain, op type) prefix or name
_INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
                          "MatMulIntegerToFloat", "QGemm", "QAttention", "QOrderedMatMul"})
WEIGHT_ONLY_OPS = frozenset({"MatMulNBits"})

_T = onnx.TensorProto
# what a quantized type computes as, for the shares ("71% of all FLOPs are INT8")
_LABELS: dict[int, str] = {
    _T.INT8: "INT8", _T.UINT8: "INT8", _T.INT4: "INT4", _T.UINT4: "INT4", _T.INT16: "INT16",
    _T.UINT16: "INT16", _T.FLOAT8E4M3FN: "FP8", _T.FLOAT8E4M3FNUZ: "FP8", _T.FLOAT8E5M2: "FP8",
    _T.FLOAT8E5M2FNUZ: "FP8"}


@dataclass(frozen=True)
class QuantGroup:
    """One integer kernel: its Conv/MatMul/Gemm, the DQ nodes feeding it, the Q nodes its output feeds."""

    kernel: str
    dequantize: tuple[str, ...]
    quantize: tuple[str, ...]
    label: str  # what it computes in: "INT8", "FP8", "INT4"

    @property
    def members(self) -> tuple[str, ...]:
        return (*self.dequantize, self.kernel, *self.quantize)


@dataclass(frozen=True)
class Quantization:
    """What :func:`of` finds in a model: the integer kernels, the other quantized ops, the Q/DQ nodes."""

    groups: tuple[QuantGroup, ...] = ()
    integer_ops: Mapping[str, str] | None = None  # node -> label, for QLinear*, MatMulInteger, ...
    weight_only: tuple[str, ...] = ()  # MatMulNBits nodes: 4-bit weights, float compute
    qdq: tuple[str, ...] = ()  # every Q/DQ node

    @property
    def compute(self) -> dict[str, str]:
        """Node -> label of every node whose compute is quantized (the shares count them apart)."""
        return {**{g.kernel: g.label for g in self.groups}, **(self.integer_ops or {})}

    @property
    def any(self) -> bool:
        return bool(self.qdq or self.integer_ops or self.weight_only)


def is_qdq(node: onnx.NodeProto) -> bool:
    return node.op_type in (QUANTIZE, DEQUANTIZE) and node.domain in QDQ_DOMAINS


def _is_integer_op(node: onnx.NodeProto) -> bool:
    return node.op_type in _INTEGER_OPS or node.op_type.startswith("QLinear")


def of(ctx: ModelContext) -> Quantization:
    """The model's :class:`Quantization`, found once per context."""
    return ctx.memo(_find)


def _find(ctx: ModelContext) -> Quantization:
    index, constants = ctx.index, ctx.constants

    def quantized_type(value: str) -> int | None:
        """The element type of a DQ's quantized input: a constant's, a Q's output's, an inferred one."""
        if value in constants:
            return constants[value].data_type
        made = index.producers.get(value)
        if made is not None and is_qdq(made.node) and made.node.op_type == QUANTIZE:
            zero_point = made.node.input[2] if len(made.node.input) > 2 else ""
            if zero_point in constants:
                return constants[zero_point].data_type
            if not zero_point:
                return _T.UINT8  # QuantizeLinear without a zero point outputs uint8
        tp = ctx.types.get(value)
        return tp.tensor_type.elem_type if tp is not None and tp.HasField("tensor_type") else None

    groups, integer, weight_only, qdq = [], {}, [], []
    for ref in ctx.nodes:
        node = ref.node
        if is_qdq(node):
            qdq.append(ref.name)
        elif _is_integer_op(node):
            first = quantized_type(node.input[0]) if node.input else None
            integer[ref.name] = _LABELS.get(first or 0, "INT8")
        elif node.op_type in WEIGHT_ONLY_OPS:
            weight_only.append(ref.name)
        elif node.op_type in KERNEL_OPS and is_onnx(node):
            dqs = [_dequantize(index, name) for name in node.input[:2]]
            if len(dqs) == 2 and all(dq is not None for dq in dqs):
                types = [quantized_type(dq.input[0]) for dq in dqs if dq is not None]
                label = _LABELS.get(types[1] or 0) or _LABELS.get(types[0] or 0) or "INT8"
                quantize = tuple(c.name for out in node.output[:1] for c in index.consumers.get(out, ())
                                 if is_qdq(c.node) and c.node.op_type == QUANTIZE)
                groups.append(QuantGroup(ref.name, tuple(dq.name for dq in dqs if dq is not None), quantize,
                                         label))
    return Quantization(tuple(groups), integer or None, tuple(weight_only), tuple(qdq))


def is_onnx(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def _dequantize(index: GraphIndex, value: str) -> onnx.NodeProto | None:
    made = index.producers.get(value)
    return made.node if made is not None and is_qdq(made.node) and made.node.op_type == DEQUANTIZE else None


def shares_text(compute: Mapping[str, str], node_flops: Mapping[str, float], nodes: Mapping) -> str:
    """'71% of all FLOPs are INT8' (each label's share of the FLOPs of ``nodes``), '' when none."""
    total = sum(node_flops.get(n, 0.0) for n in nodes)
    if not compute or total <= 0:
        return ""
    by_label: dict[str, float] = {}
    for name, label in compute.items():
        by_label[label] = by_label.get(label, 0.0) + node_flops.get(name, 0.0)
    parts = [f"{100 * flops / total:.3g}%" + (f" {label}" if i else f" of all FLOPs are {label}")
             for i, (label, flops) in enumerate(sorted(by_label.items(), key=lambda item: -item[1]))]
    return ", ".join(parts)
