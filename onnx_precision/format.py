"""Numbers for people and for JSON: one copy of each formatter the reports and commands share."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def number(x: float | None, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits; "inf"/"-inf"/"nan" as such, "-" for None."""
    if x is None:
        return "-"
    x = float(x)
    return f"{x:.{digits}g}" if math.isfinite(x) else str(x)


def percent(share: float) -> str:
    """A share (0 to 1) as a percentage to one decimal, or to the decimals that keep a share short of 100%
    (or above 0%) from reading as 100.0% (0.0%): 99.95%. Past four decimals a share that near says so
    ("> 99.9999%", "< 0.0001%"): the one spelling of a share ``convert`` and ``check`` print alike."""
    share = float(share) + 0.0  # -0.0 reads 0.0%
    digits = 1
    while digits < 4 and 0.0 < share < 1.0 and float(f"{100 * share:.{digits}f}") in (0.0, 100.0):
        digits += 1
    text = f"{100 * share:.{digits}f}"
    if 0.0 < share < 1.0 and float(text) in (0.0, 100.0):
        return f"< {0.1 ** digits:.{digits}f}%" if share < 0.5 else f"> {100 - 0.1 ** digits:.{digits}f}%"
    return f"{text}%"


def cosine_text(x: float, minimum: float | None = None) -> str:
    """Cosines live near 1: six decimals tell 0.999999 from 0.999. A cosine below ``minimum`` gets
    the digits it takes to print below it (0.99999994 against 1, never "1.000000")."""
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    digits = 6
    while minimum is not None and x < minimum and float(f"{x:.{digits}f}") >= minimum and digits < 17:
        digits += 1
    return f"{x:.{digits}f}"


def json_float(x: float) -> float | str:
    """``x`` as JSON can hold it: a float, or "inf"/"-inf"/"nan" (JSON has no non-finite numbers)."""
    return float(x) if np.isfinite(x) else str(float(x))


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float written as a string and numpy scalars made plain,
    recursively, so every JSON parser reads it."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return json_float(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
