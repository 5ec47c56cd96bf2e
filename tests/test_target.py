"""--target tensorrt: ops TensorRT builds from several layers are emulated as those layers."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.oracle import EmulationSession
from onnx_precision.target import TensorRTTarget
from onnx_precision.trt.reference import layer_model
from onnx_precision.trt.versions import NEWEST


def _one_op(tmp_path, node: onnx.NodeProto, in_shape, out_shape, x: np.ndarray) -> tuple[str, str]:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = str(tmp_path / f"{node.name}.onnx"), str(tmp_path / f"{node.name}.npz")
    onnx.save(model, path)
    np.savez(data, x=x)
    return path, data


def _reduce_l2(tmp_path):
    x = (20 + np.random.default_rng(0).standard_normal((2, 1024))).astype(np.float32)
    node = helper.make_node("ReduceL2", ["x"], ["y"], name="rl2", keepdims=1, axes=[1])
    return _one_op(tmp_path, node, [2, 1024], [2, 1], x)


def _log_softmax(tmp_path):
    x = np.zeros((1, 32768), np.float32)
    x[0, 7] = 20.0  # one dominant logit: every other probability is ~2e-9, below FP16's 6e-8
    node = helper.make_node("LogSoftmax", ["x"], ["y"], name="lsm", axis=-1)
    return _one_op(tmp_path, node, [1, 32768], [1, 32768], x)


@pytest.mark.parametrize("build, node", [(_reduce_l2, "rl2"), (_log_softmax, "lsm")])
def test_generic_keeps_fp16_where_tensorrt_must_pin(tmp_path, build, node):
    path, data = build(tmp_path)
    generic, trt = str(tmp_path / "generic.onnx"), str(tmp_path / "trt.onnx")
    assert main(["convert", path, "-o", generic, "--inputs", data, "-q"]) == 0
    assert json.load(open(tmp_path / "generic.report.json"))["pinned"] == []
    assert main(["convert", path, "-o", trt, "--inputs", data, "--target", "tensorrt", "-q"]) == 0
    report = json.load(open(tmp_path / "trt.report.json"))
    assert report["target"] == f"tensorrt {NEWEST}"
    (pin,) = report["pinned"]
    assert pin["node"] == node
    target = [r["detail"] for r in pin["reasons"] if r["source"] == "target"]
    assert target and target[0].startswith(f"TensorRT {NEWEST} builds this ")
    # the generic model fails when checked for TensorRT, and under onnx.reference's FP16 arithmetic; the
    # TensorRT plan keeps its one node FP32, the model as it was read, which check refuses as a copy
    assert main(["check", path, generic, "--inputs", data, "--target", "tensorrt", "-q"]) == 1
    assert main(["check", path, trt, "--inputs", data, "--target", "tensorrt", "-q"]) == 2
    assert main(["check", path, generic, "--inputs", data, "--oracle", "reference", "-q"]) == 1


def test_the_emulation_of_a_split_op_is_bit_identical_to_its_layers_spelled_out(tmp_path):
    path, data = _reduce_l2(tmp_path)
    model = onnx.load(path)
    x = np.load(data)["x"]
    ctx = ModelContext.of(model)
    ctx.target = TensorRTTarget(NEWEST)
    emulated = EmulationSession(ctx).run(ctx.all_low_plan(), {"x": x})["y"]
    node = model.graph.node[0]
    spelled = layer_model(node, list(model.graph.input), list(model.graph.output), opset=17, version=NEWEST)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(spelled.SerializeToString(), options).run(["y"], {"x": x})[0]
    assert np.array_equal(emulated, want, equal_nan=True)
    assert np.isinf(emulated).all()  # x*x stored in FP16: the sum of squares overflows


def test_analyze_reports_the_target_and_the_layer_rule(tmp_path, capsys):
    path, data = _log_softmax(tmp_path)
    assert main(["analyze", path, "--inputs", data, "--target", "tensorrt"]) == 0
    out = capsys.readouterr().out
    assert f"target: tensorrt {NEWEST}" in out and "log-softmax-layers" in out


# --- the Target value: what differs between targets lives in it ------------------------------------

def _scatter_add() -> onnx.ModelProto:
    """ScatterND with reduction 'add': valid in float16, but onnxruntime's CPU provider has no kernel."""
    node = helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], name="scatter", reduction="add")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("upd", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [onnx.numpy_helper.from_array(np.array([[1]], np.int64), "idx")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_onnxruntime_cpu_kernels_bind_the_plan_only_where_the_target_runs_on_onnxruntime():
    from onnx_precision import policy
    from onnx_precision.target import GENERIC

    generic = ModelContext.of(_scatter_add())
    generic.target = GENERIC
    trt = ModelContext.of(_scatter_add())
    trt.target = TensorRTTarget(NEWEST)
    assert generic.typing["scatter"].low_blocker == ("onnxruntime has no float16 ScatterND kernel with "
                                                      "reduction 'add'")
    assert policy.resolve(generic, generic.all_low_plan()).fp32_nodes == ("scatter",)
    assert trt.typing["scatter"].low_blocker is None
    assert policy.resolve(trt, trt.all_low_plan()).fp32_nodes == ()


def test_a_16_bit_type_is_one_row_every_limit_is_read_from():
    """A target whose type tops out at 1000 pins what passes 1000 and says so; FP16 pins nothing."""
    from dataclasses import replace

    from onnx_precision import policy
    from onnx_precision.float_types import FP16
    from onnx_precision.oracle import TensorStats
    from onnx_precision.target import GENERIC, GenericTarget

    narrow = replace(FP16, name="FP12", max=1000.0, min_normal=2.0 ** -6, min_subnormal=2.0 ** -9,
                     significand_bits=5)
    assert replace(FP16, name="x").exact_int == 2048 and narrow.exact_int == 64 and narrow.flush == 2.0 ** -10
    node = helper.make_node("Mul", ["x", "x"], ["y"], name="square")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    stats = {"y": TensorStats(1200.0, 1.0, 0.0, 0, 0, 4)}
    ctx = ModelContext.of(model)
    ctx.target = GENERIC
    assert policy.range_flags(ctx, ctx.all_low_plan(), stats) == {}
    assert policy.headroom_pins(ctx, ctx.all_low_plan(), stats, 2.0) == {}
    ctx = ModelContext.of(model)
    ctx.target = GenericTarget(low=narrow)
    flags = policy.range_flags(ctx, ctx.all_low_plan(), stats)
    assert [r.detail for r in flags["square"]] == ["'y' reaches 1200 in FP32, over the FP12 maximum 1000"]
    pins = policy.headroom_pins(ctx, ctx.all_low_plan(), stats, 2.0)
    assert pins["square"].source == "range"


def test_targets_by_name():
    from onnx_precision.target import GENERIC, target_named
    from onnx_precision.trt.versions import V

    assert target_named("generic") == GENERIC and GENERIC.name == "generic"
    assert target_named("tensorrt", V("8.6")) == TensorRTTarget(V("8.6"))
    assert TensorRTTarget(V("8.6")).name == "tensorrt 8.6"
    assert TensorRTTarget(V("8.6")).title == "TensorRT 8.6"
    with pytest.raises(ValueError, match="unknown target 'cuda'"):
        target_named("cuda")
