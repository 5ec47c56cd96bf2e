"""Static risk rules on tiny inline models, with and without recorded ranges."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import parse

from onnx_precision import rules
from onnx_precision.context import ModelContext
from onnx_precision.float_types import BF16, FP16, LowPrecision
from onnx_precision.target import GenericTarget


@dataclass(frozen=True)
class S:
    """Recorded stats of one tensor (the fields rules read)."""

    max_abs: float
    min_nonzero_abs: float = 1.0
    flush_fraction: float = 0.0


def find(text: str, stats: dict | None = None, rule: str | None = None,
         rule_set: tuple[rules.Rule, ...] = rules.RULES, low: LowPrecision = FP16) -> list[rules.Finding]:
    ctx = ModelContext.of(parse(text))
    ctx.target = GenericTarget(low)
    found = rules.run_rules(rules.ModelFacts(ctx, stats=stats), rule_set).findings
    return [f for f in found if rule is None or f.rule == rule]


def only(text: str, stats: dict | None = None, rule: str | None = None,
         rule_set: tuple[rules.Rule, ...] = rules.RULES, low: LowPrecision = FP16) -> rules.Finding:
    found = find(text, stats, rule, rule_set, low)
    assert len(found) == 1, found
    return found[0]


L2 = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 64] x) => (float[2, 64] y) {
  sq = Mul(x, x)
  axes = Constant<value = int64[1] {-1}>()
  ss = ReduceSum<keepdims = 1>(sq, axes)
  nrm = Sqrt(ss)
  y = Div(x, nrm)
}
"""


def test_sum_of_squares_is_high_severity_with_its_length():
    f = only(L2, rule="reduction-overflow")
    assert (f.node, f.kind, f.severity, f.confirmed) == ("node_of_ss", "overflow", "high", None)
    assert f.evidence["length"] == 64


def test_ranges_confirm_or_dismiss_the_sum_overflow():
    big = only(L2, {"ss": S(1.6e5)}, "reduction-overflow")
    assert big.confirmed is True and big.severity == "high" and big.evidence["output_max_abs"] == 1.6e5
    small = only(L2, {"ss": S(64.0)}, "reduction-overflow")
    assert small.confirmed is False and small.severity == "low" and not small.active


def test_plain_short_sum_is_low_and_long_sum_medium():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, {n}] x) => (float[4, 1] y) {{
      axes = Constant<value = int64[1] {{1}}>()
      y = ReduceSum<keepdims = 1>(x, axes)
    }}"""
    assert only(text.format(n=64)).severity == "low"
    long_sum = only(text.format(n=8192))
    assert long_sum.severity == "medium" and long_sum.evidence["length"] == 8192


def test_reduce_mean_over_all_axes_estimates_the_internal_sum():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[8, 1024] x) => (float[1, 1] y) {
      y = ReduceMean<keepdims = 1>(x)
    }"""
    f = only(text, {"y": S(100.0)})
    assert f.rule == "reduction-accumulator" and f.evidence["length"] == 8192
    assert f.evidence["internal_sum_estimate"] == 100.0 * 8192 and f.confirmed is True


def test_cumsum_reports_length_along_its_axis_and_overflow_from_ranges():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 1, 256, 128] x) => (float[1, 1, 256, 128] y) {
      axis = Constant<value = int64 {2}>()
      y = CumSum(x, axis)
    }"""
    static = only(text)
    assert static.evidence["length"] == 256 and static.kind == "precision" and static.confirmed is None
    over = only(text, {"x": S(2.0), "y": S(9.8e4)})
    assert (over.kind, over.severity, over.confirmed) == ("overflow", "high", True)
    fine = only(text, {"x": S(1.0), "y": S(200.0)})
    assert fine.confirmed is False


def test_matmul_flags_only_long_contractions_or_overflowing_outputs():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, {k}] a, float[{k}, 8] b) => (float[4, 8] y) {{
      y = MatMul(a, b)
    }}"""
    assert find(text.format(k=16)) == []
    long = only(text.format(k=8192))
    assert long.evidence["depth"] == 8192 and long.kind == "precision"
    over = only(text.format(k=16), {"y": S(7e4)})
    assert (over.rule, over.kind, over.severity) == ("long-contraction", "overflow", "high")


