"""Q/DQ scales the 16-bit type cannot hold: the scale audit of quantized models.

From opset 19 a QuantizeLinear/DequantizeLinear written in FP16 takes its scale in FP16, and a scale
that FP16 holds badly breaks the quantizer wherever it runs:

* zero, or flushed to zero (at or below half FP16's smallest subnormal, 3e-8): ``x / 0 = inf`` and
  ``0 / 0 = NaN`` on every runtime;
* a QuantizeLinear's reciprocal past FP16's maximum (a scale below 1/65504 = 1.53e-5): a runtime
  that multiplies by ``1/scale`` in FP16 gets ``inf``, and ``0 * inf = NaN`` at every zero of the input
  (torchao's FP16 -> FP8 cast, pytorch/ao issue 1766: a [0, 0.1] range mapped onto E5M2's 57344, scale
  1.7e-6). A DequantizeLinear only multiplies by its scale: no reciprocal, whatever the target;
* subnormal (below 6.1e-5): the scale keeps fewer significant bits, and every value it scales moves
  by its relative rounding error. Kept FP32 where that error is more than the quantum of the quantized
  type relative to its range (1/2^8 for 8 bits and wider; below about 7.6e-6 for INT8); within it, a
  low-severity finding and no pin: the search judges the node on the samples. Measured on four real
  per-channel INT8 models (quantize_static; scripts/bench_scale_audit.py): 32-58 of their Q/DQ nodes
  were kept FP32 for these bands, most of them INT32 bias DQs (scale = input scale x weight scale);
  FP16 rounds their subnormal scales by at most 0.19%, and rounding them all moved the outputs' error
  against the FP32 original by -3.1% to +2.6%.

The same for the scales of ``MatMulNBits`` (com.microsoft, 4-bit weights, its scales in its
activations' float type: q4f16; it only multiplies by them, so a zero scale zeroes its weights and
no reciprocal is taken), and for a float zero point (``MatMulNBits``' zero points in that type;
a Q/DQ zero point is of the quantized type, FP8's included, and never converted) that the 16-bit type
rounds by half a quantum or more: FP16 holds every integer only up to 2048, and a zero point of 2049
written FP16 is 2048, every value it dequantizes off by one quantum.

Each is a finding with the scale's value, and the node keeps FP32 whatever the samples say
(:func:`scale_problem` is also what :mod:`onnx_precision.policy.resolution` forces): the samples
cannot show a runtime's reciprocal or its flushing, which the emulation does not compute. Its
quantized group then stays FP32 with it, the Cast outside the group.

A NaN or infinite scale or float zero point is no quantization at all, in FP32 as in 16 bits: the
model is refused in every mode (:class:`~onnx_precision.errors.ModelLoadError`, naming the node and
the tensor).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from ..context import ModelContext
from ..errors import ModelLoadError
from ..float_types import LowPrecision
from ..storage import read_array
from .facts import (
    HIGH,
    LOW,
    MEDIUM,
    OVERFLOW,
    PRECISION,
    UNDERFLOW,
    Finding,
    Kind,
    ModelFacts,
    Skipped,
    finding,
)
from .registry import rule, skip

QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")


def scale_input(node: onnx.NodeProto) -> int | None:
    """The input of ``node`` that is its scale where it is audited: a Q/DQ's 1, MatMulNBits' 2; else None."""
    if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.domain in QDQ_DOMAINS:
        return 1
    return 2 if node.op_type == "MatMulNBits" and node.domain == "com.microsoft" else None


def _float_constant(node: onnx.NodeProto, index: int, ctx: ModelContext) -> np.ndarray | None:
    """The values of ``node``'s input ``index`` where it is a float32 constant, else None."""
    name = node.input[index] if len(node.input) > index else ""
    tensor = ctx.constants.get(name)
    if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
        return None
    return read_array(tensor, ctx.base_dir).astype(np.float64).ravel()


