"""Smaller statements a run makes, made true (issue 33, item 7): each test fails before its change."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_precision.cli import main

N = helper.make_node


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_analyze_says_past_the_maximum_apart_from_within_one_binade(tmp_path, capsys):
    """x*x reaches 90000 (0.46 binade past FP16's 65504), half of it 45000 (0.54 binade short): the first
    was listed under "within one binade of the 16-bit limits"."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    model = _model([N("Mul", ["x", "x"], ["sq"], name="square"),
                    N("Mul", ["sq", "half"], ["h"], name="halve"), N("Sqrt", ["h"], ["y"], name="root")],
                   [_vi("x", [4])], [_vi("y", [4])], [half])
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(model, path)
    np.savez(data, x=np.array([1, 2, 100, 300], np.float32))
    assert main(["analyze", path, "--inputs", data, "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "past the 16-bit limits on the samples: square (0.46 binade(s) past the maximum)" in out
    assert "within one binade of the 16-bit limits on the samples: halve (0.54 binade(s) to overflow)" in out
