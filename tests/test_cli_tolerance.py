"""The tolerance options: [NAME:]VALUE for every output or one, Polygraphy's spelling, usage errors."""

from __future__ import annotations

import pytest

from onnx_precision.cli import build_parser, main
from onnx_precision.cli.common import tolerance
from onnx_precision.judge import Tolerance


def parsed(*options: str) -> Tolerance:
    return tolerance(build_parser().parse_args(["check", "model.onnx", "cand.onnx", *options]))


def test_defaults_are_the_library_defaults():
    assert parsed() == Tolerance()


def test_values_for_every_output_and_for_one_output():
    tol = parsed("--atol", "1e-2", "--error-stat", "max", "--atol", "y:0.5", "--check-error-stat",
                 "logits:0:median", "--top-k", "logits:0:5", "--min-top-k-agreement", "logits:0:0.9",
                 "--threshold", "map:0.3", "--max-slice-rel-rms", "0.3", "--allow-fp32-nonfinite")
    assert tol.error_stat == "max" and tol.atol == 0.01
    assert tol.max_slice_rel_rms == 0.3 and tol.allow_fp32_nonfinite
    y, logits, heat = tol.for_output("y"), tol.for_output("logits:0"), tol.for_output("map")
    assert (y.atol, y.error_stat) == (0.5, "max")
    assert (logits.error_stat, logits.top_k, logits.min_top_k_agreement, logits.atol) == ("median", 5, 0.9,
                                                                                           0.01)
    assert heat.threshold == 0.3 and heat.max_slice_rel_rms == 0.3
    assert tol.for_output("other") is tol


def test_the_last_value_wins():
    assert parsed("--rtol", "0.1", "--rtol", "0.2").rtol == 0.2


@pytest.mark.parametrize("option, value, expected", [
    ("--error-stat", "p99", "expected one of rms, max, mean, median, quantile, elemwise"),
    ("--atol", "y:-1", "expected a finite number >= 0"),
    ("--error-quantile", "1.5", "expected a number between 0 and 1"),
    ("--top-k", "logits:0", "expected an integer >= 1"),
    ("--threshold", "map:inf", "expected a finite number"),
    ("--min-iou", ":0.5", "expected [NAME:]VALUE with a non-empty NAME"),
])
def test_a_bad_value_is_a_usage_error(option, value, expected, capsys):
    assert main(["check", "model.onnx", "cand.onnx", option, value]) == 2
    assert expected in capsys.readouterr().err
