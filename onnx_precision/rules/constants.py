"""Risk rules for constants and values: epsilons, masks, out-of-range constants, float integers, flushes."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import onnx

from ..graph import attr
from ..typing_rules import elem_type, value_problem
from .facts import (
    HIGH,
    LOW,
    MEDIUM,
    OVERFLOW,
    PRECISION,
    UNDERFLOW,
    ModelFacts,
    confirm,
    finding,
    flushes_much,
    range_evidence,
)
from .ops import RuleOutput
from .registry import ANY_OP, rule, skip

MASK_MAGNITUDE = 1e4  # constants this large and negative are additive masks, not data


_EPS_CONSUMERS = {"Sqrt", "Div", "Reciprocal", "Pow", "Log"}


@rule("Add", "Max", "Sum", "Clip")
def epsilon(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An epsilon added (or used as a floor, as F.normalize's Clip(min=1e-12)) before a
    Sqrt/Div/Reciprocal, too small for FP16: below 5.96e-8 it is exactly 0 (LayerNorm's 1e-12),
    below 6.1e-5 it is subnormal."""
    found = False
    for index, name in enumerate(node.input):
        if node.op_type == "Clip" and index != 1:
            continue  # only Clip's lower bound guards anything
        values = facts.constant(name)
        if values is None or values.size == 0 or values.dtype.kind != "f":
            continue
        magnitudes = np.abs(values.astype(np.float64))
        eps = float(magnitudes.max())
        if not (0 < eps < facts.low.min_normal) or not np.all(magnitudes > 0):
            continue
        guarded = sorted({c.op_type for c in facts.downstream_ops(node.output[0], 2)} & _EPS_CONSUMERS)
        if not guarded:
            continue
        others = [n for i, n in enumerate(node.input) if i != index and n]
        zero = eps <= facts.low.flush
        severity = HIGH if zero else MEDIUM
        what = f"is 0 in {facts.low.name}" if zero else f"is subnormal in {facts.low.name}"
        confirmed = confirm(
            facts,
            others,
            lambda *s: any(x.flush_fraction > 0 or not x.min_nonzero_abs >= facts.low.min_normal for x in s),
        )
        evidence: dict[str, object] = {"epsilon": eps, "guards": "/".join(guarded)}
        for other in others:
            evidence.update(range_evidence(facts, "guarded", other))
        yield finding(
            node,
            "epsilon-underflow",
            UNDERFLOW,
            severity,
            f"epsilon {eps:.3g} {what}; it no longer guards the {'/'.join(guarded)}",
            confirmed,
            **evidence,
        )
        found = True
    if not found:
        yield skip(f"no constant input below {facts.low.name}'s normal range guarding a "
                   f"Sqrt/Div/Reciprocal/Pow/Log")


