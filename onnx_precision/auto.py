"""Choosing a precision plan automatically: ``--mode auto`` (search) and ``--mode static``.

Plans are emulated by one :class:`~onnx_precision.oracle.Emulator`: the FP32 reference, the caller's
plan and the plan with headroom pins each run on a baked session of that plan (as fast to build as
the model); only when that plan fails does it build the switch graph, and then the layerwise
comparison and every probe of the search are runs of that one session with different rounding
switches, so a search costs session *runs*, never session *builds*.

``auto``:
  1. FP32 reference on every sample. If the FP32 model is itself non-finite, stop: that is not
     FP16's fault (status ``fp32-nonfinite``, the first non-finite node named).
  2. Base plan: the caller's plan (all FP16 + ``--keep-fp32``/``--plan``), resolved for types, plus
     *headroom* pins: a float tensor whose FP32 magnitude exceeds 65504/H on the samples stays
     FP32 at its producer and at every consumer, even when the outputs pass, because unseen
     inputs will be larger. Default H = 2 (:data:`DEFAULT_HEADROOM`): one binade of margin, so an
     input that doubles the overflowing intermediate still fits, while tensors that merely use a
     good part of FP16's range (up to 32752) keep running in FP16.
  3. If the base plan passes every sample, done. Otherwise: candidates = nodes flagged by the
     static rules (confirmed by the recorded ranges), tensors the ranges flag (overflow, values
     flushed to zero), and the first-divergence nodes of the layerwise comparison; widening order
     = the other nodes by layerwise error. :class:`~onnx_precision.search.PinSearch` pins, widens
     and shrinks to a 1-minimal set. A plan passes only if every sample passes.
``static``: steps 1-2 plus the rule and range candidates pinned, no search (a fast first look;
the report says whether that plan happens to pass).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from . import oracle, rules
from .context import ModelContext
from .costs import Clock, PhaseCost, PhaseTotals
from .data import Samples
from .errors import InternalError, PrecisionError, SearchError
from .flops import estimate_flops
from .fp16 import FP16_MAX
from .metrics import Comparison
from .oracle import Emulator, LayerwiseResult, ReferenceResult
from .oracle.stats import NodeStats, first_nonfinite_output
from .plan import PrecisionPlan, Reason
from .probing import Prober
from .search import SearchOutcome
from .searching import FlopShare, Progress, SearchBudget, is_diffuse, run_search, widen_order
from .tolerance import Tolerance
from .tradeoff import PlanPoint
from .vocab import MeasuringMode, ReasonSource, Status

log = logging.getLogger(__name__)

DEFAULT_HEADROOM = 2.0
# A tensor is "flushed" when this share of its nonzero values rounds to zero in FP16: beyond
# isolated denormals, enough to change a sum, a norm or a Log.
FLUSH_SHARE = 0.01


PASSED: Status = "passed"
FAILED: Status = "failed"
FP32_NONFINITE: Status = "fp32-nonfinite"
NO_BUDGET = SearchBudget()


@dataclass(frozen=True)
class AutoResult(PhaseTotals):
    """The chosen plan and everything the report and the verification need."""

    plan: PrecisionPlan
    status: Status  # passed | failed | fp32-nonfinite (static mode: passed/failed of its one plan)
    message: str
    mode: MeasuringMode
    before: Comparison | None  # the base plan (all FP16 but forced pins), emulated
    after: Comparison | None  # the chosen plan, emulated
    node_stats: Mapping[str, NodeStats]
    phases: tuple[PhaseCost, ...]
    search: SearchOutcome | None
    reference_outputs: tuple[dict[str, np.ndarray], ...]  # FP32 graph outputs per sample
    headroom: float
    samples: Samples  # what every probe ran on (the verification runs the written model on them)
    node_flops: Mapping[str, float] = field(default_factory=dict)  # estimated, at the first sample's shapes
    points: tuple[PlanPoint, ...] = ()  # every plan the search evaluated (the trade-off)
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def writable(self) -> bool:
        """Whether the plan is worth writing: not when the FP32 model itself is non-finite or
        when no plan passes; a static plan that fails is written (and reported as failing)."""
        return self.status == PASSED or (self.status == FAILED and self.mode == "static")

    def raise_if_failed(self) -> None:
        if self.status in (FAILED, FP32_NONFINITE):
            raise SearchError(self.message)


def choose_plan(ctx: ModelContext, base_plan: PrecisionPlan, samples: Samples,
                tolerance: Tolerance, headroom: float = DEFAULT_HEADROOM, mode: MeasuringMode = "auto",
                progress: Progress | None = None, budget: SearchBudget = NO_BUDGET) -> AutoResult:
    """Pick the plan for ``ctx``'s model starting from ``base_plan`` (see the module docstring).

    ``headroom`` 0 turns headroom pins off; otherwise it must be at least 1 (1: pin only what
    overflows on the samples). ``budget`` bounds the search (see :class:`SearchBudget`).
    """
    if headroom != 0 and not headroom >= 1.0:
        raise PrecisionError(f"--headroom {headroom:g}: must be 0 (off) or at least 1 "
                             f"(1 = pin only what overflows on the samples)")
    clock = Clock(progress)
    with clock.phase("reference") as phase:
        user = ctx.resolve(base_plan)
        emulator = Emulator(ctx)
        reference = oracle.reference_stats(emulator, samples)
        phase.count(emulator, probes=1)
    graph = _Graph.of(ctx)
    shapes = {k: np.shape(v) for k, v in samples.feeds[0].items()} if samples.feeds else {}
    flops = estimate_flops(ctx.model, shapes)
    stats = _node_stats(graph, reference.stats)
    run = _Run(mode, headroom, clock, emulator, reference, stats, samples, flops)

    nonfinite = _fp32_nonfinite_message(reference)
    if nonfinite and not tolerance.allow_fp32_nonfinite:
        return run.finish(user, FP32_NONFINITE, nonfinite)

    base = user
    for node, reason in headroom_pins(graph, user, reference.stats, headroom).items():
        base = base.with_fp32([node], reason)
    flagged = _flagged(ctx, graph, user, reference, static=mode == "static")
    prober = Prober(emulator, samples.feeds, reference.outputs, tolerance)
    with clock.phase("before") as phase:
        before = prober.comparison(user)
        phase.count(emulator, probes=1)
    if mode == "static":
        return _static(run, prober, base, flagged, before)
    return _search(run, prober, ctx, graph, user, base, flagged, before, progress, budget)


@dataclass
class _Run:
    """What every ending of :func:`choose_plan` reports."""

    mode: MeasuringMode
    headroom: float
    clock: Clock
    emulator: Emulator
    reference: ReferenceResult
    stats: Mapping[str, NodeStats]
    samples: Samples
    flops: Mapping[str, float]

    def finish(self, plan: PrecisionPlan, status: Status, message: str, before: Comparison | None = None,
               after: Comparison | None = None, outcome: SearchOutcome | None = None,
               layer: LayerwiseResult | None = None, points: tuple[PlanPoint, ...] = (),
               notes: tuple[str, ...] = ()) -> AutoResult:
        node_stats = self.stats if layer is None else _with_layerwise(self.stats, layer)
        return AutoResult(plan, status, message, self.mode, before, after, node_stats, self.clock.phases(),
                          outcome, tuple(self.reference.outputs), self.headroom, self.samples, self.flops,
                          points, notes)


def _static(run: _Run, prober: Prober, base: PrecisionPlan, flagged: Mapping[str, list[Reason]],
            before: Comparison) -> AutoResult:
    plan = _with_reasons(base, flagged, flagged)
    with run.clock.phase("static") as phase:
        after = prober.comparison(plan)
        phase.count(run.emulator, probes=1)
    if after.passed:
        return run.finish(plan, PASSED, "", before, after)
    message = "the static plan is out of tolerance; --mode auto searches for one that passes"
    return run.finish(plan, FAILED, message, before, after)


def _search(run: _Run, prober: Prober, ctx: ModelContext, graph: _Graph, user: PrecisionPlan,
            base: PrecisionPlan, flagged: Mapping[str, list[Reason]], before: Comparison,
            progress: Progress | None, budget: SearchBudget) -> AutoResult:
    emulator, clock = run.emulator, run.clock
    with clock.phase("start") as phase:
        if base.fp32_nodes == user.fp32_nodes:
            passed, detail = before.passed, prober.last_detail
        else:
            passed, detail = prober.passes(base)
        phase.count(emulator, probes=int(base.fp32_nodes != user.fp32_nodes))
    if passed:
        plan = _with_reasons(base, base.fp32_nodes, flagged)
        after = before
        if plan.fp32_nodes != user.fp32_nodes:
            with clock.phase("after") as phase:
                after = prober.comparison(plan)
                phase.count(emulator, probes=1)
        return run.finish(plan, PASSED, "", before, after)
    start_errors = dict(prober.last_errors)
    with clock.phase("layerwise") as phase:
        layer = oracle.layerwise(emulator, base, run.samples)
        phase.count(emulator, probes=1)
    with clock.phase("switch graph") as phase:
        session = emulator.searching()  # many plans follow: the switch graph, or one baked session each
        phase.count(emulator)
    prober.session = session
    searchable = [n for n in graph.order if n in session.switchable and base.is_fp16(n)]
    flagged_nodes = set(flagged) | set(layer.first_divergence)
    candidates = [n for n in searchable if n in flagged_nodes]
    # Largest layerwise error first; nodes the layerwise run does not see (subgraphs) last.
    searchable_set = set(searchable)
    ranked = [n for n in layer.ranked() if n in searchable_set]
    others = [n for n in dict.fromkeys(ranked + searchable) if n not in flagged_nodes]
    prober.last_errors = start_errors
    diffuse = is_diffuse(flagged, layer, before)
    found = run_search(prober, emulator, clock, base, candidates, widen_order(others, ctx.node_ops),
                       (False, detail), FlopShare(run.flops, graph.order), budget, diffuse, progress)
    if found.plan is None:
        return run.finish(base, FAILED, found.message, before, None, found.outcome, layer, found.points,
                          found.notes)
    plan = _with_reasons(found.plan, found.plan.fp32_nodes, flagged)
    with clock.phase("after") as phase:
        after = prober.comparison(plan)
        phase.count(emulator, probes=1)
    if not after.passed:  # the search keeps only sets that passed: this would be an oracle bug
        raise InternalError("the searched plan passed during the search but fails on re-evaluation")
    return run.finish(plan, PASSED, found.message, before, after, found.outcome, layer, found.points,
                      found.notes)


def _with_reasons(plan: PrecisionPlan, nodes, flagged: Mapping[str, list[Reason]]) -> PrecisionPlan:
    """``plan`` with ``nodes`` pinned and every rule/range reason known for them attached."""
    for node in nodes:
        for reason in flagged.get(node, ()):
            plan = plan.with_fp32([node], reason)
    return plan


# --- the model as a graph of names ------------------------------------------------------------------


@dataclass(frozen=True)
class _Graph:
    order: tuple[str, ...]  # every node, owners before their bodies
    outputs: Mapping[str, tuple[str, ...]]  # node -> every output tensor
    holders: Mapping[str, tuple[str, ...]]  # tensor -> nodes that hold it in FP16 when FP16, in order

    @staticmethod
    def of(ctx: ModelContext) -> _Graph:
        order: list[str] = []
        outputs: dict[str, tuple[str, ...]] = {}
        holders: dict[str, list[str]] = {}
        for ref in ctx.nodes:
            node, t = ref.node, ctx.typing[ref.name]
            order.append(ref.name)
            outputs[ref.name] = tuple(o for o in node.output if o)
            fp16 = [node.input[i] for i in t.convertible_inputs]
            fp16 += [node.output[i] for i in t.convertible_outputs]
            for tensor in dict.fromkeys(fp16):
                holders.setdefault(tensor, []).append(ref.name)
        return _Graph(tuple(order), outputs, {k: tuple(v) for k, v in holders.items()})

    def touching(self, tensor: str) -> tuple[str, ...]:
        """Nodes that would hold ``tensor`` in FP16: its FP16 producer and FP16 consumers."""
        return self.holders.get(tensor, ())


# --- headroom and range flags ----------------------------------------------------------------------


def headroom_pins(graph: _Graph, plan: PrecisionPlan, stats: Mapping, headroom: float) -> dict[str, Reason]:
    """Nodes to pin because a tensor they would hold in FP16 exceeds 65504/headroom in FP32.

    A tensor already over 65504 is pinned too, whatever the outputs show, but as a ``range`` pin:
    only the margin between 65504/headroom and 65504 is headroom's doing."""
    pins: dict[str, Reason] = {}
    if headroom == 0:
        return pins
    limit = FP16_MAX / headroom
    for tensor in _tensors(graph):
        s = stats.get(tensor)
        if s is None or not np.isfinite(s.max_abs) or s.max_abs <= limit:
            continue
        for node in graph.touching(tensor):
            if plan.is_fp16(node) and node not in pins:
                evidence = (("tensor", tensor), ("max_abs", f"{s.max_abs:.6g}"))
                if s.max_abs > FP16_MAX:
                    pins[node] = Reason("range", f"'{tensor}' reaches {s.max_abs:.4g} in FP32, over the FP16 "
                                                 f"maximum 65504", evidence)
                else:
                    pins[node] = Reason("headroom", f"'{tensor}' reaches {s.max_abs:.4g} in FP32, over "
                                                    f"65504/{headroom:g} = {limit:.6g}", evidence)
    return pins