EXP = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float[4] y) {
  y = Exp(x)
}
"""


def test_exp_overflow_confirmed_by_output_range():
    assert only(EXP).severity == "high"
    assert only(EXP, {"x": S(12.0), "y": S(1.6e5)}).confirmed is True
    dismissed = only(EXP, {"x": S(3.0), "y": S(20.0)})
    assert dismissed.confirmed is False and dismissed.evidence["input_max_abs"] == 3.0


POW = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float[4] y) {{
  p = Constant<value = float {{{p}}}>()
  y = Pow(x, p)
}}
"""


def test_pow_overflow_underflow_and_dismissal():
    static = only(POW.format(p=2.0))
    assert static.evidence["exponent"] == 2.0 and "255.9" in static.message
    assert only(POW.format(p=2.0), {"x": S(300.0), "y": S(9e4)}).rule == "pow-overflow"
    over = only(POW.format(p=2.0), {"x": S(300.0), "y": S(9e4)})
    assert (over.severity, over.confirmed, over.message) == ("high", True, "power exceeds 65504")
    assert only(POW.format(p=2.0), {"x": S(10.0), "y": S(100.0)}).confirmed is False
    assert find(POW.format(p=1.0)) == []


def test_flush_to_zero_matters_before_a_sqrt_and_not_before_a_sum():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 8] d) => (float[4, 1] y) {{
      two = Constant<value = float {{2.0}}>()
      sq = Pow(d, two)
      axes = Constant<value = int64[1] {{1}}>()
      v = ReduceMean<axes = [1], keepdims = 1>(sq)
      y = {op}(v)
    }}"""
    stats = {"d": S(3.0, 1e-5), "sq": S(9.0, 1e-10, 0.5), "v": S(4.0, 1e-10, 0.5), "y": S(2.0, 1e-5)}
    fragile = {f.node: f for f in find(text.format(op="Sqrt"), stats, "flush-to-zero")}
    # the squares reach the Sqrt only through a mean, which absorbs a few flushed terms
    assert (fragile["node_of_sq"].severity, fragile["node_of_v"].severity) == ("low", "medium")
    assert fragile["node_of_v"].message == "50% of the nonzero values flush to zero in FP16 before Sqrt"
    benign = {f.node: f for f in find(text.format(op="Relu"), stats, "flush-to-zero")}
    assert {f.severity for f in benign.values()} == {"low"}
    few = find(text.format(op="Sqrt"), {**stats, "sq": S(9.0, 1e-10, 0.001)}, "flush-to-zero")
    assert [f.node for f in few] == ["node_of_v"]
    assert find(text.format(op="Sqrt"), None, "flush-to-zero") == []


def test_log_of_flushing_values():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] p) => (float[4] y) {
      y = Log(p)
    }"""
    hit = only(text, {"p": S(1.0, 1e-12, 0.25), "y": S(27.6)})
    assert (hit.kind, hit.severity, hit.confirmed) == ("underflow", "high", True)
    assert hit.evidence["input_flush_fraction"] == 0.25
    assert only(text, {"p": S(1.0, 0.01), "y": S(4.6)}).confirmed is False


def test_div_by_constant_is_not_a_risk_but_by_a_tensor_is():
    by_const = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x) => (float[4] y) {
      two = Constant<value = float {2.0}>()
      y = Div(x, two)
    }"""
    assert find(by_const) == []
    by_tensor = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, float[4] d) => (float[4] y) {
      y = Div(x, d)
    }"""
    assert only(by_tensor).rule == "tiny-denominator"
    blown = only(by_tensor, {"d": S(1.0, 1e-6), "y": S(1e6)})
    assert (blown.kind, blown.severity) == ("overflow", "high")
    flushed = only(by_tensor, {"d": S(1.0, 1e-9, 0.1), "y": S(10.0)})
    assert (flushed.kind, flushed.confirmed) == ("underflow", True)


