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
