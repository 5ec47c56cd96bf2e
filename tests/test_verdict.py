"""The default verdict tells FP16 breakage from rounding noise; the other checks; per-output settings."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import models
from models import breakages
from onnx_precision import oracle
from onnx_precision.context import ModelContext
from onnx_precision.judge import Tolerance, compare_array, compare_outputs
from onnx_precision.plan import Reason

MAX = Tolerance(error_stat="max")


def all_fp16_outputs(example: models.Example) -> list[tuple[dict, dict]]:
    """(FP32, emulated all-FP16) outputs of each of ``example``'s feeds."""
    ctx = ModelContext.of(example.model)
    session = oracle.EmulationSession(ctx, capture_intermediates=False)
    plan = ctx.all_low_plan(Reason("default", "t"))
    return [(session.run(None, feed), session.run(plan, feed)) for feed in example.feeds]


@pytest.mark.parametrize("name", sorted(breakages.BREAKAGES))
def test_breakage_confined_to_a_small_part_of_the_output_fails(name):
    (ref, cand), = all_fp16_outputs(breakages.BREAKAGES[name]())
    comparison = compare_outputs(ref, cand, Tolerance(), "emulate")
    assert not comparison.passed
    for m in comparison.outputs:
        assert not m.passed, f"{name}: {m.summary()}"
        # The whole-output error is small: what fails is a slice, or a NaN.
        assert m.rel_rms_err < 0.3 and (m.worst_slice_rel_rms > 0.4 or m.new_nonfinite), m.summary()


def test_breakage_failures_name_the_broken_row():
    (ref, cand), = all_fp16_outputs(breakages.rows_l2_normalize(rows=1024, big_row=500))
    m = compare_array("y", ref["y"], cand["y"], Tolerance())
    assert m.rel_rms_err == pytest.approx(1 / 32, rel=1e-3)  # one row of 1024 is 1/32 of the energy
    assert m.failures == ("slice at y[500, 0] (64 elements) rel RMS err 1 > 0.2",)
    assert m.slices == 1024 and m.worst_slice_at == (500, 0)

    (ref, cand), = all_fp16_outputs(breakages.token_attention())  # token 40 of head 1
    m = compare_array("p", ref["p"], cand["p"], Tolerance())
    assert m.worst_slice_at == (0, 1, 40, 0) and m.worst_slice_size == 64 and m.rel_rms_err < 0.05
    (ref, cand), = all_fp16_outputs(breakages.one_nan())
    assert compare_array("z", ref["z"], cand["z"], Tolerance()).failures == ("1 new NaN/Inf",)


@pytest.mark.parametrize("name", sorted(breakages.NOISE))
def test_rounding_noise_passes(name):
    (ref, cand), = all_fp16_outputs(breakages.NOISE[name]())
    comparison = compare_outputs(ref, cand, Tolerance(), "emulate")
    assert comparison.passed, [m.summary() for m in comparison.outputs]


def test_logits_rounded_at_large_magnitude_are_noise_that_the_max_check_fails():
    (ref, cand), = all_fp16_outputs(breakages.token_attention(offset=300.0))
    m = compare_array("ctx", ref["ctx"], cand["ctx"], Tolerance())
    assert m.passed and 0.05 < m.worst_slice_rel_rms < 0.15 and m.max_abs_err > 0.1
    assert not compare_array("ctx", ref["ctx"], cand["ctx"], MAX).passed


def test_deep_cnn_all_fp16_is_heavy_tailed_noise_the_default_passes_and_max_fails():
    (ref, cand), = all_fp16_outputs(models.deep_cnn())
    m = compare_array("y", ref["y"], cand["y"], Tolerance())
    assert m.passed, m.summary()
    assert m.max_abs_err > 0.1 and m.p99_abs_err < 0.01
    assert m.rel_rms_err < 0.015 and m.worst_slice_rel_rms < 0.05
    assert 0 < m.outside_bound < 0.02 * m.elements  # a few steep pixels
    old = compare_array("y", ref["y"], cand["y"], MAX)
    assert not old.passed and old.failures[0].startswith("max abs err 0.126")


