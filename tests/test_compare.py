"""Output comparison: the statistics of one pass, the "max" check (the criterion before "rms"),
non-finite values, exact non-float outputs, samples and the JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from onnx_precision.judge import (
    Comparison,
    OutputMetrics,
    Tolerance,
    compare_array,
    compare_outputs,
    compare_samples,
)

TOL = Tolerance()
MAX = Tolerance(error_stat="max")
REF = np.linspace(-4.0, 4.0, 64, dtype=np.float32)  # max |ref| = 4, crosses zero


def test_identical_outputs_pass_with_zero_error():
    m = compare_array("y", REF, REF.copy(), TOL)
    assert (m.max_abs_err, m.max_rel_err, m.rel_rms_err, m.new_nonfinite, m.passed) == (0.0, 0.0, 0.0, 0,
                                                                                        True)
    assert m.cosine == pytest.approx(1.0, abs=1e-12)
    assert (m.outside_bound, m.elements, m.failures) == (0, 64, ())


def test_statistics_of_a_known_error():
    ref = np.ones(1000, np.float32)
    cand = ref.copy()
    cand[:10] += 0.5  # 1% of the elements off by 0.5, the rest exact
    m = compare_array("y", ref, cand, TOL)
    assert m.max_abs_err == 0.5 and m.max_rel_err == 0.5 and m.ref_max_abs == 1.0
    assert m.mean_abs_err == pytest.approx(0.005)
    assert m.p50_abs_err == 0.0 and m.p999_abs_err == pytest.approx(0.5)
    assert m.p99_abs_err == pytest.approx(0.005, abs=1e-9)  # numpy's linear interpolation at 0.99
    assert m.rel_rms_err == pytest.approx(np.sqrt(10 * 0.25 / 1000))  # 0.05
    assert m.outside_bound == 10 and m.outside_fraction == pytest.approx(0.01)  # bound: 1e-3 + 1e-2 * 1


def test_quantile_follows_the_tolerance():
    cand = REF + np.linspace(0.0, 1.0, 64, dtype=np.float32)
    m = compare_array("y", REF, cand, Tolerance(error_quantile=0.5))
    assert m.quantile == 0.5 and m.quantile_abs_err == pytest.approx(m.p50_abs_err)


def test_max_check_judges_the_error_against_the_output_magnitude_not_per_element():
    cand = REF.copy()
    near_zero = int(np.argmin(np.abs(REF)))
    cand[near_zero] += 0.03  # 7.5e-3 of max |ref| = 4: fine, though huge relative to that element
    m = compare_array("y", REF, cand, MAX)
    assert m.passed
    assert m.max_abs_err == pytest.approx(0.03, rel=1e-5)
    assert m.max_rel_err == pytest.approx(0.0075, rel=1e-4)
    cand[near_zero] += 0.02  # 0.05 > atol + rtol * 4 = 0.041
    m = compare_array("y", REF, cand, MAX)
    assert not m.passed
    assert m.failures == ("max abs err 0.05 > 0.041 (atol 0.001 + rtol 0.01 x max|ref| 4)",)


def test_fp16_rounding_alone_passes_the_defaults_and_the_max_check():
    cand = REF.astype(np.float16).astype(np.float32) * np.float32(1 + 2 ** -11)
    assert compare_array("y", REF, cand, TOL).passed
    assert compare_array("y", REF, cand, MAX).passed


def test_collapsed_output_fails_on_cosine_under_max_and_on_rel_rms_by_default():
    ref, cand = np.full(8, 1e-4, np.float32), np.zeros(8, np.float32)
    m = compare_array("y", ref, cand, MAX)
    assert m.cosine == 0.0 and not m.passed  # the abs error 1e-4 alone would pass atol
    assert m.failures == ("cosine 0.000000 < 0.999",)
    # Every error is within atol, but the signal is gone: atol passes no output that lost it (it passed)
    m = compare_array("y", ref, cand, TOL)
    assert not m.passed and m.failures[0] == ("signal lost: every element is 0 where FP32's reach 0.0001; "
                                              "atol 0.001 passes no output that lost its signal")
    assert not compare_array("y", ref, cand, Tolerance(atol=0.0)).passed
    # an output of ~1e-7 that FP16 rounds to its subnormal spacing (6e-8) keeps its signal: atol passes it
    tiny = np.linspace(1e-7, 5e-7, 64, dtype=np.float32)
    m = compare_array("y", tiny, tiny.astype(np.float16).astype(np.float32), TOL)
    assert m.rel_rms_err > 0.05 and m.passed_by == "all |err| <= atol 0.001"


def test_nonfinite_where_fp32_is_finite_fails_and_fp32_nan_is_left_out():
    cand = REF.copy()
    cand[[3, 9]] = [np.inf, np.nan]
    m = compare_array("y", REF, cand, TOL)
    assert m.new_nonfinite == 2 and not m.passed and m.failures == ("2 new NaN/Inf",)
    assert m.outside_bound == 2 and m.max_abs_err == 0.0  # the other elements are exact

    ref = REF.copy()
    ref[5] = np.nan  # the FP32 model's own NaN: not FP16's fault, left out of the metrics
    cand = REF.copy()
    cand[5] = np.nan
    m = compare_array("y", ref, cand, TOL)
    assert m.fp32_nonfinite == 1 and m.elements == 63 and m.max_abs_err == 0.0 and m.new_nonfinite == 0
    assert not m.passed and "FP32 output itself has 1 NaN/Inf" in m.failures[0]
    assert compare_array("y", ref, cand, Tolerance(allow_fp32_nonfinite=True)).passed


def test_non_float_outputs_must_match_exactly():
    idx = np.array([1, 2, 3], np.int64)
    assert compare_array("i", idx, idx.copy(), TOL).passed
    m = compare_array("i", idx, np.array([1, 2, 4], np.int64), TOL)
    assert not m.passed and m.max_abs_err == 1.0 and m.outside_bound == 1
    m = compare_array("y", REF, REF[:10], TOL)
    assert not m.passed and m.failures == ("shape [10] is not FP32's [64]",)


def test_compare_outputs_names_every_output_and_fails_a_missing_one():
    c = compare_outputs({"a": REF, "b": REF}, {"a": REF}, TOL, "emulate")
    assert [m.name for m in c.outputs] == ["a", "b"]
    assert c.metrics("a").passed and not c.metrics("b").passed and not c.passed
    assert c.metrics("b").failures == ("missing from the candidate's outputs",)
    assert c.oracle == "emulate"


def test_samples_worst_case_and_every_sample_must_pass():
    good = {"y": REF}
    bad = {"y": REF + np.float32(0.5)}
    c = compare_samples([good, good], [good, bad], TOL, "emulate")
    assert not c.passed and c.samples == 2
    m = c.outputs[0]
    assert m.max_abs_err == pytest.approx(0.5) and m.elements == 128
    assert m.failures[0].startswith("sample 1: rel RMS err 0.2")
    assert compare_samples([good, good], [good, good], TOL, "reference").passed
    with pytest.raises(ValueError):
        compare_samples([good], [good, good], TOL, "emulate")


def test_json_round_trip_keeps_every_statistic():
    cand = REF.copy()
    cand[3] = np.inf
    tol = Tolerance(top_k=2).with_output("z", threshold=0.0)
    c = compare_samples([{"y": REF.reshape(8, 8), "z": REF}], [{"y": cand.reshape(8, 8), "z": REF * 1.01}],
                        tol, "emulate")
    data = json.loads(json.dumps(c.to_json()))  # strings for inf/nan: every JSON parser reads it
    assert Comparison.from_json(data) == c
    y = data["outputs"][0]
    assert y["new_nonfinite"] == 1 and y["cosine"] == 0.0 and y["outside_fraction"] == 1 / 64
    assert [t["kind"] for t in y["tasks"]] == ["top_k"]
    assert OutputMetrics.from_json({"name": "y", "max_abs_err": "inf", "max_rel_err": 1, "cosine": 0,
                                    "new_nonfinite": 0, "passed": False}).max_abs_err == float("inf")
