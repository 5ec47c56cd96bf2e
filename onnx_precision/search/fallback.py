"""BF16 before FP32: the second step of a three-precision plan (``--fallback bf16``).

Most FP16 breakage is range (a sum of squares past 65504, activations of 1e5, a variance that
underflows); BF16 has FP32's range with 7 fraction bits, and GPUs since Ampere run it at FP16's
speed. So the nodes an FP16 plan pins for a numerical reason (the search's pins, the headroom,
range and rule pins) are tried in BF16 first: all of them BF16, then, if that fails, a search for a
1-minimal set of them that must stay FP32 (the others stay BF16), then each BF16 node is tried back
in FP16. The result holds both ways: moving any FP32 node of it to BF16, or any BF16 node to FP16,
makes some sample fail. Range failures end in BF16, precision failures (cancellation, a running
sum past 256, float-encoded integers) in FP32, without a classifier: each is measured.

The plans it probes mix FP16 and BF16, which the switch graph cannot run (it rounds in one type):
they run on baked sessions, one per plan (:meth:`onnx_precision.oracle.Emulator.mixed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..context import ModelContext
from ..costs import Clock, Counted
from ..float_types import LowPrecision
from ..plan import NodeDecision, Precision, PrecisionPlan, Reason
from ..policy import blockers
from ..tradeoff import PlanPoint
from .driver import FlopShare, Progress, SearchBudget, SearchSpace, run_search
from .prober import Prober

# Pins a fallback may move: those made for a numerical reason. The user's pins, and the type pins
# (no kernel or schema), stay FP32.
NUMERICAL = frozenset({"search", "headroom", "range", "rule", "initializer"})


@dataclass(frozen=True)
class FallbackResult:
    plan: PrecisionPlan  # ``plan`` with the nodes that hold in the fallback type moved there
    points: tuple[PlanPoint, ...]  # the plans probed, numbered after the FP16 search's
    notes: tuple[str, ...]
    probes: int


def fallback_candidates(ctx: ModelContext, plan: PrecisionPlan, low: LowPrecision,
                        switchable: frozenset[str]) -> tuple[list[str], dict[str, str]]:
    """The FP32 nodes of ``plan`` pinned for a numerical reason that ``low`` can compute (its schema
    and the target's kernels allow it), in the model's order; and the numerical pins it cannot
    compute, with why (they stay FP32 untried)."""
    typing = ctx.typing_in(low)
    kept = blockers(ctx).forced  # the emulation keeps these FP32 in every plan
    out, untried = [], {}
    for name in plan.fp32_nodes:
        reasons = plan.decisions[name].reasons
        t = typing.get(name)
        if name not in switchable or t is None or not t.has_float:
            continue
        if not reasons or not all(r.source in NUMERICAL for r in reasons):
            continue
        if t.fp16_blocker:
            untried[name] = t.fp16_blocker
        elif name in kept:
            untried[name] = f"{kept[name].detail}; the emulation keeps it FP32"
        else:
            out.append(name)
    return out, untried


def try_fallback(prober: Prober, session: Counted, clock: Clock, plan: PrecisionPlan,
                 candidates: Sequence[str], low: LowPrecision, share: FlopShare, budget: SearchBudget,
                 first_index: int, progress: Progress | None = None) -> FallbackResult:
    """``plan`` (which passes) with as many of ``candidates`` (FP32 in it) in ``low`` as pass; see
    the module docstring. ``prober`` must run mixed plans (the emulator itself, not its switch
    graph)."""
    precision = Precision(low.precision)
    why_low = Reason("search", f"FP16 fails here; {low.name} holds (FP32's range, "
                               f"{low.significand_bits} fraction bits)")
    # the FP16 plan's reasons stay: they say why FP16 failed there
    decisions = dict(plan.decisions)
    decisions.update({n: NodeDecision(precision, plan.decisions[n].reasons + (why_low,)) for n in candidates})
    trial = PrecisionPlan(decisions, plan.fp16_io)
    probes = 1
    with clock.phase("fallback") as phase:
        passed, detail = prober.passes(trial)
        points = [_point(first_index, trial, share, passed, prober.last_errors)]
        notes: list[str] = []
        if not passed:
            space = SearchSpace(trial, list(candidates), [], detail)
            found = run_search(prober, session, clock, space, share, budget, progress)
            probes += found.outcome.probes_run - 1
            points += [_point(first_index + p.index, _replayed(trial, p.pinned), share, p.passed, p.errors)
                       for p in found.points[1:]]
            if found.plan is None:  # nothing passed (a budget ran out): keep the FP16 plan
                notes.append(f"--fallback {low.precision}: {found.message}; the pins stay FP32")
                phase.count(session, probes=probes)
                return FallbackResult(plan, tuple(points), tuple(notes), probes)
            trial = _fp32_again(found.plan, plan, low, frozenset(candidates))
        trial, tried = _back_to_fp16(prober, trial, precision)
        probes += tried
        phase.count(session, probes=probes)
    kept = trial.nodes_in(precision)
    moved = len(candidates) - len(kept)
    notes.append(f"--fallback {low.precision}: {len(kept)} of {len(candidates)} FP32 pin(s) hold in "
                 f"{low.name}" + (f"; {moved} stay FP32 (they fail in {low.name} too, or pass in FP16)"
                                  if moved else ""))
    return FallbackResult(trial, tuple(points), tuple(notes), probes)


def _fp32_again(found: PrecisionPlan, fp16_plan: PrecisionPlan, low: LowPrecision,
                candidates: frozenset[str]) -> PrecisionPlan:
    """``found`` with the candidates its search pinned FP32 again keeping their FP16-plan reasons,
    and why ``low`` failed them (the other FP32 nodes were never tried in ``low``)."""
    decisions = dict(found.decisions)
    for name in found.fp32_nodes:
        if name in candidates:
            failed = tuple(Reason("search", f"{low.name} fails too: {r.detail}")
                           for r in found.decisions[name].reasons if r.source == "search")
            decisions[name] = NodeDecision(Precision.FP32, fp16_plan.decisions[name].reasons + failed)
    return PrecisionPlan(decisions, found.fp16_io)


def _back_to_fp16(prober: Prober, plan: PrecisionPlan, precision: Precision) -> tuple[PrecisionPlan, int]:
    """Each node in ``precision`` tried in FP16, one at a time, kept there where every sample passes;
    returns the plan and the probes run."""
    tried = 0
    for name in plan.nodes_in(precision):
        trial = plan.with_precision([name], Precision.FP16, Reason("search", "passes in FP16 once the "
                                                                             "others are off it"))
        tried += 1
        if prober.passes(trial)[0]:
            plan = trial
    return plan, tried


def _replayed(base: PrecisionPlan, pinned: Sequence[str]) -> PrecisionPlan:
    return base.with_precision(pinned, Precision.FP32)


def _point(index: int, plan: PrecisionPlan, share: FlopShare, passed: bool,
           errors: Mapping[str, float]) -> PlanPoint:
    return PlanPoint(index, tuple(sorted(plan.fp32_nodes)), share(plan), passed, dict(errors),
                     tuple(sorted(plan.nodes_in(Precision.BF16))))
