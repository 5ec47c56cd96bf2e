"""Decomposed LayerNorms are written as one LayerNormalization (opset 17+): loadable at onnxruntime's defaults."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models.stacks import layer_norm_stack
from onnx_precision import policy
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.oracle import default_load_problem
from onnx_precision.rewriter import rewrite
from onnx_precision.target import TensorRTTarget

H = 64


def stack(blocks: int, opset: int = 17) -> onnx.ModelProto:
    return layer_norm_stack(blocks, H, opset=opset, ramp=True)


def test_the_patterns_are_found_with_what_one_node_needs():
    found = policy.decomposed_layer_norms(ModelContext.of(stack(2)))
    assert [ln.add for ln in found] == ["b0_shift", "b1_shift"]
    first = found[0]
    assert first.nodes == ("b0_mean", "b0_sub", "b0_pow", "b0_var", "b0_add_eps", "b0_sqrt", "b0_div", "b0_scale",
                           "b0_shift")
    assert (first.x, first.axis, first.scale_index, first.bias_index) == ("x", 1, 1, 1)
    assert first.epsilon == pytest.approx(1e-5)
    assert policy.decomposed_layer_norms(ModelContext.of(stack(2, opset=16))) == ()  # no LayerNormalization


def test_an_fp16_stack_fed_fp32_is_written_as_layer_normalizations_that_load_at_default_options(tmp_path):
    ctx = ModelContext.of(stack(3))
    result = rewrite(ctx, ctx.all_low_plan())
    ops = [n.op_type for n in result.model.graph.node]
    assert ops == ["Cast", "LayerNormalization", "LayerNormalization", "LayerNormalization", "Relu", "Cast"]
    fused = [n for n in result.model.graph.node if n.op_type == "LayerNormalization"]
    assert [n.name for n in fused] == ["b0_shift", "b1_shift", "b2_shift"]  # named after the last Add
    assert [n.output[0] for n in fused] == ["b0_y", "b1_y", "b2_y"]
    assert all(a.i == 1 for n in fused for a in n.attribute if a.name == "stash_type")
    assert result.casts_added == 2 and any("3 decomposed LayerNorm(s)" in note for note in result.notes)
    path = str(tmp_path / "o.onnx")
    onnx.save(result.model, path)
    assert default_load_problem(path) == ""
    x = np.random.default_rng(0).standard_normal((2, H)).astype(np.float32)
    want = ort.InferenceSession(stack(3).SerializeToString()).run(None, {"x": x})[0]
    got = ort.InferenceSession(path).run(None, {"x": x})[0]
    assert np.abs(got - want).max() < 0.02


def test_unfused_the_same_plan_fails_onnxruntimes_default_load(tmp_path):
    """What the fusion avoids: onnxruntime's LayerNormFusion drops the leading Cast and binds X (FP32)
    and Scale (FP16) to one type."""
    ctx = ModelContext.of(stack(1))
    path = str(tmp_path / "o.onnx")
    onnx.save(rewrite(ctx, ctx.all_low_plan(), fuse_layer_norms=False).model, path)
    assert "bound to different types" in default_load_problem(path)


def test_a_tail_split_between_precisions_is_pinned_fp32_and_a_trt_layer_norm_needing_fp32_statistics_is_fed_fp32():
    ctx = ModelContext.of(stack(1))
    split = ctx.all_low_plan().with_fp32(["b0_scale"])
    pinned = policy.layer_norm_pins(ctx, split)
    assert pinned.fp32_nodes == ("b0_scale", "b0_shift")
    assert pinned.decisions["b0_shift"].reasons[-1].source == "type"
    stats_fp32 = ctx.all_low_plan().with_fp32(["b0_var", "b0_sqrt"])
    assert policy.layer_norm_pins(ctx, stats_fp32).fp32_nodes == ("b0_var", "b0_sqrt")  # generic: stats in FP32 anyway
    trt = ModelContext.of(stack(1))
    trt.target = TensorRTTarget()
    fed = policy.layer_norm_pins(trt, stats_fp32)
    assert set(fed.fp32_nodes) == set(policy.decomposed_layer_norms(trt)[0].nodes)
    assert "strongly typed" in fed.decisions["b0_mean"].reasons[-1].detail


def test_convert_writes_a_model_onnxruntime_loads_and_keeps_every_flop_in_fp16(tmp_path, capsys):
    import json

    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(stack(4), path)
    np.savez(data, x=np.random.default_rng(1).standard_normal((2, H)).astype(np.float32))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "-q"]) == 0
    report = json.load(open(tmp_path / "o.report.json"))
    assert report["status"] == "passed" and report["fp16_share"]["flops"] == 1.0
