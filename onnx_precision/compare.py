"""Comparing outputs against the FP32 reference: metrics and a pass/fail under a tolerance.

An output passes when all three hold on every sample:

* ``max |cand - ref| <= atol + rtol * max |ref|``: the error is judged against the output's
  magnitude, not element by element. FP16 stores about 11 significant bits, so every value carries
  a relative rounding error up to 2**-11 (4.9e-4) of *its own* size, and errors that flow through
  sums land on elements near zero: an element-wise relative test fails on outputs that are fine
  (a LayerNorm output crossing zero), while a scale-relative one does not. ``rtol=1e-2`` leaves
  room for roundings accumulating through a network: a 12-layer BERT-style encoder that is fine
  in FP16 measures 3-4e-3 (scripts/bench_oracle.py's transformer without outliers, all nodes
  FP16), one whose activations overflow measures > 1. ``atol=1e-3`` covers outputs whose
  magnitude is itself near zero.
* cosine similarity to the FP32 output ``>= min_cosine`` (0.999): a systematic distortion (a
  collapsed normalisation, saturated softmax) lowers it even when the largest error is small
  (the fine FP16 encoder above: 0.999997; the overflowing one: 0.11).
* no NaN/Inf where FP32 is finite (``new_nonfinite == 0``): overflow is never within tolerance.
  Where FP32 itself is non-finite the FP32 model is at fault, not FP16; those elements are left
  out of every metric.

Non-float outputs (indices, masks) must match exactly. Over several samples each metric is the
worst case, and an output passes only if it passes on every sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .format import json_float

# Outputs are float32: a cosine that should be 1 lands an ulp or two below it (0.99999994), so a
# minimum cosine is met within a few float32 ulps (--min-cosine 1 can pass).
COSINE_SLACK = 4 * float(np.finfo(np.float32).epsneg)


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-3
    rtol: float = 1e-2
    min_cosine: float = 0.999


@dataclass(frozen=True)
class OutputMetrics:
    """One output's comparison. ``max_rel_err`` is ``max_abs_err / max |ref|`` (scale-relative)."""

    name: str
    max_abs_err: float
    max_rel_err: float
    cosine: float
    new_nonfinite: int  # NaN/Inf in the candidate where the reference is finite
    passed: bool

    def to_json(self) -> dict:
        return {"name": self.name, "max_abs_err": json_float(self.max_abs_err),
                "max_rel_err": json_float(self.max_rel_err), "cosine": json_float(self.cosine),
                "new_nonfinite": self.new_nonfinite, "passed": self.passed}


@dataclass(frozen=True)
class Comparison:
    outputs: tuple[OutputMetrics, ...]
    passed: bool
    oracle: str  # which oracle produced the candidate: "emulate", "native:<provider>", "reference"
    samples: int = 1

    def metrics(self, name: str) -> OutputMetrics:
        for m in self.outputs:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict:
        return {"oracle": self.oracle, "passed": self.passed, "samples": self.samples,
                "outputs": [m.to_json() for m in self.outputs]}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity in float64; two all-zero vectors are identical (1.0), one is not (0.0)."""
    a64 = a.astype(np.float64, copy=False).ravel()
    b64 = b.astype(np.float64, copy=False).ravel()
    na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a64, b64) / (na * nb))


def _is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating)


def compare_array(name: str, ref: np.ndarray, cand: np.ndarray, tol: Tolerance) -> OutputMetrics:
    ref, cand = np.asarray(ref), np.asarray(cand)
    if ref.shape != cand.shape:
        return OutputMetrics(name, float("inf"), float("inf"), 0.0, 0, False)
    if not (_is_float(ref) and _is_float(cand)):
        return _compare_exact(name, ref, cand)
    finite = np.isfinite(ref)
    all_finite = bool(finite.all())
    r = ref if all_finite else ref[finite]
    c = cand if all_finite else cand[finite]
    new_nonfinite = int(np.count_nonzero(~np.isfinite(c)))
    if new_nonfinite:
        # Keep the magnitudes meaningful: the non-finite elements are already counted.
        ok = np.isfinite(c)
        r_ok, c_ok = r[ok], c[ok]
    else:
        r_ok, c_ok = r, c
    err = np.abs(c_ok.astype(np.float64) - r_ok.astype(np.float64))
    max_abs = float(err.max()) if err.size else 0.0
    scale = float(np.abs(r).max()) if r.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    cos = cosine(r_ok, c_ok) if not new_nonfinite else 0.0
    passed = (new_nonfinite == 0 and max_abs <= tol.atol + tol.rtol * scale
              and cos >= tol.min_cosine - COSINE_SLACK)
    return OutputMetrics(name, max_abs, max_rel, cos, new_nonfinite, bool(passed))


def _compare_exact(name: str, ref: np.ndarray, cand: np.ndarray) -> OutputMetrics:
    equal = bool(np.array_equal(ref, cand))
    if equal:
        return OutputMetrics(name, 0.0, 0.0, 1.0, 0, True)
    try:
        diff = float(np.abs(ref.astype(np.float64) - cand.astype(np.float64)).max())
    except (TypeError, ValueError):
        diff = float("inf")
    return OutputMetrics(name, diff, float("inf"), 0.0, 0, False)


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    tol: Tolerance, oracle: str) -> Comparison:
    """Compare one sample's outputs (every output of ``reference``; a missing one fails)."""
    metrics = []
    for name, ref in reference.items():
        if name not in candidate:
            metrics.append(OutputMetrics(name, float("inf"), float("inf"), 0.0, 0, False))
            continue
        metrics.append(compare_array(name, ref, candidate[name], tol))
    return Comparison(tuple(metrics), all(m.passed for m in metrics), oracle, 1)


def compare_samples(refs: Sequence[Mapping[str, np.ndarray]], cands: Sequence[Mapping[str, np.ndarray]],
                    tol: Tolerance, oracle: str) -> Comparison:
    """Worst case over samples; passes only if every sample passes."""
    if len(refs) != len(cands):
        raise ValueError(f"compare_samples: {len(refs)} reference samples but {len(cands)} candidates")
    per_sample = [compare_outputs(r, c, tol, oracle) for r, c in zip(refs, cands)]
    return merge_comparisons(per_sample, oracle)


def merge_comparisons(per_sample: Sequence[Comparison], oracle: str) -> Comparison:
    """The worst case of several single-sample comparisons of the same outputs."""
    if not per_sample:
        return Comparison((), True, oracle, 0)
    merged = []
    for i, first in enumerate(per_sample[0].outputs):
        group = [c.outputs[i] for c in per_sample]
        merged.append(OutputMetrics(
            first.name,
            max(m.max_abs_err for m in group),
            max(m.max_rel_err for m in group),
            min(m.cosine for m in group),
            sum(m.new_nonfinite for m in group),
            all(m.passed for m in group)))
    return Comparison(tuple(merged), all(c.passed for c in per_sample), oracle, len(per_sample))
