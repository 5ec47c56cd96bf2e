"""Conveniences users asked for (issue 10): --version, Polygraphy's and trtexec's spellings, sample
data told by content, useful synthetic ids, "permission denied", Polygraphy quiet under -q."""

from __future__ import annotations

import json

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


def _two_inputs(tmp_path) -> str:
    """y = x * scale, both of symbolic shape: synthetic feeds need --input-shape to be [2, 3]."""
    graph = helper.make_graph([N("Mul", ["x", "s"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 3]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, ["b", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(tmp_path, model)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "onnx-precision 0.1.0"


@pytest.mark.parametrize("options", [
    ["--input-shape", "x:2x3", "--input-shape", "s:2x3",
     "--input-range", "x:-4,-2", "--input-range", "s:3,5"],
    ["--input-shape", "x:2x3,s:2x3", "--input-range", "x:-4,-2,s:3,5"],  # trtexec's comma lists
    ["--input-shapes", "x:[2,3]", "s:[2,3]", "--val-range", "x:[-4,-2]", "s:[3,5]"],  # Polygraphy's
    ["--input-shape", "x:[2,3],s:[2,3]", "--input-range", "x:[-4,-2],s:[3,5]"],
])
def test_shapes_and_ranges_in_every_spelling(tmp_path, options):
    path = _two_inputs(tmp_path)
    out = tmp_path / "a.json"
    assert main(["analyze", path, "--json", str(out), "-q"] + options) == 0
    rows = {r["node"]: r for r in json.loads(out.read_text())["rows"]}
    # |x * s| lies in (6, 20): only the ranges given make it so
    assert 6 < rows["mul"]["fp32_range"]["max_abs"] < 20


def test_a_bad_shape_list_is_a_usage_error(tmp_path, capsys):
    path = _two_inputs(tmp_path)
    assert main(["analyze", path, "--input-shape", "x:[2,3"]) == 2
    assert "expected NAME:DIMxDIMx... or NAME:[DIM,DIM,...]" in capsys.readouterr().err


def _embedding(tmp_path, vocab: int = 7) -> str:
    """ids -> Gather(table[vocab, 4]) -> y: ids must stay below vocab."""
    table = onnx.numpy_helper.from_array(np.arange(vocab * 4, dtype=np.float32).reshape(vocab, 4), "table")
    graph = helper.make_graph([N("Gather", ["table", "ids"], ["y"], name="embed")], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 4])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(tmp_path, model)


def test_synthetic_ids_cover_the_table_they_index(tmp_path):
    from onnx_precision.data import SampleSpec, load_samples
    model = onnx.load(_embedding(tmp_path))
    samples = load_samples(model, SampleSpec())
    ids = samples.feeds[0]["ids"]
    assert ids.min() >= 0 and ids.max() == 6 and len(np.unique(ids)) == 7  # all of [0, 7), not all 0
    assert "ids: [0, 7)" in samples.source


def test_synthetic_integers_default_to_0_100(tmp_path):
    from onnx_precision.data import SampleSpec, load_samples
    graph = helper.make_graph([N("Cast", ["n"], ["y"], name="c", to=TensorProto.FLOAT)], "g",
                              [helper.make_tensor_value_info("n", TensorProto.INT32, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])])
    ids = load_samples(helper.make_model(graph), SampleSpec()).feeds[0]["n"]
    assert ids.min() >= 0 and ids.max() < 100 and len(np.unique(ids)) > 50


def test_a_polygraphy_json_is_read_whatever_its_name_and_quietly(tmp_path, capsys):
    from polygraphy.json import save_json
    path = _embedding(tmp_path)
    data = str(tmp_path / "inputs.dat")
    save_json([{"ids": np.arange(64, dtype=np.int64) % 7}], data)
    capsys.readouterr()
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "-q"]) == 0
    captured = capsys.readouterr()
    # the verdict line alone, and no [I]/[W] lines from Polygraphy under -q
    assert captured.out == (f"{path} -> {tmp_path / 'o.onnx'}: passed; worst y: rel RMS err 0; FP16: 1/1 "
                            f"nodes (100.0%), 100.0% of estimated FLOPs\n") and captured.err == ""


def test_an_npz_is_read_whatever_its_name(tmp_path):
    path = _embedding(tmp_path)
    np.savez(tmp_path / "d.npz", ids=np.arange(64, dtype=np.int64) % 7)
    (tmp_path / "d.npz").rename(tmp_path / "inputs.json")
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", str(tmp_path / "inputs.json"),
                 "-q"]) == 0


def test_unreadable_sample_data_says_permission_denied(tmp_path, capsys, monkeypatch):
    # Tests may run as root, which reads any file: the refusal is simulated where user files are opened.
    from onnx_precision import user_files
    path = _embedding(tmp_path)
    np.savez(tmp_path / "d.npz", ids=np.zeros(64, np.int64))

    def denied(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", file)

    monkeypatch.setattr(user_files, "open", denied, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", path, "-o", str(out / "o.onnx"), "--inputs", str(tmp_path / "d.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"onnx-precision: error: --inputs {tmp_path / 'd.npz'}: permission denied"]


def test_an_unreadable_model_says_permission_denied(tmp_path, capsys, monkeypatch):
    path = _embedding(tmp_path)

    def denied(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", file)

    monkeypatch.setattr(onnx, "load", denied)
    assert main(["analyze", path]) == 2
    assert capsys.readouterr().err.strip() == f"onnx-precision: error: {path}: permission denied"
