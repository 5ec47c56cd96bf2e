"""BF16 before FP32: the second step of a three-precision plan (``--fallback bf16``).

Most FP16 breakage is range (a sum of squares past 65504, activations of 1e5, a variance that
underflows, an epsilon of 1e-10 that flushes to zero); BF16 has FP32's range with 7 fraction bits,
and GPUs since Ampere run it at FP16's speed. So the nodes an FP16 plan pins for a numerical reason
(the search's pins, the headroom, range, rule and initializer pins) are tried in BF16 first, unless
their values pass BF16's own headroom too (a mask of -3.4e38 is past any 16-bit type): all of them
BF16, then, if that fails, a search for a 1-minimal set of them that must stay FP32 (the others stay
BF16). Range failures end in BF16, precision failures (cancellation, a running sum past 256,
float-encoded integers) in FP32, without a classifier: each is measured.

Then the BF16 nodes whose only reason for leaving FP16 was the FP16 search (``search`` pins: a
probe measured that un-pinning it failed, with the plan as it was then) are tried back in FP16, one
at a time: with the others now BF16 or FP32, FP16 may hold there, and the samples are all that
made the pin. A headroom, range, rule or initializer pin never goes back to FP16: it was made
*because* passing on the samples is not enough (a value within the headroom factor of FP16's
maximum, or past it; a rule's finding; a constant FP16 cannot hold), so no probe can undo it.

A decomposed LayerNorm is written as one LayerNormalization, in one type
(:func:`onnx_precision.policy.tied`: its tail, and under TensorRT all nine nodes): a candidate in one
is tried with the nodes tied to it, FP16 in the FP16 plan and FP32 only with their LayerNorm in the
file it writes, so that the LayerNorm is written in BF16 whole (as ``--low-precision bf16`` writes
it) rather than pinned FP32 around a BF16 epsilon; they go back to FP16 with it, and a candidate tied
to a node that stays FP32 for another reason is not tried (its LayerNorm is written FP32 whatever).

The plan chosen is the plan written: its LayerNorm pins applied
(:func:`onnx_precision.policy.layer_norm_pins`, as the emulation applies them to every plan it
runs), and its notes count each candidate once, in the precision it is written in. A budget
(:class:`.driver.SearchBudget`: what the FP16 search left of ``--max-probes``/``--time-budget``)
bounds the phase; where it runs out, the best plan measured to pass so far is kept (at worst the
FP16 plan) and a note says what it cut.

The plans it probes mix FP16 and BF16, which the switch graph cannot run (it rounds in one type):
they run on baked sessions, one per plan (:meth:`onnx_precision.oracle.Emulator.mixed`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..context import ModelContext
from ..costs import Clock, Counted
from ..errors import InternalError
from ..float_types import LowPrecision
from ..plan import NodeDecision, Precision, PrecisionPlan, Reason
from ..policy import (
    blockers,
    decomposed_layer_norms,
    forced_fp32,
    headroom_pins,
    held_in,
    layer_norm_pins,
    tied,
)
from ..tradeoff import PlanPoint
from .driver import FlopShare, Progress, SearchBudget, SearchSpace, run_search
from .prober import Prober

# Pins a fallback may move: those made for a numerical reason. The user's pins, and the type pins
# (no kernel or schema), stay FP32.
NUMERICAL = frozenset({"search", "headroom", "range", "rule", "initializer"})
# Pins that the samples alone made: only a node pinned for these alone may go back to FP16 (see the
# module docstring).
MEASURED_ONLY = frozenset({"search"})
# How a candidate kept FP32 says why (the reason's detail after the type's name); the notes count them
FAILS = "fails too"
UNPROVEN = "not shown to hold"


@dataclass(frozen=True)
class FallbackResult:
    plan: PrecisionPlan  # ``plan`` with the nodes that hold in the fallback type moved there, as written
    points: tuple[PlanPoint, ...]  # the plans probed, numbered after the FP16 search's
    notes: tuple[str, ...]
    probes: int


def fallback_candidates(ctx: ModelContext, plan: PrecisionPlan, low: LowPrecision, stats: Mapping,
                        headroom: float) -> tuple[list[str], dict[str, str]]:
    """The FP32 nodes of ``plan`` pinned for a numerical reason that ``low`` can compute (its schema,
    the target's kernels and its range allow it: ``stats``, the FP32 ranges, within ``low``'s maximum
    over ``headroom``), in the model's order; and the numerical pins it cannot compute, with why
    (they stay FP32 untried). A node the target's type keeps FP32 only for a constant it cannot hold
    (an epsilon of 1e-10 flushes to zero in FP16) is a candidate where ``low`` holds that constant."""
    typing = ctx.typing_in(low)
    own = blockers(ctx, low).forced
    forced = forced_fp32(ctx)
    # what the emulation keeps FP32 in ``low`` too: a LayerNorm's statistics, FP32 inside the node
    # written whatever the plan (an epsilon there included, which ``low`` would hold), and what only
    # the target's type cannot hold
    inside = frozenset() if ctx.target.normalizes_in_input_precision else frozenset(
        n for ln in decomposed_layer_norms(ctx) for n in ln.inside)
    fixed = inside | (forced - held_in(ctx, low))
    numerical = [n for n in plan.fp32_nodes if (t := typing.get(n)) is not None and t.has_float
                 and plan.decisions[n].reasons
                 and all(r.source in NUMERICAL for r in plan.decisions[n].reasons)]
    trial = plan.with_precision(numerical, Precision(low.precision))
    # each value read in its node's own type (here ``low``); past the maximum even with headroom off
    past = headroom_pins(ctx, trial, stats, headroom or 1.0)
    out, untried = [], {}
    for name in numerical:
        blocker = typing[name].low_blocker
        if blocker:
            untried[name] = blocker
        elif name in own:  # a constant (its detail names the type)
            untried[name] = own[name].detail
        elif name in past:  # a value past the type's headroom, or its maximum (the detail says which)
            untried[name] = past[name].detail
        elif name in fixed:
            kept = None if name in inside else blockers(ctx).forced.get(name)
            why = kept.detail if kept is not None else "inside a LayerNormalization that computes it in FP32"
            untried[name] = f"{why}; the emulation keeps it FP32"
        else:
            out.append(name)
    ties = tied(ctx)
    # a node tied to one that stays FP32 (not tried, or pinned for another reason) is written FP32 with
    # it, whatever it is tried in
    held = {n: other for n in out for other in ties.get(n, ()) if other not in out and not plan.is_low(other)}
    for name, other in held.items():
        untried[name] = (f"written in one LayerNormalization ('{ties[name][-1]}') with '{other}', which "
                         f"stays FP32")
    return [n for n in out if n not in held], untried


def try_fallback(ctx: ModelContext, prober: Prober, session: Counted, clock: Clock, plan: PrecisionPlan,
                 candidates: Sequence[str], share: FlopShare, budget: SearchBudget, first_index: int,
                 progress: Progress | None = None) -> FallbackResult:
    """``plan`` (which passes) with as many of ``candidates`` (FP32 in it) in the target's fallback
    type as pass, as written; see the module docstring. ``budget``: what is left of the run's (the
    whole phase counts against it). ``prober`` must run mixed plans (the emulator itself, not its
    switch graph)."""
    low, base = ctx.target.fallback, ctx.target.low  # base: the plan's 16-bit type (FP16), failing here
    if low is None:
        raise InternalError(f"a fallback tried on {ctx.target.title}, which has no fallback type")
    precision = Precision(low.precision)
    why_low = Reason("search", f"{base.name} fails here; {low.name} holds ({low.range_text}, "
                               f"{low.significand_bits} fraction bits)")
    # the FP16 plan's reasons stay: they say why FP16 failed there
    decisions = dict(plan.decisions)
    decisions.update({n: NodeDecision(precision, plan.decisions[n].reasons + (why_low,)) for n in candidates})
    ties = tied(ctx)
    companions = {n: ties[c][-1] for c in candidates for n in ties.get(c, ()) if plan.is_low(n)}
    decisions.update({n: NodeDecision(precision, (Reason("search", f"written in one LayerNormalization "
                                                                    f"('{ln}') with what {base.name} fails "
                                                                    f"there; {low.name} holds"),))
                      for n, ln in companions.items()})
    trial = PrecisionPlan(decisions, plan.fp16_io)
    spent = _Spent(budget)
    with clock.phase("fallback") as phase:
        if spent.cut():
            phase.count(session, probes=0)
            note = _cut_note(base, low, spent.cut(), f"tried nothing in {low.name}")
            return FallbackResult(plan, (), (note,), 0)
        passed, detail = prober.passes(trial)
        spent.probes += 1
        points = [_point(first_index, trial, share, passed, prober.last_errors, precision)]
        notes: list[str] = []
        if not passed:
            space = SearchSpace(trial, list(candidates), [], detail)
            found = run_search(prober, session, clock, space, share, spent.left(before=1), progress)
            spent.probes += found.outcome.probes_run - 1
            points += [_point(first_index + p.index, _replayed(trial, p.pinned), share, p.passed, p.errors,
                              precision) for p in found.points[1:]]
            cut = found.outcome.exhausted and (spent.cut() or found.outcome.exhausted)
            if found.plan is None:  # nothing passed (a budget ran out): keep the FP16 plan
                notes.append(_cut_note(base, low, cut, f"no plan with {low.name} nodes passed before it; the "
                                                       f"pins stay FP32 as the {base.name} plan has them")
                             if cut else
                             f"--fallback {low.precision}: {found.message}; the pins stay FP32")
                phase.count(session, probes=spent.probes)
                return FallbackResult(plan, tuple(points), tuple(notes), spent.probes)
            if cut:
                notes.append(_cut_note(base, low, cut, "kept the cheapest passing plan probed; it is not "
                                                       "proven minimal"))
            trial = _fp32_again(found.plan, plan, low, frozenset(candidates), cut)
        trial, cut = _back_to_base(prober, trial, precision, plan, base, ties, spent)
        if cut:
            notes.append(_cut_note(base, low, cut, f"some {low.name} nodes were not tried back in "
                                                   f"{base.name}"))
        phase.count(session, probes=spent.probes)
    written = layer_norm_pins(ctx, trial)
    counts = _counts(written, candidates, list(companions), base, low)
    return FallbackResult(written, tuple(points), (counts, *notes), spent.probes)


class _Spent:
    """What the fallback has spent of its budget so far."""

    def __init__(self, budget: SearchBudget) -> None:
        self.budget = budget
        self.probes = 0
        self.started = time.perf_counter()

    def left(self, before: int = 0) -> SearchBudget:
        """The budget left, as it was ``before`` probes ago (a search counts its start probe)."""
        return self.budget.left(self.probes - before, time.perf_counter() - self.started)

    def cut(self) -> str:
        """Why no further probe is allowed, or ""."""
        return self.left().spent()


def _cut_note(base: LowPrecision, low: LowPrecision, why: str, what: str) -> str:
    return (f"--fallback {low.precision}: {why} (it bounds the {base.name} search and the fallback "
            f"together): {what}")


def _counts(written: PrecisionPlan, pins: Sequence[str], companions: Sequence[str], base: LowPrecision,
            low: LowPrecision) -> str:
    """Each candidate once, in the precision ``written`` gives it: the ``pins`` and their
    ``companions`` (tried with them: FP32 in the ``base`` plan's file only for their LayerNorm)."""
    precision = Precision(low.precision)
    candidates = [*pins, *companions]
    held = [n for n in candidates if written.precision(n) is precision]
    back = [n for n in candidates if written.precision(n) is Precision(base.precision)]
    fp32 = [n for n in candidates if written.precision(n) is Precision.FP32]
    def said(n: str, what: str) -> bool:
        return any(r.detail.startswith(f"{low.name} {what}") for r in written.decisions[n].reasons)

    failed = [n for n in fp32 if said(n, FAILS)]
    unproven = [n for n in fp32 if said(n, UNPROVEN)]
    parts = [f"{len(held)} hold in {low.name}"]
    if failed:
        parts.append(f"{len(failed)} stay FP32 (they fail in {low.name} too)")
    if unproven:
        parts.append(f"{len(unproven)} stay FP32 (the budget ran out before they were shown to hold in "
                     f"{low.name})")
    if others := len(fp32) - len(failed) - len(unproven):
        # layer_norm_pins: their LayerNorm's nodes are not all in one type, as one node must be
        parts.append(f"{others} stay FP32 (their LayerNorm is written as one node, in one type; see the "
                     f"plan)")
    if back:
        parts.append(f"{len(back)} went back to {base.name} once the others were FP32/{low.name}")
    tied_in = f" ({len(companions)} of them only for their LayerNorm, tried with it)" if companions else ""
    return f"--fallback {low.precision}: of {len(candidates)} FP32 pin(s) tried{tied_in}, " + ", ".join(parts)


def _fp32_again(found: PrecisionPlan, base_plan: PrecisionPlan, low: LowPrecision,
                candidates: frozenset[str], cut: str) -> PrecisionPlan:
    """``found`` with the candidates its search pinned FP32 again keeping their ``base_plan`` reasons,
    and why ``low`` failed them, or, where a budget ``cut`` the search, that it did (the other FP32
    nodes were never tried in ``low``)."""
    decisions = dict(found.decisions)
    for name in found.fp32_nodes:
        if name in candidates:
            failed = (Reason("search", f"{low.name} {UNPROVEN}: {cut}"),) if cut else tuple(
                Reason("search", f"{low.name} {FAILS}: {r.detail}")
                for r in found.decisions[name].reasons if r.source == "search")
            decisions[name] = NodeDecision(Precision.FP32, base_plan.decisions[name].reasons + failed)
    return PrecisionPlan(decisions, found.fp16_io)


def _back_to_base(prober: Prober, plan: PrecisionPlan, precision: Precision, base_plan: PrecisionPlan,
                  base: LowPrecision, ties: Mapping[str, tuple[str, ...]], spent: _Spent,
                  ) -> tuple[PrecisionPlan, str]:
    """Each node in ``precision`` that ``base_plan`` (the plan in ``base``, FP16) pinned for a
    measurement alone (:data:`MEASURED_ONLY`) tried in ``base``, one at a time with the nodes ``ties``
    gives it (back to their ``base_plan`` decisions), kept there where every sample passes; returns the
    plan and why the budget stopped the tries ("" when it did not)."""
    back = Reason("search", f"passes in {base.name} once the others are off it")
    tried: set[str] = set()
    for name in plan.nodes_in(precision):
        if name in tried:
            continue
        unit = [n for n in ties.get(name, (name,)) if plan.precision(n) is precision]
        tried.update(unit)
        if not all(base_plan.is_low(n) or {r.source for r in base_plan.decisions[n].reasons} <= MEASURED_ONLY
                   for n in unit):
            continue
        if cut := spent.cut():
            return plan, cut
        trial = plan.with_reasons(Precision(base.precision), {
            n: base_plan.decisions[n].reasons if base_plan.is_low(n) else (back,) for n in unit})
        spent.probes += 1
        if prober.passes(trial)[0]:
            plan = trial
    return plan, ""


def _replayed(base: PrecisionPlan, pinned: Sequence[str]) -> PrecisionPlan:
    return base.with_precision(pinned, Precision.FP32)


def _point(index: int, plan: PrecisionPlan, share: FlopShare, passed: bool,
           errors: Mapping[str, float], fallback: Precision) -> PlanPoint:
    return PlanPoint(index, tuple(sorted(plan.fp32_nodes)), share(plan), passed, dict(errors),
                     tuple(sorted(plan.nodes_in(fallback))))
