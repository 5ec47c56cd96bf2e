"""Float64 compute converts like float32 compute by default, verified like the rest: a float64 node that
must stay wide stays float64 (not float32), with its reason, and the summary names it; --keep-float64
leaves all float64 compute as it is."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main


def _model_with_a_float64_table(freq: np.ndarray, w_scale: float = 1.0) -> onnx.ModelProto:
    """A MatMul in float32 plus an angle table an exporter left in float64 (Mul, Sin), cast back."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Cast", ["pos"], ["pd"], to=TensorProto.DOUBLE, name="to_double"),
        helper.make_node("Mul", ["pd", "freq"], ["ang"], name="ang_mul"),
        helper.make_node("Sin", ["ang"], ["s"], name="sin"),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT, name="to_float"),
        helper.make_node("Add", ["mm", "sf"], ["y"], name="add"),
    ]
    w = np.random.RandomState(0).randn(64, 64).astype(np.float32) * np.float32(w_scale)
    weights = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(freq.astype(np.float64), "freq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64]),
                                           helper.make_tensor_value_info("pos", TensorProto.FLOAT, [16, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _convert(tmp_path, capsys, model: onnx.ModelProto, positions: np.ndarray, *extra: str,
             ) -> tuple[list[str], dict[str, int], dict]:
    """Convert (auto mode); the summary lines, the written model's element types, the JSON report."""
    path, out, data = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "m.npz")
    onnx.save(model, path)
    np.savez(data, x=np.random.RandomState(1).randn(16, 64).astype(np.float32),
             pos=positions.astype(np.float32).reshape(16, 1))
    assert main(["convert", path, "-o", out, "--inputs", data, *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    written = onnx.shape_inference.infer_shapes(onnx.load(out))
    values = list(written.graph.value_info) + list(written.graph.input) + list(written.graph.output)
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    return lines, types, json.load(open(str(tmp_path / "o.report.json")))


def _note(lines: list[str]) -> list[str]:
    return [line for line in lines if "compute in float64" in line]


SMALL_ANGLES = np.linspace(0.0, 1.0, 16)  # sin of these is FP16-exact enough


def test_float64_compute_converts_to_fp16_where_it_passes(tmp_path, capsys):
    lines, types, report = _convert(tmp_path, capsys, _model_with_a_float64_table(np.full(64, 0.5)),
                                    SMALL_ANGLES)
    # it said "4 node(s) FP16, 2 FP32" with Mul and Sin left in float64, untried
    assert lines[0].startswith(f"{tmp_path / 'o.onnx'}: 6 node(s) FP16, 0 FP32,")
    assert "FP16: 6/6 nodes (100.0%), 100.0% of estimated FLOPs" in lines
    assert _note(lines) == []
    assert types["ang"] == types["s"] == types["pd"] == TensorProto.FLOAT16
    assert not any(t == TensorProto.DOUBLE for t in types.values())
    # the plan measured is the model written: the emulation rounds float64 tensors as the file stores them
    assert report["outputs"]["after"]["outputs"] == report["outputs"]["verified"]["outputs"]


def test_a_float64_table_that_needs_more_than_fp16_stays_float64_with_its_reason(tmp_path, capsys):
    # angles up to 1927 rad: FP16's spacing there is 1, so sin of the rounded angle is noise
    freq = 1.0 / 10000.0 ** (np.arange(64) / 64.0)
    lines, types, report = _convert(tmp_path, capsys, _model_with_a_float64_table(freq, 1 / 64),
                                    np.arange(16) * 128 + 7)
    assert lines[0].startswith(f"{tmp_path / 'o.onnx'}: 4 node(s) FP16, 2 FP32,")
    assert "FP32 pins (2): ang_mul (search), sin (search)" in lines
    assert _note(lines) == ["note: 2 node(s) compute in float64 (1.5% of estimated FLOPs) and stay float64, "
                            "counted with the FP32 nodes: ang_mul (search), sin (search)"]
    # kept wide in their own type: float64, not float32; the 16-bit Cast output is cast back to float64
    assert types["ang"] == types["s"] == TensorProto.DOUBLE
    assert types["pd"] == TensorProto.FLOAT16 and types["pd_fp64"] == TensorProto.DOUBLE
    assert report["plan"]["nodes"]["sin"]["reasons"][0]["source"] == "search"
    assert report["status"] == "passed"
    assert report["outputs"]["after"]["outputs"] == report["outputs"]["verified"]["outputs"]


def test_a_float64_constant_out_of_fp16_range_keeps_its_node_float64(tmp_path, capsys):
    lines, types, report = _convert(tmp_path, capsys, _model_with_a_float64_table(np.full(64, 1e5)),
                                    SMALL_ANGLES * 1e-5)
    assert report["plan"]["nodes"]["ang_mul"]["reasons"][0]["detail"] == (
        "initializer 'freq': |x| up to 100000 exceeds the FP16 maximum 65504")
    assert types["ang"] == TensorProto.DOUBLE
    assert any("ang_mul (initializer)" in line for line in _note(lines))


def test_keep_float64_leaves_float64_compute_as_it_is(tmp_path, capsys):
    lines, types, report = _convert(tmp_path, capsys, _model_with_a_float64_table(np.full(64, 0.5)),
                                    SMALL_ANGLES, "--keep-float64")
    # the Cast to float64 reads the float32 graph input as written: it counts FP32, as the shares count it
    assert lines[0].startswith(f"{tmp_path / 'o.onnx'}: 3 node(s) FP16, 3 FP32,")
    assert "FP16: 3/6 nodes (50.0%), 98.5% of estimated FLOPs" in lines
    assert _note(lines) == ["note: 2 node(s) compute in float64 (1.5% of estimated FLOPs) and stay float64, "
                            "counted with the FP32 nodes: ang_mul (--keep-float64), sin (--keep-float64)"]
    # as before float64 converted: the Cast to float64 reads float32 and writes float64, nothing in between
    assert types["pd"] == types["ang"] == types["s"] == TensorProto.DOUBLE
    assert "pd_fp64" not in types
    assert report["plan"]["nodes"]["sin"]["reasons"][0]["detail"] == (
        "computes in float64, which stays float64 (--keep-float64)")
