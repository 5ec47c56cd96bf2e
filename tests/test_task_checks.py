"""Task-aware checks: top-k agreement of logits and IoU of a thresholded map, reported and gating."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_precision.judge import Tolerance, compare_array, compare_samples, task_checks

LOGITS = np.array([[5.0, 4.9, 1.0, 0.0],   # a near tie between classes 0 and 1
                   [0.0, 1.0, 9.0, 2.0],
                   [3.0, 0.0, 0.0, 0.0],
                   [1.0, 2.0, 3.0, 4.0]])


def test_top_k_agreement_counts_rows_whose_fp32_top1_stays_in_the_candidates_top_k():
    cand = LOGITS.copy()
    cand[0, 1] = 5.1  # the near tie flips: top-1 differs, top-2 still holds it
    cand[3] = [4.0, 3.0, 2.0, 1.0]  # reversed: FP32's class 3 is now last
    top1 = task_checks.top_k(LOGITS, cand, 1, 1.0)
    assert (top1.agreement, top1.disagreeing, top1.total, top1.passed) == (0.5, 2, 4, False)
    top2 = task_checks.top_k(LOGITS, cand, 2, 0.75)
    assert (top2.agreement, top2.top1_agreement, top2.disagreeing, top2.passed) == (0.75, 0.5, 1, True)
    assert top2.summary() == "top-2 agreement 0.75 (top-1 0.5, 1/4 rows differ)"


def test_a_collapsed_row_or_nan_ranks_fp32s_class_last():
    cand = LOGITS.copy()
    cand[1] = 0.0  # all tied: no class is on top
    cand[2, 0] = np.nan
    result = task_checks.top_k(LOGITS, cand, 3, 1.0)
    assert result.disagreeing == 2 and result.agreement == 0.5


def test_threshold_iou_and_flips():
    ref = np.array([0.1, 0.2, 0.6, 0.7, 0.9, 0.4])
    cand = np.array([0.1, 0.35, 0.6, 0.7, 0.9, 0.28])  # 0.2 -> 0.35 crosses 0.3; 0.4 -> 0.28 too
    result = task_checks.threshold(ref, cand, 0.3, 0.9)
    assert result.agreement == 0.6 and result.disagreeing == 2
    assert result.top1_agreement == pytest.approx(4 / 6)
    assert not result.passed and result.failure == "IoU at 0.3 0.6 < 0.9"
    empty = task_checks.threshold(ref, ref, 1.0, 0.99)
    assert empty.agreement == 1.0 and empty.passed  # nothing above 1 in either: they agree


def test_task_checks_gate_the_output_and_are_reported_beside_the_statistics():
    cand = LOGITS * 1.001
    cand[0, 1] = 5.1
    tol = Tolerance().with_output("logits", top_k=1)
    m = compare_array("logits", LOGITS, cand, tol)
    assert not m.passed and m.failures == ("top-1 agreement 0.75 < 1",)
    assert "top-1 agreement 0.75 (top-1 0.75, 1/4 rows differ)" in m.summary()
    assert compare_array("logits", LOGITS, cand, tol.with_output("logits", top_k=2)).passed
    assert compare_array("other", LOGITS, cand, tol).tasks == ()  # per output: not for 'other'


def test_samples_merge_to_the_worst_agreement():
    tol = Tolerance(threshold=0.5, min_iou=0.0)
    ref = {"y": np.array([0.6, 0.7, 0.2, 0.1])}
    c = compare_samples([ref, ref], [{"y": ref["y"].copy()}, {"y": np.array([0.6, 0.4, 0.2, 0.1])}], tol,
                        "emulate")
    (merged,) = c.outputs[0].tasks
    assert merged.agreement == 0.5 and merged.disagreeing == 1 and merged.total == 8
