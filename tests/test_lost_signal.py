"""An output whose whole signal lies under the absolute tolerance is judged by its relative errors
(issue 33, item 2).

A 151 936-wide Softmax under --target fp16-accumulate: its denominator overflows FP16, every probability
becomes 0, and the run printed "passed ... worst probs: rel RMS err 1, max abs err 1.1e-05, cosine
0.000000": every |err| was within atol 0.001. ``atol`` is a floor for outputs that are about 0; it passes
no output whose candidate has lost the reference's signal (all zero or one value where the reference
varies, or a relative RMS error of 1 or more), in any clause of any check
(:func:`onnx_precision.judge.acceptance.failures`).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models import compute
from onnx_precision.cli import main
from onnx_precision.judge import ERROR_STATS, OutputMetrics, Tolerance, compare_array

LOST = ("signal lost: every element is 0 where FP32's reach 1.249e-05; atol 0.001 passes no output that lost "
        "its signal")


def _probabilities() -> np.ndarray:
    logits = compute.wide_softmax().feeds[0]["logits"].astype(np.float64)
    e = np.exp(logits - logits.max())
    return (e / e.sum()).astype(np.float32)


@pytest.mark.parametrize("stat", ERROR_STATS)
def test_an_all_zero_softmax_under_atol_fails_under_every_check(stat):
    # every probability about 1e-5, every |err| under atol: "rms" passed it through "all |err| <= atol",
    # "elemwise" through the atol of its bound; the |err| statistics failed it on the cosine alone
    probs = _probabilities()
    m = compare_array("probs", probs, np.zeros_like(probs), Tolerance(error_stat=stat))
    assert m.max_abs_err < 1e-3 and m.rel_rms_err == 1.0 and m.cosine == 0.0
    assert not m.passed and m.passed_by == ""
    if stat in ("rms", "elemwise"):
        assert m.failures[0] == LOST
    if stat == "rms":
        assert m.failures[1:] == ("rel RMS err 1 > 0.05",
                                  "slice at probs[0, 0] (100000 elements) rel RMS err 1 > 0.2")


def test_a_candidate_of_one_value_where_the_reference_varies_fails_under_atol():
    # a peaked distribution flattened to uniform: rel RMS err 0.24, every |err| under atol
    ref = np.full(1000, 1e-4, np.float32)
    ref[0] = 9e-4
    m = compare_array("p", ref, np.full_like(ref, ref.mean()), Tolerance())
    assert m.flat and m.max_abs_err < 1e-3 and m.rel_rms_err < 1 and not m.passed
    assert m.failures[0] == ("signal lost: every element is one value where FP32's vary (|ref| up to "
                             "0.0009); atol 0.001 passes no output that lost its signal")


def test_a_candidate_no_closer_than_zeros_fails_under_atol_and_in_the_atol_of_a_bound():
    ref = np.linspace(-4e-4, 4e-4, 64, dtype=np.float32)
    doubled = compare_array("y", ref, 3 * ref, Tolerance(error_stat="max"))  # cosine 1, rel RMS err 2
    assert doubled.cosine > 0.999 and not doubled.passed
    assert doubled.failures == ("signal lost: rel RMS err 2 >= 1, no closer to FP32 than all zeros; atol "
                                "0.001 passes no output that lost its signal",)
    noise = np.random.default_rng(0).normal(0, 1e-5, 64).astype(np.float32)  # FP32's ~0 against FP16 noise
    assert not compare_array("y", noise * 1e-3, noise, Tolerance()).passed


def test_atol_still_passes_an_output_that_keeps_its_signal():
    # ~1e-7 values rounded to FP16's subnormal spacing: rel RMS err 0.08, every |err| under atol
    tiny = np.linspace(1e-7, 5e-7, 64, dtype=np.float32)
    m = compare_array("y", tiny, tiny.astype(np.float16).astype(np.float32), Tolerance())
    assert m.rel_rms_err > 0.05 and m.passed and m.passed_by == "all |err| <= atol 0.001"
    # one value where FP32 varies by 0.3% of its level: within the relative bounds, which pass it
    level = np.full(64, 0.5, np.float32) + np.linspace(-1e-3, 1e-3, 64, dtype=np.float32)
    flat = compare_array("y", level, np.full_like(level, 0.5), Tolerance(error_stat="max"))
    assert flat.flat and flat.passed and flat.passed_by.startswith("max |err|")
    assert compare_array("y", level, np.full_like(level, 0.5), Tolerance()).passed  # rel RMS err 0.001


def test_the_metrics_of_the_signal_round_trip_through_json():
    probs = _probabilities()
    m = compare_array("probs", probs, np.zeros_like(probs), Tolerance(error_stat="elemwise"))
    assert (m.outside_bound, m.outside_rtol, m.cand_max_abs, m.flat) == (0, 100_000, 0.0, True)
    assert OutputMetrics.from_json(m.to_json()) == m


def test_convert_pins_the_softmax_whose_fp16_denominator_overflows(tmp_path, capsys):
    example = compute.wide_softmax()
    path, data = str(tmp_path / "softmax.onnx"), str(tmp_path / "logits.npz")
    onnx.save(example.model, path)
    np.savez(data, **example.feeds[0])
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--target",
                 "fp16-accumulate"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "FP32 pins (1): softmax (search)" in printed  # it was written all FP16, "passed"
    before = next(line for line in printed if line.startswith("before: "))
    assert before == ("before: FAIL (worst probs: rel RMS err 1, max abs err 1.249e-05, cosine 0.000000; "
                      f"{LOST})")
