"""Risk rules for the ops that compute: sums, contractions, exponentials, divisions, softmax."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Callable

import numpy as np
import onnx

from ..trt.intermediates import log_softmax_underflows
from .facts import (
    HIGH,
    LOW,
    MEDIUM,
    OVERFLOW,
    PRECISION,
    UNDERFLOW,
    Finding,
    ModelFacts,
    Severity,
    Skipped,
    Stats,
    confirm,
    contraction_depth,
    dim_of,
    finding,
    flushes,
    flushes_much,
    range_evidence,
    reduction_length,
    sum_of_squares_input,
)
from .registry import rule, skip

LONG_REDUCTION = 4096  # reduction depth past which FP16 accumulation loses several bits

RuleOutput = Iterator["Finding | Skipped"]


@rule("CumSum")
def cumsum(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A running sum grows with its length: it overflows, and late increments fall below FP16's
    spacing (1/2048 of the running value) long before that."""
    axis_values = facts.constant(node.input[1])
    axis = int(np.ravel(axis_values)[0]) if axis_values is not None else None
    length = dim_of(facts.shape(node.input[0]), axis) if axis is not None else None
    evidence = {"length": length, "axis": axis, **range_evidence(facts, "output", node.output[0])}
    overflow = confirm(facts, [node.output[0]], facts.overflows)
    over = _over("running sum", length)
    if overflow:
        yield finding(node, "cumsum", OVERFLOW, HIGH, f"{over} reaches beyond {facts.low.max_text}", True,
                      **evidence)
        return
    lossy = confirm(facts, [node.input[0], node.output[0]],
                    lambda i, o: o.max_abs > facts.low.exact_int * max(i.max_abs, facts.low.min_subnormal))
    yield finding(node, "cumsum", PRECISION, MEDIUM, f"{over}: increments fall below {facts.low.name} "
                                                     f"spacing", lossy,
                  **evidence)


# Bits of its significand a difference must keep: fewer, and its relative error passes 1/16.
KEPT_BITS = 4


