"""The ``softcap`` rule: c·tanh(x / c) (Gemma's logit and attention caps), whose capped values collapse
onto ±c where tanh rounds to ±1 in 16 bits."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ...context import ModelContext
from ..facts import MEDIUM, PRECISION, ModelFacts, confirm, finding, range_evidence
from ..ops import RuleOutput
from ..registry import rule, skip
from .common import one_consumer, scalar

SOFTCAP_MATCH = 1e-3  # the scale equals the divisor to this relative difference


@dataclass(frozen=True)
class Softcap:
    """c·tanh(x / c): ``divide`` (x / c, or x times 1/c), ``tanh``, ``scale`` (times c)."""

    x: str
    divide: str
    tanh: str
    scale: str
    cap: float


def softcaps(ctx: ModelContext) -> Mapping[str, Softcap]:
    """Tanh or scale node -> its softcap, found once per context."""
    return ctx.memo(_softcaps)


def _softcaps(ctx: ModelContext) -> Mapping[str, Softcap]:
    found: dict[str, Softcap] = {}
    for ref in ctx.nodes:
        tanh = ref.node
        if tanh.op_type != "Tanh":
            continue
        made = ctx.index.producers.get(tanh.input[0])
        divide = made.node if made is not None else None
        scale = one_consumer(ctx, tanh.output[0], "Mul")
        if divide is None or scale is None or one_consumer(ctx, divide.output[0], "Tanh") is None:
            continue
        cap = _divisor(ctx, divide)
        times = next((v for n in scale.input if n != tanh.output[0] and (v := scalar(ctx, n)) is not None),
                     None)
        if cap is not None and times is not None and cap > 0 and abs(times / cap - 1) <= SOFTCAP_MATCH:
            x = next(n for n in divide.input if scalar(ctx, n) is None)
            cap_found = Softcap(x, divide.name, tanh.name, scale.name, times)
            found.update({tanh.name: cap_found, scale.name: cap_found})
    return found


def _divisor(ctx: ModelContext, node: onnx.NodeProto) -> float | None:
    """c of x / c, or of x * (1/c)."""
    if node.op_type == "Div" and len(node.input) == 2:
        return scalar(ctx, node.input[1]) if scalar(ctx, node.input[0]) is None else None
    if node.op_type == "Mul" and len(node.input) == 2:
        scales = [v for n in node.input if (v := scalar(ctx, n)) is not None]
        return 1.0 / scales[0] if len(scales) == 1 and scales[0] else None
    return None


def saturates_at(cap: float, significand_bits: int) -> float:
    """|x| past which tanh(x / cap) rounds to ±1 in a type of ``significand_bits``: 1 - tanh(z) ≈ 2e^-2z
    falls below half the spacing just below 1, 2^-(bits + 2)."""
    return cap * (significand_bits + 3) * math.log(2) / 2


@rule("Tanh", "Mul")
def softcap(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """c·tanh(x / c): the capped values collapse onto ±c in 16 bits (Tanh and scale kept FP32)."""
    cap = softcaps(facts.ctx).get(node.name)
    if cap is None:
        yield skip("not the Tanh or scale of a softcap c·tanh(x / c)")
        return
    low = facts.low
    limit = saturates_at(cap.cap, low.significand_bits)
    yield finding(node, "softcap", PRECISION, MEDIUM,
                  f"softcap {cap.cap:g}·tanh(x / {cap.cap:g}) of '{cap.x}' (divided by '{cap.divide}'): in "
                  f"{low.name} tanh rounds to ±1 for |x| past {limit:.4g}, so every value beyond is "
                  f"±{cap.cap:g} and their order is lost; '{cap.tanh}' and '{cap.scale}' stay FP32",
                  confirm(facts, [cap.x], lambda s: s.max_abs > limit), cap=cap.cap, capped=cap.x,
                  divide=cap.divide, saturates_at=limit, **range_evidence(facts, "capped", cap.x))

