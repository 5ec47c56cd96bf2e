"""No output overwrites a file the run reads (issue 30, item 2): the model's external data (its
subgraphs' and functions' too), the reference model's, the plan, the samples. ``--save-plan w.bin``,
``w.bin`` the model's own weights, exited 0 and replaced them with JSON; the next run said "the FP32
model itself produces NaN/Inf". Each output is refused before any work: one line naming it, exit 2,
nothing written, every input byte for byte as it was."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_hostile_files import ends, external, model_of

from onnx_precision.analysis import analyze
from onnx_precision.convert import ConvertOptions, convert, convert_model
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


SIDE_OUTPUTS = ["--save-plan", "--report", "--report-md", "--trt-flags", "--save-inputs", "--save-outputs"]


@pytest.mark.parametrize("option", SIDE_OUTPUTS)
def test_no_side_output_of_convert_overwrites_the_models_weights(models, out, capsys, option):
    model = mlp(models)
    weights = str(models / "w.bin")
    line = ends(["convert", model, "-o", str(out / "o.onnx"), option, weights], capsys, out, _inputs(models))
    assert line == f"{weights}: output path is the input file; choose another output"


@pytest.mark.parametrize("location", ["sub.bin", "f.bin"])
def test_the_data_files_of_subgraphs_and_functions_are_inputs_too(models, out, capsys, location):
    model = nested(models)
    target = str(models / location)
    line = ends(["convert", model, "-o", str(out / "o.onnx"), "--mode", "all-fp16", "--save-plan", target],
                capsys, out, _inputs(models))
    assert line == f"{target}: output path is the input file; choose another output"


@pytest.mark.parametrize("option", ["--plan", "--layer-precisions-file", "--genai-config",
                                    "--ort-custom-op-library", "--validation-inputs"])
def test_every_file_an_option_names_is_an_input(models, out, capsys, option):
    """What the list held before (the plan, the layer-precisions file, the held-out samples), and what
    it did not (a genai_config.json, a custom-op library): each refused as an output."""
    model, given = mlp(models), models / "given"
    given.write_bytes(b"what the option reads")
    line = ends(["convert", model, "-o", str(out / "o.onnx"), option, str(given), "--save-plan", str(given)],
                capsys, out, _inputs(models))
    assert line == f"{given}: output path is the input file; choose another output"


def test_the_reference_models_weights_are_inputs_too(models, out, capsys):
    model, reference = mlp(models), mlp(models, "ref.onnx", "ref.bin")
    target = str(models / "ref.bin")
    line = ends(["convert", model, "-o", str(out / "o.onnx"), "--reference-model", reference, "--report",
                 target], capsys, out, _inputs(models))
    assert line == f"{target}: output path is the input file; choose another output"


@pytest.mark.parametrize("given", ["--plan", "--inputs", "the model"])
def test_the_written_models_data_file_may_be_no_input(models, out, capsys, given):
    """``-o o.onnx`` writes its weights to o.onnx.data: refused before any work where that is an input,
    whether or not this run writes a data file (the model's own data named so was caught only when
    its weights were written, after the search)."""
    if given == "the model":
        model, extra = mlp(models, location="o.onnx.data"), []
    else:
        model = mlp(models)
        data = models / "o.onnx.data"
        if given == "--plan":
            data.write_text('{"format": "onnx-precision-plan/1", "fp16_io": false, "nodes": {}}')
        else:
            np.savez(data.with_suffix(".npz"), x=np.ones((1, 16), np.float32))
            data.with_suffix(".npz").rename(data)
        extra = [given, str(data)]
    output = str(models / "o.onnx")
    line = ends(["convert", model, "-o", output, "--mode", "all-fp16", *extra], capsys, models,
                _inputs(models))
    assert line == (f"{output}: its weights would be written to '{models / 'o.onnx.data'}', a file this run "
                    f"reads ({models / 'o.onnx.data'}); choose another output")


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


def test_the_python_api_protects_the_same_files(models, out):
    model = mlp(models)
    weights = str(models / "w.bin")
    before = open(weights, "rb").read()
    feeds = str(models / "feeds.npz")
    np.savez(feeds, x=np.ones((1, 16), np.float32))
    converted = convert_model(model, feeds, ConvertOptions(mode="all-fp16"))
    with pytest.raises(OutputError, match="output path is the input file"):
        converted.save(feeds)
    proto = onnx.load(model, load_external_data=False)
    in_memory = convert_model(proto, options=ConvertOptions(mode="all-fp16"), base_dir=models)
    with pytest.raises(OutputError, match="output path is the input file"):
        in_memory.save(weights)
    assert open(weights, "rb").read() == before
    assert sorted(os.listdir(models)) == ["feeds.npz", "m.onnx", "w.bin"]


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