@rule("Sub")
def cancellation(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """x - y of nearly equal values keeps only the bits their magnitude leaves it: inputs stored with
    p significand bits at magnitude M give a difference of magnitude m about p + 1 - log2(M / m)
    correct bits. BF16 (8) runs out 8x sooner than FP16 (11): LayerNorm's x - mean on rows with a
    large offset, a position minus a nearby one."""
    names = [n for n in node.input if n]
    if len(names) != 2 or not node.output:
        yield skip("not a difference of two tensors")
        return
    ranges = [facts.range_of(n) for n in (*names, node.output[0])]
    if any(r is None for r in ranges):
        yield skip("no recorded range")
        return
    big = max(r.max_abs for r in ranges[:2] if r is not None)
    out = ranges[2]
    if out is None or not 0 < out.max_abs < math.inf or not math.isfinite(big):
        yield skip("no finite nonzero difference recorded")
        return
    kept = facts.low.significand_bits + 1 - math.log2(max(big / out.max_abs, 1.0))
    if kept >= KEPT_BITS:
        yield skip(f"the difference keeps {kept:.1f} of {facts.low.significand_bits + 1} bits in "
                   f"{facts.low.name}")
        return
    yield finding(node, "cancellation", PRECISION, MEDIUM,
                  f"inputs up to {big:.4g} cancel to at most {out.max_abs:.3g}: the difference keeps "
                  f"{max(kept, 0):.1f} of {facts.low.name}'s {facts.low.significand_bits + 1} bits", True,
                  **range_evidence(facts, "output", node.output[0]))


_REDUCE_OUTPUT_IS_SUM = {"ReduceSum", "ReduceSumSquare", "ReduceL1"}


def _over(what: str, length: int | None) -> str:
    """``what`` over its length where the shapes say it (never "over None elements")."""
    return f"{what} over {length} elements" if length is not None else what


@rule("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp")
def reduction(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Sums overflow when their total does; sums of squares are the usual culprit (L2 norms).
    Means and L2 norms keep their output in range but their internal sum can exceed 65504 on
    kernels that accumulate in FP16."""
    length = reduction_length(node, facts)
    squares = node.op_type in ("ReduceSumSquare", "ReduceL2") or sum_of_squares_input(node, facts)
    evidence = {"length": length, **range_evidence(facts, "output", node.output[0])}
    if node.op_type in _REDUCE_OUTPUT_IS_SUM:
        confirmed = confirm(facts, [node.output[0]], facts.overflows)
        severity = HIGH if squares else MEDIUM if (length or 0) >= LONG_REDUCTION else LOW
        what = "sum of squares" if squares else "sum"
        verb = "exceeds" if confirmed else "can exceed"
        yield finding(node, "reduction-overflow", OVERFLOW, severity,
                      f"{_over(what, length)} {verb} {facts.low.max_text}", confirmed, **evidence)
        return
    # The output is a mean, a norm or a log: estimate the internal sum from it.
    def internal(s: Stats) -> float:
        if node.op_type == "ReduceMean":
            return s.max_abs * (length or 1)
        if node.op_type == "ReduceL2":
            return s.max_abs ** 2
        return math.exp(min(s.max_abs, 700.0))  # ReduceLogSumExp
    confirmed = confirm(facts, [node.output[0]], lambda s: internal(s) > facts.low.max)
    stats = facts.range_of(node.output[0])
    if stats is not None:
        evidence["internal_sum_estimate"] = float(internal(stats))
    # TensorRT builds ReduceL2/ReduceLogSumExp from layers that store the sum in FP16 (trt.ops)
    stored = facts.ctx.target.stored_in_layers(node.op_type)
    where = stored or f"kernels accumulate in {facts.low.name}"
    yield finding(node, "reduction-accumulator", OVERFLOW, HIGH if stored else LOW,
                  f"{_over('internal sum', length)} can exceed {facts.low.max_text} where {where}",
                  confirmed, **evidence)


@rule("MatMul", "Gemm", "Conv", "ConvTranspose")
def contraction(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Long inner products lose precision and can overflow; short ones (the usual case) are fine."""
    depth = contraction_depth(node, facts)
    overflow = confirm(facts, [node.output[0]], facts.overflows)
    evidence = {"depth": depth, **range_evidence(facts, "output", node.output[0])}
    if overflow:
        yield finding(node, "long-contraction", OVERFLOW, HIGH,
                      f"inner products of depth {depth} exceed {facts.low.max_text}", True, **evidence)
    elif depth is not None and depth >= LONG_REDUCTION:
        yield finding(node, "long-contraction", PRECISION, LOW,
                      f"inner products of depth {depth} accumulate rounding error", overflow, **evidence)
    else:
        yield skip(f"inner products of depth {depth if depth is not None else 'unknown'}, "
                   f"no output past {facts.low.max_text}" if overflow is False else "no recorded range")


@rule("Exp")
def exp(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """exp(x) is inf in FP16 for x > 11.09."""
    confirmed = confirm(facts, [node.output[0]], facts.overflows)
    verb = "overflows" if confirmed else "can overflow"
    yield finding(node, "exp-overflow", OVERFLOW, HIGH,
                  f"exp {verb} {facts.low.name} (inputs above {math.log(facts.low.max):.2f})", confirmed,
                  **range_evidence(facts, "input", node.input[0]),
                  **range_evidence(facts, "output", node.output[0]))


@rule("Pow")
def power(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """x**p overflows for |x| > 65504**(1/p) (its underflow is the generic flush rule's)."""
    values = facts.constant(node.input[1])
    p = float(np.ravel(values)[0]) if values is not None and values.size == 1 else None
    if p is not None and p in (0.0, 1.0):
        yield skip(f"constant exponent {p:g}: the power cannot leave the input's range")
        return
    evidence = {"exponent": p, **range_evidence(facts, "input", node.input[0]),
                **range_evidence(facts, "output", node.output[0])}
    overflow = confirm(facts, [node.output[0]], facts.overflows)
    limit = facts.low.max ** (1.0 / p) if p is not None and p > 1 else None
    if overflow:
        message = f"power exceeds {facts.low.max_text}"
    elif limit:
        message = f"x**{p:g} overflows {facts.low.name} for |x| > {limit:.4g}"
    else:
        message = f"power can leave {facts.low.name}'s range"
    yield finding(node, "pow-overflow", OVERFLOW, HIGH if overflow else MEDIUM, message, overflow, **evidence)


def _tiny_input(node: onnx.NodeProto, facts: ModelFacts, index: int, rule_name: str, severity: Severity,
                message: str, flushes: Callable[[Stats], bool] = flushes) -> RuleOutput:
    """Shared body of Log/Sqrt/Reciprocal/Div: input ``index`` flushing to zero is the risk;
    an output past 65504 (division by a tiny value) is the other."""
    name = node.input[index]
    evidence = {**range_evidence(facts, "input", name), **range_evidence(facts, "output", node.output[0])}
    if confirm(facts, [node.output[0]], facts.overflows):
        yield finding(node, rule_name, OVERFLOW, HIGH, f"result exceeds {facts.low.max_text} (divided by "
                                                       f"a tiny value)",
                      True, **evidence)
        return
    yield finding(node, rule_name, UNDERFLOW, severity, message, confirm(facts, [name], flushes), **evidence)


@rule("Log")
def log(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """log of a value that flushed to zero is -inf."""
    yield from _tiny_input(node, facts, 0, "log-tiny-input", HIGH,
                           f"inputs below {facts.low.tiny_text} flush to zero in {facts.low.name} and "
                           f"log(0) = -inf")


@rule("Sqrt")
def sqrt(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """sqrt of a flushed value is 0, which a later division turns into inf."""
    yield from _tiny_input(node, facts, 0, "sqrt-tiny-input", MEDIUM,
                           f"inputs below {facts.low.tiny_text} flush to zero in {facts.low.name}; "
                           f"sqrt(0) then divides to inf",
                           flushes_much)


@rule("Reciprocal")
def reciprocal(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    yield from _tiny_input(node, facts, 0, "tiny-denominator", HIGH,
                           f"denominators below {facts.low.tiny_text} flush to zero in {facts.low.name}: "
                           f"1/0 = inf")


@rule("Div")
def div(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A denominator that flushes to zero makes inf (or NaN with a zero numerator)."""
    denominator = facts.constant(node.input[1])
    if denominator is not None:
        magnitudes = np.abs(denominator.astype(np.float64))
        if np.all(magnitudes >= facts.low.min_normal):
            yield skip(f"a constant divisor in {facts.low.name}'s normal range: nothing to flush")
            return
    yield from _tiny_input(node, facts, 1, "tiny-denominator", MEDIUM,
                           f"denominators below {facts.low.tiny_text} flush to zero in {facts.low.name}: "
                           f"x/0 = inf")


@rule("Softmax", "LogSoftmax")
def softmax(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Softmax is computed stably, but probabilities below 6e-8 flush to zero in FP16, which
    matters when they are later divided by or logged."""
    if node.op_type == "LogSoftmax":
        confirmed = confirm(facts, [node.output[0]], facts.overflows)
        yield finding(node, "softmax", OVERFLOW, LOW, f"log-probabilities below -{facts.low.max_text} "
                                                      f"overflow",
                      confirmed, **range_evidence(facts, "output", node.output[0]))
        layers = facts.ctx.target.stored_in_layers(node.op_type)
        if layers:  # the probabilities stored in FP16 between the layers
            flushed = confirm(facts, [node.output[0]], lambda s: log_softmax_underflows(s.max_abs, facts.low))
            yield finding(node, "log-softmax-layers", UNDERFLOW, HIGH if flushed else MEDIUM,
                          f"{layers}: probabilities below {facts.low.tiny_text} are stored as 0 in "
                          f"{facts.low.name} and their log is "
                          "-inf", flushed,
                          **range_evidence(facts, "output", node.output[0]))
        return
    downstream = {c.op_type for c in facts.downstream_ops(node.output[0], 2)}
    fragile = sorted(downstream & {"Log", "Div", "Reciprocal"})
    severity = MEDIUM if fragile else LOW
    message = f"probabilities below {facts.low.tiny_text} flush to zero in {facts.low.name}"
    if fragile:
        message += f" before {'/'.join(fragile)}"
    yield finding(node, "softmax", UNDERFLOW, severity, message,
                  confirm(facts, [node.output[0]], flushes_much),
                  **range_evidence(facts, "output", node.output[0]))
