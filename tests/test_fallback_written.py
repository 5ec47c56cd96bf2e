"""The BF16 fallback's plan, share and notes are the written model's, and its opset is raised only for
what goes BF16 (issue 23, sections 1 and 2).

``layernorm_eps`` (a decomposed LayerNorm whose epsilon of 1e-12 flushes in FP16) under TensorRT: the
LayerNorm is written as one LayerNormalization in one type, so the fallback tries its epsilon with the
whole LayerNorm in BF16 (as ``--low-precision bf16`` writes it) instead of a BF16 epsilon inside an
FP32 node. :func:`computed_in` reads the written model back: each plan node's precision must be that
of the node that computes it there (itself, or the LayerNormalization it is fused into).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from test_fallback_truth import _fallback_notes, _model, _precisions, _run
from test_shares_true import audit, written_precisions

from models import generate
from onnx_precision import policy
from onnx_precision.cli import main
from onnx_precision.context import load_model
from onnx_precision.convert import ConvertOptions, convert_model
from onnx_precision.float_types import BF16
from onnx_precision.target import target_named


def computed_in(model: str, written: onnx.ModelProto, plan: dict[str, str], target: str) -> list[str]:
    """Each node of ``plan`` (node -> precision) whose written model computes it in another type: a
    node fused into a LayerNormalization computes in that node's type, its statistics in FP32 as well
    where the target computes them as stash_type says (not TensorRT's)."""
    fused = policy.fused_names(policy.decomposed_layer_norms(load_model(model)))
    statistics = {n for ln in policy.decomposed_layer_norms(load_model(model)) for n in ln.inside}
    seen = written_precisions(written)
    wrong = []
    for node, precision in plan.items():
        op = node if node in seen else fused.get(node, node)
        allowed = {seen.get(op)} | ({"fp32"} if target != "tensorrt" and node in statistics else set())
        if precision not in allowed:
            wrong.append(f"{node}: plan {precision}, written {seen.get(op)} (in '{op}')")
    return wrong


def _convert(tmp_path, *flags: str) -> tuple[int, list[str], dict, onnx.ModelProto]:
    out = str(tmp_path / "o.onnx")
    code = main(["convert", generate.model_path("layernorm_eps"), "-o", out, "--inputs",
                 generate.data_path("layernorm_eps"), *flags])
    report = json.load(open(tmp_path / "o.report.json"))
    return code, report["notes"], report, onnx.load(out)


def test_under_tensorrt_the_fallback_writes_the_whole_layer_norm_bf16_and_says_so(tmp_path, capsys):
    """Before: the plan put the epsilon's Add in BF16 ('0.22% of FLOPs', '1 hold in BF16') inside a
    LayerNormalization written FP32 with no Cast; and then (pinned with its LayerNorm) '0 hold in
    BF16', 99.8% FP32, where --low-precision bf16 writes it all BF16 and passes."""
    code, notes, report, written = _convert(tmp_path, "--target", "tensorrt", "--fallback", "bf16")
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert set(_precisions(report).values()) == {"bf16"}
    assert _fallback_notes(report) == ["--fallback bf16: of 9 FP32 pin(s) tried (8 of them only for their "
                                       "LayerNorm, tried with it), 9 hold in BF16"]
    assert "BF16: 9/9 nodes (100.0%), 100.0% of estimated FLOPs" in lines
    assert [(n.op_type, n.name) for n in written.graph.node] == [
        ("Cast", "x_cast_bf16"), ("LayerNormalization", "ln_shift"), ("Cast", "y_bf16_cast_fp32")]
    assert computed_in(generate.model_path("layernorm_eps"), written, _precisions(report), "tensorrt") == []
    # the epsilon is an attribute of the node written, and BF16 holds it: nothing flushes there
    assert not [line for line in lines if "flush to zero" in line]
    after, verified = (report["outputs"][k]["outputs"][0] for k in ("after", "verified"))
    assert after == verified


@pytest.mark.parametrize("target", ["generic", "tensorrt"])
def test_every_statement_of_the_fallback_run_is_true_of_the_written_model(tmp_path, target):
    assert audit(tmp_path, generate.model_path("layernorm_eps"), generate.data_path("layernorm_eps"),
                 "--target", target, "--fallback", "bf16") == []
    written = onnx.load(str(tmp_path / "o.onnx"))
    with open(tmp_path / "o.plan.json", encoding="utf-8") as f:
        plan = {n: d["precision"] for n, d in json.load(f)["nodes"].items()}
    assert computed_in(generate.model_path("layernorm_eps"), written, plan, target) == []


def test_off_tensorrt_an_epsilon_inside_the_fp32_statistics_is_not_tried(tmp_path):
    """onnxruntime computes a LayerNormalization's statistics in FP32 (stash_type 1) whatever its type:
    the epsilon's Add is FP32 there in every plan, and BF16 for it would change nothing written (it
    was 'BF16', '1 hold in BF16', the FP16 node written unchanged)."""
    code, notes, report, written = _convert(tmp_path, "--fallback", "bf16")
    assert code == 0
    assert _precisions(report)["ln_add_eps"] == "fp32"
    assert _fallback_notes(report) == [
        "--fallback bf16: 1 FP32 pin(s) not tried in BF16: ln_add_eps (inside a LayerNormalization that "
        "computes it in FP32; the emulation keeps it FP32)"]
    assert [(n.op_type, n.name) for n in written.graph.node if n.op_type != "Cast"] == [
        ("LayerNormalization", "ln_shift")]


@pytest.mark.parametrize("flags", [(), ("--target", "tensorrt"), ("--low-precision", "bf16")])
def test_no_initializer_is_left_that_only_the_fused_nodes_read(tmp_path, capsys, flags):
    """The Pow's exponent and the epsilon (an attribute of the LayerNormalization) were written, one of
    them converted and counted as such."""
    code, _, _, written = _convert(tmp_path, *flags)
    assert code == 0
    assert sorted(i.name for i in written.graph.initializer) == ["beta", "gamma"]
    first = capsys.readouterr().out.splitlines()[0]
    converted = 0 if flags == ("--target", "tensorrt") else 2  # gamma and beta, where the LayerNorm is 16-bit
    assert f"{converted} initializer(s) converted" in first


# --- the opset ----------------------------------------------------------------------------------------


def _cnn(scale: float, opset: int) -> onnx.ModelProto:
    """conv_a -> relu -> conv_b, 1x2x8x8; all-ones weights times ``scale``."""
    node = helper.make_node
    weights = [nh.from_array(np.full((2, 2, 3, 3), scale, np.float32), f"w{i}") for i in (1, 2)]
    return _model([node("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
                   node("Relu", ["c1"], ["r"], name="relu"),
                   node("Conv", ["r", "w2"], ["y"], name="conv_b", pads=[1, 1, 1, 1])],
                  [("x", [1, 2, 8, 8])], [("y", [1, 2, 8, 8])], weights, opset=opset)


def _feed(value: float) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).uniform(0, value, (1, 2, 8, 8)).astype(np.float32)}


