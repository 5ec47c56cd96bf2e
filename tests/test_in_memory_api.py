"""The in-memory API (``convert_model``, ``ConvertedModel.save``) and the onnxconverter-common drop-ins
(``onnx_precision.float16``; the other modules and names: tests/test_dropin_api.py), each argument
compared with onnxconverter-common where its behaviour is right, and the L2-normalize case where it
is not: onnxconverter-common validates on onnxruntime's CPU provider, which hides FP16 overflow, and
returns a model the emulated check fails."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import PrecisionError
from onnx_precision import float16 as drop_in
from onnx_precision.check import check
from onnx_precision.cli import main
from onnx_precision.convert import ConvertedModel, ConvertOptions, convert_model
from onnx_precision.data import SampleSpec
from onnx_precision.errors import DataError, ModelLoadError, OutputError, UsageError
from onnx_precision.judge import Tolerance
from onnx_precision.storage import is_external, light_load, model_tensors, saving

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
L2 = os.path.join(MODELS, "l2_normalize.onnx")
L2_DATA = os.path.join(MODELS, "l2_normalize.npz")
MLP = os.path.join(MODELS, "benign_mlp.onnx")
MLP_DATA = os.path.join(MODELS, "benign_mlp.npz")
FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(nodes, inits, inputs=(("x", [1, 8]),), outputs=(("y", [1, 8]),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, FLOAT, s) for n, s in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def chain(width: int = 8) -> onnx.ModelProto:
    """MatMul, Add, Relu, Max, Sigmoid: Max is on onnxconverter-common's default op block list."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((width, width)) / 4).astype(np.float32), "W"),
             numpy_helper.from_array(np.full(width, 0.1, np.float32), "b"),
             numpy_helper.from_array(np.full(width, 0.2, np.float32), "c")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
             helper.make_node("Relu", ["add"], ["relu"], name="relu"),
             helper.make_node("Max", ["relu", "c"], ["max"], name="max"),
             helper.make_node("Sigmoid", ["max"], ["y"], name="sig")]
    return _model(nodes, inits, (("x", [1, width]),), (("y", [1, width]),))


def feeds(n: int = 1, width: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, width)).astype(np.float32)} for _ in range(n)]


def same_files(one, other, names=("out.onnx", "out.onnx.data")) -> bool:
    """Whether directories ``one`` and ``other`` hold the same bytes under ``names`` (and the same
    ones of them)."""
    present = [(os.path.exists(one / n), os.path.exists(other / n)) for n in names]
    return all(a == b for a, b in present) and all(
        (one / n).read_bytes() == (other / n).read_bytes() for n in names if os.path.exists(one / n))


def node_types(model: onnx.ModelProto) -> dict[str, int]:
    """Each computing node's output element type (FLOAT: the node runs FP32), Casts left out."""
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    values = [*graph.value_info, *graph.output, *graph.input]
    types = {vi.name: vi.type.tensor_type.elem_type for vi in values}
    return {n.name: types[n.output[0]] for n in graph.node if n.op_type != "Cast"}


def io_types(model: onnx.ModelProto) -> list[int]:
    return [v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]]


