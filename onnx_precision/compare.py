"""Comparing outputs against the FP32 reference: metrics and a pass/fail under a tolerance."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-3
    rtol: float = 1e-2
    min_cosine: float = 0.999
