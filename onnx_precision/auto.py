"""Choosing a precision plan automatically: ``--mode auto`` (search) and ``--mode static``.

Everything runs on ONE :class:`~onnx_precision.oracle.EmulationSession`: the FP32 reference, the
layerwise comparison and every probe of the search are runs of the same onnxruntime session with
different rounding switches, so a search costs session *runs*, never session *builds*.

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import oracle, rules
from .compare import Comparison, Tolerance, compare_outputs, merge_comparisons
from .context import ModelContext
from .costs import Clock, PhaseCost, PhaseTotals
from .data import Samples
from .errors import InternalError, PrecisionError, SearchError
from .format import cosine_text
from .fp16 import FP16_MAX
from .oracle import EmulationSession, LayerwiseResult, ReferenceResult
from .oracle.stats import NodeStats
from .plan import PrecisionPlan, Reason
from .search import PinSearch, SearchOutcome
from .vocab import MeasuringMode, ReasonSource, Status

log = logging.getLogger(__name__)

DEFAULT_HEADROOM = 2.0
ORACLE = "emulate"
# A tensor is "flushed" when this share of its nonzero values rounds to zero in FP16: beyond
# isolated denormals, enough to change a sum, a norm or a Log.
FLUSH_SHARE = 0.01

Progress = Callable[[str, int, int], None]  # (phase, probes done, estimated probes left)

PASSED: Status = "passed"
FAILED: Status = "failed"
FP32_NONFINITE: Status = "fp32-nonfinite"


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
                progress: Progress | None = None) -> AutoResult:
    """Pick the plan for ``ctx``'s model starting from ``base_plan`` (see the module docstring).

    ``headroom`` 0 turns headroom pins off; otherwise it must be at least 1 (1: pin only what
    overflows on the samples).
    """
    if headroom != 0 and not headroom >= 1.0:
        raise PrecisionError(f"--headroom {headroom:g}: must be 0 (off) or at least 1 "
                             f"(1 = pin only what overflows on the samples)")
    clock = Clock()
    with clock.phase("reference") as phase:
        user = ctx.resolve(base_plan)
        session = EmulationSession(ctx)
        reference = oracle.reference_stats(session, samples)
        phase.count(session, probes=1)
    graph = _Graph.of(ctx)
    run = _Run(mode, headroom, clock, session, reference, _node_stats(graph, reference.stats), samples)

    nonfinite = _fp32_nonfinite_message(reference)
    if nonfinite:
        return run.finish(user, FP32_NONFINITE, nonfinite)

    base = user
    for node, reason in headroom_pins(graph, user, reference.stats, headroom).items():
        base = base.with_fp32([node], reason)
    flagged = _flagged(ctx, graph, user, reference, static=mode == "static")
    prober = _Prober(session, samples.feeds, reference.outputs, tolerance)
    with clock.phase("before") as phase:
        before = prober.comparison(user)
        phase.count(session, probes=1)
    if mode == "static":
        return _static(run, prober, base, flagged, before)
    return _search(run, prober, graph, samples, user, base, flagged, before, progress)


@dataclass
class _Run:
    """What every ending of :func:`choose_plan` reports."""

    mode: MeasuringMode
    headroom: float
    clock: Clock
    session: EmulationSession
    reference: ReferenceResult
    stats: Mapping[str, NodeStats]
    samples: Samples

    def finish(self, plan: PrecisionPlan, status: Status, message: str, before: Comparison | None = None,
               after: Comparison | None = None, outcome: SearchOutcome | None = None,
               layer: LayerwiseResult | None = None) -> AutoResult:
        node_stats = self.stats if layer is None else _with_layerwise(self.stats, layer)
        return AutoResult(plan, status, message, self.mode, before, after, node_stats, self.clock.phases(),
                          outcome, tuple(self.reference.outputs), self.headroom, self.samples)


def _static(run: _Run, prober: _Prober, base: PrecisionPlan, flagged: Mapping[str, list[Reason]],
            before: Comparison) -> AutoResult:
    plan = _with_reasons(base, flagged, flagged)
    with run.clock.phase("static") as phase:
        after = prober.comparison(plan)
        phase.count(run.session, probes=1)
    if after.passed:
        return run.finish(plan, PASSED, "", before, after)
    message = "the static plan is out of tolerance; --mode auto searches for one that passes"
    return run.finish(plan, FAILED, message, before, after)


def _search(run: _Run, prober: _Prober, graph: _Graph, samples: Samples, user: PrecisionPlan,
            base: PrecisionPlan,
            flagged: Mapping[str, list[Reason]], before: Comparison, progress: Progress | None) -> AutoResult:
    session, clock = run.session, run.clock
    with clock.phase("start") as phase:
        if base.fp32_nodes == user.fp32_nodes:
            passed, detail = before.passed, prober.last_detail
        else:
            passed, detail = prober.passes(base)
        phase.count(session, probes=int(base.fp32_nodes != user.fp32_nodes))
    if passed:
        plan = _with_reasons(base, base.fp32_nodes, flagged)
        after = before
        if plan.fp32_nodes != user.fp32_nodes:
            with clock.phase("after") as phase:
                after = prober.comparison(plan)
                phase.count(session, probes=1)
        return run.finish(plan, PASSED, "", before, after)
    with clock.phase("layerwise") as phase:
        layer = oracle.layerwise(session, base, samples)
        phase.count(session, probes=1)
    searchable = [n for n in graph.order if n in session.switchable and base.is_fp16(n)]
    flagged_nodes = set(flagged) | set(layer.first_divergence)
    candidates = [n for n in searchable if n in flagged_nodes]
    # Largest layerwise error first; nodes the layerwise run does not see (subgraphs) last.
    searchable_set = set(searchable)
    ranked = [n for n in layer.ranked() if n in searchable_set]
    widen = [n for n in ranked + searchable if n not in flagged_nodes]

    with clock.phase("search") as phase:
        search = PinSearch(candidates, widen, start_failed=detail)
        while (pinned := search.select()) is not None:
            passed, detail = prober.passes(base.with_fp32(pinned, _SEARCH_PROBE))
            log.debug("probe %d (%s): %d pinned -> %s%s", search.probes_run, search.phase, len(pinned),
                      "pass" if passed else "fail", f" ({detail})" if detail else "")
            search.step(passed, detail)
            if progress is not None:
                progress("search", search.probes_run, search.remaining)
        outcome = search.outcome()
        phase.count(session, probes=outcome.probes_run - 1)  # the start probe is counted above

    if not outcome.passed:
        message = ("even with every float node in FP32 the emulated outputs are out of tolerance "
                   f"({prober.last_detail}); check the tolerance (--atol/--rtol/--min-cosine) "
                   "and the samples")
        return run.finish(base, FAILED, message, before, None, outcome, layer)
    plan = base
    for verdict in outcome.verdicts:
        plan = plan.with_fp32([verdict.node], Reason(
            "search", f"un-pinning it fails: {verdict.detail} (probe {verdict.probe})"))
    plan = _with_reasons(plan, plan.fp32_nodes, flagged)
    with clock.phase("after") as phase:
        after = prober.comparison(plan)
        phase.count(session, probes=1)
    if not after.passed:  # the search keeps only sets that passed: this would be an oracle bug
        raise InternalError("the searched plan passed during the search but fails on re-evaluation")
    return run.finish(plan, PASSED, "", before, after, outcome, layer)


def _with_reasons(plan: PrecisionPlan, nodes, flagged: Mapping[str, list[Reason]]) -> PrecisionPlan:
    """``plan`` with ``nodes`` pinned and every rule/range reason known for them attached."""
    for node in nodes:
        for reason in flagged.get(node, ()):
            plan = plan.with_fp32([node], reason)
    return plan


_SEARCH_PROBE = Reason("search", "probe")


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
    for i, out in enumerate(reference.outputs):
        for name, value in out.items():
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                where = f" on sample {i}" if len(reference.outputs) > 1 else ""
                node = reference.first_nonfinite
                if node is None:
                    return (
                        f"the FP32 model itself produces NaN/Inf in output '{name}'{where}; that is not "
                        f"an FP16 problem (fix the model or the data)"
                    )
                return (
                    f"the FP32 model itself produces NaN/Inf: node '{node}' gives a non-finite output "
                    f"from finite inputs and output '{name}' is non-finite{where}; that is not an FP16 "
                    f"problem (fix the model or the data)"
                )
    if reference.first_nonfinite is not None:
        log.info(
            "note: node '%s' is non-finite in FP32 on the samples, but the outputs are finite",
            reference.first_nonfinite,
        )
    return ""


def _graph_outputs(session: EmulationSession, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: values[name] for name in session.outputs}


# --- probing ---------------------------------------------------------------------------------------


class _Prober:
    """Does a plan pass every sample? Stops at the first failing sample and tries it first next
    time: the sample that broke the last probe is the likeliest to break the next."""

    def __init__(
        self,
        session: EmulationSession,
        feeds: Sequence[Mapping[str, np.ndarray]],
        refs: Sequence[Mapping[str, np.ndarray]],
        tolerance: Tolerance,
    ) -> None:
        self.session = session
        self.feeds = feeds
        self.refs = refs
        self.tolerance = tolerance
        self.order = list(range(len(feeds)))
        self.last_detail = ""

    def _compare(self, plan: PrecisionPlan, i: int) -> Comparison:
        out = _graph_outputs(self.session, self.session.run(plan, self.feeds[i]))
        return compare_outputs(self.refs[i], out, self.tolerance, ORACLE)

    def passes(self, plan: PrecisionPlan) -> tuple[bool, str]:
        for i in list(self.order):
            comparison = self._compare(plan, i)
            if not comparison.passed:
                self.order.remove(i)
                self.order.insert(0, i)
                self.last_detail = _failure(comparison, i, len(self.feeds), self.tolerance)
                return False, self.last_detail
        return True, ""

    def comparison(self, plan: PrecisionPlan) -> Comparison:
        """The full comparison over every sample (for the report)."""
        per_sample = [self._compare(plan, i) for i in range(len(self.feeds))]
        failing = [i for i, c in enumerate(per_sample) if not c.passed]
        if failing:
            self.last_detail = _failure(per_sample[failing[0]], failing[0], len(self.feeds), self.tolerance)
        return merge_comparisons(per_sample, ORACLE)


def _failure(comparison: Comparison, sample: int, samples: int, tolerance: Tolerance) -> str:
    bad = next(m for m in comparison.outputs if not m.passed)
    what = (
        f"{bad.new_nonfinite} new NaN/Inf"
        if bad.new_nonfinite
        else f"max abs err {bad.max_abs_err:.3g}, cosine {cosine_text(bad.cosine, tolerance.min_cosine)}"
    )
    where = f"sample {sample}, " if samples > 1 else ""
    return f"{where}output '{bad.name}' {what}"


def pinned_by(plan: PrecisionPlan, source: ReasonSource) -> tuple[str, ...]:
    """FP32 nodes with a reason of ``source`` (e.g. which pins came from headroom)."""
    return tuple(n for n in plan.fp32_nodes if any(r.source == source for r in plan.decisions[n].reasons))
