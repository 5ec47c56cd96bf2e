"""Where onnxruntime runs the written model, a Q/DQ group its CPU provider fuses into a QLinear* op of
com.microsoft whose scales are float32 only is kept FP32 as a whole only where that fusion makes the
16-bit model fail to load: written with FP16 scales, QLinearConcat made the model fail to load at
onnxruntime's default options (exit 3, ort-load-failed: NudeNet 320n quantized by quantize_static). The
other groups (Add, Mul, Sigmoid, ...) load with FP16 scales (they do not fuse: their op has no float16 CPU
kernel) and go 16-bit like any node."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import quantized
from onnx_precision.cli import main


def qdq_concat_add(opset: int = 19, c: int = 4, bias: bool = False) -> onnx.ModelProto:
    """x -> Q -> two DQ -> Conv <- DQ (INT8 weight; with ``bias``, an INT32 bias through a DQ as
    quantize_static writes it) -> Q groups, whose outputs meet in a DQ -> Concat -> Q and a
    DQ -> Add <- DQ -> Q group (UINT8 activations), each then dequantized into a float tail
    (GlobalAveragePool, Relu)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "s_x"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s_y"),
             numpy_helper.from_array(np.array(0.1, np.float32), "s_o"),
             numpy_helper.from_array(np.array(128, np.uint8), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "zp"], ["xq"], name="q_x")]
    for i in (1, 2):
        w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
        w_scale = (np.abs(w).reshape(c, -1).max(axis=1) / 127).astype(np.float32)
        w_q = np.round(w / w_scale[:, None, None, None]).astype(np.int8)
        inits += [numpy_helper.from_array(w_q, f"w{i}"),
                  numpy_helper.from_array(w_scale, f"ws{i}"),
                  numpy_helper.from_array(np.zeros(c, np.int8), f"wz{i}")]
        if bias:
            b_scale = (0.02 * w_scale).astype(np.float32)
            inits += [numpy_helper.from_array(rng.integers(-500, 500, c).astype(np.int32), f"b{i}"),
                      numpy_helper.from_array(b_scale, f"bs{i}"),
                      numpy_helper.from_array(np.zeros(c, np.int32), f"bz{i}")]
            nodes.append(helper.make_node("DequantizeLinear", [f"b{i}", f"bs{i}", f"bz{i}"], [f"bd{i}"],
                                          name=f"dq_b{i}", axis=0))
        nodes += [helper.make_node("DequantizeLinear", ["xq", "s_x", "zp"], [f"xd{i}"], name=f"dq_x{i}"),
                  helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wd{i}"],
                                   name=f"dq_w{i}", axis=0),
                  helper.make_node("Conv", [f"xd{i}", f"wd{i}"] + [f"bd{i}"] * bias, [f"c{i}"],
                                   name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"c{i}", "s_y", "zp"], [f"cq{i}"], name=f"q_c{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"cq{i}", "s_y", "zp"], [f"{op}{i}"],
                                   name=f"dq_{op}{i}") for op in ("cat", "add")]
    nodes += [helper.make_node("Concat", ["cat1", "cat2"], ["cat"], name="concat", axis=1),
              helper.make_node("QuantizeLinear", ["cat", "s_o", "zp"], ["catq"], name="q_cat"),
              helper.make_node("DequantizeLinear", ["catq", "s_o", "zp"], ["catd"], name="dq_cat"),
              helper.make_node("GlobalAveragePool", ["catd"], ["y"], name="pool"),
              helper.make_node("Add", ["add1", "add2"], ["sum"], name="add"),
              helper.make_node("QuantizeLinear", ["sum", "s_o", "zp"], ["sumq"], name="q_sum"),
              helper.make_node("DequantizeLinear", ["sumq", "s_o", "zp"], ["sumd"], name="dq_sum"),
              helper.make_node("Relu", ["sumd"], ["z"], name="relu")]
    graph = helper.make_graph(nodes, "qdq_concat_add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, 1, 1]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _fused_ops(path: str, tmp_path) -> Counter:
    """The op types of onnxruntime's optimized model of ``path``, loaded at its default options."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return Counter(node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node)


CONCAT_REASON = ("quantized group of 'concat' (INT8): onnxruntime's CPU provider fuses it into "
                 "QLinearConcat (com.microsoft), whose scales are float32 only (onnxruntime/core/optimizer/"
                 "qdq_transformer/selectors_actions); with FP16 scales the model fails to load at "
                 "onnxruntime's default options")


def test_only_the_concat_group_whose_fusion_fails_to_load_stays_fp32(tmp_path, capsys):
    # the Concat group: written with FP16 scales, QLinearConcat rejected its float16 scale at the default
    # load (exit 3, ort-load-failed), so it stays FP32 as a whole and still fuses
    path, out, plan = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(qdq_concat_add(), path)
    assert _fused_ops(path, tmp_path)["QLinearConcat"] == 1
    assert main(["convert", path, "-o", out, "--save-plan", plan]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"{path} -> {out}: passed" in printed
    # FP32 whatever a plan says, as quantized compute: one note, no pins
    assert "FP32 pins: none" in printed
    assert ("note: 4 node(s) of 1 Q/DQ group(s) that onnxruntime's CPU provider fuses into ops taking "
            "float32 scales only (1 QLinearConcat) stay FP32 as quantized compute, not listed as pins: with "
            "16-bit scales their fusion fails to load at onnxruntime's default options (measured on "
            f"onnxruntime {ort.__version__}; onnxruntime/core/optimizer/qdq_transformer/selectors_actions)"
            ) in printed
    report = json.load(open(str(tmp_path / "o.report.json")))
    assert report["status"] == "passed" and report["pinned"] == []
    assert report["ort_fused"] == ["dq_cat1", "dq_cat2", "concat", "q_cat"]
    assert _fused_ops(out, tmp_path)["QLinearConcat"] == 1
    decisions = json.load(open(plan))["nodes"]
    for member in ("dq_cat1", "dq_cat2", "concat", "q_cat"):
        assert decisions[member]["precision"] == "fp32"
        assert decisions[member]["reasons"][-1]["detail"] == CONCAT_REASON
    assert decisions["pool"]["precision"] == decisions["relu"]["precision"] == "fp16"


def test_the_add_group_whose_fp16_form_loads_goes_fp16_with_no_cast_inside(tmp_path):
    # before, every group onnxruntime would fuse was kept FP32; DQ -> Add -> Q with FP16 scales loads
    # (Add has no float16 CPU kernel: the CPU-only selector never sees it), so it is a node like any other:
    # its DQs output FP16 and its Q takes it, no Cast inside
    path, out, plan = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(qdq_concat_add(), path)
    assert main(["convert", path, "-o", out, "--save-plan", plan, "-q"]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert {decisions[m]["precision"] for m in ("dq_add1", "dq_add2", "add", "q_sum")} == {"fp16"}
    written = onnx.shape_inference.infer_shapes(onnx.load(out))
    nodes = {n.name: n for n in written.graph.node}
    types = {v.name: v.type.tensor_type.elem_type for v in written.graph.value_info}
    types.update({t.name: t.data_type for t in written.graph.initializer})
    for dq in ("dq_add1", "dq_add2"):
        assert types[nodes[dq].input[1]] == types[nodes[dq].output[0]] == TensorProto.FLOAT16
    assert nodes["add"].input[:] == [nodes["dq_add1"].output[0], nodes["dq_add2"].output[0]]
    assert nodes["q_sum"].input[0] == nodes["add"].output[0]
    assert types[nodes["q_sum"].input[1]] == TensorProto.FLOAT16
    assert not any(n.op_type == "Cast" and set(n.input) & {"add1", "add2", "sum"} for n in written.graph.node)
    assert json.load(open(str(tmp_path / "o.report.json")))["status"] == "passed"


def test_of_the_fusible_kinds_only_concat_fails_to_load_with_fp16_scales():
    # the probe's measured answers on onnxruntime 1.32 (CPU, default options): Concat has a float16 CPU
    # kernel, so its group fuses into QLinearConcat, which rejects float16 scales; the others have none,
    # do not fuse and load. With float32 scales every group loads (and fuses)
    fails = {op: quantized.fusion_fails_to_load(op, TensorProto.UINT8, TensorProto.FLOAT16, 19)
             for op in quantized.ORT_QLINEAR_FUSIONS}
    assert [op for op, failed in fails.items() if failed] == ["Concat"]
    assert quantized.fusion_fails_to_load("Concat", TensorProto.INT8, TensorProto.FLOAT16, 21)
    assert not quantized.fusion_fails_to_load("Concat", TensorProto.UINT8, TensorProto.FLOAT, 19)


def test_the_fp32_concat_group_counts_as_quantized_compute_in_the_shares(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(qdq_concat_add(), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx")]) == 0
    # the 4 Q/DQ/Concat nodes of the FP32 Concat group and the 2 Convs are quantized compute, counted
    # apart: the 16-bit share counts the float remainder alone (the Add group's 4 nodes among it)
    printed = capsys.readouterr().out.splitlines()
    assert ("FP16: 15/15 non-quantized nodes (100.0%), 100.0% of the non-quantized estimated FLOPs; 90.3% of "
            "all FLOPs are INT8") in printed
    assert any(line.endswith("; 6 node(s) of quantized compute (DQ -> Conv/MatMul/Gemm <- DQ groups, the "
                             "Q/DQ groups whose QLinear* fusion fails to load in 16 bits, integer ops) are "
                             "counted apart from the 16-bit share and the node counts") for line in printed)


def test_under_tensorrt_the_groups_are_not_onnxruntimes_to_fuse_and_stay_16_bit(tmp_path):
    # TensorRT places Q/DQ by its own rules; onnxruntime's optimiser does not run the written model
    path, plan = str(tmp_path / "m.onnx"), str(tmp_path / "p.json")
    onnx.save(qdq_concat_add(), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--target", "tensorrt", "--save-plan", plan,
                 "-q"]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert {decisions[m]["precision"] for m in ("dq_add1", "dq_add2", "add", "q_sum", "concat", "q_cat")} \
        == {"fp16"}


def test_a_conv_groups_bias_dq_stays_in_its_group_so_an_fp32_group_still_fuses(tmp_path):
    # quantize_static dequantizes a Conv's INT32 bias with a DQ of its own; onnxruntime's ConvSelector
    # wants a DQ on every Conv input. Before, that DQ was no member of the group: with the group kept
    # FP32 (here by the user) it was written FP16 and Cast back, and onnxruntime fused no QLinearConv
    path, out, plan = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(qdq_concat_add(bias=True), path)
    assert _fused_ops(path, tmp_path)["QLinearConv"] == 2
    assert main(["convert", path, "-o", out, "--keep-fp32", "conv1", "--save-plan", plan, "-q"]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert decisions["dq_b1"]["precision"] == "fp32" and decisions["dq_b1"]["reasons"][-1]["detail"] == (
        "quantized group of 'conv1' (INT8): 'conv1' is FP32, and a Cast inside the group would stop its "
        "fusion")
    assert decisions["dq_b2"]["precision"] == decisions["conv2"]["precision"] == "fp16"
    assert _fused_ops(out, tmp_path)["QLinearConv"] == 1
