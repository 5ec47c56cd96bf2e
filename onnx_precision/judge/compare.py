"""Comparing outputs against the FP32 reference: error statistics and a verdict per output.

:func:`compare_array` computes every statistic of one output in one vectorised pass (max, mean and
quantiles of ``|err|``, relative RMS error over the output and over its slices, cosine, elements
outside ``atol + rtol·|ref|``, new NaN/Inf) and asks :func:`.acceptance.judged` whether it
passes; :mod:`.acceptance` says why the default check is what it is.

Where FP32 itself is non-finite the FP32 model is at fault, not FP16: those elements are left out
of every statistic and counted in ``fp32_nonfinite``. Non-float outputs (indices, masks) must match
exactly. Over several samples each statistic is the worst case (counts are summed) and an output
passes only if it passes on every sample, and, where its tolerance holds its rms bounds over the samples
together (``Tolerance.sample_ceiling``), only if the root mean square over them does
(:func:`.acceptance.pooled`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Union

import ml_dtypes
import numpy as np

from . import task_checks
from .acceptance import judged, pooled
from .metrics import Comparison, OutputMetrics
from .settings import SLICE_MIN_ELEMENTS, Tolerance
from .task_checks import TaskResult


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity in float64; two all-zero vectors are identical (1.0), one is not (0.0)."""
    a64 = a.astype(np.float64, copy=False).ravel()
    b64 = b.astype(np.float64, copy=False).ravel()
    na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a64, b64) / (na * nb))


def _is_float(a: np.ndarray) -> bool:
    # bfloat16 (an ml_dtypes type, as onnx.reference returns a BF16 output) is no numpy floating type
    return np.issubdtype(a.dtype, np.floating) or a.dtype == ml_dtypes.bfloat16


def compare_array(name: str, ref: np.ndarray, cand: np.ndarray, tol: Tolerance) -> OutputMetrics:
    """Every statistic of one output and its verdict under ``tol`` (its per-output settings).

    One pass of vectorised numpy over the output viewed as rows of its last axis: elementwise work
    in float32 (the difference of two float32 values near each other is exact), every sum
    accumulated in float64, the quantiles partitioned in place."""
    tol = tol.for_output(name)
    ref, cand = np.asarray(ref), np.asarray(cand)
    if ref.shape != cand.shape:  # no element pairs with one of FP32's: each is out of bound, as NaN is
        unpaired = np.full(ref.shape, np.nan, np.float32)
        return replace(_failed(name, f"shape {list(cand.shape)} is not FP32's {list(ref.shape)}"),
                       outside_bound=int(ref.size), elements=int(ref.size),
                       tasks=_tasks(ref, unpaired, tol) if _is_float(ref) else ())
    if not (_is_float(ref) and _is_float(cand)):
        return _compare_exact(name, ref, cand)
    width = _row_width(ref.shape)
    dtype = np.result_type(ref.dtype, cand.dtype, np.float32)
    r = ref.astype(dtype).reshape(-1, width)  # copies: edited in place below
    c = cand.astype(dtype).reshape(-1, width)
    ref_ok = np.isfinite(r)
    cand_ok = np.isfinite(c)
    fp32_nonfinite = int(r.size - np.count_nonzero(ref_ok))
    new_nonfinite = int(np.count_nonzero(ref_ok & ~cand_ok))
    compared = None
    if fp32_nonfinite or new_nonfinite:
        # Left-out elements become 0 in both, so sums over the output and its slices skip them.
        compared = ref_ok & cand_ok
        r[~compared] = 0.0
        c[~compared] = 0.0
    err = c - r
    row_err = np.einsum("ij,ij->i", err, err, dtype=np.float64)
    row_ref = np.einsum("ij,ij->i", r, r, dtype=np.float64)
    sum_cand = float(np.einsum("ij,ij->", c, c, dtype=np.float64))
    row_elements = np.full(len(r), width) if compared is None else np.count_nonzero(compared, axis=1)
    slice_rel, slice_at, slice_size, slices = _worst_slice(row_err, row_ref, row_elements, ref.shape)
    sum_err, sum_ref = float(row_err.sum()), float(row_ref.sum())
    cand_lo, cand_hi = _extremes(c, compared)
    ref_lo, ref_hi = _extremes(r, compared)
    np.abs(err, out=err)
    bound = np.abs(r, out=r)
    elements = int(r.size) - fp32_nonfinite
    compared_count = elements - new_nonfinite
    max_abs = float(err.max()) if err.size else 0.0
    scale = float(bound.max()) if bound.size else 0.0
    mean_abs = float(err.sum(dtype=np.float64)) / compared_count if compared_count else 0.0
    bound *= tol.rtol
    outside_rtol = int(np.count_nonzero(err > bound)) + new_nonfinite
    bound += tol.atol
    outside = int(np.count_nonzero(err > bound)) + new_nonfinite
    q = tol.error_quantile
    errors = err.ravel() if compared is None else err[compared]
    p50, p99, p999, pq = (np.quantile(errors, [0.5, 0.99, 0.999, q], overwrite_input=True) if errors.size
                          else np.zeros(4))
    metrics = OutputMetrics(
        name,
        max_abs,
        _ratio(max_abs, scale),
        _cosine_of_sums(sum_ref, sum_cand, sum_err) if not new_nonfinite else 0.0,
        new_nonfinite,
        False,
        rel_rms_err=_ratio(np.sqrt(sum_err), np.sqrt(sum_ref)),
        worst_slice_rel_rms=slice_rel,
        worst_slice_at=slice_at,
        worst_slice_size=slice_size,
        slices=slices,
        mean_abs_err=mean_abs,
        p50_abs_err=float(p50),
        p99_abs_err=float(p99),
        p999_abs_err=float(p999),
        quantile=q,
        quantile_abs_err=float(pq),
        ref_max_abs=scale,
        outside_bound=outside,
        outside_rtol=outside_rtol,
        cand_max_abs=max(abs(cand_lo), abs(cand_hi)),
        flat=cand_lo == cand_hi and ref_lo != ref_hi,
        elements=elements,
        fp32_nonfinite=fp32_nonfinite,
        tasks=_tasks(ref, cand, tol),
    )
    return judged(metrics, tol)


