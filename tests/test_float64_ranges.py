"""Float64 compute is judged like float32 compute (issue 23's leftover): the rules, the headroom and
range pins and the range capture see float64 tensors, so a float64 Exp that overflows FP16, a float64
initializer FP16 cannot hold and a float64 tensor within the headroom of 65504 are pinned with the
reasons of their float32 twins; they were judged by the search alone."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import rules
from onnx_precision.cli import main
from onnx_precision.context import ModelContext

_BRANCH = ("exp", "mul_big", "div_big", "sum", "mul_near", "add")


def _twins() -> onnx.ModelProto:
    """The same branch on x in float32 (names ending 32) and on x cast to float64 (ending 64): an Exp
    to 1.3e5, an initializer of 1e5, a tensor to 4.7e4 (within the headroom of 65504), then their sum."""
    nodes, inits = [helper.make_node("Cast", ["x"], ["x64"], "to64", to=TensorProto.DOUBLE)], []
    for tag, dtype in (("32", np.float32), ("64", np.float64)):
        src = "x" if tag == "32" else "x64"
        nodes += [helper.make_node("Exp", [src], [f"e{tag}"], f"exp{tag}"),
                  helper.make_node("Mul", [src, f"big{tag}"], [f"m{tag}"], f"mul_big{tag}"),
                  helper.make_node("Div", [f"m{tag}", f"big{tag}"], [f"d{tag}"], f"div_big{tag}"),
                  helper.make_node("ReduceSum", [f"e{tag}"], [f"s{tag}"], f"sum{tag}", keepdims=1),
                  helper.make_node("Mul", [src, f"near{tag}"], [f"n{tag}"], f"mul_near{tag}"),
                  helper.make_node("Add", [f"n{tag}", f"d{tag}"], [f"a{tag}"], f"add{tag}")]
        inits += [numpy_helper.from_array(np.array(1e5, dtype), f"big{tag}"),
                  numpy_helper.from_array(np.array(4000.0, dtype), f"near{tag}")]
    nodes.append(helper.make_node("Cast", ["a64"], ["y64"], "from64", to=TensorProto.FLOAT))
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
               (("a32", [4, 16]), ("y64", [4, 16]), ("s32", [1, 1]))]
    outputs.append(helper.make_tensor_value_info("s64", TensorProto.DOUBLE, [1, 1]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    graph = helper.make_graph(nodes, "twins", [x], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feed() -> np.ndarray:
    return np.linspace(-3.0, 11.75, 64, dtype=np.float32).reshape(4, 16)  # exp(11.75) = 1.27e5


def _plan(tmp_path, mode: str) -> dict:
    model, data, plan = (str(tmp_path / n) for n in ("m.onnx", "x.npz", f"{mode}.plan.json"))
    onnx.save(_twins(), model)
    np.savez(data, x=_feed())
    main(["convert", model, "-o", str(tmp_path / f"{mode}.onnx"), "--inputs", data, "--mode", mode, "-q",
          "--save-plan", plan])
    with open(plan, encoding="utf-8") as f:
        return json.load(f)["nodes"]


def _reasons(nodes: dict, name: str) -> tuple[str, list[str]]:
    decision = nodes[name]
    return decision["precision"], [f"{r['source']}: {r['detail']}" for r in decision["reasons"]]


def test_a_float64_branch_is_pinned_with_its_float32_twins_reasons(tmp_path):
    nodes = _plan(tmp_path, "static")
    assert _reasons(nodes, "exp64") == ("fp32", [
        "range: 'e64' reaches 1.268e+05 in FP32, over the FP16 maximum 65504",
        "rule: exp-overflow: exp overflows FP16 (inputs above 11.09)"])
    assert _reasons(nodes, "mul_near64") == ("fp32", [
        "headroom: 'n64' reaches 4.7e+04 in FP32, over 65504/2 = 32752"])
    for name in _BRANCH:
        precision, reasons = _reasons(nodes, name + "32")
        assert _reasons(nodes, name + "64") == (precision, [r.replace("32'", "64'") for r in reasons]), name


def test_the_rules_see_a_float64_initializer_fp16_cannot_hold():
    ctx = ModelContext.of(_twins())
    found = {(f.node, f.rule, f.message) for f in rules.run_rules(rules.ModelFacts(ctx)).findings
             if f.rule == "constant-overflow"}
    assert {(node, message) for node, _, message in found} == {
        (f"{op}{tag}", f"constant 'big{tag}' has |x| up to 1e+05, inf in FP16")
        for op in ("mul_big", "div_big") for tag in ("32", "64")}


def test_every_statement_of_a_float64_run_is_true_of_its_file(tmp_path):
    from test_shares_true import audit

    model, data = str(tmp_path / "m.onnx"), str(tmp_path / "x.npz")
    onnx.save(_twins(), model)
    np.savez(data, x=_feed())
    assert audit(tmp_path, model, data, "--mode", "static") == []
    assert audit(tmp_path, model, data, "--mode", "static", "--keep-float64") == []


def test_the_tensorrt_flags_pin_the_float64_nodes_the_plan_keeps_fp32(tmp_path):
    """onnx-tensorrt builds float64 in float32 (convertDtype: DOUBLE -> kFLOAT), so --fp16 may run a
    float64 node in FP16: its pin is a flag. The flags left the six float64 pins out."""
    model, data, flags = (str(tmp_path / n) for n in ("m.onnx", "x.npz", "flags.txt"))
    onnx.save(_twins(), model)
    np.savez(data, x=_feed())
    main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--mode", "static", "-q",
          "--target", "tensorrt", "--trt-flags", flags])
    text = open(flags, encoding="utf-8").read()
    assert text.startswith("# onnx-precision: TensorRT flags for 13 node(s) pinned to FP32.")
    pinned = [f"{name}{tag}:fp32" for tag in ("32", "64") for name in _BRANCH] + ["from64:fp32"]
    assert f"--layerPrecisions={','.join(pinned)} " in text
