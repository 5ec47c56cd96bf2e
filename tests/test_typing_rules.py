"""Schema-driven typing: which tensors of a node convert, which are fixed, and why a node cannot be FP16."""

from __future__ import annotations

from conftest import parse

from onnx_precision import graph, policy
from onnx_precision import typing_rules as tr
from onnx_precision.context import ModelContext
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.typing_rules import kernels


def typing_of(text: str, ir_version: int = 8) -> dict[str, tr.NodeTyping]:
    model = parse(text, ir_version)
    graph.name_nodes(model)
    return tr.model_typing(model)


def test_resize_data_converts_scales_stay_fixed_float():
    t = typing_of("""<ir_version: 8, opset_import: ["": 18]>
g (float[1,1,2,2] x, float[8] roi, float[4] scales) => (float[1,1,4,4] y) {
  y = Resize(x, roi, scales)
}""")["node_of_y"]
    assert t.convertible_inputs == (0, 1)  # data and roi (roi converts with the data it slices)
    assert t.convertible_outputs == (0,)
    assert 2 not in t.convertible_inputs + t.flexible_inputs  # scales: tensor(float) in the schema
    assert t.low_blocker is None


def test_layernorm_mean_and_invstddev_stay_fp32():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x, float[4] s, float[4] b) => (float[2,4] y, float[2,1] m, float[2,1] r) {
  y, m, r = LayerNormalization(x, s, b)
}""")["node_of_y"]
    assert t.convertible_inputs == (0, 1, 2) and t.convertible_outputs == (0,)


def test_shape_reads_any_precision_and_comparison_converts_both_sides():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, float[2] z) => (int64[1] s, bool[2] b, int64[2] n) {
  s = Shape(x)
  b = Less(x, z)
  n = Cast<to=7>(x)
}""")
    assert t["node_of_s"] == tr.NodeTyping((), (), None, (0,))
    assert t["node_of_b"] == tr.NodeTyping((0, 1), (), None, ())
    assert t["node_of_n"] == tr.NodeTyping((), (), None, (0,))  # a Cast reads any type


def test_integer_only_node_has_nothing_to_convert():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17]>
g (int64[2] a) => (int64[2] b) { b = Add(a, a) }""")["node_of_b"]
    assert t == tr.NodeTyping((), (), None) and not t.has_float


def test_custom_domain_without_schema_is_blocked():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[2] x) => (float[2] y) { y = acme.Widget(x) }""")["node_of_y"]
    assert t.low_blocker == "no schema for acme::Widget at opset 1"


def test_contrib_schema_from_onnxruntime():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[2,3] a, float[3,2] b) => (float[2,2] y) { y = com.microsoft.FusedMatMul(a, b) }""")["node_of_y"]
    assert t == tr.NodeTyping((0, 1), (0,), None, ())


def test_scatternd_reduction_has_no_onnxruntime_fp16_kernel():
    text = """<ir_version: 8, opset_import: ["": 18]>
g (float[4] x, int64[1,1] i, float[1] u) => (float[4] y) { y = ScatterND<REDUCTION>(x, i, u) }"""
    blocked = typing_of(text.replace("<REDUCTION>", '<reduction="add">'))["node_of_y"]
    assert blocked.low_blocker == "onnxruntime has no float16 ScatterND kernel with reduction 'add'"
    assert typing_of(text.replace("<REDUCTION>", ""))["node_of_y"].low_blocker is None


def test_eyelike_blocked_by_probe_in_opset_22():
    t = typing_of("""<ir_version: 10, opset_import: ["": 22]>
g (int32[3,3] x) => (float[3,3] y) { y = EyeLike<dtype=1>(x) }""", ir_version=10)["node_of_y"]
    assert t.low_blocker is not None and "EyeLike in float16: onnxruntime cannot load it" in t.low_blocker


def test_bitcast_and_constant_convert_nothing():
    t = typing_of("""<ir_version: 10, opset_import: ["": 24]>
g (int32[2] x) => (float[2] y, float[2] c) {
  y = BitCast<to=1>(x)
  c = Constant<value=float[2] {1, 2}>()
}""", ir_version=10)
    assert t["node_of_y"] == tr.NodeTyping((), (), None) and t["node_of_c"] == tr.NodeTyping((), (), None)


def test_types_inside_subgraph_from_outer_scope():
    model = parse("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x, bool c) => (float[3] y) {
  y = If(c) <then_branch = t () => (float[3] o1) { o1 = Exp(x) },
              else_branch = e () => (float[3] o2) { o2 = Neg(x) }>
}""")
    graph.name_nodes(model)
    t = tr.model_typing(model)
    assert t["node_of_o1"].convertible_inputs == (0,) and t["node_of_y"].convertible_outputs == (0,)


