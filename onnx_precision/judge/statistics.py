"""The error statistics an output can be judged by (``Tolerance.error_stat``), one row each in
:data:`STATISTICS`.

A row says everything the rest of the package asks of a statistic: its name, the phrase ``--help``
gives it, the tolerance settings it applies (reports list those, :func:`.settings.applied`), its clause
in the words reports use, how it is measured on one output's metrics (:class:`Check`: the bound, whether
it holds, the failure and the room in words; :mod:`.acceptance` judges from them), whether every
element within ``atol`` passes an output anyway, and the headline a trade-off point plots.

Add a statistic: write its checks (a function of the metrics and the tolerance, as
:func:`_rms_checks`; a statistic of ``|err|`` bounded like the max is one :func:`_abs_err` call)
and add its row. Its default bounds are the tolerance's settings it reads
(:class:`.settings.Tolerance`); the metrics it reads are computed in one pass by
:func:`.compare.compare_array`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..format import cosine_text, number
from .metrics import OutputMetrics

# Outputs are float32: a cosine that should be 1 lands an ulp or two below it (0.99999994), so a
# minimum cosine is met within a few float32 ulps (--min-cosine 1 can pass).
COSINE_SLACK = 4 * 2.0**-24


class Settings(Protocol):
    """The tolerance settings statistics read (:class:`.settings.Tolerance` has them; this module
    sits below it, which validates its ``error_stat`` against :data:`STATISTICS`)."""

    @property
    def error_stat(self) -> str: ...
    @property
    def atol(self) -> float: ...
    @property
    def rtol(self) -> float: ...
    @property
    def min_cosine(self) -> float: ...
    @property
    def max_rel_rms(self) -> float: ...
    @property
    def max_slice_rel_rms(self) -> float: ...
    @property
    def error_quantile(self) -> float: ...
    @property
    def max_outside_fraction(self) -> float: ...


Term = tuple[float, str]  # (share of its bound a clause left, the clause as measured, in words)


@dataclass(frozen=True)
class Check:
    """One clause of a statistic's check, measured on one output."""

    value: float
    bound: float
    holds: bool
    failure: str  # why the output fails, when it does not hold
    measured: str  # the clause as measured, for the room of a pass ("rel RMS err 0.0451 against 0.05")
    # a bound of the form value >= bound (at most 1), measured by what each leaves to 1
    at_least: bool = False

    @property
    def term(self) -> Term:
        value, bound = (1.0 - self.value, 1.0 - self.bound) if self.at_least else (self.value, self.bound)
        return room_share(value, bound), self.measured


def room_share(value: float, bound: float) -> float:
    """The share of ``bound`` that ``value`` leaves (inf where the bound is 0: nothing measures it)."""
    return (bound - value) / bound if bound > 0 else math.inf


@dataclass(frozen=True)
class Headline:
    """What a trade-off point plots for a statistic: one number per output, and the tolerance's
    bound on that axis."""

    name: str
    value: Callable[[OutputMetrics], float]
    bound: Callable[[Settings], tuple[float, str]]  # (the bound, how the picture names it)


@dataclass(frozen=True)
class ErrorStatistic:
    name: str
    help: str  # what --help adds after the name ("" for none)
    settings: tuple[str, ...]  # the tolerance settings its check applies
    clause: Callable[[Settings], str]
    checks: Callable[[OutputMetrics, Settings], tuple[Check, ...]]
    headline: Headline
    atol_passes: bool = False  # every |err| within atol passes the output whatever the checks say
    label: Callable[[Settings], str] | None = None  # its name in reports, where a setting changes it


def _rms_checks(m: OutputMetrics, tol: Settings) -> tuple[Check, ...]:
    return (
        Check(m.rel_rms_err, tol.max_rel_rms, m.rel_rms_err <= tol.max_rel_rms,
              f"rel RMS err {number(m.rel_rms_err)} > {tol.max_rel_rms:g}",
              f"rel RMS err {number(m.rel_rms_err)} against {tol.max_rel_rms:g}"),
        Check(m.worst_slice_rel_rms, tol.max_slice_rel_rms, m.worst_slice_rel_rms <= tol.max_slice_rel_rms,
              f"slice at {m.name}{list(m.worst_slice_at)} ({m.worst_slice_size} elements) rel RMS err "
              f"{number(m.worst_slice_rel_rms)} > {tol.max_slice_rel_rms:g}",
              f"worst slice rel RMS err {number(m.worst_slice_rel_rms)} against {tol.max_slice_rel_rms:g}"),
    )


