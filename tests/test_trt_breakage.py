"""Models that pass the generic FP16 emulation and break layer by layer as TensorRT runs them, and the
static facts that predict it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.trt import intermediates as facts
from onnx_precision.trt.ops import decompose
from onnx_precision.trt.reference import layer_model
from onnx_precision.trt.versions import V

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _vi(name, shape):
    return helper.make_tensor_value_info(name, FLOAT, shape)


def run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def generic_fp16(node, inputs, outputs, opset, initializers=()):
    """Today's emulation of an FP16 node: inputs rounded, the op in FP32, the output rounded."""
    inner = helper.make_node(node.op_type,
                             [f"{n}_r" if n in {i.name for i in inputs} else n for n in node.input],
                             ["raw"], **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    nodes = []
    for vi in inputs:
        nodes += [helper.make_node("Cast", [vi.name], [f"{vi.name}_h"], to=FLOAT16),
                  helper.make_node("Cast", [f"{vi.name}_h"], [f"{vi.name}_r"], to=FLOAT)]
    nodes += [inner, helper.make_node("Cast", ["raw"], ["raw_h"], to=FLOAT16),
              helper.make_node("Cast", ["raw_h"], [node.output[0]], to=FLOAT)]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def fp32(node, inputs, outputs, opset, initializers=()):
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_reduce_l2_over_1024_values_of_20_is_inf_only_layer_by_layer():
    x = (20 + np.random.default_rng(0).uniform(-0.5, 0.5, (1, 1024))).astype(np.float32)
    node = helper.make_node("ReduceL2", ["x"], ["y"], name="rl2", axes=[1])
    io = ([_vi("x", [1, 1024])], [_vi("y", [1, 1])])
    want = run(fp32(node, *io, 13), {"x": x})
    generic = run(generic_fp16(node, *io, 13), {"x": x})
    layered = run(layer_model(node, *io, opset=13), {"x": x})
    assert 635 < want[0, 0] < 645
    np.testing.assert_allclose(generic, want, rtol=1e-3)  # 640 is a fine FP16 value
    assert np.isinf(layered[0, 0])  # the sum of squares, 4.1e5, is stored in FP16
    assert facts.sum_of_squares_overflows(1024, float(np.abs(x).max()))
    assert not facts.square_overflows(float(np.abs(x).max()))


def test_reduce_log_sum_exp_of_20_overflows_layer_by_layer():
    x = np.full((1, 1024), 20.0, dtype=np.float32)
    node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], name="lse", axes=[1])
    io = ([_vi("x", [1, 1024])], [_vi("y", [1, 1])])
    generic = run(generic_fp16(node, *io, 13), {"x": x})
    layered = run(layer_model(node, *io, opset=13), {"x": x})
    np.testing.assert_allclose(generic, 20 + np.log(1024), rtol=1e-3)
    assert np.isinf(layered[0, 0])  # exp(20) = 4.9e8: no max is subtracted
    assert facts.exp_overflows(20.0) and not facts.exp_overflows(11.0)
    assert facts.sum_of_exps_overflows(1024, 4.5) and not facts.sum_of_exps_overflows(1024, 4.0)


def test_log_softmax_over_32k_vocabulary_with_one_dominant_logit_flushes_to_minus_inf():
    logits = np.zeros((1, 32768), dtype=np.float32)
    logits[0, 0] = 20.0
    node = helper.make_node("LogSoftmax", ["x"], ["y"], name="lsm", axis=-1)
    io = ([_vi("x", [1, 32768])], [_vi("y", [1, 32768])])
    want = run(fp32(node, *io, 13), {"x": logits})
    generic = run(generic_fp16(node, *io, 13), {"x": logits})
    layered = run(layer_model(node, *io, opset=13), {"x": logits})
    np.testing.assert_allclose(want[0, 1], -20.0, atol=1e-3)
    np.testing.assert_allclose(generic, want, atol=2e-2)
    # Softmax stores p = 2e-9 in FP16 as 0 before LOG.
    assert np.isneginf(layered[0, 1:]).all() and np.isfinite(layered[0, 0])
    assert facts.log_softmax_underflows(20.0) and not facts.log_softmax_underflows(16.0)


def test_cumsum_of_4096_halves_stalls_at_1024_in_the_loop_importer_only():
    x = np.full((1, 4096), 0.5, dtype=np.float32)
    axis = numpy_helper.from_array(np.array(1, dtype=np.int64), "axis")
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs")
    io = ([_vi("x", [1, 4096])], [_vi("y", [1, 4096])])
    want = run(fp32(node, *io, 14, [axis]), {"x": x})
    generic = run(generic_fp16(node, *io, 14, [axis]), {"x": x})
    loop = run(layer_model(node, *io, opset=14, version=V("10.7"), initializers=[axis]), {"x": x})
    assert want[0, -1] == 2048.0 and generic[0, -1] == 2048.0
    assert loop[0, -1] == 1024.0 and loop[0, 2047] == 1024.0 and loop[0, 2046] == 1023.5
    # From 10.8 CumSum is one ICumulativeLayer: nothing to split, the generic emulation applies.
    assert decompose(node, opset=14, fp16=True, version=V("10.8"), constants={"axis": np.array(1)}) is None
    assert facts.cumsum_loop_stalls(1024.0, 0.5) and not facts.cumsum_loop_stalls(1023.5, 0.5)


def test_fp16_spacing_and_thresholds():
    assert facts.fp16_spacing(1024.0) == 1.0 and facts.fp16_spacing(2047.0) == 1.0
    assert facts.fp16_spacing(2048.0) == 2.0 and facts.fp16_spacing(1.0) == 2.0 ** -10
    assert facts.fp16_spacing(1e-6) == 2.0 ** -24
    assert round(facts.LOG_FP16_MAX, 2) == 11.09 and round(facts.LOG_FP16_TINY, 2) == 16.64
    assert facts.square_overflows(256.0) and not facts.square_overflows(255.0)
    assert facts.sum_overflows(3, 30000.0) and not facts.sum_overflows(2, 30000.0)
    assert facts.exceeds_fp16(65505.0) and not facts.exceeds_fp16(-65504.0)
