"""Output comparison: scale-relative tolerance, cosine floor, non-finite, exact non-float, samples."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_precision.compare import Tolerance, compare_array, compare_outputs, compare_samples

TOL = Tolerance()
REF = np.linspace(-4.0, 4.0, 64, dtype=np.float32)  # max |ref| = 4, crosses zero


def test_identical_outputs_pass_with_zero_error():
    m = compare_array("y", REF, REF.copy(), TOL)
    assert (m.max_abs_err, m.max_rel_err, m.new_nonfinite, m.passed) == (0.0, 0.0, 0, True)
    assert m.cosine == pytest.approx(1.0, abs=1e-12)


def test_error_is_judged_against_the_output_magnitude_not_per_element():
    cand = REF.copy()
    near_zero = int(np.argmin(np.abs(REF)))
    cand[near_zero] += 0.03  # 7.5e-3 of max |ref| = 4: fine, though huge relative to that element
    m = compare_array("y", REF, cand, TOL)
    assert m.passed
    assert m.max_abs_err == pytest.approx(0.03, rel=1e-5)
    assert m.max_rel_err == pytest.approx(0.0075, rel=1e-4)
    cand[near_zero] += 0.02  # 0.05 > atol + rtol * 4 = 0.041
    assert not compare_array("y", REF, cand, TOL).passed


def test_fp16_rounding_alone_passes_the_defaults():
    cand = REF.astype(np.float16).astype(np.float32) * np.float32(1 + 2 ** -11)
    assert compare_array("y", REF, cand, TOL).passed


def test_collapsed_output_fails_on_cosine():
    m = compare_array("y", np.full(8, 1e-4, np.float32), np.zeros(8, np.float32), TOL)
    assert m.cosine == 0.0 and not m.passed  # the abs error 1e-4 alone would pass atol


def test_nonfinite_where_fp32_is_finite_fails_and_fp32_nan_is_ignored():
    cand = REF.copy()
    cand[[3, 9]] = [np.inf, np.nan]
    m = compare_array("y", REF, cand, TOL)
    assert m.new_nonfinite == 2 and not m.passed

    ref = REF.copy()
    ref[5] = np.nan  # the FP32 model's own NaN: not FP16's fault, left out of the metrics
    cand = REF.copy()
    cand[5] = np.nan
    m = compare_array("y", ref, cand, TOL)
    assert m.passed and m.new_nonfinite == 0 and m.max_abs_err == 0.0


def test_non_float_outputs_must_match_exactly():
    idx = np.array([1, 2, 3], np.int64)
    assert compare_array("i", idx, idx.copy(), TOL).passed
    m = compare_array("i", idx, np.array([1, 2, 4], np.int64), TOL)
    assert not m.passed and m.max_abs_err == 1.0
    assert not compare_array("y", REF, REF[:10], TOL).passed  # shape mismatch


def test_compare_outputs_names_every_output_and_fails_a_missing_one():
    c = compare_outputs({"a": REF, "b": REF}, {"a": REF}, TOL, "emulate")
    assert [m.name for m in c.outputs] == ["a", "b"]
    assert c.metrics("a").passed and not c.metrics("b").passed and not c.passed
    assert c.oracle == "emulate"


def test_samples_worst_case_and_every_sample_must_pass():
    good = {"y": REF}
    bad = {"y": REF + np.float32(0.5)}
    c = compare_samples([good, good], [good, bad], TOL, "emulate")
    assert not c.passed and c.samples == 2
    assert c.outputs[0].max_abs_err == pytest.approx(0.5)
    assert compare_samples([good, good], [good, good], TOL, "reference").passed
    with pytest.raises(ValueError):
        compare_samples([good], [good, good], TOL, "emulate")
