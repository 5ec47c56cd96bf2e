"""Choosing a precision plan automatically: ``--mode auto`` (search) and ``--mode static``.

Plans run on one :class:`~onnx_precision.oracle.PlanRunner`, by default the emulation
(:class:`~onnx_precision.oracle.Emulator`): the FP32 reference, the caller's plan and the plan with
headroom pins each run on a baked session of that plan (as fast to build as the model); only when
that plan fails does it build the switch graph, and then the layerwise comparison and every probe
of the search are runs of that one session with different rounding switches, so a search costs
session *runs*, never session *builds*. With ``--oracle cuda|tensorrt|reference`` the probes run
on that runner instead; the ranges and the layerwise ranking, which need to see inside the
model, still come from the emulation.

``auto``:
  1. FP32 reference on every sample. If the FP32 model is itself non-finite, stop: that is not
     FP16's fault (status ``fp32-nonfinite``, the first non-finite node named).
  2. Base plan: the caller's plan (all FP16 + ``--keep-fp32``/``--plan``), resolved for types, plus
     *headroom* pins: a float tensor whose FP32 magnitude exceeds 65504/H on the samples stays
     FP32 at its producer and at every consumer, even when the outputs pass, because unseen
     inputs will be larger. Default H = 2 (:data:`~onnx_precision.basis.DEFAULT_HEADROOM`): one binade of
     margin, so an input that doubles the overflowing intermediate still fits, while tensors that merely use a
     good part of FP16's range (up to 32752) keep running in FP16.
  3. If the base plan passes every sample, done. Otherwise: candidates = nodes flagged by the
     static rules (confirmed by the recorded ranges), tensors the ranges flag (overflow, values
     flushed to zero), and the first-divergence nodes of the layerwise comparison; widening order
     = the other nodes by layerwise error. :class:`~onnx_precision.search.PinSearch` pins, widens
     and shrinks to a 1-minimal set. A plan passes only if every sample passes.
``static``: steps 1-2 plus the rule and range candidates pinned, no search (a fast first look;
the report says whether that plan happens to pass).

A generation (a decoder, a streaming model: :mod:`onnx_precision.generation`) is judged whole: the
reference is each sample's FP32 generation, run once; the ranges and the sums are measured on each sample's
feeds at its first step, its eighths and its last (what grows with the steps shows there, and the headroom
pins keep it FP32 before anything is searched; their trend is what the generation's bound extrapolates,
:mod:`onnx_precision.generation.inside`), the layerwise ranking on the first and last; every plan runs the
generation teacher-forced by the reference's tokens, and stops at its first step out of tolerance. The search
judges its plans over the first :data:`~onnx_precision.generation.HORIZON` steps (a passing plan costs that
many, not K + 1); the plan it chooses is then judged over all K, and where it fails at step k the search runs
again over a horizon past k (:func:`_over_horizons`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from .. import policy
from ..basis import (
    AS_GIVEN,
    DEFAULT_HEADROOM,
    Basis,
    forward_samples,
    generation_in,
    generations,
    judged,
    sums,
)
from ..context import ModelContext
from ..costs import Clock, Counted
from ..data import Samples
from ..errors import InternalError
from ..float_types import LowPrecision
from ..flops import flop_shares
from ..generation import HORIZON, GenerationRunner, failing_step
from ..generation.verdict import length_pins
from ..judge import Comparison, Tolerance
from ..options import Judging
from ..oracle import Emulator, Inspection, LayerwiseResult, PlanRunner, ReferenceResult
from ..oracle.blame import Edge
from ..oracle.inspection import NodeStats
from ..oracle.ranges import first_nonfinite_output
from ..outcome import FAILED, FP32_NONFINITE, PASSED, AutoResult
from ..plan import Precision, PrecisionPlan, Reason
from ..search.driver import (
    FlopShare,
    Progress,
    SearchBudget,
    SearchResult,
    SearchSpace,
    is_diffuse,
    run_search,
    widen_order,
)
from ..search.fallback import fallback_candidates, try_fallback
from ..search.prober import Prober
from ..tradeoff import PlanPoint, output_errors
from ..vocab import MeasuringMode, ReasonSource, Status

log = logging.getLogger(__name__)

NO_BUDGET = SearchBudget()


def choose_plan(ctx: ModelContext, base_plan: PrecisionPlan, samples: Samples, judging: Judging = AS_GIVEN,
                headroom: float = DEFAULT_HEADROOM, mode: MeasuringMode = "auto",
                progress: Progress | None = None, budget: SearchBudget = NO_BUDGET,
                runner: PlanRunner | None = None, profile_max: Mapping[str, tuple[int, ...]] | None = None,
                ) -> AutoResult:
    """Pick the plan for ``ctx``'s model starting from ``base_plan`` (see the module docstring), on
    ``samples``. Its first phase measures the run's basis (:mod:`onnx_precision.basis`: the reference
    ``judging`` derives and each sample's tolerance, the sums the samples prove in range with ``headroom``
    kept), which judges every plan after it and which the result keeps. ``headroom`` 0 turns headroom pins
    off; otherwise it must be at least 1 (1: pin only what overflows on the samples).

    ``budget`` bounds the search (see :class:`SearchBudget`). ``runner`` runs the probes (default: the
    emulation); where it cannot see inside a plan (a native provider, onnx.reference), the ranges and the
    layerwise ranking come from the emulation. ``profile_max``: the deployment profile's largest input
    shapes, where they pass the samples' (:mod:`onnx_precision.policy.shape_headroom`). Where the target
    has a fallback type (auto mode), the FP32 pins are tried in it first
    (:mod:`onnx_precision.search.fallback`). A generation's samples
    (:func:`~onnx_precision.basis.run_samples`) are judged over the whole generation (see the module
    docstring).
    """
    clock = Clock(progress)
    with clock.phase("reference") as phase:
        generation = generation_in(samples)
        generated = None if generation is None else generations(ctx, samples.feeds, generation)
        # what one forward pass measures (layerwise, FLOPs) runs on the samples, or on a generation's first
        # and last steps; its ranges and sums at the steps between too, whose trend its bound extrapolates
        forward = samples if generated is None else forward_samples(samples, generated.forward)
        stepped = samples if generated is None else forward_samples(samples, generated.stepped)
        found = sums(ctx, stepped, headroom)
        emulator = Emulator(ctx, measured=found.measured)
        plain = emulator if runner is None else runner
        inspection = plain.inspection or emulator.inspection
        user = policy.resolve(ctx, base_plan)
        reference = inspection.reference(stepped)
        if generated is not None:
            generated = generated.measured(ctx, reference.peaks, found.each)
        # its FP32 outputs are the model's (sessions without graph optimisations compute the same): the
        # basis is judged on them, with no run of its own (a generation's, on its reference generations)
        basis = judged(ctx, samples, judging, found, reference.outputs if generated is None else generated)
        runner = plain if generated is None else basis.generation_runner(plain)
        counted = _Counted((emulator, plain), found.sessions + (generated.sessions if generated else 0))
        phase.count(counted, probes=1)
    bounds = found.bounds
    first = forward.feeds[0] if forward.feeds else None
    shapes = {k: np.shape(v) for k, v in first.items()} if first is not None else {}
    # and the feed: an If on an input (Silero VAD's sample rate) counts the branch it takes
    shares = flop_shares(ctx, shapes, first)
    share = FlopShare(ctx, shares)
    run = _Run(mode, headroom, clock, counted, reference, _node_stats(ctx, reference.stats), basis, share,
               ctx.target.fallback, progress)

    nonfinite = _fp32_nonfinite_message(reference)
    if nonfinite and not basis.given.allow_fp32_nonfinite:
        return run.finish(_Ending(user, FP32_NONFINITE, nonfinite, unsearched="no plan was measured: " +
                                  "the FP32 model itself produces NaN/Inf"))

    pins = policy.headroom_pins(ctx, user, reference.stats, headroom)
    pins.update({n: r for n, r in policy.decoder_pins(ctx, user, reference.stats, generation).items()
                 if n not in pins})
    if generated is not None:  # --max-length: the states the bound says break before it
        pinned = user.with_fp32_reasons({node: (reason,) for node, reason in pins.items()})
        pins.update({n: r for n, r in length_pins(ctx, pinned, generated.generation, generated.runs,
                                                  ctx.target.low).items() if n not in pins})
    largest = policy.largest({k: [np.shape(f[k]) for f in forward.feeds] for k in forward.feeds[0]}
                             if forward.feeds else {})
    if profile_max:
        grown = policy.shape_headroom_pins(ctx, user, reference.stats, largest, profile_max, headroom)
        grown.update(policy.accumulation_pins(ctx, user, bounds, largest, profile_max, headroom))
        pins.update({node: reason for node, reason in grown.items() if node not in pins})
    base = user.with_fp32_reasons({node: (reason,) for node, reason in pins.items()})
    flagged = policy.flagged(ctx, user, reference.stats, static=mode == "static")
    prober = Prober(runner, samples.feeds, basis.references, basis.tolerances)
    with clock.phase("before") as phase:
        before = prober.comparison(user)
        phase.count(counted, probes=1)
    start = _Start(user, base, flagged, before)
    chosen = _static(run, prober, start) if mode == "static" else _over_horizons(
        run, prober, ctx, start, inspection, runner, progress, budget)
    edges = () if generated is not None else emulator.near_edges(chosen.plan, chosen.status == FAILED,
                                                                 samples.feeds)
    return replace(chosen, notes=chosen.notes + _size_bound(ctx, chosen.plan, bounds, largest)
                   + _knife_edge(edges, ctx.target.low))


def _knife_edge(edges: tuple[Edge, ...], low: LowPrecision) -> tuple[str, ...]:
    """Where the samples put a rounding decision's FP32 input within a few 16-bit steps of its boundary
    (:meth:`~onnx_precision.oracle.Emulator.near_edges`: those that set a shape first, then the nearest): a
    reason the nodes feeding it stay FP32 that each pin's own reason ("not tried alone: ...") does not say."""
    if not edges:
        return ()
    edge = edges[0]
    shape = " and change a shape after it" if edge.sets_shapes else ""
    kept = ", and the plan keeps what feeds it FP32" if edge.kept else ""
    more = (f" ({len(edges) - 1} more decision(s) as near: "
            + ", ".join(f"'{e.node}'" for e in edges[1:4]) + (", ..." if len(edges) > 4 else "") + ")"
            if len(edges) > 1 else "")
    return (f"'{edge.node}' decides on a value within {edge.steps:.1f} {low.name} step of its boundary on "
            f"sample {edge.sample} ({edge.value:.5g}, {edge.distance:.2g} from {edge.boundary:g}): a 16-bit "
            f"node upstream can flip it{shape}{kept}{more}",)