def scale_problem(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision,
                  ) -> tuple[Kind, str, dict[str, object]] | None:
    """(kind, what breaks, evidence) of a quantizer's scale (:func:`scale_input`) or float zero point
    in ``low``, the worst first; None when both are fine, not constants, or the node has none."""
    index = scale_input(node)
    if index is None:
        return None
    found = _float_constant(node, index, ctx)
    if found is None or found.size == 0:
        return _zero_point_problem(node, ctx, low)
    values = np.abs(_finite(node, index, found, ctx, "scale"))
    name, smallest = node.input[index], float(values.min())
    # MatMulNBits only dequantizes, multiplying by its scale: a zero scale zeroes, no reciprocal is taken
    weights = index == 2
    if smallest <= low.flush:
        broken = "every weight it scales is 0" if weights else "x/0 = inf and 0/0 = NaN on every runtime"
        return (UNDERFLOW, f"scale '{name}' is {smallest:.3g}, zero in {low.name}: {broken}",
                {"scale": name, "value": smallest})
    tiny = float(values[values > 0].min())
    evidence: dict[str, object] = {"scale": name, "value": tiny}
    # an overflow (of 1/scale): it decides analyze's verdict without an effect. Only a QuantizeLinear
    # divides by its scale; a DequantizeLinear, like MatMulNBits, multiplies by it
    if tiny < 1 / low.max and node.op_type == "QuantizeLinear":
        return (OVERFLOW, f"scale '{name}' is {tiny:.3g}: its reciprocal {1 / tiny:.3g} overflows "
                f"{low.name} (max {low.max:g}), so a runtime that multiplies by 1/scale in {low.name} "
                f"gets inf and 0 * inf = NaN at the input's zeros (torchao's FP8 cast)", evidence)
    rounding = subnormal_rounding(node, values, ctx, low)
    if rounding is not None and not rounding.fine:
        return (PRECISION, f"scale '{name}' is {tiny:.3g}, subnormal in {low.name} (below "
                f"{low.min_normal:.2g}): {rounding.text(low)}: every value it scales moves by more than the "
                f"quantizer resolves", {**evidence, "relative_error": rounding.error})
    return _zero_point_problem(node, ctx, low)


