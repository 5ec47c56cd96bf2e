"""Quantized models judged for what the 16-bit remainder adds (issue 25 §2, §5): a 16-bit
QuantizeLinear as each target computes it, and the reference the remainder is judged against."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_quantized import torchao_block

from onnx_precision.cli import main


def _fp16_candidate(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` written all FP16 by hand, its Q/DQ scales included (what the qdq-scale rule keeps any
    plan of ours from writing): Cast x -> FP16 graph -> Cast y."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    nodes = list(out.graph.node)
    nodes[0].input[0], nodes[-1].output[0] = "x16", "y16"
    del out.graph.node[:]
    cast_in = helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="cast_in")
    cast_out = helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT, name="cast_out")
    out.graph.node.extend([cast_in, *nodes, cast_out])
    onnx.checker.check_model(out, full_check=True)
    return out


def test_the_torchao_fp16_scale_is_nan_under_tensorrts_reciprocal_not_under_a_division(tmp_path, capsys):
    # scale 1.74e-6 in FP16: TensorRT quantizes by the reciprocal scale, 1/1.74e-6 = 5.7e5 overflows
    # FP16 to inf and 0 * inf = NaN at the input's zeros (E5M2 keeps the NaN); onnxruntime's CUDA kernel
    # divides (the quotient, at most 0.1/1.74e-6 = 57344, holds in FP16). Before, both targets emulated
    # the spec's FP32 division and passed.
    path, candidate = str(tmp_path / "t.onnx"), str(tmp_path / "t16.onnx")
    onnx.save(torchao_block(0.1 / 57344), path)
    onnx.save(_fp16_candidate(torchao_block(0.1 / 57344)), candidate)
    x = np.random.default_rng(0).uniform(0, 0.1, (4, 16)).astype(np.float32)
    x[:, ::3] = 0
    np.savez(tmp_path / "x.npz", x=x)
    data = str(tmp_path / "x.npz")
    assert main(["check", path, candidate, "--inputs", data, "--target", "tensorrt"]) == 1
    assert "64/64 outside bound, 64 new NaN/Inf" in capsys.readouterr().out
    assert main(["check", path, candidate, "--inputs", data]) == 0
    assert "pass (rel RMS err <= 0.05, every slice <= 0.2)" in capsys.readouterr().out


def _mlp_and_original(tmp_path) -> tuple[str, str]:
    """A QDQ MLP at opset 19 and, as its original, the same MLP with its activation quantizers bypassed."""
    from test_quantized import qdq_mlp

    from onnx_precision.quant_reference import bypassed

    path, original = str(tmp_path / "mlp.onnx"), str(tmp_path / "orig.onnx")
    onnx.save(qdq_mlp(19), path)
    proxy = bypassed(qdq_mlp(19))
    assert proxy is not None
    onnx.save(proxy, original)
    return path, original


def test_reference_model_gives_the_quantization_error_the_remainders_and_the_relative_bound(tmp_path, capsys):
    path, original = _mlp_and_original(tmp_path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--reference-model", original]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert (f"note: quantized model: the 16-bit remainder is judged against {original}: on each sample, "
            f"each output's rel RMS err may be at most 1.3 x that sample's quantization error (the QDQ model "
            f"in FP32 against it; --quant-margin 0.3)") in printed
    assert ("note: y: quantization error 0.01578, 16-bit remainder 0.01582 (+0.3% over the quantization "
            "error), bound 0.02051") in printed


def test_the_gate_passes_a_remainder_that_adds_5_percent_and_fails_one_that_adds_50(tmp_path):
    from onnx_precision.compare import compare_outputs
    from onnx_precision.context import load_model
    from onnx_precision.quant_reference import gate
    from onnx_precision.tolerance import Tolerance

    path, original = _mlp_and_original(tmp_path)
    ctx = load_model(path)
    x = np.random.default_rng(0).uniform(0, 1, (4, 32)).astype(np.float32)
    found = gate(ctx, [{"x": x}], Tolerance(), original)
    assert found is not None
    ref = found.outputs[0]["y"]
    import onnxruntime as ort
    qdq = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for added, passes in ((1.05, True), (1.5, False)):
        candidate = ref + added * (qdq - ref)  # the remainder scales the quantization error
        assert compare_outputs({"y": ref}, {"y": candidate}, found.tolerance, "emulate").passed is passes


def test_a_reference_model_with_other_outputs_is_one_line_exit_2(tmp_path, capsys):
    path, original = _mlp_and_original(tmp_path)
    other = onnx.load(original)
    other.graph.output[0].name = "z"
    other.graph.node[-1].output[0] = "z"
    onnx.save(other, original)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--reference-model", original]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"onnx-precision: error: {original}: --reference-model: its outputs (z: float32) are not "
                   f"the model's (y: float32): give the FP32 model the quantized one was made from"]
    assert not (tmp_path / "o.onnx").exists()
