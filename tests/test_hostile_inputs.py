"""What a user hands in, made safe by construction (issue 30): sample files bounded by what they expand
to, a Q/DQ scale that is no quantization, an element type ONNX does not have, JSON numbers and plan
points Python cannot read, and a long list of layer patterns. Each is one line and exit 2 from the
CLI, and the same error class from the Python API."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.errors import ModelLoadError


def _mlp(directory, batch: int | str = 1, elem_type: int = TensorProto.FLOAT) -> str:
    """y = relu(x @ w), x of shape [batch, 4] and element type ``elem_type``; returns the model path."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", elem_type, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [onnx.numpy_helper.from_array(np.full((4, 4), 0.25, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "m.onnx")
    onnx.save(model, path)
    return path


@pytest.fixture
def out(tmp_path):
    directory = tmp_path / "out"
    directory.mkdir()
    return directory


def _refused(argv: list[str], capsys, out_dir) -> str:
    """The one error line of a run that exits 2 and writes nothing into ``out_dir``."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
    assert os.listdir(out_dir) == []
    return err[0].removeprefix("onnx-precision: error: ")


# --- item 9: a graph input of element type 999 --------------------------------------------------------

TYPE_999 = "input 'x' has element type 999, which is no ONNX tensor type (onnx.TensorProto.DataType)"


@pytest.mark.parametrize("argv", [["convert", "{model}", "-o", "{out}/o.onnx", "--mode", "auto"],
                                  ["convert", "{model}", "-o", "{out}/o.onnx", "--mode", "static"],
                                  ["analyze", "{model}"]])
def test_an_element_type_onnx_does_not_have_is_one_line(tmp_path, capsys, out, argv):
    model = _mlp(tmp_path, elem_type=999)
    assert _refused([a.format(model=model, out=out) for a in argv], capsys, out) == TYPE_999


def test_an_element_type_onnx_does_not_have_from_python(tmp_path):
    from onnx_precision.analysis import analyze
    from onnx_precision.convert.in_memory import convert_model

    model = _mlp(tmp_path, elem_type=999)
    with pytest.raises(ModelLoadError) as raised:
        analyze(model)
    assert str(raised.value) == TYPE_999
    with pytest.raises(ModelLoadError, match=r"^input 'x' has element type 999, which is no ONNX"):
        convert_model(model)


# --- item 8: a NaN Q/DQ scale -------------------------------------------------------------------------

def _nan_scaled(tmp_path, per_channel: bool) -> str:
    """A Q/DQ model whose scale holds NaN: the torchao block's one activation scale, or one channel of
    the QDQ MLP's per-channel weight scale."""
    from onnx import numpy_helper
    from test_quantized import qdq_mlp, torchao_block

    if per_channel:
        model = qdq_mlp(19)
        scale = next(i for i in model.graph.initializer if i.name == "w0_s")
        values = numpy_helper.to_array(scale).copy()
        values[[3, 7]] = [np.nan, np.inf]
        scale.CopyFrom(numpy_helper.from_array(values, "w0_s"))
    else:
        model = torchao_block(float("nan"))
    path = str(tmp_path / "q.onnx")
    onnx.save(model, path)
    return path


REFUSED_QUANTIZER = ("a quantizer with a non-finite scale is no quantization (in FP32 too it maps every "
                     "value to NaN, inf or its zero point); fix the quantization, then convert")
NAN_SCALE = "{path}: node 'q_x' (QuantizeLinear): scale 'x_s' is NaN: " + REFUSED_QUANTIZER
NAN_CHANNEL = ("{path}: node 'dqw0' (DequantizeLinear): scale 'w0_s' holds NaN (2 of its 32 values not "
               "finite, the first at index 3): " + REFUSED_QUANTIZER)


@pytest.mark.parametrize("argv", [["convert", "{model}", "-o", "{out}/o.onnx", "--mode", "auto"],
                                  ["convert", "{model}", "-o", "{out}/o.onnx", "--mode", "static"],
                                  ["convert", "{model}", "-o", "{out}/o.onnx", "--mode", "all-fp16"],
                                  ["analyze", "{model}"]])
@pytest.mark.parametrize("per_channel, expected", [(False, NAN_SCALE), (True, NAN_CHANNEL)])
def test_a_nan_qdq_scale_is_refused_naming_the_node_and_scale(tmp_path, capsys, out, argv, per_channel,
                                                               expected):
    # It was 'internal error: ValueError: zero-size array to reduction operation minimum' for the NaN
    # scalar in every mode; the NaN channel passed the audit unseen (NaN compares false), static and
    # all-fp16 wrote the model
    model = _nan_scaled(tmp_path, per_channel)
    line = _refused([a.format(model=model, out=out) for a in argv], capsys, out)
    assert line == expected.format(path=model)


def test_a_nan_qdq_scale_is_refused_from_python(tmp_path):
    from onnx_precision.analysis import analyze
    from onnx_precision.convert.in_memory import convert_model

    model = _nan_scaled(tmp_path, per_channel=False)
    for run in (lambda: analyze(model), lambda: convert_model(model)):
        with pytest.raises(ModelLoadError) as raised:
            run()
        assert str(raised.value) == NAN_SCALE.format(path=model)


def test_a_nan_float_zero_point_is_refused_as_its_scale_would_be(tmp_path, capsys, out):
    # static mode ran the model to find it: 'the FP32 model itself produces NaN/Inf: node 'matmul_q4'
    # gives a non-finite output from finite inputs ...' (exit 1), not naming the zero point
    from test_quantized import nbits_block

    model = str(tmp_path / "q4.onnx")
    onnx.save(nbits_block(float("nan")), model)
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--mode", "static"], capsys, out)
    assert line == (f"{model}: node 'matmul_q4' (MatMulNBits): zero point 'w_zp' holds NaN (63 of its 64 "
                    f"values not finite, the first at index 1): a quantizer with a non-finite zero point is "
                    f"no quantization (in FP32 too it maps every value to NaN, inf or its zero point); fix "
                    f"the quantization, then convert")
