"""No output overwrites a file the run reads (issue 30, item 2): the model's external data (its
subgraphs' and functions' too), the reference model's, the plan, the samples. ``--save-plan w.bin``,
``w.bin`` the model's own weights, exited 0 and replaced them with JSON; the next run said "the FP32
model itself produces NaN/Inf". Each output is refused before any work: one line naming it, exit 2,
nothing written, every input byte for byte as it was."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_hostile_files import ends, external, model_of

from onnx_precision.analysis import analyze
from onnx_precision.convert import ConvertOptions, convert
from onnx_precision.errors import OutputError
from onnx_precision.run_inputs import protected_paths

N = helper.make_node
W = (np.random.default_rng(0).standard_normal((16, 16)) / 4).astype(np.float32)


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp(directory, name: str = "m.onnx", location: str = "w.bin") -> str:
    """y = relu(x @ w), w in ``location`` beside the model."""
    model = model_of([N("MatMul", ["x", "w"], ["h"], name="mm"), N("Relu", ["h"], ["y"], name="relu")],
                     [_vi("x", [1, 16])], [_vi("y", [1, 16])], [onnx.numpy_helper.from_array(W, "w")])
    path = str(directory / name)
    onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=0)
    return path


def nested(directory) -> str:
    """y = AddC(x) + If(c: then a Constant, else another): the function's Constant in f.bin, the then
    branch's in sub.bin, each 16 float values."""
    for location in ("f.bin", "sub.bin"):
        (directory / location).write_bytes(np.full(16, 0.5, np.float32).tobytes())
    in_function = N("Constant", [], ["k"], name="kc", value=external("fc", [16], "f.bin", 64))
    function = helper.make_function("local", "AddC", ["a"], ["b"], [in_function, N("Add", ["a", "k"], ["b"])],
                                    opset_imports=[helper.make_opsetid("", 17)])
    then = helper.make_graph([N("Constant", [], ["t"], name="tc", value=external("tc", [16], "sub.bin", 64))],
                             "then", [], [_vi("t", [16])])
    other = helper.make_graph([N("Constant", [], ["e"], name="ec",
                                 value=onnx.numpy_helper.from_array(np.zeros(16, np.float32), "ec"))],
                              "else", [], [_vi("e", [16])])
    nodes = [N("AddC", ["x"], ["a"], name="call", domain="local"),
             N("Constant", [], ["c"], name="cond", value=onnx.numpy_helper.from_array(np.array(True), "c")),
             N("If", ["c"], ["i"], name="if", then_branch=then, else_branch=other),
             N("Add", ["a", "i"], ["y"], name="add")]
    model = model_of(nodes, [_vi("x", [16])], [_vi("y", [16])], functions=[function],
                     opsets=[helper.make_opsetid("local", 1)])
    path = str(directory / "nested.onnx")
    onnx.save(model, path)
    return path


@pytest.fixture
def models(tmp_path):
    directory = tmp_path / "models"
    directory.mkdir()
    return directory


@pytest.fixture
def out(tmp_path):
    directory = tmp_path / "out"
    directory.mkdir()
    return directory


def _inputs(directory) -> tuple[str, ...]:
    return tuple(sorted(str(p) for p in directory.iterdir()))


@pytest.mark.parametrize("command", ["analyze", "check"])
def test_the_json_of_check_and_analyze_overwrites_no_weights(models, out, capsys, command):
    model = mlp(models)
    candidate = str(out / "fp16.onnx")
    convert(model, candidate, ConvertOptions(mode="all-fp16", external_data=True))
    capsys.readouterr()
    targets = [str(models / "w.bin")] + ([candidate + ".data"] if command == "check" else [])
    for target in targets:
        args = [command, model] + ([candidate] if command == "check" else []) + ["--json", target, "-q"]
        line = ends(args, capsys, out, _inputs(models) + _inputs(out))
        assert line == f"{target}: output path is the input file; choose another output"


def test_one_list_holds_every_file_a_run_reads(models):
    model, reference = nested(models), mlp(models, "ref.onnx", "ref.bin")
    samples = models / "samples"
    samples.mkdir()
    for name in ("a.npz", "b.npz"):
        np.savez(samples / name, x=np.ones(16, np.float32))
    (samples / "notes.txt").write_text("not read")
    found = protected_paths(models=(model, reference, None), files=("plan.json", None),
                            samples=(str(samples), None, str(models / "held.npz")))
    data = [str(models / name) for name in ("sub.bin", "f.bin", "ref.bin", "held.npz")]
    assert found == (model, data[0], data[1], reference, data[2], "plan.json", str(samples / "a.npz"),
                     str(samples / "b.npz"), data[3])
    assert protected_paths(models=(str(models / "missing.onnx"),)) == (str(models / "missing.onnx"),)


def test_analysis_write_json_protects_the_models_data(models):
    model = mlp(models)
    weights = str(models / "w.bin")
    before = open(weights, "rb").read()
    with pytest.raises(OutputError, match="output path is the input file"):
        analyze(model).write_json(weights)
    assert open(weights, "rb").read() == before