def _elemwise_checks(m: OutputMetrics, tol: Settings) -> tuple[Check, ...]:
    allowed = tol.max_outside_fraction * m.elements
    # outside_bound counts against the output's own atol; at atol 0 (a tolerance of atol 0, or its relative
    # part alone: acceptance.failures) the count is outside_rtol
    outside = m.outside_rtol if tol.atol == 0 else m.outside_bound
    return (Check(outside, allowed, outside <= allowed,
                  f"{outside} of {m.elements} elements outside atol {tol.atol:g} + rtol {tol.rtol:g} "
                  f"x |ref| (allowed: {math.floor(allowed)})",
                  f"{outside} elements outside atol + rtol x |ref| against {math.floor(allowed)} "
                  f"allowed"),)


_REL_RMS = Headline("rel RMS err", lambda m: m.rel_rms_err,
                    lambda tol: (tol.max_rel_rms, f"rel RMS err <= {tol.max_rel_rms:g}"))
# The statistics of |err| bound |err| by atol + rtol x max|ref|: rtol on the scale-relative axis,
# the atol part not drawn.
_MAX_REL = Headline("max |err| / max |ref|", lambda m: m.max_rel_err,
                    lambda tol: (tol.rtol, f"rtol {tol.rtol:g} (+ atol {tol.atol:g})"))


def _abs_err(name: str, value: Callable[[OutputMetrics], float], help: str = "",
             label: Callable[[Settings], str] | None = None,
             settings: tuple[str, ...] = ()) -> ErrorStatistic:
    """A statistic of |err| bounded like the max: at most atol + rtol x max|ref|, with the cosine at
    least ``min_cosine``."""
    def named(tol: Settings) -> str:
        return label(tol) if label is not None else name

    def checks(m: OutputMetrics, tol: Settings) -> tuple[Check, ...]:
        measured = value(m)
        bound = tol.atol + tol.rtol * m.ref_max_abs
        return (
            Check(measured, bound, measured <= bound,
                  f"{named(tol)} abs err {number(measured)} > {number(bound)} (atol {tol.atol:g} "
                  f"+ rtol {tol.rtol:g} x max|ref| {number(m.ref_max_abs)})",
                  f"{named(tol)} abs err {number(measured)} against {number(bound)}"),
            Check(m.cosine, tol.min_cosine, m.cosine >= tol.min_cosine - COSINE_SLACK,
                  f"cosine {cosine_text(m.cosine, tol.min_cosine)} < {tol.min_cosine:g}",
                  f"cosine {cosine_text(m.cosine)} against {tol.min_cosine:g}", at_least=True),
        )

    return ErrorStatistic(
        name, help, ("atol", "rtol", "min_cosine", *settings),
        lambda tol: (f"{named(tol)} |err| <= atol {tol.atol:g} + rtol {tol.rtol:g} x max|ref|, cosine >= "
                     f"{tol.min_cosine:g}"),
        checks, _MAX_REL, label=label)


STATISTICS: tuple[ErrorStatistic, ...] = (
    ErrorStatistic(
        "rms", "default: relative RMS error over the output and over every slice of whole rows, tells FP16 "
               "breakage from rounding noise",
        ("atol", "max_rel_rms", "max_slice_rel_rms"),
        lambda tol: f"rel RMS err <= {tol.max_rel_rms:g}, every slice <= {tol.max_slice_rel_rms:g}",
        _rms_checks, _REL_RMS, atol_passes=True),
    _abs_err("max", lambda m: m.max_abs_err,
             "max|err| <= atol + rtol x max|ref| and cosine >= --min-cosine, the criterion before rms"),
    _abs_err("mean", lambda m: m.mean_abs_err),
    _abs_err("median", lambda m: m.p50_abs_err),
    _abs_err("quantile", lambda m: m.quantile_abs_err, "that statistic of |err| in place of the max",
             label=lambda tol: f"p{100 * tol.error_quantile:g}", settings=("error_quantile",)),
    ErrorStatistic(
        "elemwise", "elements outside atol + rtol x |ref|, at most --max-outside-fraction of them",
        ("atol", "rtol", "max_outside_fraction"),
        lambda tol: (f"at most {tol.max_outside_fraction:g} of the elements outside atol {tol.atol:g} + rtol "
                     f"{tol.rtol:g} x |ref|"),
        _elemwise_checks, _MAX_REL),
)
ERROR_STATS = tuple(s.name for s in STATISTICS)
_BY_NAME = {s.name: s for s in STATISTICS}


def statistic(tol: Settings) -> ErrorStatistic:
    """The row of ``tol``'s ``error_stat``."""
    return _BY_NAME[tol.error_stat]


def stat_name(tol: Settings) -> str:
    """The statistic's name in reports ("p99" for the 0.99 quantile)."""
    row = statistic(tol)
    return row.label(tol) if row.label is not None else row.name


def help_text() -> str:
    """``--error-stat``'s list of statistics, each with its phrase."""
    return ", ".join(f"{s.name} ({s.help})" if s.help else s.name for s in STATISTICS)