def _extremes(a: np.ndarray, compared: np.ndarray | None) -> tuple[float, float]:
    """The smallest and largest of ``a`` over the elements compared (all where ``compared`` is None)."""
    values = a if compared is None else a[compared]
    return (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)


def _row_width(shape: tuple[int, ...]) -> int:
    """The length of a row: the last axis longer than 1 (1 for a scalar or all-1 shape)."""
    return ([d for d in shape if d > 1] or [1])[-1]


def _cosine_of_sums(sum_ref: float, sum_cand: float, sum_err: float) -> float:
    """Cosine from ‖r‖², ‖c‖² and ‖c - r‖² (r·c = (‖r‖² + ‖c‖² - ‖c - r‖²) / 2, exact enough in
    float64 when c is close to r, where the cosine matters); all-zero pairs as :func:`cosine`."""
    if sum_ref == 0.0 or sum_cand == 0.0:
        return 1.0 if sum_ref == sum_cand else 0.0
    dot = (sum_ref + sum_cand - sum_err) / 2.0
    return float(min(1.0, max(-1.0, dot / np.sqrt(sum_ref * sum_cand))))


def _ratio(num: float, den: float) -> float:
    if den > 0:
        return float(num / den)
    return 0.0 if num == 0 else float("inf")


def _worst_slice(
    row_err: np.ndarray, row_ref: np.ndarray, row_elements: np.ndarray, shape: tuple[int, ...]
) -> tuple[float, tuple[int, ...], int, int]:
    """The slice with the largest relative RMS error, from each row's sums of squared error and
    reference and its elements compared: (error, index of its first element, its elements, the
    number of slices). Slices are consecutive whole rows, at least SLICE_MIN_ELEMENTS elements
    each (the last rows spread over the others); each slice's reference mean square is floored at
    the whole output's."""
    rows = len(row_err)
    if rows == 0:
        return 0.0, (), 0, 0
    width = _row_width(shape)
    count = max(1, rows // max(1, -(-SLICE_MIN_ELEMENTS // width)))
    starts = (np.arange(count) * rows) // count
    err = np.add.reduceat(row_err, starts)
    ref = np.add.reduceat(row_ref, starts)
    elements = np.add.reduceat(row_elements, starts)
    total = int(elements.sum())
    floor = np.maximum(ref, (float(row_ref.sum()) / total if total else 0.0) * elements)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(floor > 0, np.sqrt(err / floor), np.where(err > 0, np.inf, 0.0))
    worst = int(np.argmax(rel))
    first = tuple(int(i) for i in np.unravel_index(int(starts[worst]) * width, shape)) if shape else ()
    size = int((np.append(starts, rows)[worst + 1] - starts[worst]) * width)
    return float(rel[worst]), first, size, count


def _tasks(ref: np.ndarray, cand: np.ndarray, tol: Tolerance) -> tuple[TaskResult, ...]:
    out = []
    if tol.top_k:
        out.append(task_checks.top_k(ref, cand, tol.top_k, tol.min_top_k_agreement))
    if tol.threshold is not None:
        out.append(task_checks.threshold(ref, cand, tol.threshold, tol.min_iou))
    return tuple(out)


def _failed(name: str, why: str) -> OutputMetrics:
    inf = float("inf")
    return OutputMetrics(
        name, inf, inf, 0.0, 0, False, rel_rms_err=inf, worst_slice_rel_rms=inf, mean_abs_err=inf,
        p50_abs_err=inf, p99_abs_err=inf, p999_abs_err=inf, quantile_abs_err=inf, failures=(why,)
    )


def _compare_exact(name: str, ref: np.ndarray, cand: np.ndarray) -> OutputMetrics:
    if np.array_equal(ref, cand):
        return OutputMetrics(name, 0.0, 0.0, 1.0, 0, True, elements=int(ref.size), passed_by="exact match")
    try:
        diff = float(np.abs(ref.astype(np.float64) - cand.astype(np.float64)).max())
    except (TypeError, ValueError):
        diff = float("inf")
    differ = int(np.count_nonzero(ref != cand))
    return OutputMetrics(
        name,
        diff,
        float("inf"),
        0.0,
        0,
        False,
        rel_rms_err=float("inf"),
        worst_slice_rel_rms=float("inf"),
        outside_bound=differ,
        elements=int(ref.size),
        failures=(f"{differ} of {ref.size} elements differ (non-float outputs must match exactly)",),
    )


def compare_outputs(
    reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], tol: Tolerance, oracle: str
) -> Comparison:
    """Compare one sample's outputs (every output of ``reference``; a missing one fails), then ask
    the tolerance's ``accept``, if any."""
    metrics = []
    for name, ref in reference.items():
        if name not in candidate:
            metrics.append(_failed(name, "missing from the candidate's outputs"))
            continue
        metrics.append(compare_array(name, ref, candidate[name], tol))
    why = tol.accept(reference, candidate) if tol.accept is not None else ""
    if why:  # the caller's judgement is of the outputs together: each fails with its words
        metrics = [replace(m, passed=False, passed_by="", room=float("inf"), room_clause="",
                           failures=(*m.failures, why)) for m in metrics]
    return Comparison(tuple(metrics), all(m.passed for m in metrics), oracle, 1)


