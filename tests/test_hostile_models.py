"""Models onnx or onnxruntime reject (issue 10, item 6): one line naming the problem, exit 2, nothing
written, in every command and mode; custom-domain ops and --ort-custom-op-library."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main

N = helper.make_node


def _model(nodes, inputs=None, outputs=None, opset=17, ir=8, extra_opsets=()) -> onnx.ModelProto:
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir
    return model


def _no_opset() -> onnx.ModelProto:
    model = _model([N("Relu", ["x"], ["y"], name="r")])
    del model.opset_import[:]
    return model


def _truncated() -> bytes:
    """A model file cut where its opset_import starts: protobuf still parses what is left."""
    full = _model([N("Relu", ["x"], ["y"], name="r")]).SerializeToString()
    cut = _no_opset().SerializeToString()
    assert full.startswith(cut) and len(cut) < len(full)  # opset_import is serialised last
    return cut


_INT_INPUT = helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])
_X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])

# name -> (model, what the one line must say)
BROKEN = {
    "dangling input": (_model([N("Relu", ["x"], ["h"], name="r"), N("Add", ["h", "nope"], ["y"], name="a")]),
                       "node 'a' (Add) reads 'nope'"),
    "cycle": (_model([N("Neg", ["e"], ["n"], name="neg"), N("Exp", ["n"], ["e"], name="exp"),
                      N("Add", ["e", "x"], ["y"], name="add")]), "is on a cycle"),
    "duplicate tensor": (_model([N("Relu", ["x"], ["y"], name="r"), N("Neg", ["x"], ["y"], name="n")]),
                         "tensor 'y' is defined twice"),
    "unknown op": (_model([N("FooBar", ["x"], ["y"], name="f")]), "'FooBar', which is not an ONNX operator"),
    "type mismatch": (_model([N("Add", ["x", "i"], ["y"], name="a")], inputs=[_X, _INT_INPUT]), "int64"),
    "opset too new": (_model([N("Relu", ["x"], ["y"], name="r")], opset=99), "ai.onnx opset 99"),
    "IR too new": (_model([N("Relu", ["x"], ["y"], name="r")], ir=99), "IR version 99"),
    "no opset_import": (_no_opset(), "the model imports no opset"),
    "truncated": (_truncated(), "the model imports no opset"),
    "zero-size dimension": (_model([N("Relu", ["x"], ["y"], name="r")],
                                   inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])],
                                   outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 3])]),
                            "input 'x' has a zero-size dimension"),
}

COMMANDS = {
    "convert all-fp16": ["convert", "{m}", "-o", "{out}/o.onnx", "--mode", "all-fp16"],
    "convert static": ["convert", "{m}", "-o", "{out}/o.onnx", "--mode", "static"],
    "convert auto": ["convert", "{m}", "-o", "{out}/o.onnx"],
    "analyze": ["analyze", "{m}", "--json", "{out}/a.json"],
    "check": ["check", "{m}", "{m}"],
}


def _with_candidate(argv: list[str], out) -> list[str]:
    """``argv`` with, for ``check``, an all-FP16 conversion of the model as the candidate (a check of the
    model against itself is refused once the model has run)."""
    if argv[0] != "check":
        return argv
    candidate = str(out / "candidate.onnx")
    assert main(["convert", argv[1], "-o", candidate, "--mode", "all-fp16", "-q"]) == 0
    return argv[:2] + [candidate] + argv[3:]


def _save(tmp_path, model: onnx.ModelProto | bytes, name: str = "m.onnx") -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def refused(argv: list[str], capsys, out_dir, inputs: tuple[str, ...] = ()) -> str:
    """Run ``argv``: exit 2, one line on stderr, nothing written under ``out_dir``, inputs unchanged."""
    before = sorted(os.listdir(out_dir))
    contents = [open(p, "rb").read() for p in inputs]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
    assert sorted(os.listdir(out_dir)) == before
    assert [open(p, "rb").read() for p in inputs] == contents
    return err[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", BROKEN)
def test_a_model_onnx_or_onnxruntime_rejects_is_one_line_and_exit_2(tmp_path, capsys, case, command):
    model, said = BROKEN[case]
    if case == "zero-size dimension" and command == "convert all-fp16":
        pytest.skip("valid for onnx and onnxruntime: all-fp16 converts it without running it (below)")
    path = _save(tmp_path, model)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(m=path, out=out) for a in COMMANDS[command]]
    line = refused(argv, capsys, out, (path,))
    assert said in line, line
    assert path in line or case == "zero-size dimension"  # a data error: it names the input


def test_a_zero_size_dimension_converts_all_fp16(tmp_path):
    path = _save(tmp_path, BROKEN["zero-size dimension"][0])
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", "all-fp16", "-q"]) == 0
    onnx.checker.check_model(out, full_check=True)


def test_all_fp16_writes_only_what_passes_the_full_checker(tmp_path, capsys):
    # Valid for the plain checker, not for the full one (the declared output type is wrong).
    model = _model([N("Relu", ["x"], ["y"], name="r")],
                   outputs=[helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])])
    onnx.checker.check_model(model)
    path = _save(tmp_path, model)
    out = tmp_path / "out"
    out.mkdir()
    line = refused(["convert", path, "-o", str(out / "o.onnx"), "--mode", "all-fp16"], capsys, out, (path,))
    assert "onnx rejects the model (full check)" in line and "node name: r" in line


def test_the_rewriter_failing_the_full_check_is_an_internal_error(tmp_path, monkeypatch, capsys):
    from onnx_precision.convert import run as convert_module
    from onnx_precision.rewriter import rewrite

    def broken_rewrite(ctx, plan, **options):
        result = rewrite(ctx, plan, **options)
        result.model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
        return result

    monkeypatch.setattr(convert_module, "rewrite", broken_rewrite)
    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")]))
    # the process boundary: one line that says it is a bug, exit 1, nothing written
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("onnx-precision: internal error (a bug in onnx-precision, not in your input): "
                          "InternalError: the written model fails onnx's full check")
    assert len(err.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_only_the_derived_graph_failing_in_onnxruntime_is_an_internal_error(tmp_path, monkeypatch, capsys):
    from onnx_precision.oracle import emulation_session as session_module

    real = session_module.make_session

    def fails_on_switch_graphs(model, *args, **kwargs):
        if any(n.op_type in ("If", "Cast") for n in model.graph.node):  # an emulation, not the user's model
            import onnxruntime as ort
            return ort.InferenceSession(b"not a model")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(session_module, "make_session", fails_on_switch_graphs)
    path = _save(tmp_path, _model([N("Relu", ["x"], ["h"], name="r"), N("Exp", ["h"], ["y"], name="e")]))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx")]) == 1
    err = capsys.readouterr().err
    assert "internal error (a bug in onnx-precision, not in your input): InternalError" in err
    assert "although the model itself loads and runs" in err and len(err.splitlines()) == 1


# --- custom-domain ops ------------------------------------------------------------------------------

def _custom(tmp_path) -> str:
    model = _model([N("Relu", ["x"], ["h"], name="r"),
                    N("MyPlugin", ["h"], ["p"], name="plugin", domain="com.acme"),
                    N("Exp", ["p"], ["y"], name="e")], extra_opsets=[helper.make_opsetid("com.acme", 1)])
    return _save(tmp_path, model, "custom.onnx")


@pytest.mark.parametrize("command", ["convert auto", "analyze", "check"])
def test_a_custom_op_onnxruntime_lacks_says_how_to_proceed(tmp_path, capsys, command):
    path = _custom(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    line = refused([a.format(m=path, out=out) for a in COMMANDS[command]], capsys, out, (path,))
    assert "node 'plugin' (com.acme:MyPlugin)" in line
    assert "--ort-custom-op-library PATH" in line and "--mode static" in line


@pytest.mark.parametrize("mode", ["all-fp16", "static"])
def test_a_custom_op_stays_fp32_and_the_model_is_written(tmp_path, capsys, mode):
    path = _custom(tmp_path)
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--mode", mode]) == 0
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    plugin = next(n for n in written.graph.node if n.op_type == "MyPlugin")
    producers = {o: n for n in written.graph.node for o in n.output}
    # it reads FP32: Relu's FP16 output cast back, not Relu's output itself
    assert producers[plugin.input[0]].op_type == "Cast"
    if mode == "static":  # written unmeasured, and said so
        captured = capsys.readouterr()
        said = captured.out + captured.err
        assert "the written model is not verified (give --ort-custom-op-library PATH" in said


def test_a_missing_custom_op_library_is_one_line(tmp_path, capsys):
    path = _custom(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    line = refused(["convert", path, "-o", str(out / "o.onnx"), "--ort-custom-op-library",
                    str(tmp_path / "nope.so")], capsys, out, (path,))
    assert "--ort-custom-op-library" in line and "nope.so: no such file" in line


@pytest.mark.parametrize("command", ["convert auto", "analyze", "check"])
def test_a_custom_op_library_is_registered_on_the_sessions(tmp_path, capsys, command):
    path = _custom(tmp_path)
    library = tmp_path / "not_a_library.so"
    library.write_bytes(b"\x7fELF but not really")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(m=path, out=out) for a in COMMANDS[command]] + ["--ort-custom-op-library", str(library)]
    line = refused(argv, capsys, out, (path,))
    assert f"--ort-custom-op-library {library}: onnxruntime cannot load it" in line


def test_a_real_custom_op_library_lets_auto_measure(tmp_path):
    extensions = pytest.importorskip("onnxruntime_extensions")
    model = _model([N("Relu", ["x"], ["h"], name="r"),
                    N("Inverse", ["h"], ["i"], name="inv", domain="ai.onnx.contrib"),
                    N("Mul", ["i", "i"], ["y"], name="m")],
                   inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                   outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])],
                   extra_opsets=[helper.make_opsetid("ai.onnx.contrib", 1)])
    path = _save(tmp_path, model)
    np.savez(tmp_path / "x.npz", x=(np.eye(3) * 2).astype(np.float32))
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "x.npz"), "-q",
                 "--ort-custom-op-library", extensions.get_library_path()]) == 0


# --- item 3: the written model loaded as the user will --------------------------------------------

def _fake_child(crash_for: set[str]):
    """A child command that crashes (SIGSEGV) for attempts whose label is in ``crash_for`` (or all,
    for "*") and loads otherwise."""
    import sys

    from onnx_precision.oracle import default_load

    def command(path, attempt, libraries):
        if "*" in crash_for or attempt.label in crash_for:
            return [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
        return [sys.executable, "-c", "pass"]

    return default_load, command


def test_a_written_model_that_crashes_onnxruntime_at_default_options_is_not_a_pass(tmp_path, capsys,
                                                                                    monkeypatch):
    default_load, command = _fake_child({default_load_label()})
    monkeypatch.setattr(default_load, "_child_command", command)
    path = _save(tmp_path, _model([N("Relu", ["x"], ["h"], name="r"), N("Exp", ["h"], ["y"], name="e")]))
    out = tmp_path / "o.onnx"
    assert main(["convert", path, "-o", str(out)]) == 3
    stdout = capsys.readouterr().out
    status = next(line for line in stdout.splitlines() if line.startswith(path))
    assert status.startswith(f"{path} -> {out}: ort-load-failed")
    assert "with default session options onnxruntime crashes (SIGSEGV) loading it" in status
    assert "it loads with InferenceSession(..., disabled_optimizers=['NchwcTransformer'])" in status
    import json
    report = json.loads((tmp_path / "o.report.json").read_text())
    assert report["status"] == "ort-load-failed" and "SIGSEGV" in report["message"]
    onnx.checker.check_model(str(out), full_check=True)  # written all the same: the user needs it


def test_no_workaround_loading_it_is_said_too(tmp_path, capsys, monkeypatch):
    default_load, command = _fake_child({"*"})
    monkeypatch.setattr(default_load, "_child_command", command)
    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")]))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "static"]) == 3
    assert "and with every workaround tried" in capsys.readouterr().out


def test_the_default_load_runs_the_staged_file_in_a_child(tmp_path, capsys, monkeypatch):
    from onnx_precision.oracle import default_load
    seen = []
    real = default_load._child_command

    def command(path, attempt, libraries):
        seen.append(path)
        assert os.path.isfile(path) and not os.path.exists(tmp_path / "o.onnx")  # staged, not yet in place
        return real(path, attempt, libraries)

    monkeypatch.setattr(default_load, "_child_command", command)
    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")]))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "-q"]) == 0
    assert len(seen) == 1 and os.path.basename(seen[0]) == "o.onnx"


def test_the_default_load_starts_at_once_and_is_waited_for_or_cancelled(tmp_path):
    from onnx_precision.oracle import DefaultLoad

    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")]))
    assert DefaultLoad(path).problem() == ""
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert DefaultLoad(str(broken)).problem().startswith(
        "with default session options onnxruntime cannot load it")
    cancelled = DefaultLoad(path)
    cancelled.cancel()
    with pytest.raises(ValueError, match="cancelled"):
        cancelled.problem()


def default_load_label() -> str:
    from onnx_precision.oracle.default_load import DEFAULT
    return DEFAULT.label


# --- item 7: a model that fails on the synthetic shapes ---------------------------------------------

def _batch_of_two(tmp_path) -> str:
    """Reshape(x[N, 4], [2, 4]): runs for N = 2 only, while the synthetic feed makes N 1."""
    shape = onnx.numpy_helper.from_array(np.array([2, 4], np.int64), "s")
    nodes = [N("Reshape", ["x", "s"], ["h"], name="rs"), N("Exp", ["h"], ["y"], name="e")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(tmp_path, model)


@pytest.mark.parametrize("command", ["convert static", "convert auto", "analyze", "check"])
def test_a_model_failing_on_the_synthetic_shapes_names_the_input(tmp_path, capsys, command):
    path = _batch_of_two(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    line = refused([a.format(m=path, out=out) for a in COMMANDS[command]], capsys, out, (path,))
    assert "input 'x' (Nx4) got 1 for its batch dimension" in line
    assert "--input-shape x:Nx4" in line
    with_shape = [a.format(m=path, out=out) for a in COMMANDS[command]] + ["--input-shape", "x:2x4", "-q"]
    assert main(_with_candidate(with_shape, out)) == 0


def test_a_model_failing_on_the_users_sample_names_the_file(tmp_path, capsys):
    path = _batch_of_two(tmp_path)
    np.savez(tmp_path / "x.npz", x=np.ones((3, 4), np.float32))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["convert", path, "-o", str(out / "o.onnx"), "--inputs", str(tmp_path / "x.npz")]
    line = refused(argv, capsys, out)
    assert f"{tmp_path / 'x.npz'}: onnxruntime cannot run the model on this sample" in line


# --- warnings: on stderr, once each, hidden by -q; never before an error's one line -------------------

def test_warnings_go_to_stderr_once_and_q_hides_them(tmp_path, capsys):
    path = _save(tmp_path, _model([N("Relu", ["x"], ["h"], name="r"), N("Exp", ["h"], ["y"], name="e")],
                                  inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                                  outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])]))
    out = str(tmp_path / "o.onnx")
    nan = str(tmp_path / "nan.npz")
    np.savez(nan, x=np.array([[np.nan, 1, 2]], np.float32))
    report = str(tmp_path / "r.json")
    for argv, said in ((["convert", path, "-o", out, "--mode", "all-fp16", "--report", report], "--report"),
                       (["analyze", path, "--inputs", nan], f"{nan}: input 'x' contains 1 NaN")):
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert "warning:" not in captured.out
        warned = [line for line in captured.err.splitlines() if said in line]
        assert len(warned) == 1 and warned[0].startswith("onnx-precision: warning: ")
        assert main(argv + ["-q"]) == 0
        assert "warning" not in capsys.readouterr().err


# --- found by the fuzz test ----------------------------------------------------------------------------

def test_a_name_with_a_newline_still_gives_one_line(tmp_path, capsys):
    model = _model([N("Relu", ["x"], ["h"], name="r"), N("Add", ["h", "no\npe"], ["y"], name="a")])
    path = _save(tmp_path, model)
    line = refused(["convert", path, "-o", str(tmp_path / "o.onnx")], capsys, tmp_path, (path,))
    assert "reads 'no\\npe'" in line


def test_a_string_that_is_not_utf8_is_one_line(tmp_path, capsys):
    data = _model([N("Relu", ["x"], ["y"], name="relu_node")]).SerializeToString()
    path = _save(tmp_path, data.replace(b"relu_node", b"relu\xffnode"))
    line = refused(["convert", path, "-o", str(tmp_path / "o.onnx")], capsys, tmp_path, (path,))
    assert "onnx.NodeProto.name is not UTF-8 text" in line


def test_a_constant_holding_fewer_values_than_its_shape_is_one_line(tmp_path, capsys):
    value = onnx.numpy_helper.from_array(np.ones((2, 3), np.float32), "c")
    value.raw_data = value.raw_data[:-4]
    model = _model([N("Constant", [], ["c"], name="const", value=value),
                    N("Add", ["x", "c"], ["y"], name="a")])
    path = _save(tmp_path, model)
    line = refused(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16"], capsys, tmp_path,
                   (path,))
    assert "tensor 'c' holds 20 bytes where its shape [2, 3] needs 24" in line


def test_a_damaged_npz_member_is_one_line(tmp_path, capsys):
    path = _save(tmp_path, _model([N("Relu", ["x"], ["y"], name="r")]))
    np.savez(tmp_path / "d.npz", x=np.ones((2, 3), np.float32))
    data = bytearray((tmp_path / "d.npz").read_bytes())
    data[100] ^= 1  # inside the member: the CRC no longer matches
    (tmp_path / "d.npz").write_bytes(bytes(data))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["convert", path, "-o", str(out / "o.onnx"), "--inputs", str(tmp_path / "d.npz")]
    line = refused(argv, capsys, out)
    assert "d.npz: cannot read as .npz" in line


# --- issue 18: a symbolic dimension is never silently 1 -------------------------------------------------

def _detector(tmp_path) -> str:
    """A detector with dynamic N, H and W: verified on a 1x3x1x1 image it would be verified on nothing."""
    nodes = [N("Relu", ["x"], ["h"], name="r"), N("ReduceSum", ["h"], ["y"], name="s", keepdims=0)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(tmp_path, model)


@pytest.mark.parametrize("command", ["convert static", "convert auto", "check"])
def test_symbolic_dimensions_without_data_stop_before_any_work(tmp_path, capsys, command):
    path = _detector(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    line = refused([a.format(m=path, out=out) for a in COMMANDS[command]], capsys, out, (path,))
    assert line == ("onnx-precision: error: symbolic dimensions with no size to verify at: input 'x' "
                    "(Nx3xHxW): H (axis 2), W (axis 3); give sample data (--inputs DATA) or the sizes "
                    "(--input-shape x:1x3x<H>x<W>)")
    sized = [a.format(m=path, out=out) for a in COMMANDS[command]] + ["--input-shape", "x:1x3x16x16", "-q"]
    assert main(_with_candidate(sized, out)) == 0


def test_analyze_without_sizes_runs_the_static_rules_alone_and_says_why(tmp_path, capsys):
    import json

    path = _detector(tmp_path)
    assert main(["analyze", path, "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "measured nothing, static rules only: symbolic dimensions with no size to verify at" in out
    report = json.load(open(tmp_path / "a.json"))
    assert report["all_fp16"] is None and report["unmeasured"].startswith("symbolic dimensions")
    sums = [r for r in report["rows"] if r["node"] == "s"][0]
    assert sums["fp32_range"] is None and sums["findings"]  # a reduction is still flagged, unconfirmed


def test_all_fp16_converts_a_model_with_symbolic_dimensions_and_says_nothing_was_verified(tmp_path, capsys):
    path = _detector(tmp_path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--mode", "all-fp16"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("not verified: --mode all-fp16 runs nothing")