LN_EPS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4, 64] v, float[4, 64] d) => (float[4, 64] y) {{
  eps = Constant<value = float {{{eps}}}>()
  ve = Add(v, eps)
  s = Sqrt(ve)
  y = Div(d, s)
}}
"""


def test_epsilon_below_subnormal_is_zero_in_fp16():
    f = only(LN_EPS.format(eps="1e-12"), rule="epsilon-underflow")
    assert f.severity == "high" and "is 0 in FP16" in f.message and f.evidence["guards"] == "Div/Sqrt"
    assert f.evidence["epsilon"] == pytest.approx(1e-12)


def test_epsilon_at_the_flush_point_is_zero_and_just_above_it_subnormal():
    # 2**-25 is halfway between 0 and the smallest subnormal: it rounds to even, 0.
    at, above = 2.0 ** -25, float(np.nextafter(np.float32(2.0 ** -25), np.float32(1)))
    assert float(np.float16(np.float32(at))) == 0.0 and float(np.float16(np.float32(above))) > 0.0
    assert "is 0 in FP16" in only(LN_EPS.format(eps=repr(at)), rule="epsilon-underflow").message
    assert "is subnormal" in only(LN_EPS.format(eps=repr(above)), rule="epsilon-underflow").message


def test_epsilon_below_normal_is_subnormal_and_large_epsilon_is_fine():
    assert only(LN_EPS.format(eps="1e-5"), rule="epsilon-underflow").severity == "medium"
    assert find(LN_EPS.format(eps="1e-3"), rule="epsilon-underflow") == []


def test_epsilon_confirmed_when_the_guarded_value_gets_tiny():
    text = LN_EPS.format(eps="1e-12")
    assert only(text, {"v": S(1.0, 1e-10, 0.5)}, "epsilon-underflow").confirmed is True
    assert only(text, {"v": S(4.0, 0.5)}, "epsilon-underflow").confirmed is False


def test_clip_floor_of_a_norm_as_f_normalize_exports_it():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 64] x) => (float[2, 64] y) {
      axes = Constant<value = int64[1] {-1}>()
      n = ReduceL2<keepdims = 1>(x, axes)
      lo = Constant<value = float {1e-12}>()
      c = Clip(n, lo)
      y = Div(x, c)
    }"""
    f = only(text, rule="epsilon-underflow")
    assert f.node == "node_of_c" and f.severity == "high" and f.evidence["guards"] == "Div"


def test_epsilon_not_guarding_anything_is_not_flagged():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x) => (float[4] y) {
      eps = Constant<value = float {1e-12}>()
      y = Add(x, eps)
    }"""
    assert find(text, rule="epsilon-underflow") == []
    assert only(text, rule="constant-underflow").confirmed is True


def test_layernormalization_epsilon_attribute():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 8] x, float[8] s, float[8] b) => (float[4, 8] y) {
      y = LayerNormalization<epsilon = 1e-12>(x, s, b)
    }"""
    f = only(text, rule="epsilon-underflow")
    assert f.node == "node_of_y" and f.severity == "low" and f.confirmed is None