@rule("LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization")
def norm_epsilon(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A fused normalization's epsilon attribute below FP16's normal range; fused kernels mostly
    add it in FP32, so this is a warning, and ranges cannot decide it."""
    eps = attr(node, "epsilon", 1e-5)
    if not (isinstance(eps, float) and eps < facts.low.min_normal):
        yield skip(f"epsilon {eps} is within {facts.low.name}'s normal range")
    else:
        zero = eps <= facts.low.flush
        yield finding(
            node,
            "epsilon-underflow",
            UNDERFLOW,
            LOW,
            f"epsilon attribute {eps:.3g} {'is 0' if zero else 'is subnormal'} in {facts.low.name} kernels "
            f"that add it in {facts.low.name}",
            None,
            epsilon=eps,
        )


def _constant_inputs(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[tuple[str, tuple[float, float]]]:
    for name in node.input:
        if name and facts.is_float(name):
            value_range = facts.constant_range(name)
            if value_range is not None:
                yield name, value_range


def _is_mask(name: str, facts: ModelFacts) -> bool:
    values = facts.constant(name)
    if values is None:
        return False
    return bool(np.any(values <= -MASK_MAGNITUDE)) and not bool(np.any(values >= MASK_MAGNITUDE))


@rule(ANY_OP)
def constant_range(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A float constant FP16 cannot hold: |x| > 65504 is inf, tiny nonzeros become 0."""
    for name, (max_abs, min_nonzero) in _constant_inputs(node, facts):
        if max_abs > facts.low.max and not _is_mask(name, facts):
            yield finding(
                node,
                "constant-overflow",
                OVERFLOW,
                HIGH,
                f"constant '{name}' has |x| up to {max_abs:.4g}, inf in {facts.low.name}",
                True,
                constant=name,
                max_abs=max_abs,
            )
        elif math.isfinite(min_nonzero) and min_nonzero <= facts.low.flush:
            # As typing_rules.value_problem: flushing matters only when the whole constant lies
            # below FP16's normal range; otherwise it is below the rounding of its largest values.
            material = value_problem(max_abs, min_nonzero, facts.low) is not None
            yield finding(
                node,
                "constant-underflow",
                UNDERFLOW,
                MEDIUM if material else LOW,
                f"constant '{name}' has nonzero |x| down to {min_nonzero:.3g}, 0 in {facts.low.name}"
                + ("" if material else f" (negligible next to its max |x| {max_abs:.3g})"),
                True,
                constant=name,
                min_nonzero_abs=min_nonzero,
                max_abs=max_abs,
            )


_MASK_MEETS = {
    "Mul": "0 * -inf = NaN wherever the other factor is 0",
    "Sub": "-inf - -inf = NaN",
    "Softmax": "a fully masked row gives NaN",
    "Add": "-inf + inf = NaN; a fully masked row of a later Softmax gives NaN",
    "Where": "masked entries become -inf; a fully masked row of a later Softmax gives NaN",
}


@rule("Add", "Sub", "Mul", "Where", "Max", "Min")
def mask_constant(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A huge negative mask constant (-1e9, float32 min) is -inf in FP16; it survives an Add but
    meets a 0 in (1 - mask) * -1e9, or a fully masked row in Softmax, and becomes NaN."""
    for name in node.input:
        if not name or not _is_mask(name, facts):
            continue
        values = facts.constant(name)
        value = float(np.min(values))  # type: ignore[arg-type]
        meets = [node.op_type] + [c.op_type for c in facts.downstream_ops(node.output[0], 3)]
        low = float(facts.low.round(np.array([value]))[0])
        infinite = not np.isfinite(low)
        # what -inf meets; a mask that stays finite (-16376, as the decoder rewrite writes it) meets none
        hazards = [_MASK_MEETS[op] for op in dict.fromkeys(meets) if op in _MASK_MEETS] if infinite else []
        severity = HIGH if infinite else LOW
        fp16 = "-inf" if infinite else f"{low:g}"
        yield finding(
            node,
            "mask-constant",
            OVERFLOW,
            severity,
            f"mask constant {value:.3g} is {fp16} in {facts.low.name}"
            + (f": {hazards[0]}" if hazards else ""),
            True,
            constant=name,
            value=value,
            meets=", ".join(dict.fromkeys(meets)),
        )


_INTEGER_VALUED = ("Floor", "Ceil", "Round", "Range")


@rule("Cast", *_INTEGER_VALUED)
def float_integer(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Integers carried in floats (positions, shapes, indices) are exact in FP16 only up to 2048, in
    BF16 only up to 256."""
    if not node.output or not facts.is_float(node.output[0]):
        yield skip("no float output")
        return
    if node.op_type == "Cast":
        source = elem_type(facts.types.get(node.input[0]))
        if source is None or onnx.helper.tensor_dtype_to_np_dtype(source).kind not in "iub":
            yield skip("casts no integer to float")
            return
    confirmed = confirm(facts, [node.output[0]], lambda s: s.max_abs > facts.low.exact_int)
    yield finding(
        node,
        "float-integer",
        PRECISION,
        MEDIUM,
        f"integer values carried in floats are exact in {facts.low.name} only up to {facts.low.exact_int}",
        confirmed,
        **range_evidence(facts, "output", node.output[0]),
    )


_FRAGILE = {"Sqrt", "Div", "Reciprocal", "Log", "Pow"}
# A sum or product over many values absorbs a few flushed terms; whether its result flushes is
# recorded (and judged) on its own output.
_ABSORBING = {
    "ReduceSum",
    "ReduceMean",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMin",
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "CumSum",
}


@rule(ANY_OP)
def flush_to_zero(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Recorded outputs of which a significant share flushes to zero in FP16. It matters when the
    zeros reach a Sqrt, a division or a Log (LayerNorm variance of near-constant rows) without a
    reduction in between; tiny tails that only feed sums and products are noise (low)."""
    if not facts.has_data or node.op_type in ("Softmax", "Constant"):
        yield skip("no recorded ranges" if not facts.has_data else f"{node.op_type} has its own rule")
        return
    for name in node.output:
        stats = facts.range_of(name) if name else None
        if stats is None or not flushes_much(stats):
            continue
        reached = facts.downstream_ops(name, 3, stop_at=_ABSORBING)
        fragile = sorted({c.op_type for c in reached} & _FRAGILE)
        message = f"{stats.flush_fraction:.0%} of the nonzero values flush to zero in {facts.low.name}"
        if fragile:
            message += f" before {'/'.join(fragile)}"
        yield finding(
            node,
            "flush-to-zero",
            UNDERFLOW,
            MEDIUM if fragile else LOW,
            message,
            True,
            tensor=name,
            **range_evidence(facts, "output", name),
        )
