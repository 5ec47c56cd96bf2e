"""Every command the tool suggests runs when pasted: the next step, the all-fp16 check and the flags file's
lines carry the run's options, quote every path and name, and never build a plan the run did not measure."""

from __future__ import annotations

import shlex

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main


def _symbolic(path: str, name: str = "x", op: str = "Relu") -> str:
    """y = op(name * w), ``name`` of shape [n, 8] with n symbolic."""
    nodes = [helper.make_node("Mul", [name, "w"], ["m"], name="scale"),
             helper.make_node(op, ["m"], ["y"], name="act")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                              [numpy_helper.from_array(np.linspace(0.5, 2, 8, dtype=np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _said(capsys: pytest.CaptureFixture[str], prefix: str) -> str:
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(prefix))
    return line[len(prefix):]


def _pasted(line: str) -> list[str]:
    """The words a shell runs of ``line`` (its comment dropped)."""
    return shlex.split(line, comments=True)


def _runs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``argv`` (an onnx-precision command) run in-process: a verdict (0 or 1), never a usage error (2).
    The GPU oracle is left out where onnxruntime-gpu is missing: every other option is the one pasted."""
    assert argv[:2] == ["onnx-precision", "check"]
    if argv[-2] == "--oracle":
        argv = argv[:-2]
    assert main(argv[1:]) in (0, 1), capsys.readouterr().err
    capsys.readouterr()


def test_the_next_check_repeats_the_synthetic_feeds_and_the_tolerance_and_runs(tmp_path, capsys):
    model, out = _symbolic(str(tmp_path / "m.onnx")), str(tmp_path / "o.onnx")
    assert main(["convert", model, "-o", out, "--input-shapes", "x:[2,8]", "--seed", "3", "--input-range",
                 "x:-2,2", "--max-rel-rms", "0.01"]) == 0
    argv = _pasted(_said(capsys, "next: "))
    assert argv == ["onnx-precision", "check", model, out, "--seed", "3", "--input-shape", "x:2x8",
                    "--input-range", "x:[-2.0,2.0]", "--max-rel-rms", "0.01", "--oracle", "cuda"]
    _runs(argv, capsys)  # before: no --input-shape, exit 2 ("symbolic dimensions with no size")
    # --mode all-fp16 verifies nothing and says how to check it, with the same options
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--input-shape", "x:2x8"]) == 0
    check = _said(capsys, "not verified: --mode all-fp16 runs nothing (--mode auto or static verifies it); "
                          "to check it: ")
    assert _pasted(check) == ["onnx-precision", "check", model, out, "--input-shape", "x:2x8"]
    _runs(_pasted(check), capsys)


def test_under_tensorrt_the_strongly_typed_build_has_the_shapes_of_the_symbolic_inputs(tmp_path, capsys):
    model, out, flags = _symbolic(str(tmp_path / "m.onnx")), str(tmp_path / "o.onnx"), str(tmp_path / "f.txt")
    assert main(["convert", model, "-o", out, "--input-shape", "x:2x8", "--target", "tensorrt",
                 "--trt-version", "10.8", "--low-precision", "bf16", "--trt-flags", flags]) == 0
    build = ["trtexec", f"--onnx={out}", "--stronglyTyped", "--minShapes=x:2x8", "--optShapes=x:2x8",
             "--maxShapes=x:2x8"]
    assert _pasted(_said(capsys, "next: ")) == build  # before: no shapes
    assert " ".join(build) in open(flags).read().splitlines()
    lines = open(flags).read().splitlines()
    # the flags file's check of the engine judges as the run judged: same feeds, target and type
    check = _pasted(next(line for line in lines if line.startswith("onnx-precision check")))
    assert check == ["onnx-precision", "check", model, out, "--input-shape", "x:2x8", "--target", "tensorrt",
                     "--trt-version", "10.8", "--low-precision", "bf16", "--oracle", "tensorrt"]
    _runs(check, capsys)


def test_a_path_with_spaces_and_semicolons_comes_back_whole(tmp_path, capsys):
    folder = tmp_path / "a b"
    folder.mkdir()
    model, out = _symbolic(str(folder / "m'1.onnx")), str(folder / "o;echo INJECTED;.onnx")
    assert main(["convert", model, "-o", out, "--input-shape", "x:2x8"]) == 0
    line = _said(capsys, "next: ")
    argv = _pasted(line)
    assert argv[2:4] == [model, out] and "echo" not in argv
    _runs(argv, capsys)
    assert main(["convert", model, "-o", out, "--input-shape", "x:2x8", "--target", "tensorrt"]) == 0
    assert _pasted(_said(capsys, "next: "))[:2] == ["trtexec", f"--onnx={out}"]


def test_an_input_name_with_a_space_survives_in_every_line(tmp_path, capsys):
    """Polygraphy splits NAME:[D0,D1] on the last ':' and keeps the name whole: its own parser reads the
    lines (they said 'pixelvalues')."""
    from polygraphy.tools.convert import Convert

    model = _symbolic(str(tmp_path / "m.onnx"), name="pixel values")
    out, flags = str(tmp_path / "o.onnx"), str(tmp_path / "f.txt")
    assert main(["convert", model, "-o", out, "--input-shape", "pixel values:2x8", "--keep-fp32", "act",
                 "--trt-flags", flags, "-q"]) == 0
    lines = open(flags).read().splitlines()
    for prefix in (f"polygraphy convert {model} ", f"polygraphy convert {out} "):
        argv = _pasted(next(line for line in lines if line.startswith(prefix)))
        tool = Convert()
        args = tool.setup_parser().parse_args(argv[2:])
        tool.parse(args)
        profiles = [g.profile_dicts for g in tool.arg_groups.values() if hasattr(g, "profile_dicts")]
        assert profiles == [[{"pixel values": ([2, 8], [2, 8], [2, 8])}]]
    trtexec = _pasted(next(line for line in lines if line.startswith(f"trtexec --onnx={out} ")))
    assert trtexec[-3:] == ["--minShapes=pixel values:2x8", "--optShapes=pixel values:2x8",
                            "--maxShapes=pixel values:2x8"]
    _runs(_pasted(next(line for line in lines if line.startswith("onnx-precision check"))), capsys)


def _layer_norm(path: str) -> str:
    """An opset-17 LayerNormalization: onnx-tensorrt names its layer from TensorRT 10.1 only."""
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5),
             helper.make_node("Relu", ["y"], ["z"], name="act")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 64])],
                              [numpy_helper.from_array(np.ones(64, np.float32), "s"),
                               numpy_helper.from_array(np.zeros(64, np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_release_range_that_cannot_hold_the_fp32_layer_norm_gets_no_runnable_line(tmp_path):
    model, out = _layer_norm(str(tmp_path / "ln.onnx")), str(tmp_path / "o.onnx")
    flags = str(tmp_path / "f.txt")
    assert main(["convert", model, "-o", out, "--target", "tensorrt", "--keep-fp32", "ln", "--trt-flags",
                 flags, "-q"]) == 0
    lines = open(flags).read().splitlines()
    old = lines.index("# TensorRT 8.6 to 10.0 (weakly typed; these flags are deprecated in 10.12 and removed "
                      "in 11.0).")
    assert lines[old + 2] == f"# (not the plan measured) trtexec --onnx={model} --fp16"
    assert lines[old + 3] == (
        "#   no runnable line for TensorRT 8.6 to 10.0: its flags cannot hold 'ln' (FP32), so TensorRT would "
        "build another plan than the one measured; the plan measured is built by the strongly typed line "
        "below (TensorRT 9.0 and later) or the flags of TensorRT 10.1 to 10.11 (their line below)")
    assert lines[old + 4].startswith("#   not expressed: node 'ln' (LayerNormalization): onnx-tensorrt names "
                                     "none of its layers after it")
    assert lines[old + 5].startswith("# TensorRT 10.1 to 10.11 ")
    assert lines[old + 6] == (f"trtexec --onnx={model} --fp16 --precisionConstraints=obey "
                              f"--layerPrecisions=ln:fp32 --layerOutputTypes=ln:fp32")
    builds = [x for x in lines if x.startswith((f"trtexec --onnx={model}", f"polygraphy convert {model}"))]
    assert len(builds) == 2 and all("ln:f" in line for line in builds)  # every runnable line holds ln
    # an all-FP16 plan asks nothing of the flags: every range's line runs
    assert main(["convert", model, "-o", out, "--target", "tensorrt", "--trt-flags", flags, "-q"]) == 0
    assert "not the plan measured" not in open(flags).read()
