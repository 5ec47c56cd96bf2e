"""Memory-minded emulation: large FP16 weights are not widened into FP32 copies."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_precision.context import ModelContext
from onnx_precision.oracle import emulate_model, run_emulated


def _fp16_matmul(rows: int) -> onnx.ModelProto:
    w = (np.random.default_rng(0).standard_normal((rows, 4)) / 8).astype(np.float16)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_large_fp16_weight_stays_fp16_behind_a_cast_and_a_small_one_is_widened():
    big, small = _fp16_matmul(16384), _fp16_matmul(8)  # 128 KiB and 64 bytes of FP16
    for model, kept in ((big, True), (small, False)):
        emulated = emulate_model(model, ".")
        types = {t.name: t.data_type for t in emulated.graph.initializer}
        assert (TensorProto.FLOAT16 in types.values()) == kept
        assert TensorProto.FLOAT in types.values() or kept
        casts = [n for n in emulated.graph.node if n.op_type == "Cast" and n.output[0] == "w"]
        assert len(casts) == int(kept)


def test_the_cast_weight_gives_the_same_outputs_as_a_widened_copy():
    model = _fp16_matmul(16384)
    x = np.random.default_rng(1).standard_normal((1, 16384)).astype(np.float32)
    got = run_emulated(ModelContext.of(model), [{"x": x}]).outputs[0]["y"]
    w = onnx.numpy_helper.to_array(model.graph.initializer[0]).astype(np.float32)
    xr = x.astype(np.float16).astype(np.float32)
    want = (xr @ w).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
