"""The tolerance: how an FP16 output is judged against FP32, as one frozen value.

:mod:`.acceptance` says what each setting means and why the defaults are what they are, and
:func:`.acceptance.failures` applies it to one output's metrics; the statistic it names
(``error_stat``) is a row of :data:`.statistics.STATISTICS`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import UsageError
from .statistics import ERROR_STATS, stat_name, statistic

_INF = float("inf")
# Each numeric setting's bounds (lo, hi) and how they read: the one source of truth, checked by
# Tolerance itself and by the CLI's options. NaN or infinity would pass anything (NaN compares false),
# and a JSON report cannot hold them.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "atol": (0.0, _INF, "a finite number >= 0"),
    "rtol": (0.0, _INF, "a finite number >= 0"),
    "min_cosine": (-1.0, 1.0, "a cosine between -1 and 1"),
    "max_rel_rms": (0.0, _INF, "a finite number >= 0"),
    "max_slice_rel_rms": (0.0, _INF, "a finite number >= 0"),
    "error_quantile": (0.0, 1.0, "a number between 0 and 1"),
    "max_outside_fraction": (0.0, 1.0, "a number between 0 and 1"),
    "min_top_k_agreement": (0.0, 1.0, "a number between 0 and 1"),
    "threshold": (-_INF, _INF, "a finite number"),
    "min_iou": (0.0, 1.0, "a number between 0 and 1"),
    "sample_ceiling": (1.0, _INF, "a finite number >= 1"),
}


class ToleranceError(UsageError, ValueError):
    """A tolerance setting out of its bounds: one line naming it (a ValueError too, as a
    dataclass's own checks raise)."""


def bound_problem(name: str, value: object) -> str:
    """What setting ``name`` expects, when ``value`` is not a finite real number within its
    :data:`BOUNDS`; "" when it is."""
    lo, hi, expected = BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        return expected
    return "" if math.isfinite(float(value)) and lo <= float(value) <= hi else expected
SLICE_MIN_ELEMENTS = 32  # a slice is whole rows of the last axis, at least this many elements

# A caller's own judgement of one sample's outputs (FP32 reference, candidate; output name -> array)
# on top of the statistics: "" accepts, anything else is why it rejects. Python callers only
# (onnxconverter-common's validate_fn): a function has no JSON nor command-line spelling.
Accept = Callable[[Mapping[str, Any], Mapping[str, Any]], str]


@dataclass(frozen=True)
class Tolerance:
    """How outputs are judged (see the module docstring); ``per_output`` overrides by output name."""

    error_stat: str = "rms"
    atol: float = 1e-3
    rtol: float = 1e-2
    min_cosine: float = 0.999
    max_rel_rms: float = 0.05
    max_slice_rel_rms: float = 0.2
    error_quantile: float = 0.99
    max_outside_fraction: float = 0.0
    top_k: int = 0  # 0: no top-k check
    min_top_k_agreement: float = 1.0
    threshold: float | None = None  # None: no thresholded-map check
    min_iou: float = 0.99
    allow_fp32_nonfinite: bool = False
    # 1: each sample within max_rel_rms and max_slice_rel_rms. Above 1, those bounds hold over the samples
    # judged together (the root mean square over them of each rel RMS err against that of each sample's
    # own bounds: merge_comparisons), each sample alone within this many times its own: where a sample's
    # error is noise drawn again (a quantized model's remainder, quant_reference), one draw can pass its
    # bound while the samples together do not move
    sample_ceiling: float = 1.0
    per_output: tuple[tuple[str, Tolerance], ...] = ()
    accept: Accept | None = None  # judges every sample's outputs together, after the statistics

    def __post_init__(self) -> None:
        if self.error_stat not in ERROR_STATS:
            raise ToleranceError(f"error_stat {self.error_stat!r} is not one of {', '.join(ERROR_STATS)}")
        for name in BOUNDS:
            value = getattr(self, name)
            problem = "" if name == "threshold" and value is None else bound_problem(name, value)
            if problem:
                raise ToleranceError(f"{name} {value!r}: expected {problem}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ToleranceError(f"top_k {self.top_k!r}: expected an integer >= 0 (0: no top-k check)")
        if self.accept is not None and not callable(self.accept):
            raise ValueError(f"accept: expected a function of (reference, candidate); got "
                             f"{type(self.accept).__name__}")

    def for_output(self, name: str) -> Tolerance:
        """The tolerance that judges output ``name`` (``allow_fp32_nonfinite`` is the same for all)."""
        for output, tol in self.per_output:
            if output == name:
                return replace(tol, allow_fp32_nonfinite=self.allow_fp32_nonfinite)
        return self

    def with_output(self, name: str, **changes: Any) -> Tolerance:
        """A copy in which output ``name`` is judged with ``changes`` over its current settings."""
        current = replace(self.for_output(name), per_output=())
        others = tuple((n, t) for n, t in self.per_output if n != name)
        return replace(self, per_output=others + ((name, replace(current, **changes)),))

    def unknown_outputs(self, names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """Outputs named in ``per_output`` that are not among ``names`` (a typo judges nothing)."""
        return tuple(n for n, _ in self.per_output if n not in names)

    def require_outputs(self, names: tuple[str, ...] | list[str], model: str) -> None:
        """Refuse per-output settings for outputs the model does not have: a typo would silently
        judge that output by the defaults, which a CI gate must not do."""
        unknown = self.unknown_outputs(names)
        if unknown:
            raise UsageError(f"{model}: a tolerance names output '{unknown[0]}', which the model does not "
                             f"have (outputs: {', '.join(names)})")

    def describe(self) -> str:
        """One line for reports and the terminal."""
        parts = [_settings_text(self)]
        base = self.to_json()
        for name, tol in self.per_output:
            changed = [f"{k}={v}" for k, v in tol.to_json().items() if k != "per_output" and v != base.get(k)]
            parts.append(f"{name}: {', '.join(changed) or 'as the others'}")
        if self.allow_fp32_nonfinite:
            parts.append("compared only where FP32 is finite")
        if self.accept is not None:
            parts.append(f"and {accept_name(self.accept)} accepts the outputs")
        return "; ".join(parts)

    def cli_args(self) -> list[str]:
        """The command-line options that give this tolerance (settings at their default left out)."""
        out: list[str] = []
        for f in fields(self):
            if f.name in ("per_output", "allow_fp32_nonfinite", "accept", "sample_ceiling"):  # no flags
                continue
            flag = "--" + f.name.replace("_", "-")
            if getattr(self, f.name) != getattr(_DEFAULT, f.name):
                out += [flag, _arg(getattr(self, f.name))]
            out += [arg for name, tol in self.per_output if getattr(tol, f.name) != getattr(self, f.name)
                    for arg in (flag, f"{name}:{_arg(getattr(tol, f.name))}")]
        return out + (["--allow-fp32-nonfinite"] if self.allow_fp32_nonfinite else [])

    def to_json(self) -> dict:
        """The check and the settings the verdict applies (:func:`applied`); the others judge nothing
        and are left out (a report listing ``min_cosine`` beside an ``rms`` verdict, which never
        reads it, said an output at cosine 0.9988 passed against 0.999)."""
        listed = ("error_stat", *applied(self), "allow_fp32_nonfinite")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name in listed}
        out["per_output"] = {name: {k: v for k, v in tol.to_json().items() if k != "per_output"}
                             for name, tol in self.per_output}
        if self.accept is not None:  # named, so the report says the outputs were judged by it too
            out["accept"] = accept_name(self.accept)
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Tolerance:
        # a report's "accept" names a Python function, which JSON cannot bring back
        known = {f.name for f in fields(Tolerance)} - {"per_output", "accept"}
        base = Tolerance(**{k: v for k, v in data.items() if k in known})
        per = tuple((name, Tolerance(**{k: v for k, v in values.items() if k in known}))
                    for name, values in dict(data.get("per_output", {})).items())
        return replace(base, per_output=per)


_DEFAULT = Tolerance()


def accept_name(accept: Accept) -> str:
    """The name reports give a caller's judgement (its ``__name__``, else its class's)."""
    return str(getattr(accept, "__name__", type(accept).__name__))


def _arg(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def applied(tol: Tolerance) -> tuple[str, ...]:
    """The settings the verdict applies under ``tol`` (:func:`.acceptance.failures`): those of its
    statistic (:attr:`.statistics.ErrorStatistic.settings`) and of the task checks asked for."""
    names = statistic(tol).settings
    if tol.sample_ceiling != 1 and "max_rel_rms" in names:
        names += ("sample_ceiling",)
    if tol.top_k:
        names += ("top_k", "min_top_k_agreement")
    if tol.threshold is not None:
        names += ("threshold", "min_iou")
    return names


def clauses(tol: Tolerance) -> tuple[str, str]:
    """The check's clause, and (a statistic that ``atol`` alone can pass: rms) the other way to
    pass: all |err| within atol; each in the words reports use, the task checks appended to the
    first."""
    row = statistic(tol)
    main = row.clause(tol)
    if "sample_ceiling" in applied(tol):
        main += (f" over the samples together (root mean square), each sample within "
                 f"{tol.sample_ceiling:g} x its own")
    if tol.top_k:
        main += f", top-{tol.top_k} agreement >= {tol.min_top_k_agreement:g}"
    if tol.threshold is not None:
        main += f", IoU at {tol.threshold:g} >= {tol.min_iou:g}"
    return main, (f"all |err| <= atol {tol.atol:g}" if row.atol_passes else "")


def _settings_text(tol: Tolerance) -> str:
    main, escape = clauses(tol)
    return f"{stat_name(tol)}: {main}" + (f" (or {escape})" if escape else "")
