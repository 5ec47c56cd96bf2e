"""Smaller statements a run makes, made true (issue 33, item 7): each test fails before its change."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_precision.cli import main

N = helper.make_node


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_analyze_says_past_the_maximum_apart_from_within_one_binade(tmp_path, capsys):
    """x*x reaches 90000 (0.46 binade past FP16's 65504), half of it 45000 (0.54 binade short): the first
    was listed under "within one binade of the 16-bit limits"."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    model = _model([N("Mul", ["x", "x"], ["sq"], name="square"),
                    N("Mul", ["sq", "half"], ["h"], name="halve"), N("Sqrt", ["h"], ["y"], name="root")],
                   [_vi("x", [4])], [_vi("y", [4])], [half])
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(model, path)
    np.savez(data, x=np.array([1, 2, 100, 300], np.float32))
    assert main(["analyze", path, "--inputs", data, "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "past the 16-bit limits on the samples: square (0.46 binade(s) past the maximum)" in out
    assert "within one binade of the 16-bit limits on the samples: halve (0.54 binade(s) to overflow)" in out


def _wide_matmul_softmax(path: str, data: str) -> None:
    """x (2x1024) -> MatMul (1024x512) -> Softmax: the Softmax is 0.05% of the estimated FLOPs."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.uniform(-0.05, 0.05, (1024, 512)).astype(np.float32), "w")
    nodes = [N("MatMul", ["x", "w"], ["h"], name="mm"), N("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    onnx.save(_model(nodes, [_vi("x", [2, 1024])], [_vi("y", [2, 512])], [w]), path)
    np.savez(data, x=rng.uniform(-1, 1, (2, 1024)).astype(np.float32))


def test_convert_and_check_print_the_same_share_of_the_same_file(tmp_path, capsys):
    """The Softmax kept FP32: 99.95% of the FLOPs are FP16. convert printed "100.0%", check "99.95%"."""
    path, data, out = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "o.onnx")
    _wide_matmul_softmax(path, data)
    assert main(["convert", path, "-o", out, "--inputs", data, "--keep-fp32-op", "Softmax", "-q"]) == 0
    converted = capsys.readouterr().out
    assert converted.endswith("; FP16: 1/2 nodes (50.0%), 99.95% of estimated FLOPs\n"), converted
    assert main(["check", path, out, "--inputs", data, "-q"]) == 0
    assert capsys.readouterr().out.endswith("; FP16: 99.95% of estimated FLOPs\n")


def test_a_share_never_reads_100_or_0_percent_unless_it_is():
    from onnx_precision.format import percent

    assert [percent(s) for s in (0.0, 1.0, 0.5, 0.9995, 0.999_999_99, 1e-9, 0.123_45)] == \
        ["0.0%", "100.0%", "50.0%", "99.95%", "> 99.9999%", "< 0.0001%", "12.3%"]


def _casts(model: onnx.ModelProto) -> int:
    from onnx_precision.graph import walk_nodes

    return sum(1 for ref in walk_nodes(model.graph) if ref.node.op_type == "Cast")


def test_the_casts_added_are_those_the_file_holds(tmp_path, capsys):
    """Under --target webgpu a mean over symbolic H x W is written as a sum of pre-scaled terms, its scale
    computed from the input's shape with Casts of its own: the first line counted the 2 Casts between
    precisions ("2 Cast(s) added") where the file holds 8 and the original none."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    model = _model([N("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                    N("GlobalAveragePool", ["c"], ["g"], name="gap"),
                    N("ReduceMean", ["c"], ["m"], name="mean", axes=[2, 3], keepdims=1),
                    N("Add", ["g", "m"], ["y"], name="add")],
                   [_vi("x", [1, 3, "H", "W"])], [_vi("y", [1, 4, 1, 1])], [w])
    path, data, out = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "o.onnx")
    onnx.save(model, path)
    np.savez(data, x=rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32))
    assert main(["convert", path, "-o", out, "--inputs", data, "--target", "webgpu"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    written = _casts(onnx.load(out))
    assert written > 2 and _casts(model) == 0
    assert f", {written} Cast(s) added, " in first, first


def _attention_like(path: str, data: str) -> None:
    """x (2x8) -> MatMul (8x8) -> Softmax -> y, with one sample."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.uniform(-1, 1, (8, 8)).astype(np.float32), "w")
    nodes = [N("MatMul", ["x", "w"], ["h"], name="mm"), N("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    onnx.save(_model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8])], [w]), path)
    np.savez(data, x=rng.uniform(-1, 1, (2, 8)).astype(np.float32))


def _one_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: ") and captured.out == "", captured
    return err[0][len("onnx-precision: error: "):]


def test_a_candidate_with_the_graph_and_weights_of_the_reference_is_refused(tmp_path, capsys):
    """docs/ci-gate.md: exit 2 for a candidate that is MODEL, "the same file, or the same graph and
    weights". A byte-identical copy passed ("passed; ... no 16-bit compute", exit 0): a CI job whose
    conversion step wrote nothing new went green."""
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    _attention_like(path, data)
    copies = {"copy.onnx": onnx.load(path), "renamed.onnx": onnx.load(path)}
    copies["renamed.onnx"].producer_name = "another tool"  # other bytes, the same graph and weights
    for name, model in copies.items():
        copy = str(tmp_path / name)
        onnx.save(model, copy)
        assert main(["check", path, copy, "--inputs", data, "-q"]) == 2
        assert _one_error(capsys) == (f"{copy}: the candidate has the graph and weights of the FP32 model "
                                      f"{path} (a copy: nothing in it computes in 16 bits); check compares "
                                      f"a 16-bit candidate with its FP32 model")
    other = onnx.load(path)  # the same graph, one weight changed: a candidate, FP32 and checked
    other.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(
        onnx.numpy_helper.to_array(other.graph.initializer[0]) * np.float32(1.0001), "w"))
    onnx.save(other, tmp_path / "other.onnx")
    assert main(["check", path, str(tmp_path / "other.onnx"), "--inputs", data, "-q"]) == 0
    assert capsys.readouterr().out.endswith("; no 16-bit compute\n")


def test_a_conversion_that_changes_nothing_suggests_no_check(tmp_path, capsys):
    """Every node pinned FP32: the model is written as it was read, and the next: line suggested checking
    it, a check that refuses it."""
    path, data, out = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "o.onnx")
    _attention_like(path, data)
    assert main(["convert", path, "-o", out, "--inputs", data, "--keep-fp32", ".*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{out}: 0 node(s) FP16, 2 FP32, 0 Cast(s) added, 0 initializer(s) converted, 0 kept "
                        f"in both precisions")
    assert not [line for line in lines if line.startswith("next: ")]
    assert main(["check", path, out, "--inputs", data]) == 2


def test_json_to_standard_output(tmp_path, capsys):
    """check and analyze --json - answered "-: writing a model to standard output is not supported": the
    JSON now goes to standard output alone (a pipe reads it), the lines the command prints to stderr."""
    import json

    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    _attention_like(path, data)
    cand = str(tmp_path / "c.onnx")
    assert main(["convert", path, "-o", cand, "--inputs", data, "--mode", "all-fp16", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", path, cand, "--inputs", data, "--json", "-", "-q"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["format"] == "onnx-precision-check/1"
    assert captured.err.startswith(f"{cand} against {path}: passed; ")
    assert main(["analyze", path, "--inputs", data, "--json", "-", "-q"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["model"] == path and captured.err.startswith(f"model: {path}\n")
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--report", "-"]) == 2
    assert _one_error(capsys) == "-: standard output is no file to write to; give a file name"


def test_onnx_reference_is_named_where_it_cannot_run_the_model(tmp_path, capsys):
    """onnx.reference has no com.microsoft Gelu, which onnxruntime runs: check --oracle reference printed
    "internal error (a bug in onnx-precision, not in your input): NotImplementedError: ..." (exit 1)."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).uniform(-1, 1, (8, 8)).astype(np.float32), "w")
    model = _model([N("MatMul", ["x", "w"], ["h"], name="mm"),
                    N("Gelu", ["h"], ["y"], name="gelu", domain="com.microsoft")],
                   [_vi("x", [2, 8])], [_vi("y", [2, 8])], [w])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    path, cand = str(tmp_path / "m.onnx"), str(tmp_path / "c.onnx")
    onnx.save(model, path)
    assert main(["convert", path, "-o", cand, "--mode", "all-fp16", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", path, cand, "--oracle", "reference"]) == 2
    assert _one_error(capsys) == (
        f"onnx.reference (--oracle reference) cannot run the candidate {cand}, nor the FP32 model {path}: "
        f"NotImplementedError: Node type 'Gelu' from domain 'com.microsoft' is unknown, known functions: []; "
        f"that is a limit of onnx.reference, not of the models or of onnx-precision: judge with --oracle "
        f"emulate")


def test_check_q_says_synthetic_data_the_recorded_target_and_keeps_the_warnings(tmp_path, capsys):
    """check -q without --inputs printed "C against M: passed; worst ...; FP16 ..." with nothing saying the
    data was synthetic or that the candidate was judged under the target it records, and -q dropped every
    warning (here: --steps asked for a generation of a model that runs one forward pass)."""
    path, data, cand = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "c.onnx")
    _attention_like(path, data)
    assert main(["convert", path, "-o", cand, "--inputs", data, "--target", "webgpu", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", path, cand, "-q", "--steps", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{cand} against {path}: passed under webgpu (recorded in the candidate) "
                                   f"on synthetic data (no --inputs); worst y: rel RMS err ")
    assert captured.err == ("onnx-precision: warning: --steps: the model feeds no output back as an input "
                            "(no generation is inferred: --feedback OUT=IN names one), so it is judged on "
                            "one forward pass\n")
    assert main(["check", path, cand, "-q", "--inputs", data, "--target", "generic"]) == 0
    assert capsys.readouterr().out.startswith(f"{cand} against {path}: passed; worst y: rel RMS err ")


def _dynamic_conv(path: str) -> None:
    """x (1x3xHxW, any size, as rapidocr feeds it) -> Conv 3x3 -> Relu."""
    weights = np.random.default_rng(0).uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    w = onnx.numpy_helper.from_array(weights, "w")
    onnx.save(_model([N("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                      N("Relu", ["c"], ["y"], name="relu")],
                     [_vi("x", [1, 3, "H", "W"])], [_vi("y", [1, 4, "H", "W"])], [w]), path)


def test_the_tensorrt_next_step_says_its_profile_is_the_samples(tmp_path, capsys):
    """The next: line's trtexec command fixed min = opt = max to the one sample's 1x3x32x32 for a model that
    takes any size; only the flags file said an engine so built rejects every other shape."""
    path, data, out = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "o.onnx")
    _dynamic_conv(path)
    np.savez(data, x=np.random.default_rng(1).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32))
    assert main(["convert", path, "-o", out, "--inputs", data, "--target", "tensorrt"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("next: trtexec "))
    assert ("--minShapes=x:1x3x32x32 --optShapes=x:1x3x32x32 --maxShapes=x:1x3x32x32  # TensorRT 9.0 and "
            "later builds it as written (--trt-flags for older); its shape profile is the samples' ('x' "
            "1x3x32x32 alone: min = opt = max): an engine built on it rejects every other shape: give the "
            "deployment's with --trt-min-shapes/--trt-opt-shapes/--trt-max-shapes") in line
    assert main(["convert", path, "-o", out, "--inputs", data, "--target", "tensorrt", "--trt-min-shapes",
                 "x:1x3x16x16", "--trt-max-shapes", "x:1x3x2048x2048"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("next: trtexec "))
    assert "shape profile is the samples'" not in line and "--maxShapes=x:1x3x2048x2048" in line


def _branching(path: str) -> None:
    """An If on a boolean input: its then_branch squares x, its else_branch (Mul, Exp) scales and exps it,
    and a Loop whose trip count is an input runs a body that adds 1 that many times."""
    then = helper.make_graph([N("Mul", ["x", "x"], ["t"], name="then_square")], "then", [],
                             [_vi("t", [2, 8])])
    other = helper.make_graph([N("Mul", ["x", "half"], ["e0"], name="else_scale"),
                               N("Exp", ["e0"], ["e"], name="else_exp")], "else", [], [_vi("e", [2, 8])])
    body = helper.make_graph([N("Identity", ["c_in"], ["c_out"], name="loop_cond"),
                              N("Add", ["acc", "one"], ["acc_out"], name="loop_add")], "body",
                             [_vi("i", [], TensorProto.INT64), _vi("c_in", [], TensorProto.BOOL),
                              _vi("acc", [2, 8])],
                             [_vi("c_out", [], TensorProto.BOOL), _vi("acc_out", [2, 8])])
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("go", TensorProto.BOOL, [], [True])]
    onnx.save(_model([N("If", ["flag"], ["b"], name="branch", then_branch=then, else_branch=other),
                      N("Loop", ["trips", "go", "b"], ["y"], name="repeat", body=body)],
                     [_vi("x", [2, 8]), _vi("flag", [], TensorProto.BOOL),
                      _vi("trips", [], TensorProto.INT64)],
                     [_vi("y", [2, 8])], inits), path)


def test_bodies_no_sample_runs_are_said(tmp_path, capsys):
    """The samples take the then_branch and run no iteration of the Loop: the else_branch and the Loop's body
    were converted and the run said "verified: pass" with no word of them."""
    path, data, out = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz"), str(tmp_path / "o.onnx")
    _branching(path)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 8)).astype(np.float32)
    np.savez(data, x=x, flag=np.array(True), trips=np.array(0, np.int64))
    assert main(["convert", path, "-o", out, "--inputs", data]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ("note: no sample runs 2 bodies of the model's control flow: the else_branch of If 'branch' (2 "
            "nodes, 2 FP16), the body of Loop 'repeat' (2 nodes, 1 FP16): converted, but nothing verified "
            "them; give samples that run them (--inputs)") in lines
    assert main(["check", path, out, "--inputs", data]) == 0  # and check, of the model written
    assert ("note: no sample runs 2 bodies of the model's control flow: the else_branch of If 'branch' (2 "
            "nodes, 2 FP16), the body of Loop 'repeat' (2 nodes, 1 FP16): converted, but nothing verified "
            "them; give samples that run them (--inputs)") in capsys.readouterr().out.splitlines()
    taken = str(tmp_path / "both.npz")  # a second sample takes the else_branch and runs the Loop twice
    np.savez(taken, x=x, flag=np.array(False), trips=np.array(2, np.int64))
    os.makedirs(tmp_path / "samples")
    for name in ("d.npz", "both.npz"):
        os.replace(tmp_path / name, tmp_path / "samples" / name)
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "samples")]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if "no sample runs" in line]
