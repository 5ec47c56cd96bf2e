"""Hostile and broken inputs (issue 10): one line, exit 2, nothing written, nothing leaked."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main


def _mlp(directory: str, location: str = "w.data") -> str:
    """y = relu(x @ w) with w external at ``location``; returns the model path (data written there
    only when the location is plain)."""
    w = np.full((4, 4), 0.25, np.float32)
    init = onnx.numpy_helper.from_array(w, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "m.onnx")
    onnx.save(model, path, save_as_external_data=True, location="w.data", size_threshold=0)
    if location != "w.data":
        raw = onnx.load(path, load_external_data=False)
        for entry in raw.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        with open(path, "wb") as f:
            f.write(raw.SerializeToString())
    return path


def _run_refused(argv: list[str], capsys, out_dir) -> str:
    before = sorted(os.listdir(out_dir))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: ")
    assert sorted(os.listdir(out_dir)) == before  # nothing written
    return err[0]


@pytest.mark.parametrize("command", ["convert", "analyze"])
def test_external_data_outside_the_model_directory_is_refused(tmp_path, capsys, command):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"s" * 64)
    models = tmp_path / "models"
    models.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for location, said in (("../secret.txt", "leads outside the model's directory"),
                           (str(secret), "is an absolute path")):
        path = _mlp(str(models), location)
        argv = ([command, path, "-o", str(out / "o.onnx"), "--mode", "all-fp16"] if command == "convert"
                else [command, path])
        line = _run_refused(argv, capsys, out)
        assert "tensor 'w'" in line and said in line


def test_a_symlink_out_of_the_model_directory_is_refused(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    path = _mlp(str(models))
    os.replace(models / "w.data", outside / "w.data")
    os.symlink(outside / "w.data", models / "w.data")
    argv = ["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16"]
    line = _run_refused(argv, capsys, tmp_path)
    assert "leads outside the model's directory" in line


def test_a_symlinked_model_reads_its_data_beside_its_target(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    path = _mlp(str(real))
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(path, links / "m.onnx")
    out = tmp_path / "o.onnx"
    assert main(["convert", str(links / "m.onnx"), "-o", str(out), "--mode", "all-fp16", "-q"]) == 0
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)


def test_reserved_external_data_keys_in_a_model_are_refused(tmp_path, capsys):
    path = _mlp(str(tmp_path))
    raw = onnx.load(path, load_external_data=False)
    raw.graph.initializer[0].external_data.add(key="onnx_precision.base_dir", value="/etc")
    with open(path, "wb") as f:
        f.write(raw.SerializeToString())
    out = tmp_path / "out"
    out.mkdir()
    line = _run_refused(["convert", path, "-o", str(out / "o.onnx")], capsys, out)
    assert "reserved external data keys" in line


def _unsorted_model() -> onnx.ModelProto:
    """x -> Neg -> Exp -> Add(.., x) -> y, with the nodes stored backwards (valid for onnxruntime)."""
    nodes = [helper.make_node("Add", ["e", "x"], ["y"], name="add"),
             helper.make_node("Exp", ["n"], ["e"], name="exp"),
             helper.make_node("Neg", ["x"], ["n"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("mode", ["all-fp16", "auto"])
def test_an_unsorted_graph_converts_to_a_sorted_valid_model(tmp_path, mode):
    path = str(tmp_path / "unsorted.onnx")
    onnx.save(_unsorted_model(), path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", mode, "-q"]) == 0
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert [n.name for n in written.graph.node if n.op_type != "Cast"] == ["neg", "exp", "add"]


def test_a_cycle_is_one_line_naming_a_node(tmp_path, capsys):
    model = _unsorted_model()
    model.graph.node[2].input[0] = "e"  # neg now reads exp's output, and exp reads neg's
    path = str(tmp_path / "cycle.onnx")
    onnx.save(model, path)
    out = tmp_path / "out"
    out.mkdir()
    line = _run_refused(["convert", path, "-o", str(out / "o.onnx")], capsys, out)
    assert "is on a cycle" in line and ("'exp'" in line or "'neg'" in line)


def _plain_model(tmp_path) -> str:
    path = str(tmp_path / "plain.onnx")
    onnx.save(_unsorted_model(), path)
    return path


@pytest.mark.parametrize("target", ["-", "/dev/null", "fifo", "link", "dir"])
def test_outputs_that_are_not_regular_files_are_refused(tmp_path, capsys, target):
    model = _plain_model(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "real.onnx").write_bytes(b"keep")
    if target == "fifo":
        os.mkfifo(out / "fifo")
    elif target == "link":
        os.symlink(out / "real.onnx", out / "link")
    elif target == "dir":
        (out / "dir").mkdir()
    path = target if target in ("-", "/dev/null") else str(out / target)
    line = _run_refused(["convert", model, "-o", path, "--mode", "all-fp16"], capsys, out)
    said = {"-": "standard output", "/dev/null": "not a regular file", "fifo": "not a regular file",
            "link": "symbolic link", "dir": "is a directory"}[target]
    assert said in line
    assert (out / "real.onnx").read_bytes() == b"keep"
    assert not os.path.exists("/dev/null.report.json")


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_follow_the_umask(tmp_path, umask):
    model = _plain_model(tmp_path)
    old = os.umask(umask)
    try:
        assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--save-plan",
                     str(tmp_path / "p.json"), "-q"]) == 0
    finally:
        os.umask(old)
    for name in ("o.onnx", "p.json", "o.report.json", "o.report.md"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o666 & ~umask, name


def test_a_missing_output_directory_fails_before_any_work(tmp_path, capsys, monkeypatch):
    model = _plain_model(tmp_path)
    import onnx_precision.convert.run as convert_module
    monkeypatch.setattr(convert_module, "load_model", lambda *a: pytest.fail("work started"))
    line = _run_refused(["convert", model, "-o", str(tmp_path / "o.onnx"), "--report-md",
                         str(tmp_path / "nowhere" / "r.md")], capsys, tmp_path)
    assert "does not exist" in line and "nowhere" in line


def test_an_interrupt_exits_130_with_one_line_and_nothing_written(tmp_path, capsys, monkeypatch):
    import onnx_precision.convert.run as convert_module
    model = _plain_model(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert_module, "rewrite", interrupted)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", model, "-o", str(out / "o.onnx")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "onnx-precision: interrupted"
    assert os.listdir(out) == []
