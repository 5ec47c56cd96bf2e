"""Quantized models: Q/DQ (INT8, FP8), MatMulNBits; what is quantized, how the 16-bit remainder is
written around it, and the scales FP16 cannot hold. Every model is quantized by hand with onnx.helper."""

from __future__ import annotations

import json

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


def qdq_mlp(opset: int, layers: int = 2, n: int = 32) -> onnx.ModelProto:
    """x -> [Q/DQ (per-tensor INT8) -> MatMul <- DQ (per-column INT8 weight) -> Add -> Relu] x layers
    -> Softmax."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((n, n)).astype(np.float32) * 0.2
        w_scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
        inits += [numpy_helper.from_array(np.round(w / w_scale).astype(np.int8), f"w{i}_q"),
                  numpy_helper.from_array(w_scale, f"w{i}_s"),
                  numpy_helper.from_array(np.zeros(n, np.int8), f"w{i}_zp"),
                  numpy_helper.from_array(np.array(0.05, np.float32), f"a{i}_s"),
                  numpy_helper.from_array(np.array(0, np.int8), f"a{i}_zp"),
                  numpy_helper.from_array(rng.standard_normal(n).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [helper.make_node("QuantizeLinear", [x, f"a{i}_s", f"a{i}_zp"], [f"q{i}"], name=f"q{i}"),
                  helper.make_node("DequantizeLinear", [f"q{i}", f"a{i}_s", f"a{i}_zp"], [f"d{i}"],
                                   name=f"dq{i}"),
                  helper.make_node("DequantizeLinear", [f"w{i}_q", f"w{i}_s", f"w{i}_zp"], [f"dw{i}"],
                                   name=f"dqw{i}", axis=1),
                  helper.make_node("MatMul", [f"d{i}", f"dw{i}"], [f"mm{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"ad{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"ad{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    nodes.append(helper.make_node("Softmax", [x], ["y"], name="softmax", axis=-1))
    return _model(nodes, inits, [4, n], [4, n], opset, "qdq_mlp")


def qdq_conv(opset: int, c: int = 8, x_scale: float = 0.02) -> onnx.ModelProto:
    """x -> Q/DQ (UINT8) -> Conv <- DQ (per-channel INT8) -> Relu -> Q/DQ -> GlobalAveragePool -> Sigmoid."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
    w_scale = (np.abs(w).reshape(c, -1).max(axis=1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(np.round(w / w_scale[:, None, None, None]).astype(np.int8), "w_q"),
             numpy_helper.from_array(w_scale, "w_s"), numpy_helper.from_array(np.zeros(c, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(x_scale, np.float32), "x_s"),
             numpy_helper.from_array(np.array(0, np.uint8), "x_zp"),
             numpy_helper.from_array(np.array(0.05, np.float32), "y_s"),
             numpy_helper.from_array(np.array(0, np.uint8), "y_zp"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32) * 0.1, "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["xq"], name="q_x"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "x_zp"], ["xd"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["wd"], name="dq_w", axis=0),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "y_s", "y_zp"], ["rq"], name="q_y"),
             helper.make_node("DequantizeLinear", ["rq", "y_s", "y_zp"], ["rd"], name="dq_y"),
             helper.make_node("GlobalAveragePool", ["rd"], ["p"], name="pool"),
             helper.make_node("Sigmoid", ["p"], ["y"], name="sigmoid")]
    return _model(nodes, inits, [1, c, 16, 16], [1, c, 1, 1], opset, "qdq_conv")


def dq_cast_kernels(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(DQ, kernel) for every DequantizeLinear -> Cast -> Conv/MatMul/Gemm in ``model``."""
    made = {out: node for node in model.graph.node for out in node.output}
    return [(made[cast.input[0]].name, kernel.name) for kernel in model.graph.node
            if kernel.op_type in ("Conv", "MatMul", "Gemm") for name in kernel.input[:2]
            for cast in [made.get(name)] if cast is not None and cast.op_type == "Cast"
            and cast.input[0] in made and made[cast.input[0]].op_type == "DequantizeLinear"]


def _written_types(model: onnx.ModelProto) -> dict[str, int]:
    """Node name -> the element type of its first output, in the written model."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = list(inferred.graph.value_info) + list(inferred.graph.output)
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    return {n.name: types.get(n.output[0], 0) for n in inferred.graph.node}


def test_a_qdq_mlp_at_opset_17_is_raised_to_19_and_its_dqs_feed_the_matmuls_in_fp16(tmp_path, capsys):
    # before: every DQ written FP32 (DequantizeLinear outputs float only before 19) and Cast to FP16
    # for its MatMul: 4 DQ -> Cast -> MatMul, each stopping TensorRT's INT8 fusion
    path, out = str(tmp_path / "mlp.onnx"), str(tmp_path / "o.onnx")
    onnx.save(qdq_mlp(17), path)
    assert main(["convert", path, "-o", out]) == 0
    printed = capsys.readouterr().out
    assert ("note: opset 17 -> 19 so that QuantizeLinear, DequantizeLinear take float16 (onnx's version "
            "converter); the upgraded FP32 model matches the original on the samples "
            "(bit-identical)") in printed
    written = onnx.load(out)
    assert written.opset_import[0].version == 19
    assert dq_cast_kernels(written) == []
    types = _written_types(written)
    assert {types[n] for n in ("dq0", "dqw0", "matmul0", "dq1", "dqw1", "matmul1")} == {TensorProto.FLOAT16}


def test_a_qdq_conv_block_at_opset_13_converts_with_no_cast_between_a_dq_and_its_conv(tmp_path):
    path, out = str(tmp_path / "conv.onnx"), str(tmp_path / "o.onnx")
    onnx.save(qdq_conv(13), path)
    assert main(["convert", path, "-o", out, "-q"]) == 0
    written = onnx.load(out)
    assert dq_cast_kernels(written) == []
    assert _written_types(written)["conv"] == TensorProto.FLOAT16


def test_with_keep_opset_a_quantized_group_stays_fp32_whole_rather_than_cast_inside(tmp_path, capsys):
    path, out, plan = str(tmp_path / "conv.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(qdq_conv(17), path)
    assert main(["convert", path, "-o", out, "--keep-opset", "--save-plan", plan]) == 0
    assert ("note: --keep-opset: opset 17 kept, where QuantizeLinear, DequantizeLinear take no float16: the "
            "quantized groups stay FP32") in capsys.readouterr().out
    written = onnx.load(out)
    assert written.opset_import[0].version == 17 and dq_cast_kernels(written) == []
    decisions = json.load(open(plan))["nodes"]
    assert decisions["conv"]["precision"] == "fp32"
    assert decisions["conv"]["reasons"][-1]["detail"] == (
        "quantized group of 'conv' (INT8): 'dq_x' is FP32, and a Cast inside the group would stop its fusion")
    assert decisions["relu"]["precision"] == "fp16"


def test_an_fp8_qdq_block_with_a_large_fp8_weight_converts(tmp_path, capsys):
    # the FP8 weight (256 KiB) reached onnxruntime by reference as an ml_dtypes array, which it took
    # for a string array: "Creation of OrtValues is currently only supported from non-string numpy arrays"
    path, out = str(tmp_path / "fp8.onnx"), str(tmp_path / "o.onnx")
    onnx.save(fp8_block(), path)
    assert main(["convert", path, "-o", out, "-q"]) == 0
    assert ": passed on synthetic data (no --inputs); worst " in capsys.readouterr().out
    written = onnx.load(out)
    assert [t.data_type for t in written.graph.initializer if t.name == "w_q"] == [TensorProto.FLOAT8E4M3FN]


def torchao_block(x_scale: float, n: int = 16) -> onnx.ModelProto:
    """x -> Q/DQ (FP8 E5M2, scale ``x_scale``) -> MatMul <- DQ (FP8 E5M2 weight) -> Relu, at opset 21
    (Q/DQ take FP16 scales there)."""
    w = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32) * 0.2
    inits = [numpy_helper.from_array(np.array(x_scale, np.float32), "x_s"),
             helper.make_tensor("zp", TensorProto.FLOAT8E5M2, [], [0.0]),
             helper.make_tensor("w_q", TensorProto.FLOAT8E5M2, [n, n], (w / 0.01).ravel().tolist()),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_s")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "zp"], ["xq"], name="q_x"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "zp"], ["xd"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "zp"], ["wd"], name="dq_w"),
             helper.make_node("MatMul", ["xd", "wd"], ["mm"], name="matmul"),
             helper.make_node("Relu", ["mm"], ["y"], name="relu")]
    return _model(nodes, inits, [4, n], [4, n], 21, "torchao")


def _zero_input(tmp_path) -> str:
    """A sample in [0, 0.1] with zeros (where 0 * inf = NaN)."""
    x = np.random.default_rng(0).uniform(0, 0.1, (4, 16)).astype(np.float32)
    x[:, ::3] = 0
    np.savez(tmp_path / "x.npz", x=x)
    return str(tmp_path / "x.npz")


TORCHAO = ("qdq-scale: scale 'x_s' is 1.74e-06: its reciprocal 5.73e+05 overflows FP16 (max 65504), so a "
           "runtime that multiplies by 1/scale in FP16 gets inf and 0 * inf = NaN at the input's zeros "
           "(torchao's FP8 cast)")


def test_the_torchao_scale_keeps_fp32_with_its_group_named_with_its_value(tmp_path, capsys):
    # a [0, 0.1] range mapped onto E5M2's 57344: scale 1.7e-6, written FP16 and named nowhere before
    path, out, plan = str(tmp_path / "t.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(torchao_block(0.1 / 57344), path)
    assert main(["convert", path, "-o", out, "--inputs", _zero_input(tmp_path), "--save-plan", plan]) == 0
    assert ("FP32 pins (4): q_x (rule), dq_x (rule), dq_w (type), matmul (type; FP8 compute, counted apart)"
            in capsys.readouterr().out)
    decisions = json.load(open(plan))["nodes"]
    assert decisions["q_x"]["reasons"][-1]["detail"] == TORCHAO
    assert decisions["q_x"]["reasons"][-1]["evidence"] == {"scale": "x_s", "value": "1.744e-06"}
    written = onnx.load(out)
    assert {t.name: t.data_type for t in written.graph.initializer}["x_s"] == TensorProto.FLOAT
    assert dq_cast_kernels(written) == []
    assert main(["analyze", path, "--inputs", str(tmp_path / "x.npz")]) == 0
    assert ("q_x: " + TORCHAO.removeprefix("qdq-scale: ") + "; kept FP32 in any plan (the rule's finding)"
            in capsys.readouterr().out.splitlines())


def test_a_scale_that_flushes_in_fp16_is_named_and_kept_fp32(tmp_path, capsys):
    # 2e-8 rounds to 0 in FP16 (at or below half its smallest subnormal 5.96e-8)
    path, plan = str(tmp_path / "t.onnx"), str(tmp_path / "p.json")
    onnx.save(torchao_block(2e-8), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert decisions["dq_x"]["reasons"][-1]["detail"] == (
        "qdq-scale: scale 'x_s' is 2e-08, zero in FP16: x/0 = inf and 0/0 = NaN on every runtime")
    assert decisions["matmul"]["precision"] == "fp32"
    assert decisions["relu"]["precision"] == "fp16"


def test_a_subnormal_scale_that_fp16_rounds_within_the_int8_quantum_is_a_note_not_a_pin(tmp_path, capsys):
    # Was kept FP32 for being subnormal ('10 significant bit(s) left'): FP16 rounds 4e-5 by 0.013%, 1/30
    # of INT8's quantum 1/2^8 of its range (real per-channel INT8 models: at most 0.19%, no output
    # changed, scripts/bench_scale_audit.py). The search judges the node on the samples.
    path, plan = str(tmp_path / "t.onnx"), str(tmp_path / "p.json")
    onnx.save(torchao_block(4e-5), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert {n: d["precision"] for n, d in decisions.items()} == dict.fromkeys(
        ("q_x", "dq_x", "dq_w", "matmul", "relu"), "fp16")
    capsys.readouterr()
    main(["analyze", path])
    assert ("dq_x: scale 'x_s' is 4e-05, subnormal in FP16 (below 6.1e-05): FP16 rounds it by 0.013% at "
            "most, within the quantum 1/2^8 of an 8-bit range (0.39%): kept FP16, judged on the samples (a "
            "runtime that flushed FP16 subnormals would read 0)") in capsys.readouterr().out


def test_a_dequantize_scale_is_judged_by_its_rounding_not_by_a_reciprocal_it_never_takes(tmp_path):
    # A DequantizeLinear multiplies by its scale: 1e-5 (below 1/65504) was kept FP32 for 'its reciprocal
    # overflows FP16', which only a QuantizeLinear computes. 1e-5 rounds by 0.19% in FP16, within INT8's
    # quantum (kept FP16); 2e-6 by 1.3%, more (kept FP32, with the figure).
    path, plan = str(tmp_path / "t.onnx"), str(tmp_path / "p.json")
    precision = ("qdq-scale: scale 'w0_s' is 2e-06, subnormal in FP16 (below 6.1e-05): FP16 rounds it by "
                 "1.3% at most, more than the quantum 1/2^8 of an 8-bit range (0.39%): every value it scales "
                 "moves by more than the quantizer resolves")
    for scale, pinned in ((1e-5, None), (2e-6, precision)):
        model = qdq_mlp(19)
        weights = next(i for i in model.graph.initializer if i.name == "w0_s")
        weights.CopyFrom(numpy_helper.from_array(np.full(32, scale, np.float32), "w0_s"))
        onnx.save(model, path)
        assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
        reasons = [r["detail"] for r in json.load(open(plan))["nodes"]["dqw0"]["reasons"]]
        assert [r for r in reasons if r.startswith("qdq-scale")] == ([pinned] if pinned else [])


def nbits_block(zero_point: float | None = None) -> onnx.ModelProto:
    """x -> MatMulNBits (4-bit weights, com.microsoft; with float zero points all ``zero_point`` but the
    first, 8) -> Add -> Relu, at opset 17."""
    k, n, block = 64, 32, 32
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, (n, k // block, block // 2), dtype=np.uint8)
    inits = [numpy_helper.from_array(packed, "w_q4"),
             numpy_helper.from_array((rng.uniform(0.01, 0.02, n * k // block)).astype(np.float32), "w_s"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32) * 0.1, "b")]
    inputs = ["x", "w_q4", "w_s"]
    if zero_point is not None:
        zero = np.full(n * k // block, zero_point, np.float32)
        zero[0] = 8
        inits.append(numpy_helper.from_array(zero, "w_zp"))
        inputs.append("w_zp")
    nodes = [helper.make_node("MatMulNBits", inputs, ["mm"], name="matmul_q4",
                              domain="com.microsoft", K=k, N=n, bits=4, block_size=block),
             helper.make_node("Add", ["mm", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "q4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def test_a_4bit_matmulnbits_block_converts_all_fp16(tmp_path, capsys):
    # q4f16: 4-bit weights (com.microsoft MatMulNBits), computing in its activations' type
    path, out = str(tmp_path / "q4.onnx"), str(tmp_path / "o.onnx")
    onnx.save(nbits_block(), path)
    assert main(["convert", path, "-o", out]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "FP16: 3/3 nodes (100.0%), 100.0% of estimated FLOPs" in printed
    assert ("note: quantized model: the reference is its Q/DQ run in FP32 as the ONNX specification defines "
            "them, float fake-quantisation (onnxruntime with its optimisations off), not onnxruntime's fused "
            "integer kernels nor TensorRT's") in printed
    written = onnx.load(out)
    assert {t.name: t.data_type for t in written.graph.initializer}["w_s"] == TensorProto.FLOAT16
    assert [n.op_type for n in written.graph.node] == ["Cast", "MatMulNBits", "Add", "Relu", "Cast"]


def test_the_shares_of_a_qdq_model_count_its_integer_kernels_apart(tmp_path, capsys):
    path = str(tmp_path / "mlp.onnx")
    onnx.save(qdq_mlp(19), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx")]) == 0
    printed = capsys.readouterr().out.splitlines()
    # the two 4x32x32 MatMuls: 2 * 2*4*32*32 = 16384 of the model's 19584 estimated FLOPs
    assert ("FP16: 11/11 non-quantized nodes (100.0%), 100.0% of the non-quantized estimated FLOPs; 83.7% of "
            "all FLOPs are INT8") in printed
    assert any(line.endswith("; 2 node(s) of quantized compute (DQ -> Conv/MatMul/Gemm <- DQ groups, integer "
                             "ops) are counted apart from the 16-bit share and the node counts")
               for line in printed)


def _com_microsoft(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its Q/DQ nodes those of com.microsoft (onnxruntime's contrib Q/DQ)."""
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            node.domain = "com.microsoft"
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_a_com_microsoft_qdq_mlp_is_raised_to_19_and_its_dqs_feed_the_matmuls_in_fp16(tmp_path, capsys):
    # before: written FP16 at opset 17, where onnxruntime's MatMulAddFusion makes an ai.onnx DQ of the
    # bias with a float16 scale, which it then refuses (exit 3: "Type 'tensor(float16)' of input
    # parameter (matmul0/MatMulAddFusion_bias_scale) of operator (DequantizeLinear) ... is invalid")
    path, out = str(tmp_path / "mlp.onnx"), str(tmp_path / "o.onnx")
    onnx.save(_com_microsoft(qdq_mlp(17)), path)
    assert main(["convert", path, "-o", out]) == 0
    assert ("note: opset 17 -> 19 so that QuantizeLinear, DequantizeLinear take float16 (onnx's version "
            "converter); the upgraded FP32 model matches the original on the samples "
            "(bit-identical)") in capsys.readouterr().out
    written = onnx.load(out)
    assert dq_cast_kernels(written) == []
    # onnx infers no type for a com.microsoft output: the scales are float16 and the only Casts the edges'
    assert {t.name: t.data_type for t in written.graph.initializer if t.name.endswith("_s")} == dict.fromkeys(
        ("w0_s", "a0_s", "w1_s", "a1_s"), TensorProto.FLOAT16)
    assert [n.name for n in written.graph.node if n.op_type == "Cast"] == ["x_cast_fp16", "y_fp16_cast_fp32"]


def test_a_com_microsoft_qdq_scale_is_audited(tmp_path):
    model = qdq_mlp(19)
    next(t for t in model.graph.initializer if t.name == "a0_s").CopyFrom(
        numpy_helper.from_array(np.array(2e-8, np.float32), "a0_s"))
    path, plan = str(tmp_path / "mlp.onnx"), str(tmp_path / "p.json")
    onnx.save(_com_microsoft(model), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert decisions["dq0"]["reasons"][-1]["detail"] == (
        "qdq-scale: scale 'a0_s' is 2e-08, zero in FP16: x/0 = inf and 0/0 = NaN on every runtime")
    assert (decisions["matmul0"]["precision"], decisions["matmul1"]["precision"]) == ("fp32", "fp16")


def test_a_float_zero_point_fp16_cannot_hold_is_named_with_its_value_and_kept_fp32(tmp_path):
    # a float zero point of 2049 written FP16 is 2048: every weight of its block off by one quantum,
    # converted silently before (FP16 holds every integer only up to 2048)
    path, plan = str(tmp_path / "q4.onnx"), str(tmp_path / "p.json")
    onnx.save(nbits_block(2049.0), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert decisions["matmul_q4"]["precision"] == "fp32"
    assert decisions["matmul_q4"]["reasons"][-1]["detail"] == (
        "qdq-scale: zero point 'w_zp' is 2049, which FP16 rounds to 2048 (every integer is exact only up to "
        "2048): every value it dequantizes is off by 1 x its scale")
    assert decisions["matmul_q4"]["reasons"][-1]["evidence"] == {"zero_point": "w_zp", "value": "2049"}
    # 8.5 and every integer up to 2048 FP16 holds exactly: nothing to say
    onnx.save(nbits_block(8.5), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    assert json.load(open(plan))["nodes"]["matmul_q4"]["precision"] == "fp16"


def test_a_matmulnbits_scale_that_flushes_in_fp16_is_named_and_kept_fp32(tmp_path):
    model = nbits_block()
    next(t for t in model.graph.initializer if t.name == "w_s").CopyFrom(
        numpy_helper.from_array(np.full(64, 2e-8, np.float32), "w_s"))
    path, plan = str(tmp_path / "q4.onnx"), str(tmp_path / "p.json")
    onnx.save(model, path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q", "--save-plan", plan]) == 0
    decisions = json.load(open(plan))["nodes"]
    assert decisions["matmul_q4"]["reasons"][-1]["detail"] == (
        "qdq-scale: scale 'w_s' is 2e-08, zero in FP16: every weight it scales is 0")
    assert (decisions["matmul_q4"]["precision"], decisions["relu"]["precision"]) == ("fp32", "fp16")
