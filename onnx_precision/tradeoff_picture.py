"""The trade-off as a picture: every plan a run measured, FP16 share of compute on x against the worst
error on a log y axis, as one plain SVG (no script, no external font; the same text for the same
points).

It shows what the Markdown table says and what the table cannot: the Pareto front as a line with
each of its point numbers printed (``--plan REPORT.json@N`` replays point N), the chosen plan
ringed, the tolerance as a dashed line, plans whose outputs turned non-finite in a labelled band
above the plot and exact plans (error 0) in one below it, and axes fitted to the data, so a front
between 97.8% and 100% FP16 fills the width instead of ten pixels of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .format import number, percent
from .render import for_svg
from .tradeoff import ALL_LISTED, PlanPoint, ToleranceLine, pareto_front

WIDTH, HEIGHT = 800, 470
LEFT, TOP, RIGHT, BOTTOM = 78, 92, 570, 410  # the plot's frame
LEGEND_X = 590
INSET = 12  # pixels between the frame and the outermost share, so no point sits on an axis
BAND, GAP = 20, 8  # the non-finite and exact bands' height, and their gap to the log scale
SHARE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
MIN_SHARE_SPAN = 0.01
CHAR_WIDTH = 6.2  # pixels per character of the 11 px sans-serif, to keep labels apart

PASSED_COLOUR, FAILED_COLOUR, FRONT_COLOUR = "#1f77b4", "#9a9a9a", "#d62728"
CHOSEN_COLOUR, TOLERANCE_COLOUR = "#ff7f0e", "#2ca02c"
NONFINITE_FILL, EXACT_FILL, FEWER_FILL = "#fbe3e3", "#e6f0e6", "#ececf6"

Symbol = Callable[[float, float], str]  # a legend entry's symbol, drawn centred at (x, y)


@dataclass(frozen=True)
class Picture:
    """What the picture shows."""

    points: tuple[PlanPoint, ...]
    statistic: str  # the error on y ("rel RMS err", ...)
    title: str = "FP16 share of compute against error"
    chosen: int | None = None  # the point of the plan the run chose
    tolerance: ToleranceLine | None = None
    note: str = ""  # why nothing was searched (or measured), "" after a search
    low: str = "FP16"  # what the share on x counts: "FP16", "BF16", or "16-bit" for a mixed plan
    of: str = "of estimated FLOPs"  # what it is a share of (:attr:`..flops.FlopShares.of`)


@dataclass(frozen=True)
class _Frame:
    """The fitted axes: FP16 shares ``share_lo``..``share_hi`` across, errors 10^``log_lo``..10^``log_hi``
    up, and the bands beside them."""

    share_lo: float
    share_hi: float
    share_step: float
    log_lo: float
    log_hi: float
    nonfinite: bool  # a band above the scale: errors that are NaN/Inf
    exact: bool  # a band below it: errors of 0
    fewer: bool  # a band left of it: plans with less FP16 than the front's last and no less error

    def x(self, share: float) -> float:
        if share < self.share_lo - 1e-9:
            return LEFT + BAND / 2
        left = LEFT + (BAND + GAP if self.fewer else 0) + INSET
        return left + (share - self.share_lo) / (self.share_hi - self.share_lo) * (RIGHT - INSET - left)

    def y(self, error: float) -> float:
        if not math.isfinite(error):
            return TOP + BAND / 2
        if error <= 0:
            return BOTTOM - BAND / 2
        top = TOP + (BAND + GAP if self.nonfinite else 0)
        bottom = BOTTOM - (BAND + GAP if self.exact else 0)
        e = min(max(math.log10(error), self.log_lo), self.log_hi)
        return top + (self.log_hi - e) / (self.log_hi - self.log_lo) * (bottom - top)

    def share_ticks(self) -> list[float]:
        first = math.ceil(self.share_lo / self.share_step - 1e-9)
        last = math.floor(self.share_hi / self.share_step + 1e-9)
        return [round(k * self.share_step, 6) for k in range(first, last + 1)]

    def error_ticks(self) -> list[tuple[int, int]]:
        """(mantissa, exponent) of the ticks: 1, 2 and 5 times each power of ten on the scale, or only
        the powers of ten where that makes more than nine (every other one past eight)."""
        decades = range(math.floor(self.log_lo), math.ceil(self.log_hi) + 1)
        ticks = [(m, d) for d in decades for m in (1, 2, 5)
                 if self.log_lo - 1e-9 <= math.log10(m) + d <= self.log_hi + 1e-9]
        if len(ticks) > 9:
            ticks = [(1, d) for d in decades if self.log_lo - 1e-9 <= d <= self.log_hi + 1e-9]
        return ticks[::2] if len(ticks) > 8 else ticks


def front_svg(picture: Picture) -> str:
    """The picture as SVG text."""
    points = sorted(picture.points, key=lambda p: p.index)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white" stroke="none"/>',
           _text(LEFT, 24, picture.title, size=15, weight="bold")]
    out += [_text(LEFT, 44 + 15 * i, line, fill="#444444") for i, line in enumerate(_subtitle(picture))]
    if not points:
        out.append(_text((LEFT + RIGHT) / 2, (TOP + BOTTOM) / 2, picture.note or "no plan was measured",
                         anchor="middle", size=13, fill="#444444"))
        return "\n".join(out + ["</svg>"]) + "\n"
    frame = fit_frame(points, picture.tolerance, picture.chosen)
    out += _bands(frame) + _axes(frame, picture.statistic, f"{picture.low} share {picture.of}")
    if picture.tolerance is not None:
        out += _tolerance(frame, picture.tolerance)
    front = pareto_front(points)
    out += _front_line(frame, front) + [_point(frame, p, picture.low) for p in points]
    out += _labels(frame, front, points, picture.chosen)
    out += _legend(frame, picture)
    return "\n".join(out + ["</svg>"]) + "\n"


def fit_frame(points: Sequence[PlanPoint], tolerance: ToleranceLine | None, chosen: int | None = None,
              ) -> _Frame:
    """Axes fitted to ``points``: the shares from the front's last point (or the chosen one, if
    lower) up, on nice steps and at least 1% wide; the finite non-zero errors and the tolerance,
    at least a decade tall."""
    floor = min((p.low_flop_share for p in pareto_front(points) + [p for p in points if p.index == chosen]),
                default=min(p.low_flop_share for p in points))
    shares = [p.low_flop_share for p in points if p.low_flop_share >= floor]
    lo, hi = min(shares), max(shares)
    if hi - lo < MIN_SHARE_SPAN:
        lo = min(max(0.0, (lo + hi - MIN_SHARE_SPAN) / 2), 1.0 - MIN_SHARE_SPAN)
        hi = lo + MIN_SHARE_SPAN
    step = next((s for s in SHARE_STEPS if (hi - lo) / s <= 6), 0.2)
    share_lo = max(0.0, math.floor(lo / step + 1e-9) * step)
    share_hi = min(1.0, math.ceil(hi / step - 1e-9) * step)
    logs = [math.log10(p.worst_error) for p in points if math.isfinite(p.worst_error) and p.worst_error > 0]
    if tolerance is not None and tolerance.bound > 0:
        logs.append(math.log10(tolerance.bound))
    log_lo, log_hi = (min(logs) - 0.1, max(logs) + 0.1) if logs else (-6.0, 0.0)
    if log_hi - log_lo < 1:
        log_lo, log_hi = (log_lo + log_hi - 1) / 2, (log_lo + log_hi + 1) / 2
    nonfinite = any(not math.isfinite(p.worst_error) for p in points)
    exact = any(p.worst_error == 0 for p in points)
    return _Frame(share_lo, share_hi, step, log_lo, log_hi, nonfinite, exact, len(shares) < len(points))


def _subtitle(picture: Picture) -> list[str]:
    """Two lines: how the plans came to be measured, and which was chosen."""
    n = len(picture.points)
    if not n:
        return []  # the note stands in the middle of the picture
    measured = f"{n} plan{'s' if n != 1 else ''} measured"
    first = f"{picture.note}; {measured}" if picture.note else f"{measured} by the search"
    chosen = [p for p in picture.points if p.index == picture.chosen]
    if not chosen:
        return [first, "no plan passes: none chosen"]
    c = chosen[0]
    return [first, f"chosen: point {c.index}, {percent(c.low_flop_share)} {picture.low}, "
                   f"{picture.statistic} {number(c.worst_error)}{'' if c.passed else ' (out of tolerance)'}"]


def _bands(frame: _Frame) -> list[str]:
    out = []
    if frame.nonfinite:
        out += [_rect(LEFT, TOP, RIGHT - LEFT, BAND, NONFINITE_FILL),
                _text(LEFT - 6, TOP + BAND / 2 + 4, "NaN/Inf", anchor="end")]
    if frame.exact:
        out += [_rect(LEFT, BOTTOM - BAND, RIGHT - LEFT, BAND, EXACT_FILL),
                _text(LEFT - 6, BOTTOM - BAND / 2 + 4, "0 (exact)", anchor="end")]
    if frame.fewer:
        below = _pct(frame.share_lo, _share_decimals(frame.share_step))
        out += [_rect(LEFT, TOP, BAND, BOTTOM - TOP, FEWER_FILL),
                _text(LEFT + BAND / 2, BOTTOM + 28, f"<{below}", anchor="middle", size=9)]  # under the ticks
    return out


def _axes(frame: _Frame, statistic: str, across: str) -> list[str]:
    out = []
    for share in frame.share_ticks():
        x = frame.x(share)
        out += [_line(x, TOP, x, BOTTOM, "#eeeeee"),
                _text(x, BOTTOM + 16, _pct(share, _share_decimals(frame.share_step)), anchor="middle")]
    for mantissa, exponent in frame.error_ticks():
        y = frame.y(mantissa * 10.0 ** exponent)
        out += [_line(LEFT, y, RIGHT, y, "#eeeeee"),
                _text(LEFT - 6, y + 4, f"{mantissa}e{exponent}", anchor="end")]
    out += [_line(LEFT, BOTTOM, RIGHT, BOTTOM, "black"), _line(LEFT, TOP, LEFT, BOTTOM, "black"),
            _text((LEFT + RIGHT) / 2, BOTTOM + 38, across, anchor="middle", size=12),
            _text(12, TOP - 12, f"worst error ({statistic}), log scale", size=12)]
    return out


def _tolerance(frame: _Frame, tolerance: ToleranceLine) -> list[str]:
    if not tolerance.bound > 0:
        return []
    y = frame.y(tolerance.bound)
    left = LEFT + (BAND + GAP if frame.fewer else 0) + 4  # the left end: plans of more FP16 sit right
    return [f'<line x1="{LEFT}" y1="{y:.1f}" x2="{RIGHT}" y2="{y:.1f}" stroke="{TOLERANCE_COLOUR}" '
            f'stroke-width="1.5" stroke-dasharray="6 4"/>',
            _text(left, y - 4, "tolerance", size=10, fill=TOLERANCE_COLOUR)]


def _front_line(frame: _Frame, front: Sequence[PlanPoint]) -> list[str]:
    if len(front) < 2:
        return []
    path = " ".join(f"{frame.x(p.low_flop_share):.1f},{frame.y(p.worst_error):.1f}" for p in front)
    return [f'<polyline points="{path}" fill="none" stroke="{FRONT_COLOUR}" stroke-width="1.5"/>']


def _point(frame: _Frame, p: PlanPoint, low: str) -> str:
    tip = (f"point {p.index}: {percent(p.low_flop_share)} {low}, error {number(p.worst_error)}, "
           f"{'passes' if p.passed else 'fails'}, {len(p.pinned)} FP32 pin(s)")
    colour = PASSED_COLOUR if p.passed else FAILED_COLOUR
    return (f'<g><title>{for_svg(tip)}</title><circle cx="{frame.x(p.low_flop_share):.1f}" '
            f'cy="{frame.y(p.worst_error):.1f}" r="4" fill="{colour}"/></g>')


def _labels(frame: _Frame, front: Sequence[PlanPoint], points: Sequence[PlanPoint],
            chosen: int | None) -> list[str]:
    """The chosen plan's ring, and the number of the chosen point and of each point of the front
    (of every point, where there are few) beside it where it covers no other label."""
    marked = [p for p in points if p.index == chosen]
    out = [f'<circle cx="{frame.x(p.low_flop_share):.1f}" cy="{frame.y(p.worst_error):.1f}" r="8" '
           f'fill="none" stroke="{CHOSEN_COLOUR}" stroke-width="2.5"/>' for p in marked]
    placed: list[tuple[float, float, float, float]] = []
    on_front = {p.index for p in front}
    numbered = points if len(points) <= ALL_LISTED else [p for p in points if p.index in on_front]
    for p in sorted(numbered, key=lambda p: (p.index != chosen, p.index not in on_front, p.index)):
        box = _free_box(frame.x(p.low_flop_share), frame.y(p.worst_error), str(p.index), placed)
        if box is not None:
            placed.append(box)
            mark = p.index == chosen
            out.append(_text(box[0], box[3] - 2, str(p.index), weight="bold" if mark else "normal",
                             fill=CHOSEN_COLOUR if mark else "black"))
    return out


def _free_box(x: float, y: float, label: str, placed: Sequence[tuple[float, float, float, float]],
              ) -> tuple[float, float, float, float] | None:
    """Where ``label`` goes beside the point (x, y): right above, right below, left above, left below,
    the first inside the plot that overlaps no placed label; None if none is free."""
    w, h = CHAR_WIDTH * len(label) + 2, 13
    for dx, dy in ((9, -17), (9, 4), (-9 - w, -17), (-9 - w, 4)):
        box = (x + dx, y + dy, x + dx + w, y + dy + h)
        inside = LEFT < box[0] and box[2] < RIGHT and TOP - 4 < box[1] and box[3] < BOTTOM
        if inside and not any(_overlap(box, other) for other in placed):
            return box
    return None


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _legend(frame: _Frame, picture: Picture) -> list[str]:
    """Legend entries, each a symbol and its words (a second, smaller line where it needs one)."""
    tol = picture.tolerance
    entries: list[tuple[Symbol, str, str]] = []
    if any(p.passed for p in picture.points):
        entries.append((_dot(PASSED_COLOUR), "plan passes", ""))
    if not all(p.passed for p in picture.points):
        entries.append((_dot(FAILED_COLOUR), "plan fails", ""))
    if len(pareto_front(picture.points)) > 1:
        entries.append((_dash(FRONT_COLOUR, ""), "Pareto front", "none better on both axes"))
    if picture.chosen is not None:
        entries.append((_ring(), f"chosen plan: point {picture.chosen}", ""))
    if tol is not None and tol.bound > 0:
        entries.append((_dash(TOLERANCE_COLOUR, "6 4"), "tolerance", tol.label))
    if frame.nonfinite:
        entries.append((_swatch(NONFINITE_FILL), "NaN/Inf: an output", "turned non-finite"))
    if frame.exact:
        entries.append((_swatch(EXACT_FILL), "0: exact, no error", ""))
    if frame.fewer:
        entries.append((_swatch(FEWER_FILL), f"less {picture.low} than the front,", "and no less error"))
    entries.append((_number_sample(), "point number", "--plan REPORT.json@N replays it"))
    out, y = [], TOP + 6
    for symbol, words, more in entries:
        out += [symbol(LEGEND_X + 8, y), _text(LEGEND_X + 24, y + 4, words)]
        if more:
            out.append(_text(LEGEND_X + 24, y + 17, more, size=10, fill="#444444"))
        y += 34 if more else 22
    return out


def _dot(colour: str) -> Symbol:
    return lambda x, y: f'<circle cx="{x}" cy="{y}" r="4" fill="{colour}"/>'


def _ring() -> Symbol:
    return lambda x, y: (f'<circle cx="{x}" cy="{y}" r="7" fill="none" stroke="{CHOSEN_COLOUR}" '
                         f'stroke-width="2.5"/>')


def _dash(colour: str, dashes: str) -> Symbol:
    pattern = f' stroke-dasharray="{dashes}"' if dashes else ""
    return lambda x, y: (f'<line x1="{x - 8}" y1="{y}" x2="{x + 8}" y2="{y}" stroke="{colour}" '
                         f'stroke-width="1.5"{pattern}/>')


def _swatch(colour: str) -> Symbol:
    return lambda x, y: _rect(x - 8, y - 6, 16, 12, colour)


def _number_sample() -> Symbol:
    return lambda x, y: _text(x, y + 4, "N", anchor="middle", weight="bold")


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, weight: str = "normal",
          fill: str = "black") -> str:
    style = "".join(f' {name}="{value}"' for name, value, default in (
        ("text-anchor", anchor, "start"), ("font-size", size, 11), ("font-weight", weight, "normal"),
        ("fill", fill, "black")) if value != default)
    return f'<text x="{x:.1f}" y="{y:.1f}"{style}>{for_svg(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, colour: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}"/>'


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" stroke="none"/>'


def _pct(share: float, decimals: int) -> str:
    return f"{100 * share:.{decimals}f}%"


def _share_decimals(step: float) -> int:
    """Decimals a tick label needs at ``step``: 0 for 1% and up, 1 for 0.1%-0.5%."""
    return max(0, -math.floor(math.log10(100 * step) + 1e-9))
