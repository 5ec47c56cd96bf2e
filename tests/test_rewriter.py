"""Rewriter rules, each on a tiny model written as ONNX text: validity, Casts, names, numbers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import parse
from onnx import TensorProto

from onnx_precision import graph
from onnx_precision.context import ModelContext
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.rewriter import rewrite

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


def named(text: str) -> onnx.ModelProto:
    model = parse(text)
    graph.name_nodes(model)
    return model


def all_fp16(model: onnx.ModelProto, fp32: tuple[str, ...] = (), fp16_io: bool = False):
    names = [r.name for r in graph.walk_nodes(model.graph)]
    plan = uniform_plan(names, Precision.FP16, Reason("default", "all-fp16"), fp16_io=fp16_io)
    return plan.with_fp32(fp32, Reason("user", "test")) if fp32 else plan


def run(model: onnx.ModelProto, feeds: dict) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def casts(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [r.node for r in graph.walk_nodes(model.graph) if r.node.op_type == "Cast"]


def value_types(graph: onnx.GraphProto) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type
            for v in list(graph.input) + list(graph.output) + list(graph.value_info)}


def valid_and_close(original, converted, feeds, rtol=1e-2, atol=1e-2):
    onnx.checker.check_model(converted, full_check=True)
    for ref, got in zip(run(original, feeds), run(converted, feeds)):
        assert got.dtype == ref.dtype
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


CHAIN = """<ir_version: 8, opset_import: ["": 17]>
g (float[2,3] x) => (float[2,3] y) {
  a = Relu(x)
  b = Exp(a)
  c = Log(b)
  d = Sigmoid(c)
  y = Neg(d)
}"""


def test_fp32_island_in_fp16_has_exactly_two_casts():
    model = named(CHAIN)
    result = rewrite(ModelContext.of(model), all_fp16(model, ("node_of_b", "node_of_c"), fp16_io=True))
    cast_nodes = casts(result.model)
    assert [(n.input[0], n.attribute[0].i) for n in cast_nodes] == [("a", FLOAT), ("c", FLOAT16)]
    assert [n.name for n in cast_nodes] == ["a_cast_fp32", "c_cast_fp16"]
    assert result.casts_added == 2
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["node_of_b"].input[0] == "a_fp32"
    assert nodes["node_of_c"].input[0] == "b"  # no Cast between the island's two nodes
    assert nodes["node_of_d"].input[0] == "c_fp16"
    feeds = {"x": np.random.default_rng(0).random((2, 3), dtype=np.float32).astype(np.float16)}
    onnx.checker.check_model(result.model, full_check=True)
    assert run(result.model, feeds)[0].dtype == np.float16


def test_graph_io_keep_names_order_and_fp32_type():
    model = named(CHAIN)
    result = rewrite(ModelContext.of(model), all_fp16(model))
    g = result.model.graph
    assert [v.name for v in g.input] == ["x"] and [v.name for v in g.output] == ["y"]
    assert value_types(g)["x"] == FLOAT and value_types(g)["y"] == FLOAT
    # the producer of y writes y_fp16; the Cast writes the output name
    assert [(n.input[0], n.output[0]) for n in casts(result.model)] == [("x", "x_fp16"), ("y_fp16", "y")]
    valid_and_close(model, result.model, {"x": np.random.default_rng(0).random((2, 3), dtype=np.float32)})


def test_fp16_io_makes_graph_io_fp16_without_casts():
    model = named(CHAIN)
    result = rewrite(ModelContext.of(model), all_fp16(model, fp16_io=True))
    assert casts(result.model) == []
    assert value_types(result.model.graph)["x"] == FLOAT16 and value_types(result.model.graph)["y"] == FLOAT16


SHARED = """<ir_version: 8, opset_import: ["": 17]>
g (float[2,3] x) => (float[2,3] y, float[2,3] z) <float[3] w = {0.1, 0.2, 0.3}> {
  y = Mul(x, w)
  z = Add(x, w)
}"""


def test_shared_initializer_kept_and_duplicated():
    model = named(SHARED)
    result = rewrite(ModelContext.of(model), all_fp16(model, ("node_of_z",)))
    inits = {t.name: t for t in result.model.graph.initializer}
    assert set(inits) == {"w", "w_fp16"}
    assert inits["w"].data_type == FLOAT and inits["w_fp16"].data_type == FLOAT16
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["node_of_y"].input[1] == "w_fp16" and nodes["node_of_z"].input[1] == "w"
    assert result.initializers_duplicated == 1 and result.initializers_converted == 0
    valid_and_close(model, result.model, {"x": np.ones((2, 3), np.float32)})


def test_initializer_converted_in_place_when_all_consumers_fp16():
    model = named(SHARED)
    result = rewrite(ModelContext.of(model), all_fp16(model))
    inits = {t.name: t for t in result.model.graph.initializer}
    assert set(inits) == {"w"} and inits["w"].data_type == FLOAT16
    assert result.initializers_converted == 1


@pytest.mark.parametrize("value,other,words", [
    (1e5, 1.0, "exceeds the FP16 maximum"),
    (1e-9, 1e-6, "flush to zero in FP16, and all its values lie below FP16's normal range"),
])
def test_initializer_fp16_cannot_hold_pins_node_fp32_and_keeps_value(value, other, words):
    model = named(f"""<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) <float[2] w = {{{value}, {other}}}> {{
  y = Mul(x, w)
}}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    decision = result.plan.decisions["node_of_y"]
    assert decision.precision is Precision.FP32
    assert decision.reasons[-1].source == "initializer" and words in decision.reasons[-1].detail
    assert "'w'" in decision.reasons[-1].detail
    w = onnx.numpy_helper.to_array(result.model.graph.initializer[0])
    assert w.dtype == np.float32 and w[0] == np.float32(value)  # never clamped
    x = np.array([2.0, 3.0], np.float32)
    np.testing.assert_array_equal(run(result.model, {"x": x})[0], x * np.array([value, other], np.float32))


