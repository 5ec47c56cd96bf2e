"""How far a plan holds: from what a generation measured over its steps, the length it verified and
an estimate of the length at which the first 16-bit value would pass the type's largest finite value
(65 504 for FP16) or a position would stop being exact (2 048 for FP16).

What is extrapolated, against the step (a decode step adds one position):

* each output's max |value| at every step (:attr:`.runner.GenerationRun.peaks`: a state, a cache's new
  entries, the logits), fitted over the last half of the steps;
* each tensor inside the model at the steps one forward pass was measured at (the prefill, the eighths and
  the last step: :attr:`.runner.GenerationRun.inside`, :mod:`.inside`), fitted over all of them, and, where
  the target keeps sums in its 16-bit type, each such sum's accumulator bound (kind "sum");
* the largest position (kind "position"): positions grow by the same count each step, so theirs is a line.

A value that passed the limit within the steps is measured, not estimated. Otherwise a rise is a trend only
where it stands out of the values' scatter about their line (:data:`_SIGNIFICANT`) and, read from a few
steps, rises at each of them (in FP32 traces of the steps measured, of SmolLM2-135M's 1 182 float tensors
one does, its rotary angles, where 596 end above their middle step's value; of Whisper tiny.en's 144 none
does at nine steps, where 7 did at five, its attention scores among them: a level that shifts once, after
its transcript ends, read as a growth). A trend is fitted with a line and with a geometric growth (a line
through log |value|), each extrapolated from the last value (or the fit's value there, where higher); of
the fits that explain the values about as well as the better one (:data:`_AS_WELL`, their RMS distance
from the values relative to the values' RMS) the more pessimistic one is taken, and named. A fit that
explains them clearly worse is not: positions 41 to 105 read as a geometric growth pass 65504 at step 504,
not 65 464. What grows slower than either model (a square root, a saturating state) is judged on the fit
anyway: the estimate errs early, not late. The bound is read from the FP32 reference's run (what the
values would be); ``wide`` leaves out the tensors a plan keeps in FP32, ``wide_sums`` the nodes it keeps
FP32.
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
GrowthKind = Literal["value", "position", "sum"]


@dataclass(frozen=True)
class Growth:
    """How one tensor's max |value| (``kind`` "value"), a position input's largest value ("position") or a
    node's 16-bit accumulator bound ("sum") grew over steps ``window`` (first, last), and the step at which it
    passes ``limit`` (None: it does not grow). ``rate``: added per step (linear, and a position's) or
    multiplied per step (geometric). ``measured``: the steps measured in the window where not every one
    was (a tensor inside the model)."""

    tensor: str
    limit: float
    last: float
    model: GrowthModel
    rate: float
    window: tuple[int, int]
    over_at: int | None
    kind: GrowthKind = "value"
    measured: tuple[int, ...] = ()

    def text(self) -> str:
        """How it was found: "measured at step 30", "estimated: ~2.03e+03 a step, linear fit over steps
        10-20" (or "over steps 0, 16, 32, 48, 64" where those alone were measured)."""
        if self.model == "measured":
            return f"measured at step {self.over_at}"
        if self.kind == "position" and self.model == "linear":
            return f"positions grow {self.rate:g} a step"
        steps = (f"steps {', '.join(map(str, self.measured))}" if self.measured else
                 f"steps {self.window[0]}-{self.window[1]}")
        if self.model == "flat":
            return f"no growth over {steps}"
        rate = f"~{self.rate:.3g} a step" if self.model == "linear" else f"x{self.rate:.4g} a step"
        return f"estimated: {rate}, {self.model} fit over {steps}"

    def what(self, low: str) -> str:
        """What passes its limit: "'layers.3/Add' passes 65504", "the FP16 sum of 'attn/MatMul' passes 65504",
        "'position_ids' stops being exact in FP16 (positions past 2048)"."""
        if self.kind == "position":
            return f"'{self.tensor}' stops being exact in {low} (positions past {self.limit:.0f})"
        if self.kind == "sum":
            return f"the {low} sum of '{self.tensor}' passes {self.limit:g}"
        return f"'{self.tensor}' passes {self.limit:g}"


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
            grown = [g for g in self.growths if g.model == "flat" and not g.measured]
            return f"{head}; nothing measured grows towards {self.low}'s limits" + (
                f" over steps {grown[0].window[0]}-{grown[0].window[1]}" if grown else "")
        what = first.what(self.low)
        if first.model == "measured":
            return f"{head}; {self.low} breaks within them: at {limit} {self.unit} {what} ({first.text()})"
        approx = "" if first.kind == "position" else "~"
        return (f"{head}; {self.low}-safe up to {approx}{limit - 1} {self.unit}: beyond it {what} "
                f"({first.text()})")


def hold_bound(run: GenerationRun, low: LowPrecision = FP16, wide: Collection[str] = (),
               position_input: str | None = None, wide_sums: Collection[str] = ()) -> HoldBound:
    """How far the generation ``run`` measured holds in ``low`` (see the module docstring). ``wide``: the
    tensors a plan keeps FP32, left out (the position input among them where positions stay FP32);
    ``position_input``: the name of the input whose values :attr:`GenerationRun.positions` holds;
    ``wide_sums``: the nodes whose sums the plan keeps FP32."""
    growths = [_every_step(name, peaks, low.max) for name, peaks in run.peaks.items() if name not in wide]
    inside = run.inside
    if inside is not None:
        growths += [_sampled(name, inside.steps, peaks, low.max) for name, peaks in inside.peaks.items()
                    if name not in wide and name not in run.peaks]
        growths += [_sampled(node, inside.steps, bounds, low.max, "sum")
                    for node, bounds in inside.sums.items() if node not in wide_sums]
    if run.positions and position_input and position_input not in wide:
        growths.append(_position(position_input, run.positions, low.exact_int))
    growths.sort(key=lambda g: (g.over_at is None, g.over_at or 0, g.kind != "value", g.tensor))
    return HoldBound(run.steps, run.lengths[-1], run.unit, low.name, tuple(growths), run.lengths[0])


_NEVER = 1e9  # steps: a growth this slow is none
# A rise over the window within this many standard deviations of the values about their line is noise:
# the peaks of a KV cache's new entries wander up and down step after step without growing, and so do
# SmolLM2's layer-1 attention scores at steps 0, 16, 32, 48 and 64 (142, 122, 147, 136, 186: a rise of 41
# over their line, scattered by 16 about it; at the nine steps now measured the rise is 54, and what keeps
# them flat is that they do not rise at each).
_SIGNIFICANT = 3.0
# A fit whose relative RMS distance from the values is within this many times the better fit's explains them
# as well (with _EXACT for values on a line or a curve to float32's precision).
_AS_WELL = 2.0
_EXACT = 1e-6


def _window(count: int) -> tuple[int, int]:
    """The steps fitted: the last half, at least two."""
    last = count - 1
    return max(0, min(last - 1, last - last // 2)), last


def _every_step(tensor: str, peaks: Sequence[float], limit: float) -> Growth:
    """An output's growth from its peak at every step, fitted over the last half."""
    values = np.asarray(peaks, dtype=np.float64)
    lo, hi = _window(len(values))
    past = _past(values, limit)
    if past is not None:
        return Growth(tensor, limit, float(values[past]), "measured", 0.0, (0, hi), past)
    if hi == 0:
        return Growth(tensor, limit, float(values[0]), "flat", 0.0, (0, 0), None)
    return _fit(tensor, np.arange(lo, hi + 1, dtype=np.float64), values[lo:hi + 1], limit)


def _sampled(tensor: str, steps: Sequence[int], peaks: Sequence[float], limit: float,
             kind: GrowthKind = "value") -> Growth:
    """A tensor's (or a sum's) growth from its peaks at the ``steps`` measured, fitted over all of them."""
    values = np.asarray(peaks, dtype=np.float64)
    window = (steps[0], steps[-1])
    past = _past(values, limit)
    if past is not None:
        return Growth(tensor, limit, float(values[past]), "measured", 0.0, window, steps[past], kind,
                      tuple(steps))
    if len(steps) < 2 or not (np.diff(values) > 0).all():  # a trend from a few steps rises at each
        return Growth(tensor, limit, float(values[-1]), "flat", 0.0, window, None, kind, tuple(steps))
    return _fit(tensor, np.asarray(steps, dtype=np.float64), values, limit, kind, tuple(steps))


def _past(values: np.ndarray, limit: float) -> int | None:
    """The index of the first value past ``limit`` (or not finite), None where none is."""
    past = np.flatnonzero(~np.isfinite(values) | (values > limit))
    return int(past[0]) if past.size else None


@dataclass(frozen=True)
class _Fit:
    model: GrowthModel
    residual: float  # RMS distance from the values, relative to their RMS
    rate: float  # added per step (linear), or log of the factor per step (geometric)
    fitted: float  # its value at the last step
    over_at: int | None


def _fit(tensor: str, steps: np.ndarray, ys: np.ndarray, limit: float, kind: GrowthKind = "value",
         measured: tuple[int, ...] = ()) -> Growth:
    lo, hi = int(steps[0]), int(steps[-1])
    last = float(ys[-1])
    flat = Growth(tensor, limit, last, "flat", 0.0, (lo, hi), None, kind, measured)
    slope, intercept = np.polyfit(steps, ys, 1)
    line = slope * steps + intercept
    if slope * (hi - lo) <= _SIGNIFICANT * float(np.std(ys - line)):
        return flat
    fits = []
    if slope > 0:
        fits.append(_extrapolated("linear", _residual(line, ys), float(slope), float(line[-1]), last, hi,
                                  limit))
    if (ys > 0).all():
        c, b = np.polyfit(steps, np.log(ys), 1)
        if c > 0:
            curve = np.exp(c * steps + b)
            fits.append(_extrapolated("geometric", _residual(curve, ys), float(c), float(curve[-1]), last, hi,
                                      limit))
    if not fits:
        return flat
    best = min(f.residual for f in fits)
    fit = min((f for f in fits if f.residual <= _AS_WELL * best + _EXACT),
              key=lambda f: (f.over_at is None, f.over_at or 0))
    shown = fit.rate if fit.model == "linear" else math.exp(fit.rate)  # added, or multiplied, per step
    return Growth(tensor, limit, last, fit.model, shown, (lo, hi), fit.over_at, kind, measured)


def _extrapolated(model: GrowthModel, residual: float, rate: float, fitted: float, last: float, hi: int,
                  limit: float) -> _Fit:
    """A fit extrapolated from the last value (or its own there, where higher) to the step past ``limit``:
    by adding ``rate`` each step, or growing by e**rate."""
    anchor = max(last, fitted)
    more = (limit - anchor) / rate if model == "linear" else math.log(limit / anchor) / rate
    return _Fit(model, residual, rate, fitted, hi + max(1, math.floor(more) + 1) if more < _NEVER else None)


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
    """The RMS distance of a fit from the values it fits, relative to their RMS: a line through a value that
    starts near zero is judged at the values' scale, not at that one value's."""
    return float(np.sqrt(np.mean((fitted - values) ** 2) / max(float(np.mean(values ** 2)), 1e-300)))
