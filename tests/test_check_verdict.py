"""``check`` and ``convert`` with the verdict options: the statistics printed, the task checks, and
an FP32 model that is itself non-finite (refused, or compared where finite)."""

from __future__ import annotations

import pytest
from test_check import example, write_plan

from onnx_precision.check import FP32NonFinite, check
from onnx_precision.cli import main
from onnx_precision.data import SampleSpec
from onnx_precision.judge import Tolerance


@pytest.fixture(scope="module")
def deep_cnn_all_fp16(tmp_path_factory) -> tuple[str, str, str]:
    model, data = example("deep_cnn")
    return model, write_plan(model, str(tmp_path_factory.mktemp("cnn") / "all16.onnx")), data


@pytest.mark.slow  # 1.0 s in a full run on 2 busy cores
def test_heavy_tailed_noise_passes_check_by_default_and_fails_the_max_check(deep_cnn_all_fp16, capsys):
    model, candidate, data = deep_cnn_all_fp16
    assert main(["check", model, candidate, "--inputs", data, "--threshold", "y:0.5"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  y: "))
    assert "max abs err 0.126" in line and "rel RMS err 0.0092" in line and "p99.9 " in line
    # the line names the clause that passed it
    assert "IoU at 0.5 0.99" in line
    assert line.endswith("  pass (rel RMS err <= 0.05, every slice <= 0.2, IoU at 0.5 >= 0.99)")
    assert main(["check", model, candidate, "--inputs", data, "--error-stat", "y:max"]) == 1
    out = capsys.readouterr().out
    assert "[max abs err 0.1262 > 0.011 (atol 0.001 + rtol 0.01 x max|ref| 1)]  FAIL" in out


def test_check_refuses_an_fp32_model_that_is_non_finite_and_names_the_node(tmp_path, capsys):
    model, data = example("fp32_nan")
    candidate = write_plan(model, str(tmp_path / "all16.onnx"))
    assert main(["check", model, candidate, "--inputs", data]) == 1
    err = capsys.readouterr().err
    assert "the FP32 model itself produces NaN/Inf in output 'y' (node 'sqrt' turns non-finite" in err
    with pytest.raises(FP32NonFinite):
        check(model, candidate, SampleSpec(inputs=data))


def test_allow_fp32_nonfinite_compares_where_fp32_is_finite(tmp_path, capsys):
    model, data = example("fp32_nan")
    candidate = write_plan(model, str(tmp_path / "all16.onnx"))
    result = check(model, candidate, SampleSpec(inputs=data), Tolerance(allow_fp32_nonfinite=True))
    m = result.comparison.metrics("y")
    assert result.passed and m.fp32_nonfinite >= 1 and m.elements == 16 - m.fp32_nonfinite
    out = str(tmp_path / "out.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "--allow-fp32-nonfinite", "-q"]) == 0
    assert main(["check", model, out, "--inputs", data, "--allow-fp32-nonfinite"]) == 0
    assert main(["convert", model, "-o", str(tmp_path / "refused.onnx"), "--inputs", data, "-q"]) == 1