def test_constant_overflow_and_underflow():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x) => (float[4] y) {
      big = Constant<value = float[2] {1e5, 1.0}>()
      tiny = Constant<value = float[2] {1e-10, 1.0}>()
      a = Mul(x, big)
      y = Mul(a, tiny)
    }"""
    found = {f.rule: f for f in find(text)}
    assert found["constant-overflow"].node == "node_of_a"
    assert found["constant-overflow"].evidence["max_abs"] == 1e5
    assert found["constant-underflow"].node == "node_of_y"
    # 1e-10 next to 1.0 is below FP16's rounding of 1.0: reported, but low (the node converts)
    assert found["constant-underflow"].severity == "low"
    assert "negligible next to its max |x| 1" in found["constant-underflow"].message


def test_constant_entirely_below_fp16_normal_range_is_medium():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
      tiny = Constant<value = float[2] {1e-10, 1e-6}>()
      y = Mul(x, tiny)
    }"""
    f = only(text, rule="constant-underflow")
    assert f.severity == "medium" and f.message == "constant 'tiny' has nonzero |x| down to 1e-10, 0 in FP16"


def test_mask_constant_times_zero_is_nan():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4, 4] scores, float[4, 4] mask) => (float[4, 4] y) {{
      one = Constant<value = float {{1.0}}>()
      big = Constant<value = float {{{value}}}>()
      inv = Sub(one, mask)
      bias = Mul(inv, big)
      masked = Add(scores, bias)
      y = Softmax<axis = -1>(masked)
    }}"""
    f = only(text.format(value="-1e9"), rule="mask-constant")
    assert f.node == "node_of_bias" and f.severity == "high" and "0 * -inf = NaN" in f.message
    assert f.evidence["meets"] == "Mul, Add, Softmax"
    assert find(text.format(value="-1e9"), rule="constant-overflow") == []  # the mask rule says it better
    # a mask FP16 holds (-16376, as the decoder rewrite writes float32's minimum) meets no -inf: none said
    held = only(text.format(value="-16376.0"), rule="mask-constant")
    assert held.severity == "low" and held.message == "mask constant -1.64e+04 is -16376 in FP16"
    # BF16 holds -1e9 (as -998 244 352): not -inf there either
    bf16 = only(text.format(value="-1e9"), rule="mask-constant", low=BF16)
    assert bf16.severity == "low" and bf16.message == "mask constant -1e+09 is -9.98244e+08 in BF16"


def test_integer_cast_to_float_beyond_2048():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (int64[16] pos) => (float[16] y) {
      y = Cast<to = 1>(pos)
    }"""
    assert only(text).confirmed is None
    assert only(text, {"y": S(4095.0)}).confirmed is True
    assert only(text, {"y": S(100.0)}).confirmed is False
    widening = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float16[16] h) => (float[16] y) {
      y = Cast<to = 1>(h)
    }"""
    assert find(widening) == []


def test_softmax_severity_depends_on_a_following_log():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 8] x) => (float[2, 8] y) {{
      p = Softmax<axis = -1>(x)
      y = {op}(p)
    }}"""
    assert only(text.format(op="Log"), rule="softmax").severity == "medium"
    assert only(text.format(op="Relu"), rule="softmax").severity == "low"


def test_registry_covers_the_issue_ops_and_accepts_new_rules():
    for op in ("CumSum", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp",
               "MatMul", "Gemm", "Conv", "Exp", "Pow", "Log", "Sqrt", "Reciprocal", "Div", "Softmax",
               "LogSoftmax", "LayerNormalization", "Cast"):
        assert op in rules.registered_ops(), op

    @rules.rule("Tanh")
    def tanh_rule(node, facts):
        yield rules.finding(node, "test-tanh", rules.PRECISION, rules.LOW, "test", None)

    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x) => (float[4] y) { y = Tanh(x) }"""
    assert only(text, rule_set=rules.RULES + (tanh_rule,)).rule == "test-tanh"


def test_finding_reason_and_json():
    f = only(L2, {"ss": S(1.6e5)}, "reduction-overflow")
    reason = f.reason()
    assert reason.source == "rule" and reason.detail.startswith("reduction-overflow: ")
    assert ("length", "64") in reason.evidence and ("output_max_abs", "1.6e+05") in reason.evidence
    assert f.to_json()["evidence"]["length"] == 64 and f.to_json()["confirmed"] is True
