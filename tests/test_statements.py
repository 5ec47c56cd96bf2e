"""What a run states must be true (issue 23, items 5-7): the reference is FP32 and the candidate is
not it, a pin that pins nothing is an error, ``-q`` keeps what decides the result, and the 16-bit
share can be gated."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.convert import ConvertOptions, convert_model
from onnx_precision.errors import UsageError

N = helper.make_node


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _vi(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2, 8])


def _attention_like() -> onnx.ModelProto:
    """x (2x8) -> MatMul (8x8 weight) -> Softmax -> y: a MatMul that holds most of the FLOPs."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8],
                           np.random.default_rng(0).uniform(-1, 1, 64).astype(np.float32).tolist())
    return _model([N("MatMul", ["x", "w"], ["h"], name="mm"), N("Softmax", ["h"], ["y"], name="sm", axis=-1)],
                  [_vi("x")], [_vi("y")], [w])


@pytest.fixture
def fp32(tmp_path) -> str:
    path = str(tmp_path / "m.onnx")
    onnx.save(_attention_like(), path)
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(1).uniform(-1, 1, (2, 8)).astype(np.float32))
    return path


@pytest.fixture
def fp16(fp32, tmp_path) -> str:
    path = str(tmp_path / "all16.onnx")
    assert main(["convert", fp32, "-o", path, "--mode", "all-fp16", "-q"]) == 0
    return path


def _data(tmp_path) -> str:
    return str(tmp_path / "x.npz")


def _one_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
    assert captured.out == ""
    return err[0]


# --- item 5: the reference is FP32, the candidate is not the reference ----------------------------------

def test_check_of_a_model_against_itself_is_refused(fp32, tmp_path, capsys):
    assert main(["check", fp32, fp32, "--inputs", _data(tmp_path)]) == 2
    assert _one_error(capsys) == (f"onnx-precision: error: {fp32}: the candidate is the FP32 model {fp32} "
                                  f"itself (the same file); check compares a 16-bit candidate with its FP32 "
                                  f"model")


def test_check_of_a_copy_of_the_reference_is_refused(fp32, tmp_path, capsys):
    # other bytes, the same graph and weights: as the file itself (issue 33 item 7; it passed, with a warning)
    copy = str(tmp_path / "copy.onnx")
    model = onnx.load(fp32)
    model.producer_name = "another tool"
    onnx.save(model, copy)
    assert main(["check", fp32, copy, "--inputs", _data(tmp_path), "-q"]) == 2
    assert _one_error(capsys).endswith(f"{copy}: the candidate has the graph and weights of the FP32 model "
                                       f"{fp32} (a copy: nothing in it computes in 16 bits); check compares "
                                       f"a 16-bit candidate with its FP32 model")


def test_check_with_the_arguments_swapped_is_refused(fp32, fp16, tmp_path, capsys):
    assert main(["check", fp16, fp32, "--inputs", _data(tmp_path)]) == 2
    assert _one_error(capsys) == (
        f"onnx-precision: error: {fp16}: the reference computes in 16 bits (node 'mm' (MatMul) reads float16 "
        f"'x_fp16', and 1 more node(s)), so it is no FP32 reference; give the FP32 model first: "
        f"onnx-precision check FP32_MODEL CANDIDATE")


def test_an_fp32_model_with_16_bit_io_casts_is_an_fp32_reference(tmp_path, capsys):
    """Casts compute nothing: a model that only casts its FP16 input to FP32 computes in FP32."""
    to_fp32 = {"to": TensorProto.FLOAT}
    ref = _model([N("Cast", ["x"], ["x32"], name="c", **to_fp32), N("Exp", ["x32"], ["y"], name="e")],
                 [_vi("x", TensorProto.FLOAT16)], [_vi("y")])
    cand = _model([N("Exp", ["x"], ["y16"], name="e"), N("Cast", ["y16"], ["y"], name="c", **to_fp32)],
                  [_vi("x", TensorProto.FLOAT16)], [_vi("y")])
    onnx.save(ref, tmp_path / "ref.onnx")
    onnx.save(cand, tmp_path / "cand.onnx")
    np.savez(tmp_path / "x16.npz", x=np.linspace(-1, 1, 16, dtype=np.float16).reshape(2, 8))
    assert main(["check", str(tmp_path / "ref.onnx"), str(tmp_path / "cand.onnx"),
                 "--inputs", str(tmp_path / "x16.npz"), "-q"]) == 0
    assert capsys.readouterr().out.endswith("; FP16: 100.0% of estimated FLOPs\n")


