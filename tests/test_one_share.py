"""One 16-bit share: ``convert`` (auto and all-fp16) and ``check`` on the file it wrote count it with one
function (:func:`onnx_precision.flops.flop_shares`), the model's own Casts counted, the conversion's not,
quantized compute apart (issue 23's leftover)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantized_dynamic import dynamic_block

from onnx_precision.cli import main


def _shares(tmp_path, path: str, options: list[str], capsys) -> tuple[tuple, tuple, list[str]]:
    """convert's share and what it is of (its report JSON's), check's of the written file (its JSON's),
    and what check -q printed."""
    out, checked = str(tmp_path / "o.onnx"), str(tmp_path / "check.json")
    assert main(["convert", path, "-o", out, *options]) == 0
    assert main(["check", path, out, "-q", "--json", checked, *options[options.index("--inputs"):][:2]]) == 0
    printed = capsys.readouterr().out.splitlines()
    with open(str(tmp_path / "o.report.json")) as f:
        converted = json.load(f)["fp16_share"]
    with open(checked) as f:
        share = json.load(f)["low_share"]
    return (converted["flops"], converted["flops_of"]), (share["flops"], share["flops_of"]), printed


def test_convert_and_check_state_one_share_of_a_dynamic_quant_model(tmp_path, capsys):
    # before: convert 31.0% of the non-quantized FLOPs, check 27.8% "of estimated FLOPs" (every Cast
    # left out, quantized compute counted in)
    path, data = dynamic_block(tmp_path)
    converted, checked, printed = _shares(tmp_path, path, ["--inputs", data], capsys)
    assert converted == checked == (pytest.approx(1.0), "the non-quantized estimated FLOPs")
    assert printed[-1].endswith("; FP16: 100.0% of the non-quantized estimated FLOPs")


def test_convert_and_check_count_a_models_own_casts_alike(tmp_path, capsys):
    # x -> Cast(float) -> MatMul -> Relu (kept FP32) -> Cast(int32) -> Cast(float): the model's own
    # Casts compute 256 + 128 + 128 of its 17024 estimated FLOPs. FP32: the Relu and the Cast to int32
    # that reads its output as written, 256. Before, check left every Cast out: 16384 / 16512 = 99.2%
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Cast", ["x"], ["xc"], name="own_cast", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["xc", "w"], ["m"], name="matmul"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Cast", ["r"], ["ri"], name="to_int", to=TensorProto.INT32),
             helper.make_node("Cast", ["ri"], ["y"], name="to_float", to=TensorProto.FLOAT)]
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    graph = helper.make_graph(nodes, "own_casts",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "x.npz")
    onnx.save(model, path)
    np.savez(data, x=rng.uniform(0, 1, (4, 64)).astype(np.float32))
    converted, checked, printed = _shares(tmp_path, path, ["--keep-fp32", "relu", "--inputs", data], capsys)
    assert converted == checked == (pytest.approx(16768 / 17024), "estimated FLOPs")
    assert printed[-1].endswith("; FP16: 98.5% of estimated FLOPs")


def test_all_fp16_lists_no_fused_dequantization_and_counts_where_the_file_computes(tmp_path, capsys):
    # before: "11 node(s) FP16, 2 FP32" (the int32 Casts, 1.3e5, written FP16: check found 32 NaN/Inf);
    # the fused dequantization is FP32 and said once, not listed
    path, data = dynamic_block(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", "all-fp16"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"{out}: 2 node(s) FP16, 0 FP32 (14 quantized node(s) apart), 3 Cast(s) added, "
                          f"1 initializer(s) converted, 0 kept in both precisions")
    assert [line for line in printed if line.startswith("  FP32 ")] == []  # DynamicQuantizeLinear neither
    assert sum(line.startswith("note: 9 dequantization node(s)") for line in printed) == 1
    assert main(["check", path, out, "-q", "--inputs", data]) == 0
    assert capsys.readouterr().out.strip().endswith("; FP16: 100.0% of the non-quantized estimated FLOPs")


def test_all_fp16_counts_a_node_that_reads_a_graph_input_as_written_fp32(tmp_path, capsys):
    # ArgMax takes the FP32 graph input as written: it computes FP32, as auto counts it and check finds
    # it; before, all-fp16 counted it FP16 ("3 node(s) FP16, 0 FP32")
    nodes = [helper.make_node("ArgMax", ["x"], ["idx"], name="argmax", axis=1),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Relu", ["h"], ["z"], name="relu")]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32), "w")
    graph = helper.make_graph(nodes, "argmax",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8]),
                               helper.make_tensor_value_info("idx", TensorProto.INT64, [4, 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx")
    onnx.save(model, path)
    assert main(["convert", path, "-o", out, "--mode", "all-fp16"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{out}: 2 node(s) FP16, 1 FP32, ")