def _tensors(graph: _Graph) -> list[str]:
    return list(graph.holders)


def _flagged(ctx: ModelContext, graph: _Graph, plan: PrecisionPlan, reference: ReferenceResult, static: bool,
             ) -> dict[str, list[Reason]]:
    """Static candidates: confirmed rule findings and range flags (flushed tensors), FP16 nodes only."""
    flags: dict[str, list[Reason]] = {}
    for node, reason in _rule_reasons(ctx, reference, static):
        if plan.is_fp16(node):
            flags.setdefault(node, []).append(reason)
    for tensor in _tensors(graph):
        s = reference.stats.get(tensor)
        if s is None:
            continue
        if s.flush_fraction >= FLUSH_SHARE:
            reason = Reason("range", f"{100 * s.flush_fraction:.1f}% of the nonzero values of '{tensor}' "
                                     f"flush to zero in FP16 (smallest |x| {s.min_nonzero_abs:.3g})",
                            (("tensor", tensor), ("flush_fraction", f"{s.flush_fraction:.4g}")))
        elif np.isfinite(s.max_abs) and s.max_abs > FP16_MAX:
            reason = Reason("range", f"'{tensor}' reaches {s.max_abs:.4g}, over the FP16 maximum 65504",
                            (("tensor", tensor), ("max_abs", f"{s.max_abs:.6g}")))
        else:
            continue
        for node in graph.touching(tensor):
            if plan.is_fp16(node):
                flags.setdefault(node, []).append(reason)
    return flags


