"""The trade-off the search explored: every plan it evaluated as a point, FP16 share of compute
against error, and the Pareto front of those points, as a table and as a plain SVG picture.

A point's error is the worst, over the samples probed, of each output's headline statistic under
the verdict in use: the relative RMS error for the default ``rms`` verdict, the scale-relative max
error (``max |err| / max |ref|``) for the others; a non-finite output counts as infinite error.
The front keeps the points that no other point beats on both FP16 share and worst error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from .format import json_safe, number
from .metrics import Comparison
from .tolerance import Tolerance


def error_statistic(tol: Tolerance) -> str:
    """The name of the statistic :func:`output_errors` reports under ``tol``."""
    return "rel RMS err" if tol.error_stat == "rms" else "max |err| / max |ref|"


@dataclass(frozen=True)
class PlanPoint:
    """One plan the search evaluated."""

    index: int  # the probe's index in the search (the point id a user replays with --plan)
    pinned: tuple[str, ...]  # every node the plan keeps FP32 (sorted): replaying these gives the plan
    fp16_flop_share: float
    passed: bool
    errors: Mapping[str, float]  # output -> worst error statistic over the samples probed

    @property
    def worst_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    def to_json(self) -> dict:
        return json_safe({"point": self.index, "pinned": list(self.pinned), "passed": self.passed,
                          "fp16_flop_share": self.fp16_flop_share, "errors": dict(self.errors)})

    @staticmethod
    def from_json(obj: Mapping) -> PlanPoint:
        return PlanPoint(int(obj["point"]), tuple(obj["pinned"]), float(obj["fp16_flop_share"]),
                         bool(obj["passed"]), {k: float(v) for k, v in obj["errors"].items()})


def output_errors(comparison: Comparison, tol: Tolerance) -> dict[str, float]:
    """Per output, the headline error statistic of a comparison (infinite where FP16 turned non-finite)."""
    rms = tol.error_stat == "rms"
    return {m.name: math.inf if m.new_nonfinite else float(m.rel_rms_err if rms else m.max_rel_err)
            for m in comparison.outputs}


def pareto_front(points: Sequence[PlanPoint]) -> list[PlanPoint]:
    """The points no other point dominates (a larger FP16 share and no larger error, or the same
    share and a smaller error), by FP16 share, largest first; duplicates of a pinned set once."""
    unique = {p.pinned: p for p in sorted(points, key=lambda p: p.index)}.values()
    ordered = sorted(unique, key=lambda p: (-p.fp16_flop_share, p.worst_error, p.index))
    front: list[PlanPoint] = []
    best = math.inf
    for p in ordered:
        if p.worst_error < best:
            front.append(p)
            best = p.worst_error
    return front


def front_table(points: Sequence[PlanPoint]) -> list[str]:
    """The front as Markdown table rows."""
    front = pareto_front(points)
    lines = ["| point | FP16 share of FLOPs | worst error | passes | FP32 pins |", "|---|---|---|---|---|"]
    for p in front:
        more = f" (+{len(p.pinned) - 6})" if len(p.pinned) > 6 else ""
        pins = ", ".join(f"`{n}`" for n in p.pinned[:6]) + more
        lines.append(f"| {p.index} | {100 * p.fp16_flop_share:.1f}% | {number(p.worst_error)} | "
                     f"{'yes' if p.passed else 'no'} | {pins or '-'} |")
    return lines


def front_svg(points: Sequence[PlanPoint], statistic: str, tolerance_error: float | None = None,
              width: int = 640, height: int = 400) -> str:
    """Every point (grey: failed, blue: passed) and the front (red line), FP16 share on x and the
    worst error on a log scale on y; deterministic text."""
    pad_l, pad_r, pad_t, pad_b = 70, 20, 30, 50
    finite = [p.worst_error for p in points if math.isfinite(p.worst_error) and p.worst_error > 0]
    lo = math.floor(math.log10(min(finite))) if finite else -6
    hi = math.ceil(math.log10(max(finite))) if finite else 0
    hi = max(hi, lo + 1)

    def x(share: float) -> float:
        return pad_l + share * (width - pad_l - pad_r)

    def y(error: float) -> float:
        if not math.isfinite(error):
            return pad_t - 10  # above the plot: broke (NaN/Inf)
        e = math.log10(max(error, 10.0 ** lo))
        return pad_t + (hi - e) / (hi - lo) * (height - pad_t - pad_b)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" '
           f'stroke="black"/>',
           f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="black"/>']
    for k in range(0, 11, 2):
        out.append(f'<text x="{x(k / 10):.1f}" y="{height - pad_b + 15}" text-anchor="middle">'
                   f'{10 * k}%</text>')
    for e in range(lo, hi + 1):
        out.append(f'<text x="{pad_l - 5}" y="{y(10.0 ** e) + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{(width + pad_l) / 2:.0f}" y="{height - 10}" text-anchor="middle">'
               f'FP16 share of estimated FLOPs</text>')
    out.append(f'<text x="15" y="{height / 2:.0f}" transform="rotate(-90 15 {height / 2:.0f})" '
               f'text-anchor="middle">worst error ({escape(statistic)})</text>')
    if tolerance_error is not None and tolerance_error > 0:
        ty = y(tolerance_error)
        out.append(f'<line x1="{pad_l}" y1="{ty:.1f}" x2="{width - pad_r}" y2="{ty:.1f}" stroke="green" '
                   f'stroke-dasharray="4 3"/>')
    front = pareto_front(points)
    if len(front) > 1:
        path = " ".join(f"{x(p.fp16_flop_share):.1f},{y(p.worst_error):.1f}" for p in front)
        out.append(f'<polyline points="{path}" fill="none" stroke="red"/>')
    for p in sorted(points, key=lambda p: p.index):
        colour = "#1f77b4" if p.passed else "#999999"
        out.append(f'<circle cx="{x(p.fp16_flop_share):.1f}" cy="{y(p.worst_error):.1f}" r="3" '
                   f'fill="{colour}"><title>point {p.index}: {100 * p.fp16_flop_share:.1f}% FP16, error '
                   f'{number(p.worst_error)}</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