def not_run(reference: Mapping[str, np.ndarray], why: str, oracle: str) -> Comparison:
    """A candidate whose run did not complete on one sample (``why``), against that sample's
    ``reference``: every output fails for that reason, not compared."""
    return Comparison(tuple(replace(_failed(name, why), not_compared=(0,)) for name in reference), False,
                      oracle, 1)


def shapes_key(feed: Mapping[str, np.ndarray]) -> str:
    """A feed's input shapes, as reports name a group of samples: "x:1x3x256x256, mask:1x256"."""
    return ", ".join(f"{name}:{'x'.join(str(d) for d in np.shape(v))}" for name, v in sorted(feed.items()))


Outputs = Sequence[Mapping[str, np.ndarray]]  # one mapping per sample
# one tolerance for every sample, or one per sample (a quantized model's gate: each sample's bound is
# relative to its own quantization error, and the samples are judged together,
# :mod:`onnx_precision.quant_reference`)
Tolerances = Union[Tolerance, Sequence[Tolerance]]


def each_sample(tol: Tolerances, count: int) -> tuple[Tolerance, ...]:
    """The tolerance of each of ``count`` samples."""
    if isinstance(tol, Tolerance):
        return (tol,) * count
    if len(tol) != count:
        raise ValueError(f"{len(tol)} tolerances for {count} samples")
    return tuple(tol)


