"""Quantized models: Q/DQ (INT8, FP8), MatMulNBits; what is quantized, how the 16-bit remainder is
written around it, and the scales FP16 cannot hold. Every model is quantized by hand with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main


def _model(nodes, inits, x_shape, y_shape, opset: int, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 19 else 9
    onnx.checker.check_model(model, full_check=True)
    return model


def fp8_block(n: int = 512) -> onnx.ModelProto:
    """x -> Q/DQ (FP8 E4M3FN) -> MatMul <- DQ (an FP8 weight of n*n bytes, over the size that goes
    to onnxruntime by reference) -> Add -> Relu -> Softmax, at opset 19."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, n)).astype(np.float32) * 0.1
    w_scale = np.float32(np.abs(w).max() / 448)
    inits = [helper.make_tensor("w_q", TensorProto.FLOAT8E4M3FN, [n, n], (w / w_scale).ravel().tolist()),
             numpy_helper.from_array(np.array(w_scale, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0.05, np.float32), "x_s"),
             helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0.0]),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32) * 0.1, "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "zp"], ["xq"], name="q_x"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "zp"], ["xd"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "zp"], ["wd"], name="dq_w"),
             helper.make_node("MatMul", ["xd", "wd"], ["mm"], name="matmul"),
             helper.make_node("Add", ["mm", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, inits, [4, n], [4, n], 19, "fp8_block")


def test_an_fp8_qdq_block_with_a_large_fp8_weight_converts(tmp_path, capsys):
    # the FP8 weight (256 KiB) reached onnxruntime by reference as an ml_dtypes array, which it took
    # for a string array: "Creation of OrtValues is currently only supported from non-string numpy arrays"
    path, out = str(tmp_path / "fp8.onnx"), str(tmp_path / "o.onnx")
    onnx.save(fp8_block(), path)
    assert main(["convert", path, "-o", out, "-q"]) == 0
    assert ": passed;" in capsys.readouterr().out
    written = onnx.load(out)
    assert [t.data_type for t in written.graph.initializer if t.name == "w_q"] == [TensorProto.FLOAT8E4M3FN]