@pytest.mark.parametrize("target", ["generic", "tensorrt"])
def test_a_model_with_nothing_bf16_keeps_its_opset(tmp_path, target):
    """An FP16-clean model at opset 11: the fallback has nothing to try, and the written model, 100%
    FP16, was written at opset 22 (TensorRT; 13 elsewhere) for nothing."""
    report = _run(tmp_path, _cnn(0.1, 11), _feed(1.0), "--target", target, "--fallback", "bf16")
    assert set(_precisions(report).values()) == {"fp16"}
    raised = 22 if target == "tensorrt" else 13
    assert report["notes"][0] == (
        f"opset kept at 11: no node went BF16 (the plan was measured on the model raised to opset {raised}, "
        f"which matches it on the samples; the model written at opset 11 is verified as always)")
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert written.opset_import[0].version == 11
    assert written_precisions(written) == {"conv_a": "fp16", "relu": "fp16", "conv_b": "fp16",
                                           "x_cast_fp16": "fp16", "y_fp16_cast_fp32": "fp32"}
    assert report["status"] == "passed"


def test_a_conv_that_goes_bf16_is_written_at_the_raised_opset(tmp_path):
    """Activations of 1e5 and more: FP16 overflows in the Convs, BF16 holds them; Conv takes bfloat16
    from opset 22."""
    report = _run(tmp_path, _cnn(1.0, 17), _feed(3e4), "--target", "tensorrt", "--fallback", "bf16")
    assert _precisions(report)["conv_b"] == "bf16"
    assert report["notes"][0].startswith("opset 17 -> 22 so that Conv takes bfloat16")
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert written.opset_import[0].version == 22
    assert written_precisions(written)["conv_b"] == "bf16"


def test_bf16_nodes_that_need_no_raised_opset_are_written_at_the_models_own(tmp_path):
    """A Conv kept FP16 feeds a Mul whose 3e4 times its output FP16's headroom pins and BF16 holds:
    Mul takes bfloat16 at opset 17, only the Conv (FP16) needed 22."""
    node = helper.make_node
    model = _model([node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                    node("Mul", ["c", "k"], ["big"], name="amplify"),
                    node("Mul", ["big", "k2"], ["y"], name="shrink")],
                   [("x", [1, 2, 8, 8])], [("y", [1, 2, 8, 8])],
                   [nh.from_array(np.full((2, 2, 3, 3), 0.1, np.float32), "w"),
                    nh.from_array(np.array(3e4, np.float32), "k"),
                    nh.from_array(np.array(1e-4, np.float32), "k2")])
    report = _run(tmp_path, model, _feed(1.0), "--target", "tensorrt", "--fallback", "bf16")
    assert _precisions(report) == {"conv": "fp16", "amplify": "bf16", "shrink": "bf16"}
    assert report["notes"][0].startswith("opset kept at 17: no node of Conv is BF16 (the plan was measured "
                                         "on the model raised to opset 22")
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert written.opset_import[0].version == 17
    assert {n: written_precisions(written)[n] for n in ("conv", "amplify", "shrink")} == _precisions(report)
    assert report["status"] == "passed"


def test_the_in_memory_conversion_keeps_the_opset_too():
    model = _cnn(0.1, 11)
    options = ConvertOptions(mode="static", target=target_named("tensorrt", fallback=BF16))
    result = convert_model(model, _feed(1.0), options)
    assert result.passed and result.model.opset_import[0].version == 11
    assert result.report is not None
    assert result.report.notes[0].startswith("opset kept at 11: no node went BF16")
    assert {result.plan.precision(n) for n in ("conv_a", "relu", "conv_b")} == {"fp16"}
    assert TensorProto.BFLOAT16 not in {i.data_type for i in result.model.graph.initializer}