def _finite(node: onnx.NodeProto, index: int, values: np.ndarray, ctx: ModelContext, what: str) -> np.ndarray:
    """``values``, ``node``'s constant input ``index`` (its scale or float zero point), when every one
    is finite. A NaN or an infinity is no quantization, whatever the 16-bit type: the FP32 model
    already maps every value through it to NaN, inf or the zero point (``q * NaN``, ``x / inf = 0``),
    so no plan can be judged against it and none would repair it; the model is refused, one line
    naming the node and the tensor (an audit that went on would compare NaN and find nothing, or fail
    on an empty minimum)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size == 0:
        return values
    first = float(values[bad[0]])
    shown = "NaN" if np.isnan(first) else f"{first:g}"
    held = f"is {shown}" if values.size == 1 else \
        f"holds {shown} ({bad.size} of its {values.size} values not finite, the first at index {bad[0]})"
    raise ModelLoadError(f"{ctx.path}: node '{node.name}' ({node.op_type}): {what} '{node.input[index]}' "
                         f"{held}: a quantizer with a non-finite {what} is no quantization (in FP32 too "
                         f"it maps every value to NaN, inf or its zero point); fix the quantization, then "
                         f"convert")


@dataclass(frozen=True)
class SubnormalRounding:
    """What the 16-bit type's rounding of a quantizer's subnormal scales does: each dequantized (or
    quantized) value moves by the scale's relative error, against the quantum of the quantized type
    relative to its range (1/2^8 for 8 bits and wider: a wider type's values, INT32 biases, meet the
    model's 8-bit activation quantizers; 1/2^4 for 4 bits). Measured on real per-channel INT8 models
    (scripts/bench_scale_audit.py), FP16 rounds their subnormal scales by at most 0.19%, half that
    quantum, and the outputs' error against the FP32 original moved by -3.1% to +2.6% with all of them
    rounded: within it the scale is a note, the samples judge the node."""

    error: float  # the largest |fp16(s) - s| / s over the scale's subnormal values
    quantum: float  # 1 / 2^bits, bits = min(8, the quantized type's)
    bits: int

    @property
    def fine(self) -> bool:
        return self.error <= self.quantum

    def text(self, low: LowPrecision) -> str:
        """'FP16 rounds it by 0.12% at most, within the quantum 1/2^8 of an 8-bit range (0.39%)'."""
        within = "within" if self.fine else "more than"
        article = "an" if self.bits == 8 else "a"
        return (f"{low.name} rounds it by {100 * self.error:.2g}% at most, {within} the quantum "
                f"1/2^{self.bits} of {article} {self.bits}-bit range ({100 * self.quantum:.2g}%)")


def _quantized_bits(node: onnx.NodeProto, ctx: ModelContext) -> int:
    """The bits of ``node``'s quantized type (its zero point's, or its constant quantized input's),
    at most 8; MatMulNBits' ``bits``; 8 where neither is known."""
    if node.op_type == "MatMulNBits":
        return next((int(a.i) for a in node.attribute if a.name == "bits"), 4)
    for index in (2, 0):
        name = node.input[index] if len(node.input) > index else ""
        tensor = ctx.constants.get(name) if name else None
        if tensor is not None and tensor.data_type != onnx.TensorProto.FLOAT:
            return 4 if tensor.data_type in _FOUR_BITS else 8
    return 8


_FOUR_BITS = (onnx.TensorProto.INT4, onnx.TensorProto.UINT4)


def subnormal_rounding(node: onnx.NodeProto, values: np.ndarray, ctx: ModelContext, low: LowPrecision,
                       ) -> SubnormalRounding | None:
    """The rounding of ``node``'s scale ``values`` (absolute) where some are subnormal in ``low``; else
    None."""
    sub = values[(values > 0) & (values < low.min_normal)]
    if sub.size == 0:
        return None
    error = float(np.max(np.abs(low.round(sub.astype(np.float32)).astype(np.float64) - sub) / sub))
    bits = min(8, _quantized_bits(node, ctx))
    return SubnormalRounding(error, 2.0 ** -bits, bits)


def _zero_point_problem(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision,
                        ) -> tuple[Kind, str, dict[str, object]] | None:
    """A float zero point (MatMulNBits' input 3) that ``low`` rounds by half a quantum or more."""
    values = _float_constant(node, 3, ctx) if node.op_type == "MatMulNBits" else None
    if values is None or values.size == 0:
        return None
    _finite(node, 3, values, ctx, "zero point")
    off = np.abs(low.round(values).astype(np.float64) - values)
    worst = int(np.argmax(off))
    if off[worst] < 0.5:
        return None
    name, value = node.input[3], float(values[worst])
    return (PRECISION, f"zero point '{name}' is {value:g}, which {low.name} rounds to "
            f"{float(low.round(values[worst:worst + 1])[0]):g} (every integer is exact only up to "
            f"{low.exact_int}): every value it dequantizes is off by {off[worst]:g} x its scale",
            {"zero_point": name, "value": value})


def scale_finding(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision) -> Finding | None:
    """The finding of a Q/DQ node's scale in ``low`` (:func:`scale_problem`), or None; data-independent,
    so confirmed with or without ranges. Its :meth:`~.facts.Finding.reason` keeps the node FP32."""
    problem = scale_problem(node, ctx, low)
    if problem is None:
        return None
    kind, message, evidence = problem
    return finding(node, "qdq-scale", kind, MEDIUM if kind == PRECISION else HIGH, message, True, **evidence)


@rule("QuantizeLinear", "DequantizeLinear")
def qdq_scale(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding | Skipped]:
    """A Q/DQ scale that is zero, subnormal or whose reciprocal overflows in the 16-bit type (see the
    module's docstring)."""
    found = scale_finding(node, facts.ctx, facts.low) or _subnormal_note(node, facts.ctx, facts.low)
    yield found if found is not None else skip(f"the scale is not a constant, or {facts.low.name} holds it")


def _subnormal_note(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision) -> Finding | None:
    """A low-severity finding (no pin: the search judges the node on the samples) for a scale whose
    subnormal values the 16-bit type rounds within the quantum (:class:`SubnormalRounding`)."""
    index = scale_input(node)
    found = None if index is None else _float_constant(node, index, ctx)
    if index is None or found is None:
        return None
    rounding = subnormal_rounding(node, np.abs(found), ctx, low)
    if rounding is None:
        return None
    name, tiny = node.input[index], float(np.abs(found)[np.abs(found) > 0].min())
    return finding(node, "qdq-scale", PRECISION, LOW,
                   f"scale '{name}' is {tiny:.3g}, subnormal in {low.name} (below {low.min_normal:.2g}): "
                   f"{rounding.text(low)}: kept {low.name}, judged on the samples (a runtime that flushed "
                   f"{low.name} subnormals would read 0)", True, scale=name, value=tiny,
                   relative_error=rounding.error)
