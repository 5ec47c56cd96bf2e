"""Hostile model files (issue 30): shapes past 2**64 elements, external data in a function, sparse
tensors, subgraphs nested past protobuf's limit, a full disk. Each ends in one line naming the file
and what is at fault, with the documented exit code, nothing written and the inputs untouched, through
the CLI and through the Python API."""

from __future__ import annotations

import errno
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.convert import ConvertOptions, convert_model
from onnx_precision.errors import ModelLoadError, OutputError, WriteError
from onnx_precision.storage import saving

N = helper.make_node
COMMANDS = {
    "convert all-fp16": ["convert", "{m}", "-o", "{out}/o.onnx", "--mode", "all-fp16"],
    "convert static": ["convert", "{m}", "-o", "{out}/o.onnx", "--mode", "static"],
    "convert auto": ["convert", "{m}", "-o", "{out}/o.onnx"],
    "analyze": ["analyze", "{m}", "--json", "{out}/a.json"],
    "check": ["check", "{m}", "{m}", "--json", "{out}/c.json"],
}


def argv(command: str, model: str, out) -> list[str]:
    return [a.format(m=model, out=out) for a in COMMANDS[command]]


def ends(args: list[str], capsys, out_dir, inputs: tuple[str, ...], code: int = 2) -> str:
    """Run ``args``: exit ``code``, one line on stderr, nothing written under ``out_dir``, each of
    ``inputs`` byte for byte as it was; the line."""
    before = sorted(os.listdir(out_dir))
    contents = [open(p, "rb").read() for p in inputs]
    assert main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
    assert sorted(os.listdir(out_dir)) == before
    assert [open(p, "rb").read() for p in inputs] == contents
    return err[0].removeprefix("onnx-precision: error: ")


def model_of(nodes, inputs, outputs, inits=(), functions=(), opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *opsets],
                              functions=list(functions))
    model.ir_version = 8
    return model


def external(name: str, dims: list[int], location: str, length: int | None = None) -> onnx.TensorProto:
    """A float tensor of shape ``dims`` whose data is said to be at ``location`` (``length``: the
    length entry, none by default)."""
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", "0")]
    entries += [("length", str(length))] if length is not None else []
    for key, value in entries:
        tensor.external_data.add(key=key, value=value)
    return tensor