@pytest.mark.parametrize("mode", ["auto", "static"])
def test_convert_of_a_model_that_computes_in_16_bits_is_refused(fp16, tmp_path, capsys, mode):
    out = str(tmp_path / "again.onnx")
    assert main(["convert", fp16, "-o", out, "--mode", mode, "--inputs", _data(tmp_path)]) == 2
    assert _one_error(capsys) == (
        f"onnx-precision: error: {fp16}: the model computes in 16 bits (node 'mm' (MatMul) reads float16 "
        f"'x_fp16', and 1 more node(s)), so it is no FP32 reference; convert the FP32 model it was made from "
        f"(--mode all-fp16, which measures nothing, takes it as it is)")
    assert not [f for f in os.listdir(tmp_path) if f.startswith("again")]


def test_a_candidate_without_16_bit_compute_is_warned_of(fp32, tmp_path, capsys):
    """An FP32 candidate that is not the reference (here: a Softmax written as Exp / ReduceSum) passes,
    and the run says that it compared FP32 with FP32, in -q too."""
    model = _attention_like()
    del model.graph.node[1:]
    model.graph.node.extend([N("Exp", ["h"], ["e"], name="exp"),
                             N("ReduceSum", ["e"], ["s"], name="sum", keepdims=1),
                             N("Div", ["e", "s"], ["y"], name="div")])
    model.graph.initializer.append(helper.make_tensor("axes", TensorProto.INT64, [1], [-1]))
    model.graph.node[2].input.append("axes")
    cand = str(tmp_path / "fp32_again.onnx")
    onnx.save(model, cand)
    assert main(["check", fp32, cand, "--inputs", _data(tmp_path)]) == 0
    assert (f"onnx-precision: warning: {cand}: the candidate computes nothing in 16 bits (every float node "
            f"is FP32): this check compared FP32 with FP32") in capsys.readouterr().err
    assert main(["check", fp32, cand, "--inputs", _data(tmp_path), "-q"]) == 0
    assert capsys.readouterr().out.endswith("; no 16-bit compute\n")


# --- item 6: a pin that matches nothing is an error; -q keeps the verdict's facts ------------------------

def test_keep_fp32_op_in_the_wrong_case_is_an_error_suggesting_the_op(fp32, tmp_path, capsys):
    out = str(tmp_path / "o.onnx")
    assert main(["convert", fp32, "-o", out, "--keep-fp32-op", "softmax", "-q"]) == 2
    assert _one_error(capsys) == ("onnx-precision: error: --keep-fp32-op softmax matches no op type; did you "
                                  "mean Softmax?")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "x.npz"]


def test_keep_fp32_op_far_from_any_op_names_the_nearest(fp32, tmp_path, capsys):
    assert main(["convert", fp32, "-o", str(tmp_path / "o.onnx"), "--keep-fp32-op", "MatMull"]) == 2
    assert _one_error(capsys).endswith("--keep-fp32-op MatMull matches no op type of the model (nearest: "
                                       "MatMul)")


def test_keep_fp32_pattern_that_matches_no_node_is_an_error(fp32, tmp_path, capsys):
    assert main(["convert", fp32, "-o", str(tmp_path / "o.onnx"), "--keep-fp32", "nomatch"]) == 2
    assert _one_error(capsys) == ("onnx-precision: error: --keep-fp32 'nomatch' matches no node name in the "
                                  "model")
    assert main(["convert", fp32, "-o", str(tmp_path / "o.onnx"), "--keep-fp32", "MM"]) == 2
    assert _one_error(capsys).endswith("--keep-fp32 'MM' matches no node name; did you mean '(?i)MM' (it "
                                       "matches mm)?")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "x.npz"]


