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
    # the generic model fails when checked for TensorRT, and under onnx.reference's FP16 arithmetic
    assert main(["check", path, generic, "--inputs", data, "--target", "tensorrt", "-q"]) == 1
    assert main(["check", path, trt, "--inputs", data, "--target", "tensorrt", "-q"]) == 0
    assert main(["check", path, generic, "--inputs", data, "--oracle", "reference", "-q"]) == 1


def test_the_emulation_of_a_split_op_is_bit_identical_to_its_layers_spelled_out(tmp_path):
    path, data = _reduce_l2(tmp_path)
    model = onnx.load(path)
    x = np.load(data)["x"]
    ctx = ModelContext.of(model)
    ctx.target = TensorRTTarget(NEWEST)
    emulated = EmulationSession(ctx).run(ctx.all_fp16_plan(), {"x": x})["y"]
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
