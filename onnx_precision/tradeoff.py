"""The trade-off a run explored: every plan it measured as a point, FP16 share of compute against
error, and the Pareto front of those points, as a table (the picture is
:mod:`onnx_precision.tradeoff_picture`).

A point's error is the worst, over the samples probed, of each output's headline statistic under
the verdict in use: the relative RMS error for the default ``rms`` verdict, the scale-relative max
error (``max |err| / max |ref|``) for the others; a non-finite output counts as infinite error.
The front keeps the points that no other point beats on both FP16 share and worst error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .format import json_safe, number, percent
from .judge import Comparison, Tolerance, statistic
from .judge.metrics import named_samples
from .render import for_markdown


def error_statistic(tol: Tolerance) -> str:
    """The name of the statistic :func:`output_errors` reports under ``tol`` (its row's headline)."""
    return statistic(tol).headline.name


@dataclass(frozen=True)
class PlanPoint:
    """One plan the search evaluated."""

    index: int  # the probe's index in the search (the point id a user replays with --plan)
    pinned: tuple[str, ...]  # every node the plan keeps FP32 (sorted): replaying these gives the plan
    low_flop_share: float  # the 16-bit share of the plan as written (:class:`.search.driver.FlopShare`)
    passed: bool
    errors: Mapping[str, float]  # output -> worst error statistic over the samples probed
    bf16: tuple[str, ...] = ()  # the nodes in BF16 in a plan that also has FP16 ones (--fallback bf16)

    @property
    def worst_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    def to_json(self) -> dict:
        # "fp16_flop_share": the key saved reports and replayed points hold, named before BF16; it is the
        # share of every 16-bit type (low_flop_share)
        out = {"point": self.index, "pinned": list(self.pinned), "passed": self.passed,
               "fp16_flop_share": self.low_flop_share, "errors": dict(self.errors)}
        return json_safe({**out, "bf16": list(self.bf16)} if self.bf16 else out)

    @staticmethod
    def from_json(obj: Mapping) -> PlanPoint:
        return PlanPoint(int(obj["point"]), tuple(obj["pinned"]), float(obj["fp16_flop_share"]),
                         bool(obj["passed"]), {k: float(v) for k, v in obj["errors"].items()},
                         tuple(obj.get("bf16", ())))


def output_errors(comparison: Comparison, tol: Tolerance) -> dict[str, float]:
    """Per output, the headline error statistic of a comparison (infinite where FP16 turned non-finite)."""
    value = statistic(tol).headline.value
    return {m.name: math.inf if m.new_nonfinite else float(value(m)) for m in comparison.outputs}


def worst_output_text(comparison: Comparison, tol: Tolerance) -> str:
    """"worst y: rel RMS err 0.0004456": the output furthest from FP32 and its headline statistic
    (:func:`output_errors`), or its new NaN/Inf, or the samples whose run stopped (no statistic measures
    those: "worst y: sample 1 not compared (its run stopped)")."""
    worst = comparison.worst()
    if worst is None:
        return "no output compared"
    if worst.not_compared:
        return f"worst {worst.name}: {named_samples(worst.not_compared)} not compared (the run stopped)"
    if worst.new_nonfinite:
        return f"worst {worst.name}: {worst.new_nonfinite} new NaN/Inf"
    return f"worst {worst.name}: {error_statistic(tol)} {number(output_errors(comparison, tol)[worst.name])}"


def pareto_front(points: Sequence[PlanPoint]) -> list[PlanPoint]:
    """The points no other point dominates (a larger FP16 share and no larger error, or the same
    share and a smaller error), by FP16 share, largest first; duplicates of a pinned set once."""
    unique = {p.pinned: p for p in sorted(points, key=lambda p: p.index)}.values()
    ordered = sorted(unique, key=lambda p: (-p.low_flop_share, p.worst_error, p.index))
    front: list[PlanPoint] = []
    best = math.inf
    for p in ordered:
        if p.worst_error < best:
            front.append(p)
            best = p.worst_error
    return front


ALL_LISTED = 12  # up to this many points, the table lists (and the picture numbers) every one


def front_table(points: Sequence[PlanPoint], flops: Mapping[str, float] | None = None,
                chosen: int | None = None, listed: int = 6, low: str = "FP16",
                of: str = "of estimated FLOPs") -> list[str]:
    """Markdown table rows: every point where there are at most :data:`ALL_LISTED`, else the front
    and the chosen point; the chosen one marked, each row's pins costliest first (by estimated
    FLOPs), ``listed`` of them. ``of``: what the shares are of (:attr:`.flops.FlopShares.of`)."""
    front = pareto_front(points)
    if len(points) <= ALL_LISTED:
        rows = sorted(points, key=lambda p: p.index)
    else:
        rows = front + [p for p in points if p.index == chosen and p not in front][:1]
    lines = [f"| point | {low} share {of} | worst error | passes | FP32 pins, costliest first |",
             "|---|---|---|---|---|"]
    for p in rows:
        pins = costliest_first(p.pinned, flops or {})
        more = f" (+{len(pins) - listed})" if len(pins) > listed else ""
        label = f"**{p.index} (chosen)**" if p.index == chosen else str(p.index)
        listed_pins = ", ".join(for_markdown(n, cell=True) for n in pins[:listed]) + more
        lines.append(f"| {label} | {percent(p.low_flop_share)} | {number(p.worst_error)} | "
                     f"{'yes' if p.passed else 'no'} | {listed_pins or '-'} |")
    return lines


def costliest_first(nodes: Sequence[str], flops: Mapping[str, float]) -> list[str]:
    """``nodes`` by estimated FLOPs, most first (ties by name)."""
    return sorted(nodes, key=lambda n: (-flops.get(n, 0.0), n))


@dataclass(frozen=True)
class ToleranceLine:
    """Where the tolerance sits on the error axis, and how the picture names it."""

    bound: float
    label: str


def tolerance_line(tol: Tolerance) -> ToleranceLine:
    """The tolerance on the error axis: its statistic's headline bound (the rel RMS bound for
    ``rms``; rtol for those that bound |err| by atol + rtol x |ref|, the atol part not drawn)."""
    bound, label = _bound(tol)
    if any(_bound(t)[0] != bound for _, t in tol.per_output):
        label += " (some outputs differ)"
    return ToleranceLine(bound, label)


def _bound(tol: Tolerance) -> tuple[float, str]:
    return statistic(tol).headline.bound(tol)
