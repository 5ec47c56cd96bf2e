"""Float64 compute is named for what it is: it stays float64, and no count or share calls it 16-bit."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main


def _model_with_a_float64_table() -> onnx.ModelProto:
    """A MatMul in float32 plus an angle table an exporter left in float64 (Mul, Sin), cast back."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE, name="to_double"),
        helper.make_node("Mul", ["xd", "freq"], ["ang"], name="ang_mul"),
        helper.make_node("Sin", ["ang"], ["s"], name="sin"),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT, name="to_float"),
        helper.make_node("Add", ["mm", "sf"], ["y"], name="add"),
    ]
    weights = [numpy_helper.from_array(np.random.RandomState(0).randn(64, 64).astype(np.float32), "W"),
               numpy_helper.from_array(np.full((64,), 0.5), "freq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_float64_nodes_are_not_counted_as_fp16_and_the_summary_names_them(tmp_path, capsys):
    model, out = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx")
    onnx.save(_model_with_a_float64_table(), model)
    data = str(tmp_path / "m.npz")
    np.savez(data, x=np.random.RandomState(1).randn(4, 64).astype(np.float32))
    assert main(["convert", model, "-o", out, "--inputs", data]) == 0
    lines = capsys.readouterr().out.splitlines()
    # it said "6 node(s) FP16, 0 FP32" and "6/6 nodes (100.0%)" with Mul and Sin written in float64
    assert lines[0].startswith(f"{out}: 4 node(s) FP16, 2 FP32,")
    assert "FP16: 4/6 nodes (66.7%), 98.5% of estimated FLOPs" in lines
    assert ("note: 2 node(s) compute in float64 (1.5% of estimated FLOPs) and stay float64: ang_mul, sin; "
            "onnx-precision converts float32 compute only, and counts these with the FP32 nodes") in lines
    written = onnx.shape_inference.infer_shapes(onnx.load(out))
    types = {v.name: v.type.tensor_type.elem_type for v in written.graph.value_info}
    assert types["ang"] == types["s"] == TensorProto.DOUBLE
    report = json.load(open(str(tmp_path / "o.report.json")))
    assert report["plan"]["nodes"]["sin"]["reasons"][0]["detail"] == (
        "computes in float64, which stays float64 (onnx-precision converts float32 compute only)")