def test_resolve_plan_reasons():
    model = parse("""<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[2] x) => (float[2] y) <float[2] big = {70000, 1}, float[2] ok = {2, 3}> {
  a = Mul(x, big)
  b = Mul(a, ok)
  y = acme.Widget(b)
}""")
    graph.name_nodes(model)
    plan = uniform_plan([r.name for r in graph.walk_nodes(model.graph)], Precision.FP16,
                        Reason("default", "all-fp16"))
    resolved = policy.resolve_plan(ModelContext.of(model), plan)
    assert resolved.fp32_nodes == ("node_of_a", "node_of_y")
    assert resolved.decisions["node_of_a"].reasons[-1].source == "initializer"
    assert "70000" in resolved.decisions["node_of_a"].reasons[-1].detail
    assert resolved.decisions["node_of_y"].reasons[-1].source == "type"
    assert resolved.decisions["node_of_b"].precision is Precision.FP16


def test_sequence_input_kept_fp32_forces_consumer_fp32():
    model = parse("""<ir_version: 8, opset_import: ["": 17]>
g (seq(float[2]) s, int64 i) => (float[2] y) {
  a = SequenceAt(s, i)
  y = Exp(a)
}""")
    graph.name_nodes(model)
    plan = uniform_plan(["node_of_a", "node_of_y"], Precision.FP16, Reason("default", "all-fp16"))
    resolved = policy.resolve_plan(ModelContext.of(model), plan)
    assert resolved.precision("node_of_a") is Precision.FP32
    assert "cannot be cast" in resolved.decisions["node_of_a"].reasons[-1].detail
    assert resolved.precision("node_of_y") is Precision.FP16


def test_value_problem():
    assert tr.value_problem(65504.0, 1.0) is None
    assert "exceeds" in tr.value_problem(65520.0, 1.0)
    assert "flush" in tr.value_problem(2.0 ** -15, 2.0 ** -26)  # all subnormal: flushing matters
    assert tr.value_problem(1.0, 2.0 ** -26) is None  # below the rounding error of 1.0
    assert "flush" in tr.flush_note(1.0, 2.0 ** -26)
    assert tr.flush_note(1.0, 2.0 ** -24) is None  # the smallest subnormal survives
    assert tr.value_problem(1.0, 2.0 ** -24) is None


def test_infinite_constants_are_exact_in_fp16():
    model = parse("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y, float[3] z) <float[3] mask = {0, -inf, 1}, float[3] big = {-inf, 70000, 1}> {
  y = Add(x, mask)
  z = Add(x, big)
}""")
    graph.name_nodes(model)
    plan = uniform_plan(["node_of_y", "node_of_z"], Precision.FP16, Reason("default", "all-fp16"))
    resolved = policy.resolve_plan(ModelContext.of(model), plan)
    assert resolved.fp32_nodes == ("node_of_z",)
    assert "70000" in resolved.decisions["node_of_z"].reasons[-1].detail


def test_loop_carried_floats_convert_and_counters_do_not():
    t = typing_of("""<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, int64 n, bool c) => (float[2] s, int64 k) {
  s, k = Loop(n, c, x, n) <body = b (int64 i, bool c_in, float[2] acc, int64 cnt)
                                 => (bool c_out, float[2] acc2, int64 cnt2) {
      c_out = Identity(c_in)
      acc2 = Add(acc, acc)
      cnt2 = Add(cnt, i)
  }>
}""")["node_of_s"]
    assert t == tr.NodeTyping((2,), (0,), None, ())  # v_initial x and its final value; never M, cond, ints


MANY_OPS = """<ir_version: 10, opset_import: ["": 22]>
g (float[2,3] x, int32[3,3] s) => (float[2,3] y, float[3,3] e) {
    a = Relu(x)
    b = Sigmoid(a)
    c = Mul(a, b)
    y = Softmax<axis=-1>(c)
    e = EyeLike<dtype=1>(s)
}"""


def test_node_signatures_are_probed_in_one_session_when_all_load(monkeypatch):
    from onnx_precision import helper_sessions

    monkeypatch.setattr(kernels, "_PROBES", {})
    before = helper_sessions.built()
    typing = typing_of(MANY_OPS.replace("    e = EyeLike<dtype=1>(s)\n", "").replace(", float[3,3] e", ""),
                       10)
    assert helper_sessions.built() - before == 1
    assert all(t.low_blocker is None for t in typing.values())


def test_one_node_that_fails_in_fp16_is_still_found_among_many(monkeypatch):
    monkeypatch.setattr(kernels, "_PROBES", {})
    typing = typing_of(MANY_OPS, 10)
    assert "EyeLike in float16: onnxruntime cannot load it" in typing["node_of_e"].low_blocker
    assert [n for n, t in typing.items() if t.low_blocker] == ["node_of_e"]
