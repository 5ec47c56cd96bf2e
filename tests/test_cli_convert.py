"""``onnx-precision convert`` through ``main(argv)``: outputs, plans, TensorRT flags and bad input."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import parse

from onnx_precision.cli import main

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[2,3] x) => (float[2,3] y) <float[3] w = {0.5, 1.5, 2.5}> {
  a = Mul(x, w)
  b = Exp(a)
  y = Relu(b)
}"""


@pytest.fixture
def model_path(save):
    return save(parse(MODEL))


def files(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_convert_writes_valid_fp16_model_and_summary(model_path, tmp_path, capsys):
    out = str(tmp_path / "out.onnx")
    assert main(["convert", model_path, "-o", out]) == 0
    converted = onnx.load(out)
    onnx.checker.check_model(converted, full_check=True)
    assert [n.name for n in converted.graph.node if n.op_type != "Cast"] == ["node_of_a", "node_of_b",
                                                                             "node_of_y"]
    x = np.random.default_rng(0).random((2, 3), dtype=np.float32)
    got = ort.InferenceSession(out).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(np.exp(x * np.array([0.5, 1.5, 2.5], np.float32)), 0),
                               rtol=2e-3)
    assert "3 node(s) FP16, 0 FP32, 2 Cast(s) added" in capsys.readouterr().out


def test_keep_fp32_save_plan_and_plan_round_trip(model_path, tmp_path, capsys):
    out, plan = str(tmp_path / "out.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", model_path, "-o", out, "--mode", "all-fp16", "--keep-fp32", "node_of_b",
                 "--save-plan", plan]) == 0
    saved = json.load(open(plan))
    assert saved["nodes"]["node_of_b"]["precision"] == "fp32"
    assert saved["nodes"]["node_of_b"]["reasons"][-1] == {"source": "user", "detail": "--keep-fp32 node_of_b"}
    assert "FP32 node_of_b (user: --keep-fp32 node_of_b)" in capsys.readouterr().out
    again = str(tmp_path / "again.onnx")
    assert main(["convert", model_path, "-o", again, "--mode", "all-fp16", "--plan", plan]) == 0
    assert open(out, "rb").read() == open(again, "rb").read()


def test_keep_fp32_op(model_path, tmp_path):
    out, plan = str(tmp_path / "out.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", model_path, "-o", out, "--keep-fp32-op", "Exp", "--save-plan", plan]) == 0
    nodes = json.load(open(plan))["nodes"]
    assert [n for n, d in nodes.items() if d["precision"] == "fp32"] == ["node_of_b"]


def test_fp16_io(model_path, tmp_path):
    out = str(tmp_path / "out.onnx")
    assert main(["convert", model_path, "-o", out, "--fp16-io"]) == 0
    g = onnx.load(out).graph
    assert g.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert not [n for n in g.node if n.op_type == "Cast"]


def test_trt_flags_file(model_path, tmp_path):
    out, flags = str(tmp_path / "out.onnx"), str(tmp_path / "trt.txt")
    assert main(["convert", model_path, "-o", out, "--keep-fp32", "node_of_b", "--trt-flags", flags]) == 0
    text = open(flags).read()
    assert "--layerPrecisions=node_of_b:fp32" in text
    assert f"--onnx={out} --stronglyTyped" in text


def test_output_is_deterministic(model_path, tmp_path):
    a, b = str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")
    assert main(["convert", model_path, "-o", a]) == 0
    assert main(["convert", model_path, "-o", b]) == 0
    assert open(a, "rb").read() == open(b, "rb").read()


def test_converting_the_output_again_changes_nothing(model_path, tmp_path):
    once, twice = str(tmp_path / "once.onnx"), str(tmp_path / "twice.onnx")
    assert main(["convert", model_path, "-o", once, "--keep-fp32", "node_of_b"]) == 0
    # all-fp16: the measuring modes refuse a model that computes in 16 bits as their FP32 reference
    assert main(["convert", once, "-o", twice, "--keep-fp32", "node_of_b", "--mode", "all-fp16"]) == 0
    assert open(once, "rb").read() == open(twice, "rb").read()


def test_keep_fp32_matching_nothing_is_an_error(model_path, tmp_path, capsys):
    out = str(tmp_path / "out.onnx")
    assert main(["convert", model_path, "-o", out, "--keep-fp32", "nothing_like_this"]) == 2
    assert "error: --keep-fp32 'nothing_like_this' matches no node name" in capsys.readouterr().err
    assert not os.path.exists(out)