def occ():
    """onnxconverter-common's two modules (a test/compare extra: skipped when missing)."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    auto = pytest.importorskip("onnxconverter_common.auto_mixed_precision")
    return float16, auto


def occ_auto(*args, **kwargs) -> onnx.ModelProto:
    with contextlib.redirect_stdout(io.StringIO()):  # it prints every attempt
        return occ()[1].auto_convert_mixed_precision(*args, **kwargs)


# --- convert_model: in memory in, in memory out ---------------------------------------------------

def test_a_modelproto_converts_in_memory_without_writing_any_file(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    model = onnx.load(L2)
    before = model.SerializeToString()
    x = np.load(L2_DATA)["x"]
    result = convert_model(model, [{"x": x}, {"x": x / 2}])
    assert isinstance(result, ConvertedModel) and isinstance(result.model, onnx.ModelProto)
    # Nothing written anywhere: onnxruntime's import (in the default load's child) leaves its '.ses'
    # session id in TMPDIR, and nothing else is there.
    assert sorted(os.listdir(tmp_path)) == ["tmp"] and set(os.listdir(scratch)) <= {".ses"}
    assert model.SerializeToString() == before  # the caller's model is left as it was
    assert result.passed and result.report is not None and result.report.status == "passed"
    assert result.report.verified is not None and result.report.verified.passed  # the model, emulated
    assert result.plan.fp32_nodes == ("sumsq", "norm") and result.plan.decisions["sumsq"].reasons
    assert result.report.sample_count == 2 and result.report.samples_source == "2 feeds given in memory"
    assert result.report.model == "<in-memory model>" and result.report.output == "<converted in memory>"
    onnx.checker.check_model(result.model, full_check=True)
    assert node_types(result.model) == {"square": FLOAT16, "sumsq": FLOAT, "norm": FLOAT,
                                        "normalize": FLOAT16}


def test_the_default_load_of_an_in_memory_model_runs_in_a_child_from_its_bytes(monkeypatch):
    from onnx_precision.oracle import default_load
    seen = []
    real = default_load._child_command

    def command(path, attempt, libraries):
        seen.append(path)
        return real(path, attempt, libraries)

    monkeypatch.setattr(default_load, "_child_command", command)
    assert convert_model(chain(), feeds()).passed
    assert seen == ["-"]  # the serialized model on the child's stdin, no file


def test_a_model_onnxruntime_cannot_load_at_default_options_is_returned_with_that_status(monkeypatch):
    import sys

    from onnx_precision.oracle import default_load

    def crash(path, attempt, libraries):
        return [sys.executable, "-c", "import os, signal, sys; sys.stdin.buffer.read(); "
                                      "os.kill(os.getpid(), signal.SIGSEGV)"]

    monkeypatch.setattr(default_load, "_child_command", crash)
    result = convert_model(chain(), feeds())
    assert result.status == "ort-load-failed" and not result.passed
    assert "SIGSEGV" in result.report.message


def test_all_fp16_mode_runs_nothing_and_returns_the_plan():
    result = convert_model(chain(), options=ConvertOptions(mode="all-fp16", keep_fp32=("^relu$",)))
    assert result.report is None and result.status == "not verified" and not result.passed
    assert set(result.plan.fp32_nodes) == {"relu"}
    assert node_types(result.model)["relu"] == FLOAT


def test_feeds_as_one_dict_a_list_of_dicts_a_file_or_a_sample_spec():
    one = convert_model(chain(), feeds()[0])
    assert one.report.samples_source == "feeds given in memory" and one.report.sample_count == 1
    spec = convert_model(chain(), SampleSpec(feeds=tuple(feeds(3))))
    assert spec.report.sample_count == 3
    l2 = convert_model(L2, L2_DATA)
    assert l2.report.samples_source == L2_DATA and set(l2.plan.fp32_nodes) == {"sumsq", "norm"}


def test_feeds_that_do_not_fit_are_one_line_data_errors_naming_the_feed():
    bad = feeds(2)
    bad[1] = {"x": bad[1]["x"].astype(np.float64)}
    with pytest.raises(DataError, match=r"^samples\[1\]: input 'x' has dtype float64; the model expects "
                                        r"float32$"):
        convert_model(chain(), bad)
    with pytest.raises(DataError, match=r"^samples: missing input 'x'"):
        convert_model(chain(), {})
    with pytest.raises(DataError, match=r"expected a dict of input name -> numpy array, or a non-empty "
                                        r"list of them; got int"):
        convert_model(chain(), 3)
    with pytest.raises(DataError, match=r"^samples\[0\]: expected a dict .*; got numpy.ndarray$"):
        convert_model(chain(), [np.zeros((1, 8), np.float32)])
    with pytest.raises(DataError, match="both a file"):
        SampleSpec(inputs="a.npz", feeds=tuple(feeds()))


def test_a_wrong_kind_of_argument_is_a_precision_error_saying_what_was_expected(tmp_path):
    cases = [
        (lambda: convert_model(b"not a proto"), UsageError,
         "model: expected an onnx.ModelProto or the path of an .onnx file; got bytes"),
        (lambda: convert_model(chain(), options={"mode": "auto"}), UsageError,
         "options: expected onnx_precision.convert.ConvertOptions; got dict"),
        (lambda: convert_model(chain(), options=ConvertOptions(mode="fast")), UsageError,
         "options: mode 'fast' is not one of"),
        (lambda: convert_model(chain(), options=ConvertOptions(report_json="r.json")), UsageError,
         "options.report_json: convert_model writes no file (report.write_json(result.report, path); "
         "result.save(path) writes the model)"),
        (lambda: convert_model(L2, base_dir=str(tmp_path)), UsageError, "base_dir: only for a ModelProto"),
        (lambda: convert_model(str(tmp_path / "missing.onnx")), ModelLoadError, "no such file"),
        (lambda: drop_in.convert_float_to_float16(42), drop_in.DropInError,
         "model: expected an onnx.ModelProto (or the path of an .onnx file); got int"),
        (lambda: drop_in.convert_float_to_float16(chain(), keep_io_types=["x"]), drop_in.DropInError,
         "keep_io_types: expected a bool"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind) as caught:
            call()
        assert isinstance(caught.value, PrecisionError) and not isinstance(caught.value, TypeError)
        assert text in str(caught.value) and "\n" not in str(caught.value)


# --- saving: atomic, and the CLI's bytes --------------------------------------------------------

def test_save_writes_the_bytes_the_cli_writes_for_the_same_options(tmp_path):
    cli, mem = tmp_path / "cli", tmp_path / "mem"
    cli.mkdir(), mem.mkdir()
    assert main(["convert", L2, "-o", str(cli / "out.onnx"), "--inputs", L2_DATA, "-q"]) == 0
    converted = convert_model(onnx.load(L2), [dict(np.load(L2_DATA))])
    assert converted.save(mem / "out.onnx") == str(mem / "out.onnx")
    assert same_files(cli, mem, ("out.onnx",))
    # all-fp16 with the block options, FP16 I/O and a data file
    source = tmp_path / "chain.onnx"
    onnx.save(chain(32), str(source))
    argv = ["--mode", "all-fp16", "--keep-fp32", "relu", "--keep-fp32-op", "Max", "--fp16-io",
            "--external-data"]
    assert main(["convert", str(source), "-o", str(cli / "out.onnx"), "-q"] + argv) == 0
    options = ConvertOptions(mode="all-fp16", keep_fp32=("relu",), keep_fp32_ops=("Max",), fp16_io=True,
                             external_data=True)
    convert_model(chain(32), options=options).save(mem / "out.onnx")
    assert os.path.getsize(mem / "out.onnx.data") > 0 and same_files(cli, mem)


def test_save_is_atomic_and_never_overwrites_the_input(tmp_path, monkeypatch):
    path = tmp_path / "chain.onnx"
    onnx.save(chain(), str(path))
    converted = convert_model(str(path), options=ConvertOptions(mode="all-fp16"))
    with pytest.raises(OutputError, match="output path is the input file"):
        converted.save(path)

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saving, "_write_data_file", fail)
    with pytest.raises(OutputError, match="No space left on device"):
        converted.save(tmp_path / "out.onnx", external_data=True)
    assert sorted(os.listdir(tmp_path)) == ["chain.onnx"]  # no model, no data file, no staging left
    with pytest.raises(OutputError, match="does not exist"):
        converted.save(tmp_path / "no" / "out.onnx")


def _external(tmp_path) -> str:
    """chain(32) with its weights in ``weights.bin`` beside the model."""
    model = chain(32)
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="weights.bin",
              size_threshold=128)
    return str(tmp_path / "ext.onnx")


def test_external_data_by_path_or_as_a_modelproto_with_its_base_dir(tmp_path):
    path = _external(tmp_path)
    for name in ("cli", "path", "proto"):
        (tmp_path / name).mkdir()
    assert main(["convert", path, "-o", str(tmp_path / "cli" / "out.onnx"), "--mode", "all-fp16", "-q"]) == 0
    by_path = convert_model(path, options=ConvertOptions(mode="all-fp16"))
    light = onnx.load(path, load_external_data=False)
    with pytest.raises(ModelLoadError, match=r"tensor 'W' keeps its data in 'weights.bin', a file relative "
                                             r"to the model's directory: give base_dir"):
        convert_model(light, options=ConvertOptions(mode="all-fp16"))
    with_dir = convert_model(light, options=ConvertOptions(mode="all-fp16"), base_dir=tmp_path)
    for name, converted in (("path", by_path), ("proto", with_dir)):
        converted.save(tmp_path / name / "out.onnx")
        assert os.path.exists(tmp_path / name / "out.onnx.data")
        assert same_files(tmp_path / "cli", tmp_path / name)
    # measured modes verify it in memory: its weights stay in files, so the default load is not checked
    measured = convert_model(path, feeds(width=32))
    assert measured.passed and any("default-options load of the converted model was not checked" in w
                                   for w in measured.warnings)


def test_a_large_single_file_model_stays_memory_mapped_and_saves_as_the_cli_does(tmp_path, monkeypatch):
    # Stand-ins for "large" (32 MB and more: its weights read in place) and "over 2 GB" (protobuf's
    # limit): the code paths of the real sizes, on a model with one 100 KB weight.
    monkeypatch.setattr(light_load, "LIGHT_LOAD_BYTES", 1024)
    path = tmp_path / "big.onnx"
    onnx.save(chain(160), str(path))
    converted = convert_model(str(path), feeds(width=160))
    assert converted.passed
    kept = [t for t in model_tensors(converted.rewrite.model) if t.name == "W"]
    assert kept and is_external(kept[0])  # read from the model file, converted as it is saved
    weights = {t.name: numpy_helper.to_array(t) for t in converted.model.graph.initializer}  # read in now
    source = {t.name: numpy_helper.to_array(t) for t in chain(160).graph.initializer}
    assert weights["W"].dtype == np.float16 and np.array_equal(weights["W"], source["W"].astype(np.float16))
    monkeypatch.setattr(saving, "PROTO_LIMIT", 4096)
    with pytest.raises(UsageError, match=r"over 2 GB with its weights, more than a ModelProto holds; "
                                         r"result.save\(path\) writes it"):
        replace(converted).model  # noqa: B018  # a property that may refuse
    cli, mem = tmp_path / "cli", tmp_path / "mem"
    cli.mkdir(), mem.mkdir()
    data = str(tmp_path / "feeds.npz")
    np.savez(data, **feeds(width=160)[0])
    assert main(["convert", str(path), "-o", str(cli / "out.onnx"), "--inputs", data, "-q"]) == 0
    converted.save(mem / "out.onnx")
    assert os.path.exists(mem / "out.onnx.data") and same_files(cli, mem)


# --- the drop-ins against onnxconverter-common ---------------------------------------------------

@pytest.mark.parametrize("arguments", [{}, {"keep_io_types": True}, {"keep_io_types": False},
                                       {"node_block_list": ["relu"]}, {"op_block_list": ["Relu"]},
                                       {"op_block_list": []},
                                       {"node_block_list": ["relu"], "op_block_list": None}])
def test_convert_float_to_float16_blocks_and_keeps_io_as_onnxconverter_common(arguments):
    float16, _ = occ()
    theirs = float16.convert_float_to_float16(chain(), **arguments)
    ours = drop_in.convert_float_to_float16(chain(), **arguments)
    assert node_types(ours) == node_types(theirs)
    assert io_types(ours) == io_types(theirs)
    onnx.checker.check_model(ours, full_check=True)


def test_a_node_block_list_name_no_node_has_warns():
    with pytest.warns(UserWarning, match="node_block_list: the model has no node named 'nope'"):
        drop_in.convert_float_to_float16(chain(), node_block_list=["nope"])


def test_constants_are_never_clamped_where_onnxconverter_common_clamps_them(tmp_path):
    """min_positive_val/max_finite_val: 2e4 is an FP16 value and stays one (onnxconverter-common
    makes it 1e4); 1e5 is not, and its consumer stays FP32 (onnxconverter-common makes it 1e4)."""
    float16, _ = occ()
    nodes = [helper.make_node("Mul", ["x", "c"], ["y"], name="mul_c"),
             helper.make_node("Mul", ["x", "d"], ["z"], name="mul_d")]
    inits = [numpy_helper.from_array(np.full(4, 2e4, np.float32), "c"),
             numpy_helper.from_array(np.full(4, 1e5, np.float32), "d")]
    model = _model(nodes, inits, (("x", [1, 4]),), (("y", [1, 4]), ("z", [1, 4])))
    with pytest.warns(UserWarning, match="truncated"):
        theirs = float16.convert_float_to_float16(model, keep_io_types=True)
    ours = drop_in.convert_float_to_float16(model, keep_io_types=True)
    values = {name: {t.name: numpy_helper.to_array(t) for t in m.graph.initializer} for name, m in
              (("theirs", theirs), ("ours", ours))}
    assert values["theirs"]["c"][0] == 1e4 and values["theirs"]["d"][0] == 1e4
    assert values["ours"]["c"].dtype == np.float16 and values["ours"]["c"][0] == 2e4
    assert values["ours"]["d"].dtype == np.float32 and values["ours"]["d"][0] == 1e5
    assert node_types(ours) == {"mul_c": FLOAT16, "mul_d": FLOAT}
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    spec = SampleSpec(feeds=({"x": np.full((1, 4), 0.01, np.float32)},))
    for name, converted in (("theirs", theirs), ("ours", ours)):
        onnx.save(converted, str(tmp_path / f"{name}.onnx"))
    assert check(str(tmp_path / "fp32.onnx"), str(tmp_path / "ours.onnx"), spec).passed
    assert not check(str(tmp_path / "fp32.onnx"), str(tmp_path / "theirs.onnx"), spec).passed
    with pytest.warns(UserWarning, match="max_finite_val: not used; onnx-precision never clamps"):
        drop_in.convert_float_to_float16(model, max_finite_val=65504.0)


def test_disable_shape_infer_changes_nothing_and_the_input_is_never_changed():
    float16, _ = occ()
    theirs_input = chain()
    float16.convert_float_to_float16(theirs_input, disable_shape_infer=True)
    assert theirs_input.SerializeToString() != chain().SerializeToString()  # theirs converts it in place
    model = chain()
    with_inference = drop_in.convert_float_to_float16(model)
    without = drop_in.convert_float_to_float16(model, disable_shape_infer=True)
    assert model.SerializeToString() == chain().SerializeToString()
    assert without.SerializeToString() == with_inference.SerializeToString()


def test_check_fp16_ready_refuses_an_fp16_model_with_the_same_value_error():
    float16, _ = occ()
    converted = float16.convert_float_to_float16(chain())
    for convert in (float16.convert_float_to_float16, drop_in.convert_float_to_float16):
        with pytest.raises(ValueError, match="already converted to float16"):
            convert(converted)
    again = drop_in.convert_float_to_float16(converted, check_fp16_ready=False)
    assert io_types(again) == io_types(float16.convert_float_to_float16(converted, check_fp16_ready=False))
    with pytest.raises(ValueError, match="already converted to float16"):
        drop_in.auto_convert_mixed_precision(converted, feeds()[0], rtol=0.01)


def test_a_path_converts_as_the_loaded_model_and_comes_back_holding_its_weights(tmp_path):
    path = _external(tmp_path)  # its weights in weights.bin
    from_path = drop_in.convert_float_to_float16(path, keep_io_types=True)
    assert not any(is_external(t) for t in model_tensors(from_path))  # onnx.save-able as it is
    from_proto = drop_in.convert_float_to_float16(chain(32), keep_io_types=True)
    assert from_path.SerializeToString() == from_proto.SerializeToString()


def test_auto_convert_mixed_precision_takes_the_tolerance_as_onnxconverter_common(monkeypatch):
    """rtol alone gets atol 1e-8, atol alone rtol 1e-5 (numpy's defaults, as onnxconverter-common
    fills them); judged on every element; neither, nor validate_fn, is the same ValueError."""
    _, auto = occ()
    for convert in (auto.auto_convert_mixed_precision, drop_in.auto_convert_mixed_precision):
        with pytest.raises(ValueError, match="Argument `validate_fn` and `rtol` cannot both be `None`."):
            convert(chain(), feeds()[0])
    seen = []
    real = drop_in.convert_model

    def spy(model, samples, options):
        seen.append(options)
        return real(model, samples, options)

    monkeypatch.setattr(drop_in, "convert_model", spy)
    drop_in.auto_convert_mixed_precision(chain(), feeds()[0], rtol=0.01)
    drop_in.auto_convert_mixed_precision(chain(), feeds()[0], atol=0.5)
    assert [o.judging.tolerance for o in seen] == [Tolerance(error_stat="elemwise", rtol=0.01, atol=1e-8),
                                           Tolerance(error_stat="elemwise", rtol=1e-5, atol=0.5)]
    assert all(o.mode == "auto" and o.fp16_io and o.keep_fp32_ops == ("Max",) for o in seen)


@pytest.mark.parametrize("keep_io_types", [True, False])
def test_auto_convert_mixed_precision_agrees_with_onnxconverter_common_where_nothing_overflows(keep_io_types):
    model, feed = onnx.load(MLP), dict(np.load(MLP_DATA))
    theirs = occ_auto(model, feed, rtol=0.01, atol=0.001, keep_io_types=keep_io_types)
    ours = drop_in.auto_convert_mixed_precision(model, feed, rtol=0.01, atol=0.001,
                                                keep_io_types=keep_io_types)
    assert node_types(ours) == node_types(theirs) == {n: FLOAT16 for n in node_types(theirs)}
    assert io_types(ours) == io_types(theirs)


def test_validate_fn_is_given_the_outputs_onnxconverter_common_gives_it():
    """It steers the search (tests/test_dropin_api.py); here, what it is given: the last call's
    arrays are of the dtypes and shapes onnxconverter-common's last call has."""
    model, feed = onnx.load(MLP), dict(np.load(MLP_DATA))
    calls: dict[str, list] = {"theirs": [], "ours": []}

    def recorder(name):
        def validate(fp32, fp16):
            calls[name].append(([a.dtype for a in fp32], [a.dtype for a in fp16], [a.shape for a in fp16]))
            return True
        return validate

    theirs = occ_auto(model, feed, recorder("theirs"))
    ours = drop_in.auto_convert_mixed_precision(model, feed, recorder("ours"))
    assert node_types(ours) == node_types(theirs)
    assert calls["ours"][-1] == calls["theirs"][-1]  # fp32 arrays, then the FP16 outputs as float16
    for convert in (occ_auto, drop_in.auto_convert_mixed_precision):
        with pytest.raises(ValueError, match="validation failed for original fp32 model"):
            convert(model, feed, lambda fp32, fp16: False)


