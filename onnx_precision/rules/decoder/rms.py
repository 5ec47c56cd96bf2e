"""The ``rms-statistics`` rule: an RMSNorm's mean of squares, written node by node, whose x² passes the
16-bit maximum once |x| passes its square root."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ...context import ModelContext
from ..facts import MEDIUM, OVERFLOW, ModelFacts, confirm, finding, range_evidence
from ..ops import RuleOutput
from ..registry import rule, skip
from .common import one_consumer, scalar


@dataclass(frozen=True)
class RmsNorm:
    """x / sqrt(mean(x²) + eps) written node by node: the statistic's nodes (the square, the mean, the
    epsilon's Add, the Sqrt and, where x is multiplied by it, the inverse) and the node that normalises."""

    x: str
    square: str
    mean: str
    add_eps: str
    sqrt: str
    inverse: str | None
    normalize: str
    epsilon: float

    @property
    def statistic(self) -> tuple[str, ...]:
        return (self.square, self.mean, self.add_eps, self.sqrt) + ((self.inverse,) if self.inverse else ())


def rms_norms(ctx: ModelContext) -> Mapping[str, RmsNorm]:
    """Node of a statistic -> its RMSNorm (main graph), found once per context."""
    return ctx.memo(_rms_norms)


def _rms_norms(ctx: ModelContext) -> Mapping[str, RmsNorm]:
    found: dict[str, RmsNorm] = {}
    for ref in ctx.nodes:
        if ref.node.op_type == "ReduceMean" and not ref.graph_path:
            norm = _rms_norm(ctx, ref.node)
            found.update(dict.fromkeys(norm.statistic, norm) if norm is not None else {})
    return found



def _rms_norm(ctx: ModelContext, mean: onnx.NodeProto) -> RmsNorm | None:
    made = ctx.index.producers.get(mean.input[0])
    square = made.node if made is not None else None
    if square is None or not (
            (square.op_type == "Pow" and scalar(ctx, square.input[1]) == 2.0)
            or (square.op_type == "Mul" and square.input[0] == square.input[1])):
        return None
    x = square.input[0]
    centred = ctx.index.producers.get(x)
    if centred is not None and centred.node.op_type == "Sub":
        return None  # a LayerNorm's variance (policy.layer_norm writes it with FP32 statistics)
    add = one_consumer(ctx, mean.output[0], "Add")
    eps = None if add is None else next((v for n in add.input if n != mean.output[0]
                                         and (v := scalar(ctx, n)) is not None), None)
    sqrt = None if add is None or eps is None else one_consumer(ctx, add.output[0], "Sqrt")
    if add is None or eps is None or sqrt is None:
        return None
    after = one_consumer(ctx, sqrt.output[0], "Reciprocal", "Div")
    if after is None:
        return None
    if after.op_type == "Div" and list(after.input) == [x, sqrt.output[0]]:
        return RmsNorm(x, square.name, mean.name, add.name, sqrt.name, None, after.name, eps)
    if after.op_type == "Div" and (after.input[1] != sqrt.output[0] or scalar(ctx, after.input[0]) != 1.0):
        return None
    normalize = one_consumer(ctx, after.output[0], "Mul")
    if normalize is None or x not in normalize.input:
        return None
    return RmsNorm(x, square.name, mean.name, add.name, sqrt.name, after.name, normalize.name, eps)


@rule("Pow", "Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div")
def rms_statistics(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An RMSNorm's statistic: x² passes the 16-bit maximum for |x| past its square root."""
    norm = rms_norms(facts.ctx).get(node.name)
    if norm is None:
        yield skip("not the statistic of an RMSNorm written node by node")
        return
    limit = math.sqrt(facts.low.max)
    yield finding(node, "rms-statistics", OVERFLOW, MEDIUM,
                  f"statistic of the RMSNorm of '{norm.x}' (normalised by '{norm.normalize}'): x² passes "
                  f"{facts.low.max_text} once |x| passes {limit:.4g}, as a residual stream does late in a "
                  f"generation; the statistic stays FP32, as LayerNormalization's stash_type 1 keeps it",
                  confirm(facts, [norm.x], lambda s: s.max_abs > limit), x=norm.x, epsilon=norm.epsilon,
                  square_limit=limit, statistic="/".join(norm.statistic),
                  **range_evidence(facts, "x", norm.x))

