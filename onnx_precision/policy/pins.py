"""Pins a plan takes from what is known before any search: ranges, headroom, rules, the target.

Each function reads the model context (and, where measured, the FP32 ranges of the reference run)
and returns reasons per node, or a plan with them; the search starts from what they pin.

* :func:`headroom_pins`: a tensor whose FP32 magnitude exceeds max/H on the samples stays FP32 at
  its producer and every consumer (H: the headroom), because unseen inputs will be larger;
* :func:`underflow_headroom`: its other end: 16-bit nodes whose largest values lie within H of the
  type's normal minimum, where a quieter input loses their precision (said, not pinned);
* :func:`range_flags`: tensors that overflow or flush to zero on the samples;
* :func:`rule_pins`: findings of the static risk rules, confirmed by the ranges when measured;
* :func:`target_reasons`: a measured pin whose op the target builds from several layers says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from .. import rules
from ..context import ModelContext
from ..float_types import LowPrecision, low_of
from ..plan import PrecisionPlan, Reason
from .resolution import resolve

# A tensor is "flushed" when this share of its nonzero values rounds to zero in FP16: beyond
# isolated denormals, enough to change a sum, a norm or a Log.
FLUSH_SHARE = 0.01
# Pins that a measurement made (their op's layers may be why).
MEASURED = ("search", "range", "rule", "headroom")

Flags = dict[str, list[Reason]]  # node -> reasons, in the order found


def low_holders(ctx: ModelContext) -> Mapping[str, tuple[str, ...]]:
    """Tensor -> the nodes that would hold it in their 16-bit type when 16-bit (its producer and
    consumers), in node order; computed once per context."""
    return ctx.memo(_low_holders)


def _low_holders(ctx: ModelContext) -> dict[str, tuple[str, ...]]:
    holders: dict[str, list[str]] = {}
    for ref in ctx.nodes:
        node, t = ref.node, ctx.typing[ref.name]
        low = [node.input[i] for i in t.convertible_inputs] + [node.output[i] for i in t.convertible_outputs]
        for tensor in dict.fromkeys(low):
            holders.setdefault(tensor, []).append(ref.name)
    return {k: tuple(v) for k, v in holders.items()}


def headroom_pins(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping, headroom: float,
                  ) -> dict[str, Reason]:
    """Nodes to pin because a tensor they would hold in FP16 exceeds max/headroom in FP32.

    A tensor already over the type's maximum is pinned too, whatever the outputs show, but as a
    ``range`` pin: only the margin between max/headroom and max is headroom's doing."""
    pins: dict[str, Reason] = {}
    if headroom == 0:
        return pins
    for tensor, holders in low_holders(ctx).items():
        s = stats.get(tensor)
        if s is None or not np.isfinite(s.max_abs) or s.max_abs <= ctx.target.low.max / headroom:
            continue
        for node in holders:
            low = _type_of(ctx, plan, node)
            limit = 0.0 if low is None else low.max / headroom
            if low is not None and node not in pins and s.max_abs > limit:
                evidence = (("tensor", tensor), ("max_abs", f"{s.max_abs:.6g}"))
                if s.max_abs > low.max:
                    pins[node] = overflow_reason(tensor, s.max_abs, low)
                else:
                    pins[node] = Reason("headroom", f"'{tensor}' reaches {s.max_abs:.4g} in FP32, over "
                                                    f"{low.max:g}/{headroom:g} = {limit:.6g}", evidence)
    return pins


def underflow_headroom(ctx: ModelContext, plan: PrecisionPlan, node_stats: Mapping, headroom: float,
                       ) -> dict[str, float]:
    """The overflow headroom's twin: each 16-bit node of ``plan`` whose outputs' largest |x| in FP32
    (``node_stats``: node -> its ``max_abs``) lies below ``headroom`` x its type's normal minimum,
    with how many binades above that minimum it peaks (:meth:`LowPrecision.scale_binades`, under log2
    ``headroom``; negative: below).

    What matters of a tensor is its largest values, the scale its error is judged at: exact zeros (a
    ReLU's) and tiny values beside large ones (absorbed in any sum with them) do not, so a node is
    judged by its max |x|, never by its smallest nonzero one. A node that peaks at 1e-6 in FP16 keeps
    about 4 of its 11 bits (6e-8 steps); one that peaks within H of 6.1e-5 does so on an input H times
    quieter (a pitch tracker at 10% volume failed so). These are said, not pinned
    (``scripts/bench_margins.py``): no node of the 13 examples and 5 trained networks measured peaks
    there, so pins would cost them nothing, but judging a node by what it reads instead flagged 18 in
    two OCR networks (Adds of 1e-6 weights) and pinning those raised the error (0.0102 to 0.0145): a
    low peak is a risk the output's verdict measures, not a failure."""
    found: dict[str, float] = {}
    if headroom == 0:
        return found
    for node, s in node_stats.items():
        low = _type_of(ctx, plan, node)
        # a Constant's values are weights, which the initializer checks judge (a 1e-6 scale is no loss)
        if ctx.node_ops[node] == "Constant":
            continue
        if low is not None and s.max_abs is not None and 0 < s.max_abs < math.inf:
            binades = low.scale_binades(s.max_abs)
            if binades < math.log2(headroom):
                found[node] = binades
    return found