def error_of(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_missing_file(tmp_path, capsys):
    missing = str(tmp_path / "nope.onnx")
    assert f"{missing}: no such file" in error_of(["convert", missing, "-o", str(tmp_path / "o.onnx")],
                                                  capsys)
    assert files(tmp_path) == []


def test_not_a_file(tmp_path, capsys):
    assert "not a file" in error_of(["convert", str(tmp_path), "-o", str(tmp_path / "o.onnx")], capsys)
    assert files(tmp_path) == []


def test_not_onnx(tmp_path, capsys):
    path = tmp_path / "model.onnx"
    path.write_text("this is not a model\n" * 10)
    err = error_of(["convert", str(path), "-o", str(tmp_path / "o.onnx")], capsys)
    assert f"{path}: not an ONNX model" in err
    assert files(tmp_path) == ["model.onnx"]


def test_truncated_protobuf(model_path, tmp_path, capsys):
    data = open(model_path, "rb").read()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    err = error_of(["convert", str(truncated), "-o", str(tmp_path / "o.onnx")], capsys)
    assert "truncated.onnx" in err and "not an ONNX model" in err
    assert not os.path.exists(tmp_path / "o.onnx")


def test_missing_external_data(tmp_path, capsys):
    model = parse(MODEL)
    w = model.graph.initializer[0]
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w), "w"))  # raw data can go external
    path = str(tmp_path / "ext.onnx")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=0)
    os.remove(tmp_path / "ext.data")
    err = error_of(["convert", path, "-o", str(tmp_path / "o.onnx")], capsys)
    assert "external data file 'ext.data' of tensor 'w' is missing" in err
    assert files(tmp_path) == ["ext.onnx"]


def test_plan_naming_unknown_node(model_path, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": {"no_such_node": {"precision": "fp32"}}}))
    err = error_of(["convert", model_path, "-o", str(tmp_path / "o.onnx"), "--plan", str(plan)], capsys)
    assert f"{plan}: plan names node 'no_such_node' which is not in the model" in err
    assert not os.path.exists(tmp_path / "o.onnx")


def test_plan_not_json(model_path, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text("{")
    err = error_of(["convert", model_path, "-o", str(tmp_path / "o.onnx"), "--plan", str(plan)], capsys)
    assert f"{plan}: not valid JSON" in err


def test_output_equal_to_input(model_path, capsys):
    before = open(model_path, "rb").read()
    err = error_of(["convert", model_path, "-o", model_path], capsys)
    assert "output path is the input file" in err
    assert open(model_path, "rb").read() == before


def test_output_directory_missing(model_path, tmp_path, capsys):
    out = str(tmp_path / "no" / "such" / "dir" / "o.onnx")
    assert "does not exist" in error_of(["convert", model_path, "-o", out], capsys)


def test_output_is_a_directory(model_path, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    before = files(tmp_path)
    err = error_of(["convert", model_path, "-o", str(out)], capsys)
    assert f"{out}: is a directory" in err
    assert files(tmp_path) == before and files(out) == []


def test_trt_flags_name_trtexec_cannot_parse_is_written_down_not_fatal(tmp_path, save):
    model = parse(MODEL)
    model.graph.node[1].name = "bad,name"
    path = save(model)
    out, flags = str(tmp_path / "o.onnx"), str(tmp_path / "trt.txt")
    assert main(["convert", path, "-o", out, "--keep-fp32", "bad", "--trt-flags", flags]) == 0
    assert os.path.exists(out)
    text = open(flags).read()
    assert "#   not expressed: node 'bad,name' (Exp) cannot be named in trtexec's flags" in text
    assert f"--onnx={out} --stronglyTyped" in text


@pytest.mark.parametrize("flag, value, expected", [
    ("--atol", "-1", "expected a finite number >= 0"), ("--rtol", "nan", "expected a finite number >= 0"),
    ("--atol", "inf", "expected a finite number >= 0"),
    ("--min-cosine", "1.5", "expected a cosine between -1 and 1")])
def test_bad_tolerance_is_a_usage_error(model_path, tmp_path, capsys, flag, value, expected):
    code = main(["convert", model_path, "-o", str(tmp_path / "o.onnx"), flag, value])
    err = capsys.readouterr().err
    assert code == 2
    assert f"argument {flag}: '{value}': {expected}" in err.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "o.onnx") and not os.path.exists(tmp_path / "o.report.json")


def test_outputs_never_overwrite_the_sample_data_or_the_plan(model_path, tmp_path, capsys):
    data = tmp_path / "data.npz"
    np.savez(str(data), x=np.ones((2, 3), np.float32))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": {}}))
    before = {p: p.read_bytes() for p in (data, plan)}
    out = str(tmp_path / "o.onnx")
    for argv in (["--inputs", str(data), "--report", str(data)],
                 ["--plan", str(plan), "--save-plan", str(plan)],
                 ["--inputs", str(tmp_path), "--report-md", str(data)]):
        err = error_of(["convert", model_path, "-o", out] + argv, capsys)
        assert "output path is the input file" in err
    err = error_of(["analyze", model_path, "--inputs", str(data), "--json", str(data)], capsys)
    assert "output path is the input file" in err
    assert {p: p.read_bytes() for p in (data, plan)} == before
    assert not os.path.exists(out)


@pytest.mark.parametrize("flag, value, expected", [
    ("--seed", "-1", "expected an integer >= 0"),
    ("--input-range", "x:-inf,0", "both finite float32 values"),
    ("--input-range", "x:-1e39,1", "both finite")])
def test_bad_sample_options_are_usage_errors(model_path, capsys, flag, value, expected):
    assert main(["analyze", model_path, flag, value]) == 2
    assert expected in capsys.readouterr().err.strip().splitlines()[-1]