def test_every_check_choice():
    ref = np.linspace(-1.0, 1.0, 1000)
    cand = ref.copy()
    cand[:5] += 0.05  # 0.5% of the elements off by 0.05: max fails, the bulk statistics pass
    verdicts = {stat: compare_array("y", ref, cand, Tolerance(error_stat=stat)).passed
                for stat in ("rms", "max", "mean", "median", "quantile", "elemwise")}
    assert verdicts == {"rms": True, "max": False, "mean": True, "median": True, "quantile": True,
                        "elemwise": False}
    p999 = compare_array("y", ref, cand, Tolerance(error_stat="quantile", error_quantile=0.999))
    assert p999.failures == ("p99.9 abs err 0.05 > 0.011 (atol 0.001 + rtol 0.01 x max|ref| 1)",)
    m = compare_array("y", ref, cand, Tolerance(error_stat="elemwise", max_outside_fraction=0.004))
    assert m.failures == ("5 of 1000 elements outside atol 0.001 + rtol 0.01 x |ref| (allowed: 4)",)
    assert compare_array("y", ref, cand, Tolerance(error_stat="elemwise", max_outside_fraction=0.005)).passed


def test_elementwise_bound_is_atol_plus_rtol_times_each_reference_element():
    ref = np.array([0.0, 1.0, 100.0])
    tol = Tolerance(atol=0.01, rtol=0.1)
    inside = compare_array("y", ref, ref + np.array([0.0099, 0.1099, 10.0099]), tol)
    assert inside.outside_bound == 0
    outside = compare_array("y", ref, ref + np.array([0.0101, 0.1101, 10.0101]), tol)
    assert outside.outside_bound == 3


def test_per_output_tolerances():
    ref = {"a": np.ones(100), "b": np.ones(100)}
    cand = {"a": np.ones(100) * 1.1, "b": np.ones(100) * 1.1}  # rel RMS err 0.1 on both
    tol = Tolerance().with_output("b", max_rel_rms=0.2)
    c = compare_outputs(ref, cand, tol, "emulate")
    assert [m.passed for m in c.outputs] == [False, True]
    assert tol.with_output("b", atol=0.5).for_output("b").max_rel_rms == 0.2  # settings accumulate
    assert tol.unknown_outputs(["a"]) == ("b",)
    assert replace(tol, allow_fp32_nonfinite=True).for_output("b").allow_fp32_nonfinite  # one setting for all
    assert Tolerance.from_json(json.loads(json.dumps(tol.to_json()))) == tol
    assert tol.describe().startswith("rms: rel RMS err <= 0.05, every slice <= 0.2 (or all |err| <= atol "
                                     "0.001)")
    assert tol.describe().endswith("; b: max_rel_rms=0.2")


def test_a_bad_setting_is_refused():
    with pytest.raises(ValueError, match="error_stat 'p99'"):
        Tolerance(error_stat="p99")
    with pytest.raises(ValueError, match="error_quantile 2"):
        Tolerance(error_quantile=2.0)


def test_slices_are_whole_rows_of_at_least_32_elements():
    shape_slices = {(64, 64): 64, (1, 1, 16, 16): 8, (4, 10): 1, (100, 3): 9, (1, 5, 1): 1, (): 1}
    for shape, slices in shape_slices.items():
        ref = np.ones(shape)
        assert compare_array("y", ref, ref, Tolerance()).slices == slices, shape
    # NHWC with one channel: the size-1 axes are left out, so the rows are the image rows.
    ref = np.ones((1, 8, 64, 1))
    cand = ref.copy()
    cand[0, 3] = 0.0
    m = compare_array("y", ref, cand, Tolerance())
    assert m.slices == 8 and m.worst_slice_at == (0, 3, 0, 0) and m.worst_slice_rel_rms == 1.0


def test_a_weak_row_is_judged_against_the_output_scale():
    ref = np.ones((32, 64))
    ref[7] = 1e-3  # a row 1000x weaker than the others: its own relative error would be huge
    cand = ref.copy()
    cand[7, 0] += 0.01
    m = compare_array("y", ref, cand, Tolerance())
    # The row's error RMS 0.01/8 over the output's RMS sqrt(31/32), not over its own 1e-3.
    assert m.passed and m.worst_slice_rel_rms == pytest.approx(0.01 / 8 / np.sqrt(31 / 32), rel=1e-3)


def test_fp32_nonfinite_outputs_fail_unless_allowed():
    (ref, cand), = all_fp16_outputs(models.fp32_nan())
    nans = int(np.isnan(ref["y"]).sum())  # sqrt of the negative inputs
    m = compare_array("y", ref["y"], cand["y"], Tolerance())
    assert nans >= 1 and m.fp32_nonfinite == nans and not m.passed
    why = (f"the FP32 output itself has {nans} NaN/Inf (--allow-fp32-nonfinite compares only where it is "
           "finite)")
    assert m.failures == (why,)
    allowed = compare_array("y", ref["y"], cand["y"], Tolerance(allow_fp32_nonfinite=True))
    assert allowed.passed and allowed.elements == 16 - nans and allowed.new_nonfinite == 0
