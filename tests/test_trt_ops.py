"""The op table: layers per op and release, and spelled decompositions that compute the op in FP32."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.trt.cumsum import cumsum_fp16_loop
from onnx_precision.trt.ops import TABLE, decompose, node_layers, split_op_types
from onnx_precision.trt.reference import layer_model
from onnx_precision.trt.spell import DecompositionError
from onnx_precision.trt.versions import NEWEST, TrtVersion, V

RNG = np.random.default_rng(7)


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def single_node_model(node, inputs, outputs, opset, initializers=()):
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


X4 = (2, 3, 4, 5)
# (op, opset, attributes, extra constant inputs, input shapes, release)
CASES: list[tuple[str, int, dict[str, object], list[onnx.TensorProto], list[tuple[int, ...]], TrtVersion]] = [
    ("ReduceSumSquare", 17, {"axes": [1, 3]}, [], [X4], NEWEST),
    ("ReduceSumSquare", 18, {"keepdims": 0}, [ints("axes", [2])], [X4], NEWEST),
    ("ReduceL2", 13, {"axes": [-1], "keepdims": 0}, [], [X4], NEWEST),
    ("ReduceL2", 18, {}, [ints("axes", [1, -1])], [X4], NEWEST),
    ("ReduceLogSumExp", 13, {"axes": [2]}, [], [X4], NEWEST),
    ("ReduceLogSumExp", 18, {}, [ints("axes", [0])], [X4], NEWEST),
    ("ReduceLogSum", 13, {}, [], [X4], NEWEST),
    ("ReduceL1", 11, {"axes": [0]}, [], [X4], NEWEST),
    ("LogSoftmax", 13, {}, [], [X4], NEWEST),
    ("LogSoftmax", 11, {"axis": 2}, [], [X4], NEWEST),
    ("MeanVarianceNormalization", 13, {}, [], [X4], NEWEST),
    ("MeanVarianceNormalization", 18, {"axes": [1, 2]}, [], [X4], NEWEST),
    ("LpNormalization", 17, {"axis": 1, "p": 2}, [], [X4], NEWEST),
    ("LpNormalization", 17, {"p": 1}, [], [X4], NEWEST),
    ("RMSNormalization", 23, {"axis": -2}, [], [X4, (4, 5)], NEWEST),
    ("Mish", 18, {}, [], [X4], NEWEST),
    ("HardSwish", 14, {}, [], [X4], NEWEST),
    ("Gemm", 13, {"transB": 1, "alpha": 0.5, "beta": 2.0}, [], [(4, 6), (5, 6), (5,)], NEWEST),
    ("Gemm", 9, {"transA": 1}, [], [(6, 4), (6, 5), (4, 5)], NEWEST),
    ("Mean", 13, {}, [], [X4, X4, (5,)], NEWEST),
    ("Sum", 13, {}, [], [X4, X4, X4], NEWEST),
    ("CumSum", 14, {}, [ints("axis", 2)], [X4], V("10.7")),
    ("CumSum", 14, {"exclusive": 1}, [ints("axis", -1)], [X4], V("8.6")),
    ("CumSum", 14, {"exclusive": 1, "reverse": 1}, [ints("axis", 0)], [X4], V("10.0")),
]


@pytest.mark.parametrize("op, opset, attrs, constants, shapes, release", CASES,
                         ids=[f"{c[0]}-{c[1]}-{'-'.join(c[2])}" for c in CASES])
def test_spelled_layers_compute_the_op_in_fp32(op, opset, attrs, constants, shapes, release):
    names = [f"in{i}" for i in range(len(shapes))]
    node = helper.make_node(op, names + [c.name for c in constants], ["y"], name="n", **attrs)
    inputs = [_vi(n, list(s)) for n, s in zip(names, shapes)]
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    original = single_node_model(node, inputs, [_vi("y", None)], opset, constants)
    spelled = layer_model(node, inputs, [_vi("y", None)], opset=opset, fp16=False, version=release,
                          initializers=constants)
    assert {n.op_type for n in spelled.graph.node} - {"Identity", "Constant"} != {op}  # really decomposed
    want, got = run(original, feeds)[0], run(spelled, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def kinds(node, release=NEWEST, opset=17):
    return [(layer.kind, layer.naming.value) for layer in node_layers(node, release, opset=opset)
            if layer.computes]


def test_layers_of_the_ops_in_the_issue():
    x = ["x"]
    assert kinds(helper.make_node("ReduceSumSquare", x, ["y"])) == [
        ("ElementWise PROD", "unnamed"), ("Reduce SUM", "node")]
    assert kinds(helper.make_node("ReduceL2", x, ["y"])) == [
        ("ElementWise PROD", "unnamed"), ("Reduce SUM", "node"), ("Unary SQRT", "node")]
    assert kinds(helper.make_node("ReduceLogSumExp", x, ["y"])) == [
        ("Unary EXP", "node"), ("Reduce SUM", "node"), ("Unary LOG", "node")]
    assert kinds(helper.make_node("ReduceLogSum", x, ["y"])) == [("Reduce SUM", "node"),
                                                                ("Unary LOG", "node")]
    assert kinds(helper.make_node("ReduceL1", x, ["y"])) == [("Unary ABS", "node"), ("Reduce SUM", "node")]
    assert kinds(helper.make_node("LogSoftmax", x, ["y"])) == [("SoftMax", "node"), ("Unary LOG", "unnamed")]
    cumsum = helper.make_node("CumSum", ["x", "axis"], ["y"])
    assert kinds(cumsum, V("10.7")) == [("ElementWise SUM (loop body: the running sum)", "unnamed")]
    assert kinds(cumsum, V("10.8")) == [("Cumulative SUM", "node")]
    layer_norm = helper.make_node("LayerNormalization", ["x", "s"], ["y"])
    assert kinds(layer_norm, V("10.0")) == [("Normalization", "unnamed")]
    assert kinds(layer_norm, V("10.1")) == [("Normalization", "node")]
    assert kinds(helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=2.0)) == [
        ("MatrixMultiply", "node"), ("ElementWise PROD (alpha)", "unnamed"),
        ("ElementWise SUM (bias)", "unnamed")]
    assert kinds(helper.make_node("Relu", x, ["y"])) == [("Relu", "node")]  # not in the table: one layer


def test_every_entry_cites_what_was_read():
    for entry in TABLE.values():
        for variant in entry.variants:
            assert "DEFINE_BUILTIN_OP_IMPORTER" in variant.source or "normalizationHelper" in variant.source
            assert "read in" in variant.source
    assert split_op_types(V("10.7")) >= {"ReduceL2", "ReduceLogSumExp", "LogSoftmax", "CumSum", "Gemm"}
    assert "CumSum" not in split_op_types(V("10.8"))
    assert "RMSNormalization" not in split_op_types(V("10.14"))


def test_one_layer_nodes_are_not_decomposed():
    assert decompose(helper.make_node("Relu", ["x"], ["y"]), opset=17, fp16=True) is None
    assert decompose(helper.make_node("Softmax", ["x"], ["y"]), opset=17, fp16=True) is None
    assert decompose(helper.make_node("Gemm", ["a", "b"], ["y"]), opset=17, fp16=True) is None
    assert decompose(helper.make_node("Mean", ["a"], ["y"]), opset=17, fp16=True) is None
    # IsReduceNoOp: onnx-tensorrt imports an identity.
    noop = helper.make_node("ReduceL2", ["x"], ["y"], noop_with_empty_axes=1)
    assert decompose(noop, opset=18, fp16=True) is None
    cumsum = helper.make_node("CumSum", ["x", "axis"], ["y"])
    assert decompose(cumsum, opset=14, fp16=True, version=V("10.8")) is None
    with pytest.raises(DecompositionError, match=r"input 'axis' must be a constant"):
        decompose(cumsum, opset=14, fp16=True, version=V("10.7"))


def test_fp16_spelling_rounds_each_layer_output_but_not_the_node_output():
    node = helper.make_node("ReduceL2", ["x"], ["y"], name="rl2", axes=[1])
    spelled = decompose(node, opset=17, fp16=True)
    assert spelled.rounded == ("y__0_mul", "y__1_reducesum")
    assert [n.op_type for n in spelled.nodes] == ["Mul", "Cast", "Cast", "Constant", "ReduceSum", "Cast",
                                                  "Cast", "Sqrt"]
    assert [n.attribute[0].i for n in spelled.nodes if n.op_type == "Cast"] == [TensorProto.FLOAT16,
                                                                                TensorProto.FLOAT] * 2
    assert spelled.nodes[-1].output == ["y"] and spelled.nodes[-1].input == ["y__1_reducesum__rounded"]
    assert [layer.kind for layer, _ in spelled.layers] == ["ElementWise PROD", "Reduce SUM", "Unary SQRT"]
    # Names come from the caller's fresh(), so they never collide with the model's (opset 11: axes attribute).
    fresh_names = iter("abcdefgh")
    spelled = decompose(node, opset=11, fp16=False, fresh=lambda base: next(fresh_names))
    assert [(list(n.output), n.name) for n in spelled.nodes] == [(["a"], "b"), (["c"], "d"), (["y"], "e")]
    assert spelled.rounded == ()


def test_cumsum_loop_scan_matches_the_numpy_loop_bit_for_bit():
    x = np.concatenate([np.full((1, 4096), 0.5, np.float32),
                        RNG.uniform(0.4, 0.6, (1, 4096)).astype(np.float32),
                        (RNG.standard_normal((1, 4096)) * 30).astype(np.float32)])
    for exclusive in (0, 1):
        for reverse in (0, 1):
            node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
            model = layer_model(node, [_vi("x", [3, 4096])], [_vi("y", [3, 4096])], opset=14,
                                version=V("10.7"), initializers=[ints("axis", -1)])
            onnx.checker.check_model(model, full_check=True)
            got = run(model, {"x": x})[0]
            want = cumsum_fp16_loop(x, -1, exclusive=bool(exclusive), reverse=bool(reverse))
            assert np.array_equal(got, want)
