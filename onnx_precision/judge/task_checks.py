"""Task-aware checks of one output, for users who know what it means: classifier logits (top-k
agreement) and maps that are thresholded downstream (IoU of the thresholded map).

A statistic says how far FP16 moved the numbers; these say whether the decision the application
takes from them changed. They are reported beside the statistics and gate the output when asked
for (:class:`.settings.Tolerance` ``top_k`` / ``threshold``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOP_K, THRESHOLD = "top_k", "threshold"


@dataclass(frozen=True)
class TaskResult:
    """One task check of one output.

    ``top_k``: rows are the vectors along the last axis; ``agreement`` is the share of rows whose
    FP32 top-1 class is among the candidate's top ``k`` (``disagreeing`` rows are not),
    ``top1_agreement`` the share whose argmax is the same.
    ``threshold``: ``agreement`` is the IoU of ``{x > threshold}`` (1 when both sets are empty),
    ``top1_agreement`` the share of elements on the same side, ``disagreeing`` the elements that
    crossed the threshold.
    """

    kind: str
    parameter: float  # k, or the threshold
    agreement: float
    top1_agreement: float
    disagreeing: int
    total: int  # rows (top_k) or elements (threshold)
    minimum: float
    passed: bool

    @property
    def label(self) -> str:
        return f"top-{int(self.parameter)} agreement" if self.kind == TOP_K else f"IoU at {self.parameter:g}"

    @property
    def failure(self) -> str:
        return f"{self.label} {self.agreement:.6g} < {self.minimum:g}"

    def summary(self) -> str:
        if self.kind == TOP_K:
            return (f"{self.label} {self.agreement:.4g} (top-1 {self.top1_agreement:.4g}, "
                    f"{self.disagreeing}/{self.total} rows differ)")
        return f"{self.label} {self.agreement:.4g} ({self.disagreeing}/{self.total} elements cross it)"

    def to_json(self) -> dict:
        return {"kind": self.kind, "parameter": self.parameter, "agreement": self.agreement,
                "top1_agreement": self.top1_agreement, "disagreeing": self.disagreeing, "total": self.total,
                "minimum": self.minimum, "passed": self.passed}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> TaskResult:
        return TaskResult(str(data["kind"]), float(data["parameter"]), float(data["agreement"]),
                          float(data["top1_agreement"]), int(data["disagreeing"]), int(data["total"]),
                          float(data["minimum"]), bool(data["passed"]))


def top_k(ref: np.ndarray, cand: np.ndarray, k: int, minimum: float) -> TaskResult:
    """Top-k agreement along the last axis (a NaN in the candidate ranks last)."""
    width = ref.shape[-1] if ref.ndim else 1
    r = ref.reshape(-1, width)
    c = np.nan_to_num(cand.reshape(-1, width).astype(np.float64), nan=-np.inf)
    ref_top = np.argmax(r, axis=1)
    # The rank of FP32's top-1 class among the candidate's values, counting ties against it: a
    # row that collapsed to one value ranks it last, not first.
    value = c[np.arange(len(c)), ref_top]
    rank = np.count_nonzero(c >= value[:, None], axis=1) - 1
    in_top_k = rank < k
    same_top1 = rank == 0
    rows = len(r)
    agreement = float(in_top_k.mean()) if rows else 1.0
    return TaskResult(TOP_K, float(k), agreement, float(same_top1.mean()) if rows else 1.0,
                      int(rows - np.count_nonzero(in_top_k)), rows, minimum, agreement >= minimum)


def threshold(ref: np.ndarray, cand: np.ndarray, level: float, minimum: float) -> TaskResult:
    """Agreement of ``x > level`` between FP32 and the candidate (NaN is below any threshold)."""
    r, c = ref > level, cand > level
    union = int(np.count_nonzero(r | c))
    iou = float(np.count_nonzero(r & c)) / union if union else 1.0
    flipped = int(np.count_nonzero(r != c))
    size = r.size
    return TaskResult(THRESHOLD, float(level), iou, 1.0 - flipped / size if size else 1.0, flipped, size,
                      minimum, iou >= minimum)


def merge(results: Sequence[TaskResult]) -> TaskResult:
    """Several samples' results of one check: the worst agreement, the disagreements summed."""
    first = results[0]
    agreement = min(r.agreement for r in results)
    return TaskResult(first.kind, first.parameter, agreement, min(r.top1_agreement for r in results),
                      sum(r.disagreeing for r in results), sum(r.total for r in results), first.minimum,
                      all(r.passed for r in results))
