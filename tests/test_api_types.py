"""What the commands are handed, checked at their entry points (issue 30 items 10 and 14): a wrong kind of
value is one line of the PrecisionError family (exit 2 on the command line), never an AttributeError or a
TypeError from deep inside, nor onnxruntime's own message."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx_precision.check import check
from onnx_precision.cli import main
from onnx_precision.convert import ConvertOptions, convert, convert_model
from onnx_precision.errors import PrecisionError, UsageError
from onnx_precision.options import Judging
from onnx_precision.target import Targeting


def _relu(inputs: tuple[str, ...] = ("x",), elem: int = T.FLOAT) -> onnx.ModelProto:
    """y = Relu(x) (+ each further input), all [1, 4] of ``elem``."""
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu")]
    last = "r"
    for i, extra in enumerate(inputs[1:]):
        nodes.append(h.make_node("Add", [last, extra], [f"a{i}"], name=f"add{i}"))
        last = f"a{i}"
    nodes.append(h.make_node("Identity", [last], ["y"], name="out"))
    graph = h.make_graph(nodes, "relu", [h.make_tensor_value_info(n, elem, [1, 4]) for n in inputs],
                         [h.make_tensor_value_info("y", elem, [1, 4])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_candidate_that_needs_an_input_the_model_does_not_have_is_one_line_exit_2(tmp_path, capsys):
    model, candidate = str(tmp_path / "m.onnx"), str(tmp_path / "c.onnx")
    onnx.save(_relu(), model)
    onnx.save(_relu(("x", "bias"), T.FLOAT16), candidate)
    assert main(["check", model, candidate]) == 2
    err = capsys.readouterr().err
    assert err == (f"onnx-precision: error: {candidate}: needs input 'bias', which {model} does not have: "
                   f"the candidate must take the FP32 model's inputs\n")


@pytest.mark.parametrize("call, line", [
    (lambda: ConvertOptions(tolerance=None),
     "tolerance None: expected an onnx_precision.judge.Tolerance"),
    (lambda: ConvertOptions(target="tensorrt"),
     "target 'tensorrt': expected an onnx_precision.target.Target "
     "(onnx_precision.target.target_named('tensorrt'))"),
    (lambda: Targeting(target="tpu"),  # type: ignore[arg-type]
     "target 'tpu': expected an onnx_precision.target.Target"),
    (lambda: Judging(quant_margin=11), "--quant-margin 11: expected a fraction between 0 and 10"),
    (lambda: Judging(keep_opset="yes"), "--keep-opset 'yes': expected True or False"),  # type: ignore[arg-type]
    (lambda: ConvertOptions(report_json=3), "--report 3: expected the path of a file (a str), or None"),
    (lambda: ConvertOptions(tolerence=None), "ConvertOptions: no option 'tolerence'"),
])
def test_options_of_the_wrong_kind_are_one_line(call, line):
    with pytest.raises(UsageError) as e:
        call()
    assert str(e.value) == line


def test_the_entry_points_refuse_what_they_cannot_take_in_one_line(tmp_path):
    model = str(tmp_path / "m.onnx")
    onnx.save(_relu(), model)
    proto = onnx.load(model)
    cases = [
        (lambda: check(None, model), "model: expected the path of an .onnx file; got NoneType"),
        (lambda: check(proto, model), "model: expected the path of an .onnx file; got ModelProto (check "
                                      "reads files: onnx.save it first)"),
        (lambda: check(model, 5), "candidate: expected the path of an .onnx file; got int"),
        (lambda: check(model, model, tol=0.1), "tolerance 0.1: expected an onnx_precision.judge.Tolerance"),
        (lambda: check(model, model, target="tensorrt"),
         "target 'tensorrt': expected an onnx_precision.target.Target "
         "(onnx_precision.target.target_named('tensorrt'))"),
        (lambda: convert(model, None), "output: expected the path to write the model to; got NoneType"),
        (lambda: convert(None, str(tmp_path / "o.onnx")),
         "model: expected the path of an .onnx file; got NoneType"),
        (lambda: convert(model, str(tmp_path / "o.onnx"), "auto"),
         "options: expected onnx_precision.convert.ConvertOptions; got str"),
        (lambda: convert_model(proto, base_dir=5), "base_dir 5: expected the directory of the model's data "
                                                   "files (a path)"),
    ]
    for call, line in cases:
        with pytest.raises(PrecisionError) as e:
            call()
        assert str(e.value) == line
        assert e.value.exit_code == 2
    assert not (tmp_path / "o.onnx").exists()


def test_check_and_analyze_take_the_judging_options_convert_takes(tmp_path, capsys):
    from onnx_precision.analysis import analyze

    model = str(tmp_path / "m.onnx")
    onnx.save(_relu(), model)
    feed = {"x": np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)}
    written = convert_model(model, feed, ConvertOptions(mode="all-fp16"))
    candidate = str(tmp_path / "c.onnx")
    written.save(candidate)
    assert check(model, candidate, keep_opset=True, keep_float64=True).passed
    assert analyze(model, reference_model=model, quant_margin=0.5).rows
    for command in (["check", model, candidate], ["analyze", model]):
        assert main([*command, "--keep-opset", "--keep-float64", "--reference-model", model, "-q"]) == 0
    capsys.readouterr()