def test_the_drop_ins_run_on_an_in_memory_model_and_warn_as_python_warnings():
    model = chain()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixed = drop_in.auto_convert_mixed_precision(model, feeds()[0], rtol=0.01, atol=0.001,
                                                     keep_io_types=True)
        whole = drop_in.convert_float_to_float16(model, keep_io_types=True)
    assert model.SerializeToString() == chain().SerializeToString()
    assert node_types(mixed)["max"] == FLOAT and node_types(whole)["max"] == FLOAT
    assert not [w for w in caught if issubclass(w.category, UserWarning)]  # nothing to warn about here
    no_float = _model([helper.make_node("Identity", ["x"], ["y"], name="id")], [])
    for vi in [*no_float.graph.input, *no_float.graph.output]:
        vi.type.tensor_type.elem_type = TensorProto.INT64
    with pytest.warns(UserWarning, match="nothing to convert"):
        drop_in.convert_float_to_float16(no_float)


def test_l2_normalize_auto_keeps_the_culprits_fp32_where_onnxconverter_common_overflows(tmp_path):
    """The acceptance case: onnxconverter-common's CPU validation passes an all-FP16 L2 norm whose
    sum of squares (~1.3e5) overflows FP16 on a GPU; the emulated check fails it. The drop-in
    keeps that sum and its square root FP32, and its model passes the same check."""
    model, feed = onnx.load(L2), dict(np.load(L2_DATA))
    theirs = occ_auto(model, feed, rtol=0.01, atol=0.001, keep_io_types=True)
    ours = drop_in.auto_convert_mixed_precision(model, feed, rtol=0.01, atol=0.001, keep_io_types=True)
    assert node_types(theirs) == {"square": FLOAT16, "sumsq": FLOAT16, "norm": FLOAT16, "normalize": FLOAT16}
    assert node_types(ours) == {"square": FLOAT16, "sumsq": FLOAT, "norm": FLOAT, "normalize": FLOAT16}
    spec, tol = SampleSpec(inputs=L2_DATA), Tolerance(error_stat="elemwise", rtol=0.01, atol=0.001)
    for name, converted in (("theirs", theirs), ("ours", ours)):
        onnx.save(converted, str(tmp_path / f"{name}.onnx"))
    passed = check(L2, str(tmp_path / "ours.onnx"), spec, tol)
    failed = check(L2, str(tmp_path / "theirs.onnx"), spec, tol)
    assert passed.passed and passed.oracle == "emulate"
    assert not failed.passed
    y = failed.comparison.outputs[0]
    assert y.outside_bound == y.elements  # every element out of tolerance: x / inf is 0
    assert not check(L2, str(tmp_path / "theirs.onnx"), spec).passed  # and by the default tolerance