def _type_of(ctx: ModelContext, plan: PrecisionPlan, node: str) -> LowPrecision | None:
    """The 16-bit type ``node`` computes in under ``plan`` (None: FP32): each is judged by its own,
    the target's by the target's row."""
    decision = plan.decisions.get(node)
    if decision is None or not decision.precision.is_low:
        return None
    low = ctx.target.low
    return low if decision.precision == low.precision else low_of(decision.precision)


def overflow_reason(tensor: str, max_abs: float, low: LowPrecision) -> Reason:
    """Why a node holding ``tensor`` stays FP32: it passes the type's maximum on the samples (one
    text for the headroom and the range flags, so a node flagged by both gets the reason once)."""
    return Reason("range", f"'{tensor}' reaches {max_abs:.4g} in FP32, over the {low.name} maximum "
                           f"{low.max:g}", (("tensor", tensor), ("max_abs", f"{max_abs:.6g}")))


def range_flags(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping) -> Flags:
    """FP16 nodes holding a tensor that flushes to zero (:data:`FLUSH_SHARE` of its nonzero values)
    or passes the type's maximum on the samples."""
    flags: Flags = {}
    for tensor, holders in low_holders(ctx).items():
        s = stats.get(tensor)
        if s is None:
            continue
        for node in holders:
            low = _type_of(ctx, plan, node)
            reason = None if low is None else _range_reason(tensor, s, low, ctx.target.low)
            if reason is not None:
                flags.setdefault(node, []).append(reason)
    return flags


def _range_reason(tensor: str, s: rules.Stats, low: LowPrecision, measured: LowPrecision) -> Reason | None:
    """Why ``tensor`` (its FP32 stats ``s``) is out of ``low``'s range, or None. The flush fraction was
    measured against ``measured`` (the target's type): it says nothing of another."""
    if s.flush_fraction >= FLUSH_SHARE and low is measured:
        return Reason("range", f"{100 * s.flush_fraction:.1f}% of the nonzero values of '{tensor}' flush to "
                               f"zero in {low.name} (smallest |x| {s.min_nonzero_abs:.3g})",
                      (("tensor", tensor), ("flush_fraction", f"{s.flush_fraction:.4g}")))
    if np.isfinite(s.max_abs) and s.max_abs > low.max:
        return overflow_reason(tensor, s.max_abs, low)
    return None


def rule_pins(ctx: ModelContext, stats: Mapping | None, severe_only: bool) -> Iterator[tuple[str, Reason]]:
    """(node, reason) of each finding of the static risk rules that stands: confirmed by ``stats``
    (the FP32 ranges) when there are some, not dismissed when there are none (``None``: the model
    could not be run). ``severe_only``: high and medium severity only, for a plan nothing will test."""
    measured = stats is not None
    for finding in rules.run_rules(rules.ModelFacts(ctx, stats)).findings:
        stands = finding.confirmed if measured else finding.active
        if stands and (not severe_only or finding.severity in (rules.HIGH, rules.MEDIUM)):
            yield finding.node, finding.reason()


def flagged(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping, static: bool) -> Flags:
    """The search's static candidates: confirmed rule findings (``static``: severe ones only), then
    range flags, FP16 nodes of ``plan`` only."""
    flags: Flags = {}
    for node, reason in rule_pins(ctx, stats, severe_only=static):
        if _type_of(ctx, plan, node) is ctx.target.low:  # the rules judge the target's type
            flags.setdefault(node, []).append(reason)
    for node, reasons in range_flags(ctx, plan, stats).items():
        flags.setdefault(node, []).extend(reasons)
    return flags


def with_flags(plan: PrecisionPlan, nodes: Iterable[str], flags: Mapping[str, list[Reason]]) -> PrecisionPlan:
    """``plan`` with ``nodes`` pinned and every rule/range reason known for them attached."""
    return plan.with_fp32_reasons({node: flags[node] for node in nodes if node in flags})


def unmeasured_static_plan(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with the nodes the high and medium severity risk rules flag pinned, resolved: the
    static plan of a model onnxruntime cannot run (no ranges confirm or dismiss a finding)."""
    pins: Flags = {}
    for node, reason in rule_pins(ctx, None, severe_only=True):
        if plan.is_low(node):
            pins.setdefault(node, []).append(reason)
    return resolve(ctx, plan.with_fp32_reasons(pins))


def target_reasons(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with a ``target`` reason on each measured FP32 pin whose op the target builds from
    several layers: the pin may be there because of those layers (a generic run may not need it)."""
    spelling = ctx.target.emulation.spelling(ctx.model, ctx.base_dir, ctx.types, lambda base: base)
    added: dict[str, list[Reason]] = {}
    for ref in ctx.nodes:
        decision = plan.decisions.get(ref.name)
        if decision is None or plan.is_low(ref.name):
            continue
        if not any(r.source in MEASURED for r in decision.reasons):
            continue
        kinds = spelling.layer_kinds(ref.node)
        if len(kinds) > 1:
            added[ref.name] = [Reason(
                "target", f"{ctx.target.title} builds this {ref.node.op_type} from {len(kinds)} layers "
                          f"({', '.join(kinds)}), each storing {ctx.target.low.name}; the emulation "
                          f"followed them")]
    return plan.with_fp32_reasons(added) if added else plan
