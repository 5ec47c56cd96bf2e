"""Driving the pin search against the oracle: cost order, budgets, progress, trade-off points.

:class:`~onnx_precision.search.PinSearch` is the pure search state; this module feeds it the
candidates and the widening order, probes each set it proposes, and records every probe as a
trade-off point (FP16 share of FLOPs against error). The search maximises FP16 *compute*: pins
are weighed by their estimated FLOPs, cheap ones (elementwise ops, normalisation statistics) are
tried before contractions (Conv, MatMul), and the shrink drops expensive pins first.

When the all-FP16 error is *diffuse* (no rule or range flag, nothing turned non-finite, the error
grows smoothly through the layers) no small set of pins fixes it: the search says so and runs on a
small probe budget instead of grinding, and the trade-off shows what each pin buys.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..context import ModelContext
from ..costs import Clock, Counted
from ..flops import FlopShares
from ..judge import Comparison
from ..oracle import LayerwiseResult
from ..plan import PrecisionPlan, Reason
from ..policy import layer_norm_pins
from ..policy.resolution import group_pins
from ..quantized import INTEGER_OPS
from ..tradeoff import PlanPoint
from .prober import Prober
from .state import ALONE_MIN_WIN, ALONE_RUN, MIN_WIN, PinEvidence, PinSearch, SearchOutcome

log = logging.getLogger(__name__)

# (phase, probes done, estimated probes left, best FP16 share of FLOPs so far or None)
Progress = Callable[[str, int, int, "float | None"], None]

# Probe budget when the all-FP16 error is diffuse noise and the user set none: enough to find a
# few pins that matter, and to draw the trade-off, without hundreds of probes for a few 1e-3.
DIFFUSE_PROBES = 24
# Ops whose FLOPs grow with a contraction depth: pinned last, un-pinned first (a recurrent op's gates are
# two matrix products a step). The integer ones are those whose float twin is one (quantized.INTEGER_OPS).
_FLOAT_CONTRACTIONS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "Attention",
                                 "MultiHeadAttention", "LSTM", "GRU", "RNN"})
CONTRACTIONS = _FLOAT_CONTRACTIONS | {op for op, row in INTEGER_OPS.items()
                                     if row.twin in _FLOAT_CONTRACTIONS}

_SEARCH_PROBE = Reason("search", "probe")


@dataclass(frozen=True)
class SearchBudget:
    """Limits on the search; when one runs out, the cheapest passing plan probed so far is kept.
    ``exhaustive``: shrink every passing set to a 1-minimal one, however many pins it holds (by default
    a large one is shrunk only as far as it can win: :data:`.state.BOUNDED_ABOVE`)."""

    max_probes: int | None = None
    seconds: float | None = None
    exhaustive: bool = False

    def left(self, probes: int, seconds: float) -> SearchBudget:
        """What is left of this budget once ``probes`` probes and ``seconds`` are spent: a phase after
        the search (the BF16 fallback) gets what the search left, so the budget bounds the run."""
        return SearchBudget(None if self.max_probes is None else max(self.max_probes - probes, 0),
                            None if self.seconds is None else max(self.seconds - seconds, 0.0),
                            self.exhaustive)

    def spent(self) -> str:
        """Why this budget allows no further probe, or "" while it does."""
        if self.max_probes is not None and self.max_probes <= 0:
            return "the probe budget (--max-probes) ran out"
        if self.seconds is not None and self.seconds <= 0:
            return "the time budget (--time-budget) ran out"
        return ""


@dataclass(frozen=True)
class SearchSpace:
    """Where the search starts and what it may pin: ``candidates`` first, then ``widen`` in order,
    on top of ``base`` (which failed with ``start_failure``); ``diffuse``: see :func:`is_diffuse`."""

    base: PrecisionPlan
    candidates: Sequence[str]
    widen: Sequence[str]
    start_failure: str
    diffuse: bool = False


@dataclass(frozen=True)
class SearchResult:
    """What the search found, for :mod:`onnx_precision.convert.choose` to report."""

    plan: PrecisionPlan | None  # None: nothing passed
    outcome: SearchOutcome
    points: tuple[PlanPoint, ...]
    notes: tuple[str, ...]
    message: str  # why it failed, or why it stopped early


class FlopShare:
    """The 16-bit share of a plan as it would be written: with its LayerNorm pins
    (:func:`~onnx_precision.policy.layer_norm_pins`) and its quantized groups each in one type
    (:func:`~onnx_precision.policy.resolution.group_pins`), as the emulation applies them to every plan
    it runs, counted as every share the run states is (:class:`~onnx_precision.flops.FlopShares`). And
    each node's estimated FLOPs (at least 1), which the search weighs pins by."""

    def __init__(self, ctx: ModelContext, shares: FlopShares) -> None:
        self.ctx = ctx
        self.shares = shares
        self.flops = {n: max(float(shares.node_flops.get(n, 1.0)), 1.0) for n in ctx.node_ops}
        # what the shares are of: the estimated FLOPs of the non-quantized nodes
        self.total = sum(f for n, f in shares.node_flops.items() if n not in shares.quantized)

    def __call__(self, plan: PrecisionPlan) -> float:
        return self.shares.low(group_pins(self.ctx, layer_norm_pins(self.ctx, plan)))