def compare_by_shape(feeds: Outputs, references: Outputs, candidates: Outputs, tol: Tolerances,
                     oracle: str) -> Comparison:
    """:func:`compare_samples`, and, where the samples come in several input shapes, the comparison
    of each shape's samples (``by_shape``): the worst error of a model verified at 256 and 1024 is
    told per size."""
    per_sample = [compare_outputs(r, c, t, oracle)
                  for r, c, t in zip(references, candidates, each_sample(tol, len(references)))]
    whole = merge_comparisons(per_sample, oracle)
    groups: dict[str, list[int]] = {}
    for i, feed in enumerate(feeds):
        groups.setdefault(shapes_key(feed), []).append(i)
    if len(groups) < 2:
        return whole
    by_shape = tuple((key, merge_comparisons([per_sample[i] for i in idx], oracle))
                     for key, idx in groups.items())
    return replace(whole, by_shape=by_shape)


def compare_samples(
    refs: Sequence[Mapping[str, np.ndarray]],
    cands: Sequence[Mapping[str, np.ndarray]],
    tol: Tolerances,
    oracle: str,
) -> Comparison:
    """Worst case over samples; passes only if every sample passes."""
    if len(refs) != len(cands):
        raise ValueError(f"compare_samples: {len(refs)} reference samples but {len(cands)} candidates")
    per_sample = [compare_outputs(r, c, t, oracle)
                  for r, c, t in zip(refs, cands, each_sample(tol, len(refs)))]
    return merge_comparisons(per_sample, oracle)


def merge_comparisons(per_sample: Sequence[Comparison], oracle: str) -> Comparison:
    """The worst case of several single-sample comparisons of the same outputs."""
    if not per_sample:
        return Comparison((), True, oracle, 0)
    merged = [_merge_output([c.outputs[i] for c in per_sample]) for i in range(len(per_sample[0].outputs))]
    return Comparison(tuple(merged), all(c.passed for c in per_sample) and all(m.passed for m in merged),
                      oracle, len(per_sample), per_sample=tuple(per_sample))


def _merge_output(group: Sequence[OutputMetrics]) -> OutputMetrics:
    """The worst case of one output's metrics on several samples, judged by the bounds they hold together
    where they do (:func:`.acceptance.pooled`)."""
    return pooled(group[0] if len(group) == 1 else _worst(group), group)


def _worst(group: Sequence[OutputMetrics]) -> OutputMetrics:
    worst_slice = max(group, key=lambda m: _sortable(m.worst_slice_rel_rms))
    thinnest = min(group, key=lambda m: m.room)  # the sample nearest a bound
    failures = [f"sample {i}: {why}" for i, m in enumerate(group) for why in m.failures]
    tasks = tuple(task_checks.merge([m.tasks[j] for m in group]) for j in range(len(group[0].tasks)))
    return OutputMetrics(
        group[0].name,
        max(m.max_abs_err for m in group),
        max(m.max_rel_err for m in group),
        min(m.cosine for m in group),
        sum(m.new_nonfinite for m in group),
        all(m.passed for m in group),
        rel_rms_err=max(m.rel_rms_err for m in group),
        worst_slice_rel_rms=worst_slice.worst_slice_rel_rms,
        worst_slice_at=worst_slice.worst_slice_at,
        worst_slice_size=worst_slice.worst_slice_size,
        slices=sum(m.slices for m in group),
        mean_abs_err=max(m.mean_abs_err for m in group),
        p50_abs_err=max(m.p50_abs_err for m in group),
        p99_abs_err=max(m.p99_abs_err for m in group),
        p999_abs_err=max(m.p999_abs_err for m in group),
        quantile=group[0].quantile,
        quantile_abs_err=max(m.quantile_abs_err for m in group),
        ref_max_abs=max(m.ref_max_abs for m in group),
        outside_bound=sum(m.outside_bound for m in group),
        outside_rtol=sum(m.outside_rtol for m in group),
        cand_max_abs=max(m.cand_max_abs for m in group),
        flat=any(m.flat for m in group),
        elements=sum(m.elements for m in group),
        fp32_nonfinite=sum(m.fp32_nonfinite for m in group),
        not_compared=tuple(i for i, m in enumerate(group) if m.not_compared),
        failures=tuple(failures),
        tasks=tasks,
        passed_by="" if failures else " / ".join(dict.fromkeys(m.passed_by for m in group if m.passed_by)),
        room=float("inf") if failures else thinnest.room,
        room_clause="" if failures else thinnest.room_clause,
    )


def _sortable(x: float) -> float:
    return float("inf") if np.isnan(x) else x
