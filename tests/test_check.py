"""``check``: the emulated gate for a candidate FP16 model, through the API and ``main(argv)``."""

from __future__ import annotations

import os

import onnx
import pytest
from conftest import parse

from onnx_precision.check import check
from onnx_precision.cli import main
from onnx_precision.context import load_model
from onnx_precision.data import SampleSpec
from onnx_precision.graph import walk_nodes
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.rewriter import rewrite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def example(name: str) -> tuple[str, str]:
    """The shipped example model and its sample data."""
    data = os.path.join(ROOT, "models", f"{name}.npz")
    if not os.path.exists(data):
        data = os.path.join(ROOT, "models", name)
    return os.path.join(ROOT, "models", f"{name}.onnx"), data


def write_plan(model_path: str, out: str, fp32: tuple[str, ...] = (), fp16_io: bool = False) -> str:
    loaded = load_model(model_path)
    names = [r.name for r in walk_nodes(loaded.model.graph)]
    plan = uniform_plan(names, Precision.FP16, Reason("default", "test"), fp16_io)
    plan = plan.with_fp32(fp32, Reason("user", "test"))
    # node by node, as a plain converter writes it (a LayerNormalization would compute in FP32 inside)
    onnx.save(rewrite(loaded, plan, fuse_layer_norms=False).model, out)
    return out


@pytest.mark.parametrize("name", ["l2_normalize", "nafnet_boxfilter", "layernorm_eps", "softmax_nomax",
                                  "log_underflow", "two_culprits", "if_branch", "dynamic_batch"])
def test_plain_all_fp16_conversion_fails_with_exit_1(name, tmp_path, capsys):
    model, data = example(name)
    candidate = write_plan(model, str(tmp_path / "all16.onnx"))
    assert main(["check", model, candidate, "--inputs", data]) == 1
    out = capsys.readouterr().out
    assert "oracle: emulate" in out and "FAIL" in out


def test_benign_model_all_fp16_passes_with_exit_0(tmp_path, capsys):
    model, data = example("benign_mlp")
    candidate = write_plan(model, str(tmp_path / "all16.onnx"))
    assert main(["check", model, candidate, "--inputs", data]) == 0
    out = capsys.readouterr().out
    assert "y: max abs err" in out and out.strip().splitlines()[-2:] == [
        "PASS: within tolerance",
        "note: the pass was judged on 1 sample: other inputs may fail; more samples: --inputs DIR with "
        "several .npz"]


def test_pinned_candidate_passes_and_metrics_are_reported(tmp_path):
    model, data = example("l2_normalize")
    candidate = write_plan(model, str(tmp_path / "pinned.onnx"), ("sumsq", "norm"))
    result = check(model, candidate, SampleSpec(inputs=data))
    assert result.passed and result.oracle == "emulate"
    metrics = result.comparison.metrics("y")
    assert metrics.new_nonfinite == 0 and metrics.cosine > 0.9999
    all16 = check(model, write_plan(model, str(tmp_path / "all16.onnx")), SampleSpec(inputs=data))
    assert not all16.passed and all16.comparison.metrics("y").cosine < 0.5


def test_fp16_io_candidate_is_fed_fp16(tmp_path):
    model, data = example("benign_mlp")
    candidate = write_plan(model, str(tmp_path / "io16.onnx"), fp16_io=True)
    assert check(model, candidate, SampleSpec(inputs=data)).passed


def test_candidate_from_another_tool_is_checked(tmp_path):
    from onnxconverter_common import float16

    model, data = example("l2_normalize")
    converted = float16.convert_float_to_float16(onnx.load(model), keep_io_types=True)
    path = str(tmp_path / "occ.onnx")
    onnx.save(converted, path)
    # onnxruntime's CPU provider would hide this overflow; the emulated gate does not.
    result = check(model, path, SampleSpec(inputs=data))
    assert not result.passed and "hide" in "\n".join(result.lines())


def test_candidate_without_the_models_outputs_is_an_error(tmp_path, capsys):
    model, data = example("benign_mlp")
    other = parse("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 16] x) => (float[4, 16] z) { z = Relu(x) }
    """)
    path = str(tmp_path / "other.onnx")
    onnx.save(other, path)
    assert main(["check", model, path, "--inputs", data]) == 2
    err = capsys.readouterr().err
    assert "other.onnx: has no output 'y'" in err and err.count("\n") == 1


def test_candidate_that_cannot_run_on_the_samples_is_an_error(capsys):
    model, data = example("benign_mlp")
    other, _ = example("l2_normalize")  # also x -> y, but x is [1, 64]
    assert main(["check", model, other, "--inputs", data]) == 2
    err = capsys.readouterr().err
    assert "cannot run the candidate" in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_candidate_file_is_exit_2(tmp_path, capsys):
    model, data = example("benign_mlp")
    assert main(["check", model, str(tmp_path / "nope.onnx"), "--inputs", data]) == 2
    assert "nope.onnx: no such file" in capsys.readouterr().err


def test_native_oracle_without_gpu_is_exit_2(tmp_path, capsys):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA: the native oracle is available")
    model, data = example("benign_mlp")
    candidate = write_plan(model, str(tmp_path / "all16.onnx"))
    assert main(["check", model, candidate, "--inputs", data, "--oracle", "cuda"]) == 2
    assert "CUDAExecutionProvider" in capsys.readouterr().err
