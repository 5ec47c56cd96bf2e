"""Misleading results (issue 10, items 10-16): what a run says must be what it did."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main

N = helper.make_node


def _save(tmp_path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=8) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _vi(name: str, elem: int = TensorProto.FLOAT, shape=(2, 4)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
    return err[0]


# --- item 14: plans are read strictly ------------------------------------------------------------------

def _relu_exp(tmp_path) -> str:
    return _save(tmp_path, _model([N("Relu", ["x"], ["h"], name="r"), N("Exp", ["h"], ["y"], name="e")],
                                  [_vi("x")], [_vi("y")]))


@pytest.mark.parametrize("plan, said", [
    ({"format": "onnx-precision-plan/1", "fp16_io": "false", "nodes": {"r": "fp16"}},
     "'fp16_io' is 'false'; expected true or false (a JSON boolean)"),
    ({"format": "onnx-precision-plan/9", "nodes": {"r": "fp16"}}, "format 'onnx-precision-plan/9' is not"),
    ({"nodes": {"r": {"precision": 16}}}, "node 'r' has precision 16; expected fp16, bf16 or fp32"),
    ({"nodes": {"r": {"precision": "fp32", "reasons": [{"source": "user", "detail": 5}]}}},
     "a reason's 'detail' is 5, not text"),
    ({"nodes": {"r": {"precision": "fp32", "reasons": [{"source": ["user"]}]}}},
     "a reason's 'source' is ['user'], not text"),
    ({"nodes": {"r": {"precision": "fp32", "reasons": [{"source": "user", "evidence": {"a": {"b": 1}}}]}}},
     "a reason's 'evidence' is {'a': {'b': 1}}, not an object of texts or numbers"),
])
def test_a_plan_of_the_wrong_types_is_one_line(tmp_path, capsys, plan, said):
    model = _relu_exp(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", model, "-o", str(out / "o.onnx"), "--plan", str(tmp_path / "plan.json")]) == 2
    line = _one_error(capsys)
    assert "plan.json: " in line and said in line, line
    assert os.listdir(out) == []


def test_a_saved_plan_reads_back(tmp_path):
    model = _relu_exp(tmp_path)
    plan = str(tmp_path / "plan.json")
    assert main(["convert", model, "-o", str(tmp_path / "a.onnx"), "--keep-fp32", "e", "--save-plan", plan,
                 "-q"]) == 0
    assert main(["convert", model, "-o", str(tmp_path / "b.onnx"), "--plan", plan, "-q"]) == 0


# --- item 15: IR < 4 initializers listed as graph inputs -------------------------------------------------

def _ir3(tmp_path) -> str:
    w = onnx.numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")
    model = _model([N("MatMul", ["x", "w"], ["h"], name="mm"), N("Relu", ["h"], ["y"], name="r")],
                   [_vi("x", shape=(1, 4)), _vi("w", shape=(4, 4))], [_vi("y", shape=(1, 4))], [w],
                   opset=9, ir=3)
    return _save(tmp_path, model)


def _input_types(path: str) -> dict[str, int]:
    return {vi.name: vi.type.tensor_type.elem_type for vi in onnx.load(path).graph.input}


@pytest.mark.parametrize("mode", ["all-fp16", "auto"])
def test_ir3_weights_listed_as_inputs_stay_fp32_like_every_graph_input(tmp_path, mode):
    path = _ir3(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", mode, "-q"]) == 0
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert _input_types(out) == {"x": TensorProto.FLOAT, "w": TensorProto.FLOAT}
    assert [i.data_type for i in written.graph.initializer] == [TensorProto.FLOAT]
    # the MatMul still runs in FP16, on a Cast of w (so a fed w is still honoured)
    assert any(n.op_type == "Cast" and n.input[0] == "w" for n in written.graph.node)


def test_ir3_weights_listed_as_inputs_follow_fp16_io(tmp_path):
    path = _ir3(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", "all-fp16", "--fp16-io", "-q"]) == 0
    assert _input_types(out) == {"x": TensorProto.FLOAT16, "w": TensorProto.FLOAT16}


# --- item 16: --min-cosine 1, and digits that show the failing criterion ---------------------------------

def _identity_and_shifted(tmp_path, shift: float) -> tuple[str, str, str]:
    """y = Identity(x), and a candidate y = x + [0, shift]; fed x = [1, 0]: cosine 1/sqrt(1 + shift^2)."""
    ref = _save(tmp_path, _model([N("Identity", ["x"], ["y"], name="i")], [_vi("x", shape=(2,))],
                                 [_vi("y", shape=(2,))]), "ref.onnx")
    c = onnx.numpy_helper.from_array(np.array([0, shift], np.float32), "c")
    cand = _save(tmp_path, _model([N("Add", ["x", "c"], ["y"], name="a")], [_vi("x", shape=(2,))],
                                  [_vi("y", shape=(2,))], [c]), "cand.onnx")
    np.savez(tmp_path / "x.npz", x=np.array([1, 0], np.float32))
    return ref, cand, str(tmp_path / "x.npz")


def test_min_cosine_1_passes_within_a_few_float32_ulps(tmp_path, capsys):
    ref, cand, data = _identity_and_shifted(tmp_path, 2.0 ** -12)  # cosine 1 - 3e-8: below 1 in float64
    assert main(["check", ref, cand, "--inputs", data, "--error-stat", "max", "--min-cosine", "1"]) == 0
    assert "PASS: within tolerance" in capsys.readouterr().out


def test_a_failing_cosine_prints_the_digits_that_show_it_fails(tmp_path, capsys):
    ref, cand, data = _identity_and_shifted(tmp_path, 1e-3)  # cosine 0.9999995: "1.000000" at 6 decimals
    assert main(["check", ref, cand, "--inputs", data, "--error-stat", "max", "--min-cosine", "1"]) == 1
    assert "[cosine 0.9999995 < 1]  FAIL" in capsys.readouterr().out


# --- items 10-13: nothing to convert, already FP16, no share without a model, the user's "before" -------

def _report(tmp_path, name: str = "o") -> tuple[dict, str]:
    return (json.loads((tmp_path / f"{name}.report.json").read_text()),
            (tmp_path / f"{name}.report.md").read_text())


# float64 converts by default: a float64-only model has nothing to convert under --keep-float64 only
@pytest.mark.parametrize("elem, keep, why", [
    (TensorProto.INT64, (), "the model has no float32 or float64 tensors"),
    (TensorProto.DOUBLE, ("--keep-float64",), "the model has no float32 tensors (float64 stays float64 under "
                                              "--keep-float64;")])
@pytest.mark.parametrize("mode", ["all-fp16", "auto"])
def test_a_model_without_float32_says_nothing_to_convert(tmp_path, capsys, elem, keep, why, mode):
    nodes = [N("Add", ["x", "x"], ["h"], name="add"), N("Neg", ["h"], ["y"], name="neg")]
    path = _save(tmp_path, _model(nodes, [_vi("x", elem)], [_vi("y", elem)]))
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", mode, *keep]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{out}: nothing to convert")
    assert why in captured.out and "%)" not in captured.out
    assert f"onnx-precision: warning: {why}" in captured.err
    if mode == "auto":
        report, markdown = _report(tmp_path)
        assert report["fp16_share"] is None and why in report["nothing_to_convert"]
        assert f"- FP16 share: nothing to convert: {why}" in markdown
        assert "every node runs in FP16" not in markdown


def test_an_fp16_model_warns_it_is_already_fp16(tmp_path, capsys):
    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")], [_vi("x", TensorProto.FLOAT16)],
                                  [_vi("y", TensorProto.FLOAT16)]))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16"]) == 0
    assert "warning: the model computes nothing in float32 (already FP16 or BF16?): nothing to convert" in \
        capsys.readouterr().err


def test_a_run_that_writes_no_model_gives_no_fp16_share(tmp_path, capsys):
    # the FP32 model itself is non-finite: no model is written, only the report
    path = _save(tmp_path, _model([N("Log", ["x"], ["y"], name="log")], [_vi("x")], [_vi("y")]))
    np.savez(tmp_path / "x.npz", x=-np.ones((2, 4), np.float32))
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "x.npz")]) == 1
    assert "FP16" not in capsys.readouterr().out
    report, markdown = _report(tmp_path)
    assert report["status"] == "fp32-nonfinite" and report["fp16_share"] is None
    assert "- FP16 share: none, no model written" in markdown and "100.0%" not in markdown


def test_the_before_section_of_a_user_plan_is_labelled_so(tmp_path, capsys):
    path = _relu_exp(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--keep-fp32", "^e$"]) == 0
    assert "\nbefore (your plan, from --keep-fp32): pass" in capsys.readouterr().out
    report, markdown = _report(tmp_path)
    assert report["before_plan"] == "your plan, from --keep-fp32"
    assert "## Before: your plan, from --keep-fp32 (emulated): pass" in markdown
    assert "all FP16" not in markdown
    assert main(["convert", path, "-o", out, "-q"]) == 0
    assert "## Before: all FP16 (emulated)" in _report(tmp_path)[1]