def _vi(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


# --- item 6: an element count past 2**64 --------------------------------------------------------------

def _huge(tmp_path, dims: list[int], length: int | None) -> tuple[str, str]:
    """y = x + w, w external in an empty w.bin with shape ``dims``; (model, data file)."""
    data = tmp_path / "w.bin"
    data.write_bytes(b"")
    model = model_of([N("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [1])], [_vi("y", dims)],
                     [external("w", dims, "w.bin", length)])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    return path, str(data)


HUGE = {  # shape, length entry, what the line says
    "2**64 elements, length 0": (
        [2**32, 2**32], 0,
        "external data length 0 at offset 0 does not match its shape [4294967296, 4294967296] "
        "(73786976294838206464 bytes)"),
    "2**64 elements, no length": (
        [2**32, 2**32], None, "tensor 'w' needs bytes 0..73786976294838206464 but the file has 0"),
    "a negative dimension": ([-2, -2], 16, "tensor 'w' has a negative dimension in its shape [-2, -2]"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", HUGE)
def test_an_external_tensor_past_2_64_elements_is_one_line_naming_it(tmp_path, capsys, command, case):
    """np.prod(dims, dtype=int64) wrapped [2**32, 2**32] to 0 elements, so a length of 0 passed: an
    internal error, and all-fp16 wrote a model onnxruntime refuses."""
    dims, length, said = HUGE[case]
    model, data = _huge(tmp_path, dims, length)
    out = tmp_path / "out"
    out.mkdir()
    line = ends(argv(command, model, out), capsys, out, (model, data))
    assert line.startswith(f"{model}: ") and said in line and "'w'" in line


@pytest.mark.parametrize("case", HUGE)
def test_the_api_refuses_such_a_tensor_in_the_same_words(tmp_path, case):
    dims, length, said = HUGE[case]
    model, _ = _huge(tmp_path, dims, length)
    with pytest.raises(ModelLoadError, match=re.escape(said)):
        convert_model(model)
    with pytest.raises(ModelLoadError, match="'w'"):
        convert_model(onnx.load(model, load_external_data=False), base_dir=tmp_path)


# --- item 12: external data on a function's Constant ---------------------------------------------------

HALF = np.full(4, 0.5, np.float32)


def _function_model(directory, location: str = "c.bin") -> str:
    """y = AddC(x), a local function adding a Constant whose data is external at ``location``
    (HALF written to c.bin)."""
    (directory / "c.bin").write_bytes(HALF.tobytes())
    constant = N("Constant", [], ["k"], name="kc", value=external("c", [4], location, 16))
    function = helper.make_function("local", "AddC", ["a"], ["b"],
                                    [constant, N("Add", ["a", "k"], ["b"], name="fadd")],
                                    opset_imports=[helper.make_opsetid("", 17)])
    model = model_of([N("AddC", ["x"], ["y"], name="call", domain="local")], [_vi("x", [4])], [_vi("y", [4])],
                     functions=[function], opsets=[helper.make_opsetid("local", 1)])
    path = str(directory / "m.onnx")
    onnx.save(model, path)
    return path


def _runs_with_half_added(model: onnx.ModelProto) -> None:
    """The function's Constant is in the model, and onnxruntime computes x + 0.5 with it."""
    (constant,) = [n for f in model.functions for n in f.node if n.op_type == "Constant"]
    assert constant.attribute[0].t.data_location != TensorProto.EXTERNAL
    assert onnx.numpy_helper.to_array(constant.attribute[0].t).tolist() == HALF.tolist()
    x = np.arange(4, dtype=np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": x})[0].tolist() == (x + HALF).tolist()


@pytest.mark.parametrize("where, mode", [("the model's folder", "all-fp16"), ("elsewhere", "auto")])
def test_a_functions_external_constant_is_read_from_the_models_folder(tmp_path, monkeypatch, capsys, where,
                                                                      mode):
    """onnx's checker resolved it against the working directory: from the model's folder the written
    model failed the full check (an internal error, exit 1), elsewhere the load said 'not regular file'
    (exit 2)."""
    models, out = tmp_path / "models", tmp_path / "out"
    models.mkdir()
    out.mkdir()
    model = _function_model(models)
    monkeypatch.chdir(models if where == "the model's folder" else out)
    assert main(["convert", model, "-o", str(out / "o.onnx"), "--mode", mode, "-q"]) == 0, capsys.readouterr()
    written = onnx.load(str(out / "o.onnx"))
    onnx.checker.check_model(written, full_check=True)
    _runs_with_half_added(written)
    assert main(["analyze", model, "-q"]) == 0
    capsys.readouterr()
    # nothing to convert: the model as it was read, which check refuses once it has read and run both
    assert main(["check", model, str(out / "o.onnx"), "-q"]) == 2
    assert capsys.readouterr().err.endswith("(a copy: nothing in it computes in 16 bits); check compares a "
                                            "16-bit candidate with its FP32 model\n")


def test_the_api_reads_a_functions_external_constant_from_the_models_folder(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    model = _function_model(models)
    monkeypatch.chdir(tmp_path)
    options = ConvertOptions(mode="all-fp16")
    _runs_with_half_added(convert_model(model, options=options).model)
    proto = onnx.load(model, load_external_data=False)
    _runs_with_half_added(convert_model(proto, options=options, base_dir=models).model)
    with pytest.raises(ModelLoadError, match="tensor 'c' keeps its data in 'c.bin'.*give base_dir"):
        convert_model(proto)


@pytest.mark.parametrize("location, said", [
    ("../secret.bin", "leads outside the model's directory"),
    ("gone.bin", "external data file 'gone.bin' of tensor 'c' is missing")])
def test_a_functions_external_constant_is_checked_as_a_graphs(tmp_path, capsys, location, said):
    models, out = tmp_path / "models", tmp_path / "out"
    models.mkdir()
    out.mkdir()
    (tmp_path / "secret.bin").write_bytes(HALF.tobytes())
    model = _function_model(models, location)
    for command in ("convert all-fp16", "analyze"):
        line = ends(argv(command, model, out), capsys, out, (model, str(tmp_path / "secret.bin")))
        assert line.startswith(f"{model}: ") and said in line


def test_a_subgraphs_external_data_is_read_from_the_models_folder(tmp_path, monkeypatch, capsys):
    """A Constant kept in a file inside an If branch, and an initializer of that branch: validation's
    checkable_copy lost its edits of every subgraph (protobuf's extend copies the nodes it kept), so
    the checker looked for their data in the working directory ('not regular file', exit 2, elsewhere)
    and, from the model's folder, met the name twice (an SSA error, exit 2)."""
    models, out = tmp_path / "models", tmp_path / "out"
    models.mkdir()
    out.mkdir()
    (models / "sub.bin").write_bytes(np.concatenate([HALF, HALF]).tobytes())
    constant = N("Constant", [], ["t"], name="tc", value=external("tc", [4], "sub.bin", 16))
    initializer = external("ti", [4], "sub.bin", 16)
    initializer.external_data[1].value = "16"  # the offset
    then = helper.make_graph([constant, N("Add", ["t", "ti"], ["s"], name="sum")], "then", [],
                             [_vi("s", [4])], [initializer])
    other = helper.make_graph([N("Identity", ["x"], ["e"], name="same")], "else", [], [_vi("e", [4])])
    nodes = [N("Constant", [], ["c"], name="cond", value=onnx.numpy_helper.from_array(np.array(True), "c")),
             N("If", ["c"], ["i"], name="if", then_branch=then, else_branch=other),
             N("Add", ["x", "i"], ["y"], name="add")]
    model = str(models / "m.onnx")
    onnx.save(model_of(nodes, [_vi("x", [4])], [_vi("y", [4])]), model)
    for where in (models, out):
        monkeypatch.chdir(where)
        written = str(out / f"o_{where.name}.onnx")
        assert main(["convert", model, "-o", written, "-q"]) == 0, capsys.readouterr()
        assert main(["analyze", model, "-q"]) == 0
        session = ort.InferenceSession(written, providers=["CPUExecutionProvider"])
        assert session.run(None, {"x": np.zeros(4, np.float32)})[0].tolist() == [1.0] * 4


# --- item 15: sparse tensors ---------------------------------------------------------------------------

def _sparse(tmp_path, where: str) -> str:
    """y = x + s, s a sparse [4] tensor (2 values): a sparse initializer, or a Constant's sparse_value."""
    values = onnx.numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "s")
    sparse = helper.make_sparse_tensor(values, onnx.numpy_helper.from_array(np.array([0, 3], np.int64), "i"),
                                       [4])
    nodes = [N("Add", ["x", "s"], ["y"], name="add")]
    if where == "a Constant":
        nodes.insert(0, N("Constant", [], ["s"], name="sc", sparse_value=sparse))
    model = model_of(nodes, [_vi("x", [4])], [_vi("y", [4])])
    if where == "an initializer":
        model.graph.sparse_initializer.append(sparse)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    return path


SPARSE = {"an initializer": "tensor 's' is a sparse initializer, which onnx-precision does not support; "
                            "store it as a dense initializer",
          "a Constant": "node 'sc' (Constant) holds a sparse tensor ('sparse_value'), which onnx-precision "
                        "does not support; store it dense"}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("where", SPARSE)
def test_a_sparse_tensor_is_refused_as_what_it_is(tmp_path, capsys, command, where):
    """A sparse initializer read as "'s', which is no graph input, initializer or node output"; a
    Constant's sparse_value ended in an internal error (AttributeError: sparse_value)."""
    model = _sparse(tmp_path, where)
    out = tmp_path / "out"
    out.mkdir()
    assert ends(argv(command, model, out), capsys, out, (model,)) == f"{model}: {SPARSE[where]}"
    with pytest.raises(ModelLoadError, match=re.escape(SPARSE[where])):
        convert_model(model)


# --- item 15: subgraphs nested past protobuf's recursion limit -----------------------------------------

def _nested_ifs(tmp_path, depth: int) -> str:
    """y = If(c) whose then branch is an If whose then branch ..., ``depth`` Ifs in all, a Relu of x
    innermost; each else branch a Relu."""
    def relu(name: str) -> onnx.GraphProto:
        return helper.make_graph([N("Relu", ["x"], [name], name=f"r_{name}")], "leaf", [], [_vi(name, [4])])

    body = relu("o0")
    for level in range(1, depth):
        node = N("If", ["c"], [f"o{level}"], name=f"if{level}", then_branch=body,
                 else_branch=relu(f"e{level}"))
        body = helper.make_graph([node], f"g{level}", [], [_vi(f"o{level}", [4])])
    top = N("If", ["c"], ["y"], name="top", then_branch=body, else_branch=relu("e"))
    model = model_of([top], [_vi("c", [], TensorProto.BOOL), _vi("x", [4])], [_vi("y", [4])])
    path = str(tmp_path / f"if{depth}.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


DEEP = ("its subgraphs nest 32 deep (If, Loop or Scan bodies within bodies), past protobuf's recursion limit "
        "of 100 nested messages: onnx cannot parse it")


@pytest.mark.parametrize("command", COMMANDS)
def test_subgraphs_nested_past_protobufs_limit_say_so(tmp_path, capsys, command):
    """It read as "not an ONNX model (protobuf does not parse; truncated or another format)"."""
    model = _nested_ifs(tmp_path, 32)
    out = tmp_path / "out"
    out.mkdir()
    assert ends(argv(command, model, out), capsys, out, (model,)) == f"{model}: {DEEP}"
    with pytest.raises(ModelLoadError, match=re.escape(DEEP)):
        convert_model(model)


def test_subgraphs_nested_just_within_the_limit_convert(tmp_path, capsys):
    model = _nested_ifs(tmp_path, 31)
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16", "-q"]) == 0
    with open(tmp_path / "junk.onnx", "wb") as f:
        f.write(b"\xff" * 64)
    assert ends(["analyze", str(tmp_path / "junk.onnx")], capsys, tmp_path, ()).endswith(
        "junk.onnx: not an ONNX model (protobuf does not parse; truncated or another format)")


# --- item 15: a full disk ---------------------------------------------------------------------------------

def _disk_full_on(monkeypatch, suffix: str, error: int = errno.ENOSPC) -> None:
    """Writing the staged output whose path ends in ``suffix`` fails with ``error``."""
    original = saving.Outputs.stage

    def stage(self, path, write):
        if path.endswith(suffix):
            def write(staged):
                with open(staged, "wb") as f:  # half-written when the disk fills up
                    f.write(b"partial")
                raise OSError(error, os.strerror(error))
        return original(self, path, write)

    monkeypatch.setattr(saving.Outputs, "stage", stage)


@pytest.mark.parametrize("suffix, where", [(".md", "the last output, the Markdown report"),
                                           (".data", "the model's data file")])
def test_a_full_disk_is_the_machines_failure_exit_1_naming_the_file(tmp_path, capsys, monkeypatch, suffix,
                                                                     where):
    """It exited 2, as a user's mistake, where the CLI's docstring says an operating-system failure
    exits 1; nothing is left behind, the inputs are untouched."""
    models, out = tmp_path / "models", tmp_path / "out"
    models.mkdir()
    out.mkdir()
    model = str(models / "m.onnx")
    onnx.save(model_of([N("Relu", ["x"], ["y"], name="r")], [_vi("x", [1, 4])], [_vi("y", [1, 4])]), model)
    _disk_full_on(monkeypatch, suffix)
    line = ends(["convert", model, "-o", str(out / "o.onnx"), "--trt-flags", str(out / "t.txt"),
                 "--external-data"], capsys, out, (model,), code=1)
    written = out / ("o.onnx.data" if suffix == ".data" else "o.report.md")
    assert line == f"{written}: cannot write: {os.strerror(errno.ENOSPC)}"


def test_the_api_raises_a_full_disk_as_a_write_error_and_a_users_mistake_stays_exit_2(tmp_path, monkeypatch):
    model = str(tmp_path / "m.onnx")
    onnx.save(model_of([N("Relu", ["x"], ["y"], name="r")], [_vi("x", [1, 4])], [_vi("y", [1, 4])]), model)
    converted = convert_model(model, options=ConvertOptions(mode="all-fp16"))
    _disk_full_on(monkeypatch, "o.onnx")
    full = f"o.onnx: cannot write: {os.strerror(errno.ENOSPC)}"
    with pytest.raises(WriteError, match=re.escape(full)) as e:
        converted.save(tmp_path / "o.onnx")
    assert e.value.exit_code == 1 and isinstance(e.value, OutputError)
    _disk_full_on(monkeypatch, "p.onnx", errno.EACCES)
    with pytest.raises(OutputError) as refused:
        converted.save(tmp_path / "p.onnx")
    assert not isinstance(refused.value, WriteError) and refused.value.exit_code == 2
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