def test_tiny_weight_among_normal_ones_converts_and_is_noted():
    # One value in a trained weight matrix below FP16's smallest subnormal is smaller than the
    # rounding error FP16 makes on the matrix's largest values: the node stays FP16, and the
    # flush is said, not silent.
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) <float[3] w = {1e-9, 0.5, -0.25}> {
  y = Mul(x, w)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    decision = result.plan.decisions["node_of_y"]
    assert decision.precision is Precision.FP16
    assert decision.reasons[-1] == Reason(
        "initializer", "initializer 'w': nonzero |x| down to 1e-09 flush to zero in FP16, less than the "
        "rounding error of its largest values (max |x| 0.5)", (("tensor", "w"),))
    assert result.notes[-1].startswith("1 FP16 node(s) have weights whose tiniest values flush to zero: "
                                       "node_of_y:")
    w = onnx.numpy_helper.to_array(result.model.graph.initializer[0])
    assert w.dtype == np.float16 and list(w) == [0.0, 0.5, -0.25]


def test_resize_scales_stay_fp32():
    model = named("""<ir_version: 8, opset_import: ["": 18]>
g (float[1,1,2,2] x) => (float[1,1,4,6] y) <float[4] scales = {1.0, 1.0, 2.0, 3.0}> {
  y = Resize<mode="linear">(x, , scales)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    inits = {t.name: t for t in result.model.graph.initializer}
    assert inits["scales"].data_type == FLOAT
    resize = next(n for n in result.model.graph.node if n.op_type == "Resize")
    assert resize.input[0] == "x_fp16" and resize.input[2] == "scales"
    valid_and_close(model, result.model, {"x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)})


def test_cast_to_float_inside_fp16_region_follows_the_plan():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x, int64[3] i) => (float[3] y) {
  a = Relu(x)
  b = Cast<to=1>(a)
  f = Cast<to=1>(i)
  c = Add(b, f)
  y = Sigmoid(c)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["node_of_b"].attribute[0].i == FLOAT16
    assert nodes["node_of_f"].attribute[0].i == FLOAT16
    assert result.casts_added == 2  # x in, y out: nothing around the existing Casts
    valid_and_close(model, result.model, {"x": np.array([-1, 0.5, 2], np.float32), "i": np.array([1, 2, 3])})


def test_existing_widening_cast_is_reused_not_cancelled():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float16[3] x) => (float[3] y) {
  a = Cast<to=1>(x)
  b = Exp(a)
  y = Sigmoid(b)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["node_of_b"].input[0] == "x"  # not Cast(Cast(x, FLOAT), FLOAT16)
    assert nodes["node_of_a"].attribute[0].i == FLOAT  # the user's pin stays
    valid_and_close(model, result.model, {"x": np.array([-1, 0.5, 2], np.float16)})


IF_MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[3] x, bool c) => (float[3] y) {
  t = Mul(x, x)
  y = If(c) <
    then_branch = then_g () => (float[3] o1) { o1 = Exp(t) },
    else_branch = else_g () => (float[3] o2) { o2 = Neg(t) }
  >
}"""


def test_if_with_outer_scope_tensor_gets_one_cast_before_if():
    model = named(IF_MODEL)
    result = rewrite(ModelContext.of(model), all_fp16(model, ("node_of_o1",)))
    main = result.model.graph
    names = [n.name for n in main.node]
    assert names.index("t_cast_fp32") < names.index("node_of_y")  # the Cast the FP32 body node needs
    then_g = next(a.g for a in main.node[names.index("node_of_y")].attribute if a.name == "then_branch")
    assert then_g.node[0].input[0] == "t_fp32"
    # If is FP16: the FP32 branch output is cast back to float16 inside the branch
    assert then_g.output[0].type.tensor_type.elem_type == FLOAT16
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for cond in (True, False):
        valid_and_close(model, result.model, {"x": x, "c": np.array(cond)})


def test_loop_with_carried_float_keeps_types_consistent():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, int64 n) => (float[2] s) {
  cond = Constant<value=bool {1}>()
  zero = Constant<value=float[2] {0, 0}>()
  s = Loop(n, cond, zero) <body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
      c_out = Identity(c_in)
      acc_out = Add(acc, x)
  }>
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    loop = next(n for n in result.model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    assert body.input[2].type.tensor_type.elem_type == FLOAT16
    assert body.output[1].type.tensor_type.elem_type == FLOAT16
    zero = next(n for n in result.model.graph.node if n.name == "node_of_zero")
    assert zero.attribute[0].t.data_type == FLOAT16  # the initial value is converted, not Cast
    valid_and_close(model, result.model, {"x": np.array([0.25, 1.5], np.float32), "n": np.array(5)})


def test_unnamed_nodes_get_names_and_keep_them():
    model = parse(CHAIN)
    renames = graph.name_nodes(model)
    assert [new for _, new in renames] == ["node_of_a", "node_of_b", "node_of_c", "node_of_d", "node_of_y"]
    result = rewrite(ModelContext.of(model), all_fp16(model, ("node_of_c",)))
    names = [n.name for n in result.model.graph.node]
    assert {"node_of_a", "node_of_b", "node_of_c", "node_of_d", "node_of_y"} <= set(names)
    assert len(names) == len(set(names))


def test_already_mixed_model_converts_idempotently():
    model = named(SHARED.replace("z = Add(x, w)", "z0 = Add(x, w)\n  z = Exp(z0)"))
    first = rewrite(ModelContext.of(model), all_fp16(model, ("node_of_z0",))).model
    again = rewrite(ModelContext.of(first), all_fp16(first, ("node_of_z0",))).model
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)


def test_output_is_deterministic_and_keeps_ir_and_opsets():
    model = named(IF_MODEL)
    plan = all_fp16(model, ("node_of_o1",))
    a = rewrite(ModelContext.of(model), plan).model.SerializeToString(deterministic=True)
    b = rewrite(ModelContext.of(model), plan).model.SerializeToString(deterministic=True)
    assert a == b
    out = onnx.load_from_string(a)
    assert out.ir_version == 8 and [(o.domain, o.version) for o in out.opset_import] == [("", 17)]


def test_dtype_attributes_and_constant_of_shape_follow_plan():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float[2,2] x, int64[2] shape) => (float[2,2] y, float[2,2] z) {
  e = EyeLike<dtype=1>(x)
  y = Add(x, e)
  f = ConstantOfShape<value=float[1] {1.5}>(shape)
  z = Mul(x, f)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["node_of_f"].attribute[0].t.data_type == FLOAT16
    assert result.plan.precision("node_of_f") is Precision.FP16
    eye = nodes["node_of_e"]
    dtype = next(a.i for a in eye.attribute if a.name == "dtype")
    assert dtype == (FLOAT16 if result.plan.precision("node_of_e") is Precision.FP16 else FLOAT)
    valid_and_close(model, result.model, {"x": np.ones((2, 2), np.float32), "shape": np.array([2, 2])})


def test_unknown_custom_op_stays_fp32_with_reason():
    model = named("""<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[3] x) => (float[3] y) {
  a = Relu(x)
  y = acme.Widget(a)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    decision = result.plan.decisions["node_of_y"]
    assert decision.precision is Precision.FP32 and decision.reasons[-1].source == "type"
    assert "no schema for acme::Widget" in decision.reasons[-1].detail
    widget = next(n for n in result.model.graph.node if n.op_type == "Widget")
    assert widget.input[0] == "a_fp32"


def test_one_cast_per_tensor_and_type_shared_by_consumers_and_bodies():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x, bool c) => (float[3] y, float[3] z, float[3] w) {
  t = Exp(x)
  y = Neg(t)
  z = Abs(t)
  w = If(c) <then_branch = a () => (float[3] o1) { o1 = Sqrt(t) },
              else_branch = b () => (float[3] o2) { o2 = Sin(t) }>
}""")
    fp32 = ("node_of_y", "node_of_z", "node_of_o1", "node_of_o2")
    result = rewrite(ModelContext.of(model), all_fp16(model, fp32))
    from_t = [n for n in casts(result.model) if n.input[0] == "t"]
    assert [(n.name, n.output[0]) for n in from_t] == [("t_cast_fp32", "t_fp32")]
    x = np.array([0.5, 1.0, 2.0], np.float32)
    for cond in (True, False):
        valid_and_close(model, result.model, {"x": x, "c": np.array(cond)})


def test_output_datatype_default_follows_fp16():
    model = named("""<ir_version: 8, opset_import: ["": 17]>
g (int64 n) => (float[8] y) {
  w = HannWindow(n)
  y = Sqrt(w)
}""")
    result = rewrite(ModelContext.of(model), all_fp16(model))
    window = next(n for n in result.model.graph.node if n.op_type == "HannWindow")
    assert result.plan.precision("node_of_w") is Precision.FP16
    assert [(a.name, a.i) for a in window.attribute] == [("output_datatype", FLOAT16)]
    valid_and_close(model, result.model, {"n": np.array(8)})
