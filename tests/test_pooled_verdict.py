"""A bound held over the samples together (``Tolerance.sample_ceiling`` above 1, what a quantized model's
gate judges with two or more samples): the root mean square over the samples of an output's rel RMS err
(and of its worst slice's) against that of each sample's own bound, each sample alone within the ceiling
times its own. Where each sample's error is the quantization noise drawn again, one sample can read as far
over its bound while the samples together do not move; a broken sample still fails alone."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_precision.judge import Tolerance, compare_samples

REF = [np.random.default_rng(k).standard_normal(256) for k in range(2)]
NOISE = [np.random.default_rng(10 + k).standard_normal(256) for k in range(2)]


def _judged(errors: list[float], bounds: list[float], ceiling: float = 2.0):
    """Samples whose candidates have exactly ``errors`` as rel RMS err, each judged by its own bound."""
    cands = [{"y": r + e * np.linalg.norm(r) / np.linalg.norm(n) * n} for r, n, e in zip(REF, NOISE, errors)]
    tolerances = [Tolerance().with_output("y", max_rel_rms=b, max_slice_rel_rms=1.0, sample_ceiling=ceiling)
                  for b in bounds]
    return compare_samples([{"y": r} for r in REF], cands, tolerances, "emulate")


def test_a_sample_over_its_own_bound_passes_where_the_samples_together_are_within_theirs():
    # sample 0 at 1.3 x its own bound, sample 1 at 0.5 x: together sqrt((1.69 + 0.25) / 2) = 0.985 x
    judged = _judged([0.13, 0.05], [0.1, 0.1])
    assert judged.passed
    (y,) = judged.outputs
    assert y.passed_by == ("rel RMS err <= 0.1, every slice <= 1 over the 2 samples together (root mean "
                           "square), each sample within 2 x its own")
    assert y.room_clause == "rel RMS err over the 2 samples together 0.09849 against 0.1"
    assert y.rel_rms_err == pytest.approx(0.13)  # the worst sample's, as every merged statistic
    # before the gate judged samples together (each sample within its own bound): sample 0 failed
    alone = _judged([0.13, 0.05], [0.1, 0.1], ceiling=1.0)
    assert not alone.passed and alone.outputs[0].failures == ("sample 0: rel RMS err 0.13 > 0.1",)


def test_the_samples_together_over_their_bound_fail_though_each_is_within_its_ceiling():
    judged = _judged([0.11, 0.11], [0.1, 0.1])
    assert not judged.passed and all(c.passed for c in judged.per_sample)
    assert judged.failure() == ("output 'y' rel RMS err over the 2 samples together (root mean square) 0.11 "
                                "> 0.1")


def test_one_broken_sample_fails_alone_whatever_the_others_pool_to():
    # sample 0 at 2.1 x its own bound passes the ceiling (2 x); sample 1 nearly exact
    judged = _judged([0.21, 0.001], [0.1, 0.1])
    assert judged.outputs[0].failures[0] == "sample 0: rel RMS err 0.21 > 0.2"
    nan = _judged([float("nan"), 0.01], [0.1, 0.1])
    assert not nan.passed and not nan.per_sample[0].passed and nan.per_sample[1].passed


def test_each_sample_counts_its_own_bound_in_the_pool():
    # a sample the quantizers hit harder has a looser bound: 0.25 against 0.2 and 0.05 against 0.1 pool to
    # sqrt((0.0625 + 0.0025) / 2) = 0.1803 against sqrt((0.04 + 0.01) / 2) = 0.1581: over
    assert not _judged([0.25, 0.05], [0.2, 0.1]).passed
    assert _judged([0.2, 0.05], [0.2, 0.1]).passed


def test_a_bound_over_the_samples_is_a_setting_of_the_tolerance_that_reports_state():
    tol = Tolerance().with_output("y", max_rel_rms=0.14, sample_ceiling=2.0)
    assert tol.to_json()["per_output"]["y"]["sample_ceiling"] == 2.0
    assert Tolerance.from_json(tol.to_json()) == tol and tol.cli_args() == ["--max-rel-rms", "y:0.14"]
    assert tol.describe().endswith("y: max_rel_rms=0.14, sample_ceiling=2.0")
    with pytest.raises(ValueError, match=r"sample_ceiling 0.5: expected a finite number >= 1"):
        Tolerance(sample_ceiling=0.5)
