"""Q/DQ scales the 16-bit type cannot hold: the scale audit of quantized models.

From opset 19 a QuantizeLinear/DequantizeLinear written in FP16 takes its scale in FP16, and a scale
that FP16 holds badly breaks the quantizer wherever it runs:

* zero, or flushed to zero (at or below half FP16's smallest subnormal, 3e-8): ``x / 0 = inf`` and
  ``0 / 0 = NaN`` on every runtime;
* a reciprocal past FP16's maximum (a scale below 1/65504 = 1.53e-5): a runtime that multiplies by
  ``1/scale`` in FP16 gets ``inf``, and ``0 * inf = NaN`` at every zero of the input (torchao's
  FP16 -> FP8 cast, pytorch/ao issue 1766: a [0, 0.1] range mapped onto E5M2's 57344, scale 1.7e-6);
* subnormal (below 6.1e-5): the scale keeps fewer significant bits (every dequantized value is off
  by the same relative error), and a runtime that flushes subnormals to zero (flush-to-zero kernels)
  reads a zero scale.

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
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

from ..context import ModelContext
from ..float_types import LowPrecision
from ..storage import read_array
from .facts import HIGH, MEDIUM, OVERFLOW, PRECISION, UNDERFLOW, Finding, Kind, ModelFacts, Skipped, finding
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
    found = None if index is None else _float_constant(node, index, ctx)
    if found is None or found.size == 0:
        return None if index is None else _zero_point_problem(node, ctx, low)
    values = np.abs(found)
    name, smallest = node.input[index], float(values.min())
    # MatMulNBits only dequantizes, multiplying by its scale: a zero scale zeroes, no reciprocal is taken
    weights = index == 2
    if smallest <= low.flush:
        broken = "every weight it scales is 0" if weights else "x/0 = inf and 0/0 = NaN on every runtime"
        return (UNDERFLOW, f"scale '{name}' is {smallest:.3g}, zero in {low.name}: {broken}",
                {"scale": name, "value": smallest})
    tiny = float(values[values > 0].min())
    evidence: dict[str, object] = {"scale": name, "value": tiny}
    # an overflow (of 1/scale): it decides analyze's verdict without an effect
    if tiny < 1 / low.max and not weights:
        return (OVERFLOW, f"scale '{name}' is {tiny:.3g}: its reciprocal {1 / tiny:.3g} overflows "
                f"{low.name} (max {low.max:g}), so a runtime that multiplies by 1/scale in {low.name} "
                f"gets inf and 0 * inf = NaN at the input's zeros (torchao's FP8 cast)", evidence)
    if tiny < low.min_normal:
        bits = int(np.floor(np.log2(tiny / low.min_subnormal))) + 1
        return (PRECISION, f"scale '{name}' is {tiny:.3g}, subnormal in {low.name} (below "
                f"{low.min_normal:.2g}): {bits} significant bit(s) left, and a runtime that flushes "
                f"subnormals to zero reads a zero scale", evidence)
    return _zero_point_problem(node, ctx, low)


def _zero_point_problem(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision,
                        ) -> tuple[Kind, str, dict[str, object]] | None:
    """A float zero point (MatMulNBits' input 3) that ``low`` rounds by half a quantum or more."""
    values = _float_constant(node, 3, ctx) if node.op_type == "MatMulNBits" else None
    if values is None or values.size == 0:
        return None
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
    found = scale_finding(node, facts.ctx, facts.low)
    yield found if found is not None else skip(f"the scale is not a constant, or {facts.low.name} holds it")