def test_the_library_refuses_a_pin_that_matches_nothing():
    with pytest.raises(UsageError, match="^--keep-fp32-op softmax matches no op type; did you mean Softmax"):
        convert_model(_attention_like(), options=ConvertOptions(mode="all-fp16", keep_fp32_ops=("softmax",)))
    with pytest.raises(UsageError, match="^--keep-fp32 'nomatch' matches no node name"):
        convert_model(_attention_like(), options=ConvertOptions(mode="all-fp16", keep_fp32=("nomatch",)))


def test_check_q_prints_one_verdict_line_with_the_share(fp32, fp16, tmp_path, capsys):
    assert main(["check", fp32, fp16, "--inputs", _data(tmp_path), "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith(f"{fp16} against {fp32}: passed; worst y: rel RMS err ")
    assert out[0].endswith("; FP16: 100.0% of estimated FLOPs")


def test_convert_q_prints_the_worst_output_and_the_share(fp32, tmp_path, capsys):
    out = str(tmp_path / "o.onnx")
    assert main(["convert", fp32, "-o", out, "--inputs", _data(tmp_path), "--keep-fp32-op", "MatMul",
                 "-q"]) == 0
    line = capsys.readouterr().out.splitlines()
    share = json.load(open(tmp_path / "o.report.json"))["fp16_share"]["flops"]
    assert len(line) == 1 and line[0].startswith(f"{fp32} -> {out}: passed; worst y: rel RMS err ")
    assert line[0].endswith(f"; FP16: 1/2 nodes (50.0%), {100 * share:.1f}% of estimated FLOPs")


# --- item 7: --min-16bit-share ------------------------------------------------------------------------

def test_a_share_below_min_16bit_share_fails_and_the_reports_say_so(fp32, tmp_path, capsys):
    out = str(tmp_path / "o.onnx")
    args = ["convert", fp32, "-o", out, "--inputs", _data(tmp_path), "--keep-fp32-op", "MatMul"]
    assert main(args + ["--min-16bit-share", "50"]) == 1
    report = json.load(open(tmp_path / "o.report.json"))
    share = 100 * report["fp16_share"]["flops"]
    assert share < 50
    message = f"16-bit share {share:.1f}% of FLOPs is below --min-16bit-share 50"
    assert capsys.readouterr().out.splitlines()[1] == f"{fp32} -> {out}: failed ({message})"
    assert report["status"] == "failed" and report["message"] == message
    assert f"- status: **failed**: {message}" in open(tmp_path / "o.report.md").read()
    assert os.path.exists(out)  # written, as a failing written model is: the reports say why
    assert main(args + ["--min-16bit-share", f"{share - 0.1:.1f}", "-q"]) == 0
    assert capsys.readouterr().out.startswith(f"{fp32} -> {out}: passed; ")


@pytest.mark.parametrize("value", ["101", "-1", "nan", "inf", "half"])
def test_min_16bit_share_is_validated(fp32, tmp_path, capsys, value):
    assert main(["convert", fp32, "-o", str(tmp_path / "o.onnx"), "--min-16bit-share", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"onnx-precision convert: error: argument --min-16bit-share: '{value}': expected a "
                   f"percentage between 0 and 100 (see --help)"]


@pytest.mark.parametrize("value", [101.0, -1.0, float("nan"), "50"])
def test_the_library_validates_min_16bit_share(value):
    with pytest.raises(UsageError, match="^--min-16bit-share .*: expected a percentage between 0 and 100$"):
        ConvertOptions(min_16bit_share=value)


def test_the_library_gates_the_share(tmp_path):
    feed = {"x": np.random.default_rng(1).uniform(-1, 1, (2, 8)).astype(np.float32)}
    options = ConvertOptions(keep_fp32_ops=("MatMul",), min_16bit_share=99.0)
    converted = convert_model(_attention_like(), feed, options)
    assert converted.report is not None and converted.report.status == "failed"
    assert converted.report.message.startswith("16-bit share ") and "below --min-16bit-share 99" in \
        converted.report.message
