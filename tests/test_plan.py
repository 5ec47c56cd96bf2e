"""The precision plan: immutability, JSON round trip, user choices."""

from __future__ import annotations

import json

import pytest

from onnx_precision.errors import PlanError, UsageError
from onnx_precision.plan import Precision, PrecisionPlan, Reason, apply_user_choices, uniform_plan

OPS = {"conv1": "Conv", "relu1": "Relu", "softmax": "Softmax", "div_norm": "Div"}


def all_fp16() -> PrecisionPlan:
    return uniform_plan(OPS, Precision.FP16, Reason("default", "all-fp16"))


def test_with_fp32_returns_a_new_plan_and_keeps_the_old_one():
    plan = all_fp16()
    pinned = plan.with_fp32(["softmax"], Reason("rule", "softmax"))
    assert plan.fp32_nodes == ()
    assert pinned.fp32_nodes == ("softmax",)
    assert pinned.decisions["softmax"].reasons == (Reason("rule", "softmax"),)
    assert pinned.fp16_nodes == ("conv1", "relu1", "div_norm")


def test_reasons_accumulate_only_while_precision_is_unchanged():
    plan = all_fp16().with_fp32(["div_norm"], Reason("rule", "div"))
    plan = plan.with_fp32(["div_norm"], Reason("search", "needed"))
    assert [r.source for r in plan.decisions["div_norm"].reasons] == ["rule", "search"]
    back = plan.with_fp16(["div_norm"], Reason("search", "not needed"))
    assert [r.source for r in back.decisions["div_norm"].reasons] == ["search"]


def test_json_round_trip_is_exact(tmp_path):
    plan = all_fp16().with_fp32(["softmax"], Reason("range", "max |x| 7e4", (("max_abs", "70000"),)))
    path = tmp_path / "plan.json"
    path.write_text(plan.dumps())
    again = PrecisionPlan.load(str(path))
    assert again == plan
    assert again.dumps() == plan.dumps()
    assert json.loads(plan.dumps())["nodes"]["softmax"]["reasons"][0]["evidence"] == {"max_abs": "70000"}


def test_unknown_node_is_an_error():
    with pytest.raises(PlanError, match="unknown node 'nope'"):
        all_fp16().with_fp32(["nope"])


def test_plan_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PlanError, match=r"bad.json: not valid JSON"):
        PrecisionPlan.load(str(bad))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"nodes": {"a": {"precision": "int8"}}}))
    with pytest.raises(PlanError, match="node 'a' has precision 'int8'; expected fp16, bf16 or fp32"):
        PrecisionPlan.load(str(wrong))
    with pytest.raises(PlanError, match="--plan .*missing.json: no such file$"):
        PrecisionPlan.load(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("reasons", [["why"], [{"detail": "no source"}], [{"source": "s", "evidence": [1]}],
                                     3])
def test_malformed_reasons_are_a_plan_error(reasons):
    with pytest.raises(PlanError, match="hand.json: node 'a' has malformed 'reasons'"):
        PrecisionPlan.from_json({"nodes": {"a": {"precision": "fp32", "reasons": reasons}}},
                                source="hand.json")


def test_user_choices_regex_op_and_plan():
    user = PrecisionPlan.from_json({"nodes": {"relu1": "fp32"}})
    plan, warnings = apply_user_choices(all_fp16(), OPS, keep_fp32=["^conv"], keep_fp32_ops=["Softmax"],
                                        user_plan=user)
    assert set(plan.fp32_nodes) == {"conv1", "relu1", "softmax"}
    assert plan.decisions["conv1"].reasons == (Reason("user", "--keep-fp32 ^conv"),)
    assert plan.decisions["softmax"].reasons == (Reason("user", "--keep-fp32-op Softmax"),)
    assert warnings == []


def test_user_choices_that_match_nothing_are_errors_with_the_nearest():
    with pytest.raises(UsageError, match=r"^--keep-fp32 '\^lstm' matches no node name in the model$"):
        apply_user_choices(all_fp16(), OPS, keep_fp32=["^lstm"])
    with pytest.raises(UsageError, match=r"^--keep-fp32-op LSTM matches no op type of the model \(its op "):
        apply_user_choices(all_fp16(), OPS, keep_fp32_ops=["LSTM"])


def test_user_plan_naming_unknown_node_is_an_error():
    user = PrecisionPlan.from_json({"nodes": {"ghost": "fp32", "relu1": "fp32"}})
    with pytest.raises(PlanError, match="plan names node 'ghost' which is not in the model"):
        apply_user_choices(all_fp16(), OPS, user_plan=user)


def test_invalid_regex_is_a_plan_error():
    with pytest.raises(PlanError, match=r"--keep-fp32 '\(': invalid regular expression"):
        apply_user_choices(all_fp16(), OPS, keep_fp32=["("])
