"""How far a plan holds: from what a generation measured over its steps, the length it verified and
an estimate of the length at which the first 16-bit value would pass the type's largest finite value
(65 504 for FP16) or a position would stop being exact (2 048 for FP16).

Each traced tensor's max |value| per step (:attr:`.runner.GenerationRun.peaks`) is fitted over the
last half of the steps, linearly and geometrically (a line through log |value|); the fit closer to the
values (relative RMS residual) is extrapolated from the last step's value, or from the fit's value
there where it is higher. A value that passed the limit within the steps is measured, not estimated.
Positions grow by the same count each step, so theirs is a line. What grows slower than either model
(a square root, a saturating state) is judged on the fit anyway: the estimate errs early, not late.
The bound is read from the FP32 reference's run (what the values would be); ``wide`` leaves out the
tensors a plan keeps in FP32.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..float_types import FP16, LowPrecision
from .runner import GenerationRun

GrowthModel = Literal["linear", "geometric", "flat", "measured"]


@dataclass(frozen=True)
class Growth:
    """How one tensor's max |value| (``kind`` "value") or a position input's largest value ("position")
    grew over steps ``window`` (first, last), and the step at which it passes ``limit`` (None: it does
    not grow). ``rate``: added per step (linear, and a position's) or multiplied per step (geometric)."""

    tensor: str
    limit: float
    last: float
    model: GrowthModel
    rate: float
    window: tuple[int, int]
    over_at: int | None
    kind: Literal["value", "position"] = "value"

    def text(self) -> str:
        """How it was found: "measured at step 30", "estimated: ~2.03e+03 a step, linear fit over steps
        10-20"."""
        if self.model == "measured":
            return f"measured at step {self.over_at}"
        if self.kind == "position" and self.model == "linear":
            return f"positions grow {self.rate:g} a step"
        steps = f"steps {self.window[0]}-{self.window[1]}"
        if self.model == "flat":
            return f"no growth over {steps}"
        rate = f"~{self.rate:.3g} a step" if self.model == "linear" else f"x{self.rate:.4g} a step"
        return f"estimated: {rate}, {self.model} fit over {steps}"


@dataclass(frozen=True)
class HoldBound:
    """How far a generation holds in ``low``: verified for ``verified_steps`` steps (``verified_length``
    tokens or chunks); the first value to break (``first``: the growth that passes its limit soonest,
    None when none does) and the length that step reaches, ``limit_length``: the plan is safe up to
    ``limit_length - 1``. ``growths``: every tensor and position looked at, soonest first."""

    verified_steps: int
    verified_length: int
    unit: str
    low: str
    growths: tuple[Growth, ...]
    start: int  # the length reached at step 0

    @property
    def first(self) -> Growth | None:
        return next((g for g in self.growths if g.over_at is not None), None)

    @property
    def limit_length(self) -> int | None:
        first = self.first
        return None if first is None or first.over_at is None else self.start + first.over_at

    def holds(self, length: int) -> bool:
        """Whether the plan is expected to hold a generation of ``length`` (a ``--max-length``)."""
        limit = self.limit_length
        return limit is None or length < limit

    def describe(self) -> str:
        """"verified for 64 steps (72 tokens); FP16-safe up to ~1 900 tokens: beyond it 'layers.22/Add_2'
        passes 65504 (estimated: ...)"."""
        head = f"verified for {self.verified_steps} steps ({self.verified_length} {self.unit})"
        first, limit = self.first, self.limit_length
        if first is None or limit is None:
            grown = [g for g in self.growths if g.model == "flat"]
            return f"{head}; nothing measured grows towards {self.low}'s limits" + (
                f" over steps {grown[0].window[0]}-{grown[0].window[1]}" if grown else "")
        position = first.kind == "position"
        what = (f"'{first.tensor}' stops being exact in {self.low} (positions past {first.limit:.0f})"
                if position else f"'{first.tensor}' passes {first.limit:g}")
        if first.model == "measured":
            return f"{head}; {self.low} breaks within them: at {limit} {self.unit} {what} ({first.text()})"
        approx = "" if position else "~"
        return (f"{head}; {self.low}-safe up to {approx}{limit - 1} {self.unit}: beyond it {what} "
                f"({first.text()})")



def hold_bound(run: GenerationRun, low: LowPrecision = FP16, wide: Collection[str] = (),
               position_input: str | None = None) -> HoldBound:
    """How far the generation ``run`` measured holds in ``low`` (see the module docstring). ``wide``: the
    tensors a plan keeps FP32, left out (the position input among them where positions stay FP32);
    ``position_input``: the name of the input whose values :attr:`GenerationRun.positions` holds."""
    growths = [_growth(name, peaks, low.max) for name, peaks in run.peaks.items() if name not in wide]
    if run.positions and position_input and position_input not in wide:
        growths.append(_position(position_input, run.positions, low.exact_int))
    growths.sort(key=lambda g: (g.over_at is None, g.over_at or 0, g.tensor))
    return HoldBound(run.steps, run.lengths[-1], run.unit, low.name, tuple(growths), run.lengths[0])


_NEVER = 1e9  # steps: a growth this slow is none
# A rise over the window within this many standard deviations of the values about their line is noise:
# the peaks of a KV cache's new entries wander up and down step after step without growing.
_SIGNIFICANT = 3.0


def _window(count: int) -> tuple[int, int]:
    """The steps fitted: the last half, at least two."""
    last = count - 1
    return max(0, min(last - 1, last - last // 2)), last


def _growth(tensor: str, peaks: Sequence[float], limit: float) -> Growth:
    values = np.asarray(peaks, dtype=np.float64)
    past = np.flatnonzero(~np.isfinite(values) | (values > limit))
    lo, hi = _window(len(values))
    if past.size:
        return Growth(tensor, limit, float(values[past[0]]), "measured", 0.0, (0, hi), int(past[0]))
    if hi == 0:
        return Growth(tensor, limit, float(values[0]), "flat", 0.0, (0, 0), None)
    steps = np.arange(lo, hi + 1, dtype=np.float64)
    ys = values[lo:hi + 1]
    last = float(ys[-1])
    slope, intercept = np.polyfit(steps, ys, 1)
    fits: list[tuple[float, GrowthModel, float, float]] = []  # (residual, model, rate, value at hi)
    line = slope * steps + intercept
    if slope * (hi - lo) <= _SIGNIFICANT * float(np.std(ys - line)):
        return Growth(tensor, limit, last, "flat", 0.0, (lo, hi), None)
    if slope > 0:
        fits.append((_residual(line, ys), "linear", float(slope), float(line[-1])))
    if (ys > 0).all():
        c, b = np.polyfit(steps, np.log(ys), 1)
        if c > 0:
            curve = np.exp(c * steps + b)
            fits.append((_residual(curve, ys), "geometric", float(c), float(curve[-1])))
    if not fits:
        return Growth(tensor, limit, last, "flat", 0.0, (lo, hi), None)
    _, model, rate, fitted = min(fits, key=lambda f: f[0])
    anchor = max(last, fitted)
    # steps until the value passes the limit: by adding ``rate`` each step, or growing by e**rate
    more = (limit - anchor) / rate if model == "linear" else math.log(limit / anchor) / rate
    over_at = hi + max(1, math.floor(more) + 1) if more < _NEVER else None
    shown = rate if model == "linear" else math.exp(rate)  # added, or multiplied, per step
    return Growth(tensor, limit, last, model, shown, (lo, hi), over_at)


def _position(tensor: str, positions: Sequence[int], limit: int) -> Growth:
    """Positions past ``limit`` are not all exact; they grow by the same count each step."""
    hi = len(positions) - 1
    past = [s for s, p in enumerate(positions) if p > limit]
    if past:
        return Growth(tensor, limit, float(positions[past[0]]), "measured", 0.0, (0, hi), past[0], "position")
    rate = (positions[hi] - positions[hi - 1]) if hi else 0
    window = (max(0, hi - 1), hi)
    if rate <= 0:
        return Growth(tensor, limit, float(positions[hi]), "flat", 0.0, window, None, "position")
    more = (limit - positions[hi]) // rate + 1
    return Growth(tensor, limit, float(positions[hi]), "linear", float(rate), window, hi + more, "position")


def _residual(fitted: np.ndarray, values: np.ndarray) -> float:
    """The relative RMS distance of a fit from the values it fits."""
    return float(np.sqrt(np.mean(((fitted - values) / np.maximum(np.abs(values), 1e-30)) ** 2)))
