"""A quantized model's node counts and pin lists count its quantized compute apart, as its FLOP share
does (issue 25 item 1): "FP16: 2/2 non-quantized nodes", "(14 quantized node(s) apart)", and no
DynamicQuantizeLinear among the pins (it takes float32 only: quantized compute, FP32 whatever the
plan). A Q/DQ node kept FP32 for its scale or its opset stays a pin, with its reason."""

from __future__ import annotations

import json

import onnx
from test_quantized import torchao_block
from test_quantized_dynamic import dynamic_block

from onnx_precision.cli import main
from onnx_precision.format import number

DQL_NOTE = ("note: 2 integer op(s) of quantized compute take no 16-bit type and stay FP32, counted apart and "
            "not listed as pins: 2 DynamicQuantizeLinear (DynamicQuantizeLinear-11 schema: T1 allows no "
            "tensor(float16))")


def test_a_quantize_dynamic_block_counts_its_remainder_and_pins_no_dynamic_quantize_linear(tmp_path, capsys):
    # before: "2 node(s) FP16, 11 FP32", "FP16: 2/13 nodes (15.4%)" (the 2 DynamicQuantizeLinear and 9
    # dequantization nodes counted FP32) and "FP32 pins (2): x_QuantizeLinear (type), s_QuantizeLinear (type)"
    path, data = dynamic_block(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--inputs", data]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"{out}: 2 node(s) FP16, 0 FP32 (14 quantized node(s) apart), 3 Cast(s) added, "
                          f"1 initializer(s) converted, 0 kept in both precisions")
    assert printed[3:5] == [
        "FP16: 2/2 non-quantized nodes (100.0%), 100.0% of the non-quantized estimated FLOPs; 99.3% of all "
        "FLOPs are INT8",
        "FP32 pins: none"]
    assert DQL_NOTE in printed
    with open(tmp_path / "o.report.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["fp16_share"] | {"flops_by_precision": None} == {
        "nodes": 1.0, "flops": 1.0, "flops_of": "the non-quantized estimated FLOPs", "16bit_nodes": 2,
        "fp16_nodes": 2, "total_nodes": 2, "nodes_of": "the non-quantized nodes that compute in a float type",
        "quantized_nodes": 14, "flops_by_precision": None}
    assert report["pinned"] == []
    assert report["fp32_integer_ops"] == ["x_QuantizeLinear", "s_QuantizeLinear"]
    with open(tmp_path / "o.report.md", encoding="utf-8") as f:
        markdown = f.read().splitlines()
    assert ("- FP16 share: 2/2 non-quantized nodes (100.0%), 100.0% of the non-quantized estimated FLOPs; "
            "99.3% of all FLOPs are INT8") in markdown
    at = markdown.index("## FP32 nodes (0 pinned, and 11 of quantized compute)")
    assert markdown[at + 2] == ("None pinned: every non-quantized node runs in FP16; the notes say why the "
                                "11 of quantized compute stay FP32.")
    error = report["tradeoff"]["points"][0]["errors"]["y"]  # CPU-dependent (test_quantized_dynamic)
    assert f"| **0 (chosen)** | 100.0% | {number(error)} | yes | - |" in markdown
    with open(tmp_path / "o.report.tradeoff.svg", encoding="utf-8") as f:
        assert ", 0 FP32 pin(s)" in f.read()


def test_all_fp16_of_a_quantize_dynamic_block_lists_no_dynamic_quantize_linear(tmp_path, capsys):
    path, _ = dynamic_block(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", "all-fp16"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"{out}: 2 node(s) FP16, 0 FP32 (14 quantized node(s) apart), ")
    assert not [line for line in printed if line.startswith("  FP32 ")]  # before: the 2 DynamicQuantizeLinear
    assert DQL_NOTE in printed


def test_a_qdq_block_counts_its_remainder_and_keeps_its_scale_pins(tmp_path, capsys):
    # the torchao case: the FP8 activation scale 1.7e-6 keeps q_x and dq_x FP32 (rule), and with them the
    # group (dq_w, matmul: type). The MatMul is quantized compute: out of the counts (before: "1 node(s)
    # FP16, 4 FP32", "FP16: 1/5 nodes (20.0%)"), still a pin, as the Q/DQ nodes
    path, out = str(tmp_path / "tao.onnx"), str(tmp_path / "o.onnx")
    onnx.save(torchao_block(1.7e-6), path)
    assert main(["convert", path, "-o", out]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"{out}: 1 node(s) FP16, 3 FP32 (1 quantized node(s) apart), 2 Cast(s) added, "
                          f"0 initializer(s) converted, 0 kept in both precisions")
    assert printed[3:5] == [
        "FP16: 1/4 non-quantized nodes (25.0%), 14.3% of the non-quantized estimated FLOPs; 82.1% of all "
        "FLOPs are FP8",
        "FP32 pins (4): q_x (rule), dq_x (rule), dq_w (type), matmul (type; FP8 compute, counted apart)"]
    with open(tmp_path / "o.report.json", encoding="utf-8") as f:
        report = json.load(f)
    share = report["fp16_share"]
    assert (share["16bit_nodes"], share["total_nodes"], share["quantized_nodes"]) == (1, 4, 1)
    assert [p["node"] for p in report["pinned"]] == ["q_x", "dq_x", "dq_w", "matmul"]
    assert "fp32_integer_ops" not in report
    with open(tmp_path / "o.report.md", encoding="utf-8") as f:
        assert "## FP32 nodes (4)" in f.read().splitlines()