def widen_order(ranked: Sequence[str], ops: Mapping[str, str]) -> list[str]:
    """``ranked`` (largest layerwise error first) with cheap nodes before contractions, each group
    keeping its error order."""
    cheap = [n for n in ranked if ops.get(n) not in CONTRACTIONS]
    return cheap + [n for n in ranked if ops.get(n) in CONTRACTIONS]


def is_diffuse(flagged: Mapping[str, object], layer: LayerwiseResult, before: Comparison) -> bool:
    """Whether the all-FP16 error looks like rounding noise rather than a breakage: no rule or range
    flag, no output turned non-finite, no shape changed by a flipped decision, and no node where the
    error starts by turning non-finite."""
    if flagged or layer.shape_changes or any(m.new_nonfinite for m in before.outputs):
        return False
    return not any(layer.nodes[n].new_nonfinite for n in layer.first_divergence if n in layer.nodes)


def run_search(prober: Prober, session: Counted, clock: Clock, space: SearchSpace, share: FlopShare,
               budget: SearchBudget, progress: Progress | None) -> SearchResult:
    """Probe the sets :class:`PinSearch` proposes until it is done or a budget runs out."""
    notes = []
    max_probes = budget.max_probes
    base = space.base
    diffuse = ("the error of the plan to start from looks like diffuse rounding noise (no overflow, "
               "underflow, NaN or rule finding; the error grows smoothly through the layers)")
    if space.diffuse:
        log.info("note: %s", diffuse)
        if max_probes is None:
            max_probes = DIFFUSE_PROBES
            notes.append(f"searching on a budget of {DIFFUSE_PROBES} probes (--max-probes to change it)")
    deadline = None if budget.seconds is None else time.perf_counter() + budget.seconds
    base_pins = frozenset(base.fp32_nodes)
    points = [PlanPoint(0, tuple(sorted(base_pins)), share(base), False, dict(prober.last_errors))]
    best: float | None = None
    with clock.phase("search") as phase:
        search = PinSearch(space.candidates, space.widen, start_failed=space.start_failure, cost=share.flops,
                           max_probes=max_probes, total_cost=share.total, exhaustive=budget.exhaustive)
        while (pinned := search.select()) is not None:
            probe = base.with_fp32(pinned, _SEARCH_PROBE)
            passed, detail = prober.passes(probe)
            log.debug("probe %d (%s): %d pinned -> %s%s", search.probes_run, search.phase, len(pinned),
                      "pass" if passed else "fail", f" ({detail})" if detail else "")
            search.step(passed, detail)
            point = PlanPoint(search.probes_run - 1, tuple(sorted(base_pins | pinned)), share(probe), passed,
                              dict(prober.last_errors))
            points.append(point)
            if passed:
                best = point.low_flop_share if best is None else max(best, point.low_flop_share)
            if progress is not None:
                progress("search", search.probes_run, search.remaining, best)
            if deadline is not None and time.perf_counter() > deadline:
                search.stop(f"the time budget ({budget.seconds:g} s) ran out")
        outcome = search.outcome()
        phase.count(session, probes=outcome.probes_run - 1)  # the start probe is counted before
    if not outcome.passed:
        if space.diffuse:  # said only when it held: a search that passes proves a small set did remove it
            notes.insert(0, f"{diffuse}: no small set of FP32 pins removes it; a statistical verdict or a "
                            f"looser tolerance fits such outputs")
        if outcome.exhausted:
            message = f"{outcome.exhausted} before any plan passed; raise --max-probes or --time-budget"
        else:
            message = ("even with every float node in FP32 the emulated outputs are out of tolerance "
                       f"({prober.last_detail}); check the tolerance and the samples")
        return SearchResult(None, outcome, tuple(points), tuple(notes), message)
    plan = base.with_fp32_reasons({v.node: (Reason("search", _why(v)),) for v in outcome.evidence})
    message = ""
    if outcome.exhausted:
        kept_set = tuple(sorted(base_pins | set(outcome.pinned)))
        kept = next(p.index for p in points if p.passed and p.pinned == kept_set)
        message = (f"{outcome.exhausted}: kept the cheapest passing plan probed (point {kept}); it is not "
                   f"proven minimal")
        notes.append(message)
    if outcome.untried:
        notes.append(_untried_note(outcome, share.shares.of))
    return SearchResult(plan, outcome, tuple(points), tuple(notes), message)


def _untried_note(outcome: SearchOutcome, of: str) -> str:
    """What the bounded shrink (:meth:`.state.PinSearch._bounded`) left unproven, and how to prove it."""
    return (f"the plan is not proven 1-minimal: {len(outcome.untried)} of its {len(outcome.pinned)} searched "
            f"pins were tried only in groups whose un-pinning failed, not alone ({outcome.untried_share:.1%} "
            f"{of} together): groups under {MIN_WIN:.0%} of them are not split, and tries alone stop once "
            f"{ALONE_RUN} in a row un-pin less than {ALONE_MIN_WIN:.1%}; --exhaustive-minimise tries each, "
            f"at a probe or more per pin")


def _why(evidence: PinEvidence) -> str:
    if evidence.probe >= 0:
        return f"un-pinning it fails: {evidence.detail} (probe {evidence.probe})"
    return evidence.detail
