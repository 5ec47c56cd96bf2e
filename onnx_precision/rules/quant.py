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


def _scale(node: onnx.NodeProto, ctx: ModelContext) -> np.ndarray | None:
    """The values of a Q/DQ node's constant float scale, else None."""
    name = node.input[1] if len(node.input) > 1 else ""
    tensor = ctx.constants.get(name)
    if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
        return None
    return np.abs(read_array(tensor, ctx.base_dir).astype(np.float64)).ravel()


def scale_problem(node: onnx.NodeProto, ctx: ModelContext, low: LowPrecision,
                  ) -> tuple[Kind, str, dict[str, object]] | None:
    """(kind, what breaks, evidence) of a Q/DQ node's scale in ``low``, the worst first; None when
    the scale is fine, not a constant, or the node is no Q/DQ."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in QDQ_DOMAINS:
        return None
    values = _scale(node, ctx)
    if values is None or values.size == 0:
        return None
    name, smallest = node.input[1], float(values.min())
    if smallest <= low.flush:
        return (UNDERFLOW, f"scale '{name}' is {smallest:.3g}, zero in {low.name}: x/0 = inf and 0/0 = "
                f"NaN on every runtime", {"scale": name, "value": smallest})
    tiny = float(values[values > 0].min())
    evidence: dict[str, object] = {"scale": name, "value": tiny}
    if tiny < 1 / low.max:  # an overflow (of 1/scale): it decides analyze's verdict without an effect
        return (OVERFLOW, f"scale '{name}' is {tiny:.3g}: its reciprocal {1 / tiny:.3g} overflows "
                f"{low.name} (max {low.max:g}), so a runtime that multiplies by 1/scale in {low.name} "
                f"gets inf and 0 * inf = NaN at the input's zeros (torchao's FP8 cast)", evidence)
    if tiny < low.min_normal:
        bits = int(np.floor(np.log2(tiny / low.min_subnormal))) + 1
        return (PRECISION, f"scale '{name}' is {tiny:.3g}, subnormal in {low.name} (below "
                f"{low.min_normal:.2g}): {bits} significant bit(s) left, and a runtime that flushes "
                f"subnormals to zero reads a zero scale", evidence)
    return None


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