def _size_bound(ctx: ModelContext, plan: PrecisionPlan, bounds: Mapping[str, float],
                largest: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """Where the target sums in FP16 over a symbolic axis: the size up to which ``plan`` holds
    (:func:`onnx_precision.policy.size_bounds`), its tightest node named."""
    found = policy.size_bounds(ctx, plan, bounds, largest)
    if not found:
        return ()
    more = (f"; {len(found) - 1} more FP16 node(s) sum over symbolic axes, with more room"
            if len(found) > 1 else "")
    return (found[0].text(ctx.target.name, ctx.target.low.max) + more,)


class _Counted:
    """The sessions built by the runners of one run, each counted once, and ``before`` them (the basis')."""

    def __init__(self, runners: tuple[Counted, ...], before: int = 0) -> None:
        self.runners = tuple({id(r): r for r in runners}.values())
        self.before = before

    @property
    def sessions_built(self) -> int:
        return self.before + sum(r.sessions_built for r in self.runners)


@dataclass(frozen=True)
class _Ending:
    """How one path of :func:`choose_plan` ended."""

    plan: PrecisionPlan
    status: Status
    message: str
    before: Comparison | None = None
    after: Comparison | None = None
    found: SearchResult | None = None
    layer: LayerwiseResult | None = None
    measured: tuple[PlanPoint, ...] = ()  # without a search: the plans measured, the chosen one last
    unsearched: str = ""  # why no search ran
    fallback_points: tuple[PlanPoint, ...] = ()  # the plans --fallback probed
    fallback_chosen: int | None = None  # the point of the plan --fallback chose
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Start:
    """What the search starts from: the caller's plan resolved, with headroom pins, the static
    candidates and the caller's plan measured."""

    user: PrecisionPlan
    base: PrecisionPlan
    flagged: Mapping[str, list[Reason]]
    before: Comparison


@dataclass(frozen=True)
class _Run:
    """What every ending of :func:`choose_plan` reports."""

    mode: MeasuringMode
    headroom: float
    clock: Clock
    counted: _Counted
    reference: ReferenceResult
    stats: Mapping[str, NodeStats]
    basis: Basis
    share: FlopShare
    fallback: LowPrecision | None = None
    progress: Progress | None = None

    def finish(self, end: _Ending) -> AutoResult:
        node_stats = self.stats if end.layer is None else _with_layerwise(self.stats, end.layer)
        found = end.found
        points = (end.measured if found is None else found.points) + end.fallback_points
        chosen = end.fallback_chosen if end.fallback_chosen is not None else _chosen_point(end, points)
        notes = (() if found is None else found.notes) + end.notes
        return AutoResult(end.plan, end.status, end.message, self.mode, end.before, end.after, node_stats,
                          self.clock.phases(), None if found is None else found.outcome,
                          tuple(self.reference.outputs), self.headroom, self.basis,
                          self.share.shares.node_flops,
                          points, notes, chosen, end.unsearched, self.share.shares.quantized,
                          counted_as=self.share.shares.counted_as)

    def fall_back(self, ctx: ModelContext, prober: Prober, plan: PrecisionPlan, runner: PlanRunner,
                  next_point: int, budget: SearchBudget) -> tuple[PrecisionPlan, tuple[PlanPoint, ...],
                                                               tuple[str, ...]]:
        """``plan`` with its numerical FP32 pins tried in the fallback type first (none: as it is);
        ``budget``: what the search left of the run's."""
        if self.fallback is None:
            return plan, (), ()
        candidates, untried = fallback_candidates(ctx, plan, self.fallback, self.reference.stats,
                                                  self.headroom)
        low = self.fallback.name
        kept = (f"--fallback {self.fallback.precision}: {len(untried)} FP32 pin(s) not tried in {low}: "
                + "; ".join(f"{n} ({why})" for n, why in list(untried.items())[:3])
                + (f"; and {len(untried) - 3} more" if len(untried) > 3 else ""),) if untried else ()
        if not candidates:
            return plan, (), kept or (f"--fallback {self.fallback.precision}: no FP32 pin to try in {low} "
                                      f"(none is pinned for a numerical reason)",)
        mixed = prober.on(runner)  # mixed FP16/BF16 plans run on baked sessions, not the switch graph
        result = try_fallback(ctx, mixed, self.counted, self.clock, plan, candidates, self.share, budget,
                              next_point, self.progress)
        return result.plan, result.points, result.notes + kept

    def chosen_point(self, plan: PrecisionPlan, after: Comparison, tolerance: Tolerance, index: int,
                     ) -> PlanPoint:
        """The plan the fallback chose, as the trade-off's last point."""
        return PlanPoint(index, tuple(sorted(plan.fp32_nodes)), self.share(plan), after.passed,
                         output_errors(after, tolerance), tuple(sorted(plan.nodes_in(Precision.BF16))))

    def measured(self, plans: list[tuple[PrecisionPlan, Comparison]], tolerance: Tolerance,
                 ) -> tuple[PlanPoint, ...]:
        """The plans measured without a search as trade-off points, numbered in the order measured;
        a plan with the same pins as the one before it is one point."""
        points: list[PlanPoint] = []
        for plan, comparison in plans:
            pinned = tuple(sorted(plan.fp32_nodes))
            if points and points[-1].pinned == pinned:
                points.pop()
            points.append(PlanPoint(len(points), pinned, self.share(plan), comparison.passed,
                                    output_errors(comparison, tolerance)))
        return tuple(points)


def _chosen_point(end: _Ending, points: tuple[PlanPoint, ...]) -> int | None:
    """The point of the plan chosen: without a search the last plan measured; after one, the first
    passing point with the pins it found (None when nothing passed)."""
    if end.found is None:
        return end.measured[-1].index if end.measured else None
    if end.found.plan is None:
        return None
    pinned = tuple(sorted(end.found.plan.fp32_nodes))
    return next((p.index for p in points if p.passed and p.pinned == pinned), None)


def _static(run: _Run, prober: Prober, start: _Start) -> AutoResult:
    before = start.before
    plan = policy.with_flags(start.base, start.flagged, start.flagged)
    with run.clock.phase("static") as phase:
        after = prober.comparison(plan)
        phase.count(run.counted, probes=1)
    measured = run.measured([(start.user, before), (plan, after)], prober.tolerance)
    unsearched = "--mode static: no search, the plan to start from and the static plan"
    if after.passed:
        return run.finish(_Ending(plan, PASSED, "", before, after, measured=measured, unsearched=unsearched))
    message = "the static plan is out of tolerance; --mode auto searches for one that passes"
    return run.finish(_Ending(plan, FAILED, message, before, after, measured=measured, unsearched=unsearched))


def _search(run: _Run, prober: Prober, ctx: ModelContext, start: _Start, inspection: Inspection,
            runner: PlanRunner, progress: Progress | None, budget: SearchBudget) -> AutoResult:
    clock, user, base, flagged, before = run.clock, start.user, start.base, start.flagged, start.before
    with clock.phase("start") as phase:
        if base.fp32_nodes == user.fp32_nodes:
            passed, detail = before.passed, prober.last_detail
        else:
            passed, detail = prober.passes(base)
        phase.count(run.counted, probes=int(base.fp32_nodes != user.fp32_nodes))
    if passed:
        plan = policy.with_flags(base, base.fp32_nodes, flagged)
        after = before
        if plan.fp32_nodes != user.fp32_nodes:
            with clock.phase("after") as phase:
                after = prober.comparison(plan)
                phase.count(run.counted, probes=1)
        measured = run.measured([(user, before), (plan, after)], prober.tolerance)
        mixed, tried, notes = run.fall_back(ctx, prober, plan, runner, len(measured), budget)
        if tried:
            return _fallen_back(run, prober.on(runner), mixed, tried, notes,
                                _Ending(plan, PASSED, "", before, after, measured=measured,
                                        unsearched=_nothing_to_search(user, plan)))
        return run.finish(_Ending(plan, PASSED, "", before, after, measured=measured,
                                  unsearched=_nothing_to_search(user, plan), notes=notes))
    with clock.phase("layerwise") as phase:
        layer = inspection.layerwise(base, run.basis.forward)
        phase.count(run.counted, probes=1)
    with clock.phase("switch graph") as phase:
        # many plans follow: the emulation's switch graph, or baked sessions; a plan given with BF16
        # nodes in an FP16 run (--plan) is mixed, which only baked sessions run
        lows = {d.precision.value for d in base.decisions.values() if d.precision.is_low}
        searcher = runner if lows - {ctx.target.low.precision} else runner.searching()
        phase.count(run.counted)
    prober = prober.on(searcher)
    searchable = [n for n in ctx.node_ops if n in searcher.switchable and base.is_low(n)]
    flagged_nodes = set(flagged) | set(layer.first_divergence)
    candidates = [n for n in searchable if n in flagged_nodes]
    # Largest layerwise error first; nodes the layerwise run does not see (subgraphs) last.
    searchable_set = set(searchable)
    ranked = [n for n in layer.ranked() if n in searchable_set]
    others = [n for n in dict.fromkeys(ranked + searchable) if n not in flagged_nodes]
    space = SearchSpace(base, candidates, widen_order(others, ctx.node_ops), detail,
                        is_diffuse(flagged, layer, before))
    started = time.perf_counter()
    found = run_search(prober, run.counted, clock, space, run.share, budget, progress)
    if found.plan is None:
        return run.finish(_Ending(base, FAILED, found.message, before, None, found, layer))
    plan = policy.with_flags(found.plan, found.plan.fp32_nodes, flagged)
    left = budget.left(found.outcome.probes_run, time.perf_counter() - started)
    mixed, tried, notes = run.fall_back(ctx, prober, plan, runner, len(found.points), left)
    if tried:
        return _fallen_back(run, prober.on(runner), mixed, tried, notes,
                            _Ending(plan, PASSED, found.message, before, None, found, layer))
    with clock.phase("after") as phase:
        after = prober.comparison(plan)
        phase.count(run.counted, probes=1)
    if not after.passed:  # the search keeps only sets that passed: this would be an oracle bug
        raise InternalError("the searched plan passed during the search but fails on re-evaluation")
    return run.finish(_Ending(plan, PASSED, found.message, before, after, found, layer, notes=notes))


def _over_horizons(run: _Run, prober: Prober, ctx: ModelContext, start: _Start, inspection: Inspection,
                   runner: PlanRunner, progress: Progress | None, budget: SearchBudget) -> AutoResult:
    """:func:`_search` (``prober`` and ``runner`` judge the whole generation, or one forward pass), for a
    generation over a horizon: its plans judged over the first
    :data:`~onnx_precision.generation.HORIZON` steps, the plan chosen over all of them; where that fails at
    step k, searched again over twice as many steps as k (at most all), until the plan chosen passes or the
    horizon is every step."""
    generation = run.basis.generation
    if generation is None or not isinstance(runner, GenerationRunner):
        return _search(run, prober, ctx, start, inspection, runner, progress, budget)
    steps = generation.steps
    horizon = min(HORIZON, steps)
    tried: list[str] = []
    while True:
        within = runner.within(horizon)
        found = _search(run, prober.on(within), ctx, start, inspection, within, progress, budget)
        if not found.passed or horizon == steps:
            return replace(found, notes=found.notes + _horizon_note(tried, horizon, steps))
        if found.after is not None and len(found.after.outputs) == len(runner.outputs):
            return found  # the plan to start from, judged whole already ("before"): nothing searched
        with run.clock.phase("generation") as phase:
            whole = prober.comparison(found.plan)
            phase.count(run.counted, probes=1)
        failing = failing_step(whole)
        if failing is None:
            return replace(found, after=whole, phases=run.clock.phases(),
                           notes=found.notes + _horizon_note(tried, horizon, steps))
        tried.append(f"the plan chosen over steps 0-{horizon} failed at step {failing} "
                     f"({whole.failure()})")
        horizon = min(steps, 2 * max(horizon, failing))


def _horizon_note(tried: list[str], horizon: int, steps: int) -> tuple[str, ...]:
    """What the search's horizon was, and why it grew."""
    judged = (f"plans were judged over the generation's steps 0-{horizon} (the search's horizon)"
              + (f", the plan chosen over all {steps}" if horizon < steps else ""))
    return ("; ".join(tried + [judged]),)


def _fallen_back(run: _Run, prober: Prober, plan: PrecisionPlan, tried: tuple[PlanPoint, ...],
                 notes: tuple[str, ...], end: _Ending) -> AutoResult:
    """The FP16 search's ending ``end`` with the plan the fallback chose, measured again as "after"
    and added to the trade-off as its last point."""
    with run.clock.phase("after") as phase:
        after = prober.comparison(plan)
        phase.count(run.counted, probes=1)
    if not after.passed:
        raise InternalError("the fallback's plan passed during its search but fails on re-evaluation")
    last = run.chosen_point(plan, after, prober.tolerance, tried[-1].index + 1)
    same = [p for p in tried if p.passed and (p.pinned, p.bf16) == (last.pinned, last.bf16)]
    points, chosen = (tried, same[-1].index) if same else (tried + (last,), last.index)
    unsearched = end.unsearched and f"{end.unsearched}, then the BF16 fallback"
    return run.finish(replace(end, plan=plan, after=after, fallback_points=points, fallback_chosen=chosen,
                              notes=notes, unsearched=unsearched))


def _nothing_to_search(user: PrecisionPlan, plan: PrecisionPlan) -> str:
    """Why no search ran when the plan to start from passed."""
    added = len(plan.fp32_nodes) - len(user.fp32_nodes)
    pins = f" with {added} headroom pin(s)" if added else " as it is"
    return f"nothing needed searching: the plan to start from passes{pins}"


# --- statistics for the report ---------------------------------------------------------------------


def _node_stats(ctx: ModelContext, tensor_stats: Mapping) -> dict[str, NodeStats]:
    out = {}
    for ref in ctx.nodes:
        found = [tensor_stats[t] for t in ref.node.output if t and t in tensor_stats]
        if found:
            out[ref.name] = NodeStats(max(s.max_abs for s in found), min(s.min_nonzero_abs for s in found))
    return out


def _layerwise_errors(layer: LayerwiseResult) -> dict[str, float]:
    """Per node the scale-relative error of its emulated output; inf where it turned non-finite."""
    return {
        name: float("inf") if e.new_nonfinite else float(e.max_rel_err) for name, e in layer.nodes.items()
    }


def _with_layerwise(stats: Mapping[str, NodeStats], layer: LayerwiseResult) -> dict[str, NodeStats]:
    out = dict(stats)
    for name, error in _layerwise_errors(layer).items():
        s = out.get(name, NodeStats())
        out[name] = NodeStats(s.max_abs, s.min_nonzero_abs, error)
    return out


def _fp32_nonfinite_message(reference: ReferenceResult) -> str:
    """Why the FP32 model itself is unusable as a reference, or "".

    Only non-finite *outputs* stop the conversion: an intermediate -inf that the model absorbs
    (Log of a 0/1 mask added to attention scores before Softmax) is how some models work, and the
    comparison leaves elements that are non-finite in FP32 out anyway. The message names the first
    node that turns non-finite from finite inputs, where the oracle found one.
    """
    bad = first_nonfinite_output(reference.outputs)
    if bad is not None:
        sample, name = bad
        where = f" on sample {sample}" if len(reference.outputs) > 1 else ""
        node = reference.first_nonfinite
        if node is None:
            return (f"the FP32 model itself produces NaN/Inf in output '{name}'{where}; that is not "
                    f"a 16-bit precision problem (fix the model or the data)")
        return (f"the FP32 model itself produces NaN/Inf: node '{node}' gives a non-finite output "
                f"from finite inputs and output '{name}' is non-finite{where}; that is not a "
                f"16-bit precision problem (fix the model or the data)")
    if reference.first_nonfinite is not None:
        log.info(
            "note: node '%s' is non-finite in FP32 on the samples, but the outputs are finite",
            reference.first_nonfinite,
        )
    return ""


def pinned_by(plan: PrecisionPlan, source: ReasonSource) -> tuple[str, ...]:
    """FP32 nodes with a reason of ``source`` (e.g. which pins came from headroom)."""
    return tuple(n for n in plan.fp32_nodes if any(r.source == source for r in plan.decisions[n].reasons))
