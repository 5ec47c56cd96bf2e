"""The values a comparison produces: one output's metrics and verdict, and a comparison of outputs.

:mod:`.compare` computes them; :mod:`.acceptance` judges them. Both
round-trip through JSON (reports are read back by ``--plan REPORT.json@K`` and by tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..format import json_float, number
from .task_checks import TaskResult


@dataclass(frozen=True)
class Pool:
    """An output's part in rms bounds held over several samples together (``Tolerance.sample_ceiling``
    above 1): over ``samples`` samples, the root mean square of its rel RMS err and of its worst slice's,
    and of each sample's own bounds on them (each sample alone held to ``ceiling`` times its own). A sample
    within ``atol`` (whose errors do not count) counts at most its own bounds."""

    samples: int
    ceiling: float
    rel_rms: float
    bound: float
    slice_rel_rms: float
    slice_bound: float

    @staticmethod
    def merged(pools: Sequence[Pool]) -> Pool:
        """The pool of the samples of ``pools`` together (each weighed by its samples)."""
        count = sum(p.samples for p in pools)

        def rms(value: Callable[[Pool], float]) -> float:
            return math.sqrt(math.fsum(p.samples * value(p) ** 2 for p in pools) / count)

        return Pool(count, max(p.ceiling for p in pools), rms(lambda p: p.rel_rms), rms(lambda p: p.bound),
                    rms(lambda p: p.slice_rel_rms), rms(lambda p: p.slice_bound))


@dataclass(frozen=True)
class OutputMetrics:
    """One output's comparison with FP32. Errors are ``|cand - ref|`` over the elements where both
    are finite; ``max_rel_err`` is ``max_abs_err / max|ref|`` (scale-relative), ``rel_rms_err``
    ``‖cand - ref‖ / ‖ref‖``; slices are defined in :mod:`.acceptance`."""

    name: str
    max_abs_err: float
    max_rel_err: float
    cosine: float
    new_nonfinite: int  # NaN/Inf in the candidate where the reference is finite
    passed: bool
    rel_rms_err: float = 0.0
    worst_slice_rel_rms: float = 0.0
    worst_slice_at: tuple[int, ...] = ()  # index of the worst slice's first element
    worst_slice_size: int = 0  # its elements
    slices: int = 0
    mean_abs_err: float = 0.0
    p50_abs_err: float = 0.0
    p99_abs_err: float = 0.0
    p999_abs_err: float = 0.0
    quantile: float = 0.99  # the quantile of |err| in quantile_abs_err (the tolerance's error_quantile)
    quantile_abs_err: float = 0.0
    ref_max_abs: float = 0.0
    outside_bound: int = 0  # elements outside atol + rtol·|ref| of the output's tolerance, NaN/Inf included
    outside_rtol: int = 0  # those outside rtol·|ref| alone: the elementwise bound's count without its atol
    cand_max_abs: float = 0.0  # the candidate's largest |value| where both are finite
    # the candidate is one value throughout (all zero, say) where the reference is not: no signal left
    flat: bool = False
    elements: int = 0  # elements where FP32 is finite (the new NaN/Inf among them)
    fp32_nonfinite: int = 0  # elements left out because FP32 itself is NaN/Inf there
    # the samples whose run stopped before giving the output (judge.not_run; (0,) in one sample's
    # comparison, each sample's place in a merge's): none of their elements is among those counted
    not_compared: tuple[int, ...] = ()
    failures: tuple[str, ...] = ()  # why it fails; () when it passes
    tasks: tuple[TaskResult, ...] = ()
    passed_by: str = ""  # the clause it passes under ("all |err| <= atol 0.001", ...); "" when it fails
    # a pass: the share of its bound the deciding clause left, and that clause as measured
    # (acceptance.room); inf and "" when it fails or no bound measures it
    room: float = math.inf
    room_clause: str = ""
    # where its rms bounds hold over the samples together, its part in them (in memory only, not in the
    # JSON: the merge of samples pools them, and its verdict and failures say what came of it)
    pool: Pool | None = field(default=None, compare=False, repr=False)

    @property
    def outside_fraction(self) -> float:
        return self.outside_bound / self.elements if self.elements else 0.0

    @property
    def finite_note(self) -> str:
        """Where NaN/Inf were left out of the statistics, how many elements they cover; "" otherwise."""
        if not (self.new_nonfinite or self.fp32_nonfinite):
            return ""
        return (f"statistics over the {self.elements - self.new_nonfinite} of "
                f"{self.elements + self.fp32_nonfinite} elements finite in both")

    def other_failures(self) -> tuple[str, ...]:
        """The failures but the new-NaN/Inf count, which the statistics line already gives."""
        return tuple(f for f in self.failures if f != f"{self.new_nonfinite} new NaN/Inf")

    def verdict(self) -> str:
        """"pass (the clause it passes under)" or "FAIL"."""
        if not self.passed:
            return "FAIL"
        return f"pass ({self.passed_by})" if self.passed_by else "pass"

    def summary(self) -> str:
        """One line: the main statistics, then the task checks and, when it fails, why."""
        text = (f"max abs err {number(self.max_abs_err)}, max rel err {number(self.max_rel_err)}, "
                f"rel RMS err {number(self.rel_rms_err)} (worst slice {number(self.worst_slice_rel_rms)}), "
                f"p99 {number(self.p99_abs_err)}, p99.9 {number(self.p999_abs_err)}, "
                f"cosine {self.cosine:.6f}, {self.outside_bound}/{self.elements} outside bound")
        if self.not_compared:
            text += (f" ({named_samples(self.not_compared)} not compared: "
                     f"{'its run' if len(self.not_compared) == 1 else 'their runs'} stopped)")
        if self.new_nonfinite:
            text += f", {self.new_nonfinite} new NaN/Inf"
        if self.finite_note:
            text += f" ({self.finite_note})"
        text += "".join(f", {t.summary()}" for t in self.tasks)
        others = self.other_failures()
        return text + (f" [{'; '.join(others)}]" if not self.passed and others else "")

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "pool" or (f.name == "not_compared" and not value):  # the latter: only where set
                continue
            if f.name == "tasks":
                value = [t.to_json() for t in value]
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, float):
                value = json_float(value)
            out[f.name] = value
        out["outside_fraction"] = json_float(self.outside_fraction)
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> OutputMetrics:
        values: dict[str, Any] = {}
        for f in fields(OutputMetrics):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name == "tasks":
                value = tuple(TaskResult.from_json(t) for t in value)
            elif f.name == "failures":
                value = tuple(str(v) for v in value)
            elif f.name in ("worst_slice_at", "not_compared"):
                value = tuple(int(v) for v in value)
            elif f.type in ("float", float):
                value = float(value)  # "inf"/"nan" strings too
            values[f.name] = value
        return OutputMetrics(**values)


@dataclass(frozen=True)
class Comparison:
    outputs: tuple[OutputMetrics, ...]
    passed: bool
    oracle: str  # which oracle produced the candidate: "emulate", "native:<provider>", "reference"
    samples: int = 1
    # samples of several input shapes: (the shapes, as "x:1x3x256x256", the comparison of those samples)
    by_shape: tuple[tuple[str, Comparison], ...] = ()
    # the comparison of each sample a merge took the worst of, in order (in memory only, not in the JSON):
    # a quantized model's gate names the sample that decides its verdict (quant_reference.QuantGate.notes)
    per_sample: tuple[Comparison, ...] = field(default=(), compare=False, repr=False)

    def failure(self, sample: int = 0, samples: int = 1) -> str:
        """One phrase naming the first failing output and how it failed (``sample`` of ``samples``:
        which feed this comparison is of)."""
        bad = next(m for m in self.outputs if not m.passed)
        # the verdict's own words name the criterion that failed, with the digits that show it
        what = (f"{bad.new_nonfinite} new NaN/Inf" if bad.new_nonfinite
                else "; ".join(bad.failures) or f"max abs err {bad.max_abs_err:.3g}, cosine {bad.cosine:.4f}")
        where = f"sample {sample}, " if samples > 1 else ""
        return f"{where}output '{bad.name}' {what}"

    def metrics(self, name: str) -> OutputMetrics:
        for m in self.outputs:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict:
        out = {"oracle": self.oracle, "passed": self.passed, "samples": self.samples,
               "outputs": [m.to_json() for m in self.outputs]}
        if self.by_shape:
            out["by_shape"] = [{"shapes": shapes, **c.to_json()} for shapes, c in self.by_shape]
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Comparison:
        by_shape = tuple((str(s["shapes"]), Comparison.from_json(s)) for s in data.get("by_shape", ()))
        return Comparison(tuple(OutputMetrics.from_json(m) for m in data["outputs"]), bool(data["passed"]),
                          str(data["oracle"]), int(data.get("samples", 1)), by_shape)

    def worst(self) -> OutputMetrics | None:
        """The output furthest from FP32: a failing one first, then by new NaN/Inf and relative error."""
        pool = [m for m in self.outputs if not m.passed] or list(self.outputs)
        return max(pool, key=lambda m: (m.new_nonfinite, _sortable(m.rel_rms_err), _sortable(m.max_abs_err)),
                   default=None)


def named_samples(indices: Sequence[int]) -> str:
    """"sample 1", "samples 0, 2"."""
    return (f"sample {indices[0]}" if len(indices) == 1 else
            f"samples {', '.join(str(i) for i in indices)}")


def _sortable(x: float | None) -> float:
    return math.inf if x is None or math.isnan(x) else float(x)