def _rule_reasons(ctx: ModelContext, reference: ReferenceResult, static: bool,
                  ) -> Iterator[tuple[str, Reason]]:
    """Findings of the static risk rules that the recorded ranges confirm (static mode: only
    those of high or medium severity, since nothing will test them)."""
    for finding in rules.run_rules(rules.ModelFacts(ctx, reference.stats)).findings:
        if finding.confirmed and (not static or finding.severity in (rules.HIGH, rules.MEDIUM)):
            yield finding.node, finding.reason()


# --- statistics for the report ---------------------------------------------------------------------


def _node_stats(graph: _Graph, tensor_stats: Mapping) -> dict[str, NodeStats]:
    out = {}
    for node in graph.order:
        found = [tensor_stats[t] for t in graph.outputs[node] if t in tensor_stats]
        if found:
            out[node] = NodeStats(max(s.max_abs for s in found), min(s.min_nonzero_abs for s in found))
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
                    f"an FP16 problem (fix the model or the data)")
        return (f"the FP32 model itself produces NaN/Inf: node '{node}' gives a non-finite output "
                f"from finite inputs and output '{name}' is non-finite{where}; that is not an FP16 "
                f"problem (fix the model or the data)")
    if reference.first_nonfinite is not None:
        log.info(
            "note: node '%s' is non-finite in FP32 on the samples, but the outputs are finite",
            reference.first_nonfinite,
        )
    return ""


def pinned_by(plan: PrecisionPlan, source: ReasonSource) -> tuple[str, ...]:
    """FP32 nodes with a reason of ``source`` (e.g. which pins came from headroom)."""
    return tuple(n for n in plan.fp32_nodes if any(r.source == source for r in plan.decisions[n].reasons))
