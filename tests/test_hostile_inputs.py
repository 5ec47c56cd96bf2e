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


# --- item 11: numbers Python cannot read, a report of the wrong shape, a point that is no number ------

LONG_INT = "1" * 5000  # past Python's int-string limit (4300 digits): int() raises ValueError in json


@pytest.mark.parametrize("option, text", [("--plan", '{"nodes": {}, "n": ' + LONG_INT + "}"),
                                          ("--inputs", '[{"x": ' + LONG_INT + "}]")])
def test_an_integer_of_5000_digits_in_a_json_file_is_one_line(tmp_path, capsys, out, option, text):
    model = _mlp(tmp_path)
    path = tmp_path / "f.json"
    path.write_text(text)
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), option, str(path)], capsys, out)
    assert line == f"{option} {path}: not readable JSON: an integer of more than 4300 digits (Python's limit)"


def _report(tmp_path, **fields) -> str:
    """A report whose trade-off has point 1 (pinning nothing), with ``fields`` replacing its own."""
    import json
    report = {"tradeoff": {"points": [{"point": 1, "pinned": []}]}, **fields}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    return str(path)


@pytest.mark.parametrize("fields, problem", [
    ({"tradeoff": [1]}, "not a conversion report with a trade-off (no 'tradeoff' points)"),
    ({"tradeoff": {"points": [{"point": 1, "pinned": {"mm": 1}}]}},
     "trade-off point 1: 'pinned' is of type dict, not a list of node names"),
    ({"tradeoff": {"points": [{"point": 1, "pinned": ["mm", ["relu"]]}]}},
     "trade-off point 1: 'pinned' is a list holding a value of type list, not a list of node names"),
    ({"tradeoff": {"points": [{"point": 1}]}}, "trade-off point 1 has no 'pinned' list of node names"),
    ({"tradeoff": {"points": [{"point": True, "pinned": []}]}},
     "the report has no trade-off point 1 (points: )"),
    ({"low_precision": "bf16", "plan": [1]},
     "the report's 'plan' is no plan (expected an object with 'nodes', node name -> decision)"),
    ({"low_precision": "bf16", "plan": {"nodes": 5}},
     "the report's 'plan' is no plan (expected an object with 'nodes', node name -> decision)")])
def test_a_report_point_of_the_wrong_shape_is_one_line(tmp_path, capsys, out, fields, problem):
    # 'tradeoff' a list, 'plan' a list: AttributeError; 'nodes' an int: TypeError (internal errors)
    from onnx_precision.errors import PlanError
    from onnx_precision.plan import PrecisionPlan

    model, report = _mlp(tmp_path), _report(tmp_path, **fields)
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--plan", f"{report}@1"], capsys, out)
    assert line == f"{report}@1: {problem}"
    with pytest.raises(PlanError) as raised:
        PrecisionPlan.load(f"{report}@1")
    assert str(raised.value) == line


@pytest.mark.parametrize("point", ["²", LONG_INT])
def test_a_report_point_that_is_no_number_is_one_line(tmp_path, capsys, out, point):
    # '²'.isdigit() is true and int('²') a ValueError; so is int() of 5000 digits
    model, report = _mlp(tmp_path), _report(tmp_path)
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--plan", f"{report}@{point}"], capsys, out)
    assert line == (f"{report}@{point}: no such file, and what follows '@' is no trade-off point of {report} "
                    f"(REPORT.json@K: K as the report numbers its points, in digits 0-9)")


def test_a_report_point_and_long_integers_from_python(tmp_path):
    from onnx_precision.data import SampleSpec, load_samples
    from onnx_precision.errors import DataError, PlanError
    from onnx_precision.plan import PrecisionPlan

    with pytest.raises(PlanError, match=r"@²: no such file, and what follows '@' is no trade-off point of "):
        PrecisionPlan.load(_report(tmp_path) + "@²")
    path = tmp_path / "in.json"
    path.write_text('[{"x": ' + LONG_INT + "}]")
    with pytest.raises(DataError, match=r"in\.json: not readable JSON: an integer of more than 4300 digits"):
        load_samples(onnx.load(_mlp(tmp_path)), SampleSpec(inputs=str(path)))
    assert PrecisionPlan.load(_report(tmp_path) + "@1").decisions == {}


# --- item 5: sample files bounded by what they expand to ------------------------------------------------

def _npz_bytes(arrays: dict[str, np.ndarray], method: int = 8) -> bytes:
    """An .npz of ``arrays`` with its members compressed by zip ``method`` (8: deflate, as
    np.savez_compressed; 12: bzip2; 14: lzma)."""
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.save(member, array)
            archive.writestr(f"{name}.npy", member.getvalue())
    return buffer.getvalue()


def _polygraphy_json(path, feeds: list[dict[str, bytes | str]]) -> None:
    """A Polygraphy JSON of ``feeds``, each array's payload given as bytes (written base64) or text."""
    import base64
    import json
    path.write_text(json.dumps([{name: {"array": base64.b64encode(p).decode() if isinstance(p, bytes) else p,
                                        "polygraphy_class": "ndarray"} for name, p in feed.items()}
                                for feed in feeds]))


@pytest.fixture
def small_bound(monkeypatch):
    """MAX_SAMPLE_BYTES at 64 KiB, and no array read past the checks: a refusal must come first."""
    from onnx_precision.data import files as data
    monkeypatch.setattr(data, "MAX_SAMPLE_BYTES", 64 << 10)
    return data


def _unread(data, monkeypatch) -> None:
    def read(*args):
        pytest.fail("an array was read before the bound was checked")
    monkeypatch.setattr(data, "_load_npz", read)
    monkeypatch.setattr(data, "_payload_array", read)


RAISE_IT = "give fewer or smaller samples, or a larger --memory-budget (a run holds about 11x its samples)"
PAST_BOUND = ("its arrays expand to {size} ({feeds}), more than sample data can sensibly be ({bound} at "
              "most, counted expanded, whatever the file weighs); " + RAISE_IT)


@pytest.mark.parametrize("form", ["npz", "json", "directory"])
def test_sample_files_are_bounded_by_what_they_expand_to(tmp_path, capsys, out, small_bound, monkeypatch,
                                                         form):
    # 128 KiB of zeros deflate to a few hundred bytes: the file weighs nothing, the arrays twice the bound
    model = _mlp(tmp_path, batch="N")
    x = np.zeros((8192, 4), np.float32)
    if form == "npz":
        data = tmp_path / "d.npz"
        data.write_bytes(_npz_bytes({"x": x}))
        feeds = "1 feed"
    elif form == "json":  # Polygraphy's decoder takes an .npz payload's first array
        data = tmp_path / "d.json"
        _polygraphy_json(data, [{"x": _npz_bytes({"x": x})}])
        feeds = "1 feed"
    else:  # each file within the bound, the three together past it
        data = tmp_path / "d"
        data.mkdir()
        for i in range(3):
            (data / f"{i}.npz").write_bytes(_npz_bytes({"x": x[:3000]}))
        feeds = "3 feeds"
    assert os.path.getsize(data) < 1000 or form == "directory"
    _unread(small_bound, monkeypatch)
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--inputs", str(data)], capsys, out)
    size = "141 KiB" if form == "directory" else "128 KiB"
    assert line == f"--inputs {data}: " + PAST_BOUND.format(size=size, feeds=feeds, bound="64 KiB")


@pytest.mark.parametrize("method, name", [(12, "bzip2"), (14, "lzma")])
@pytest.mark.parametrize("form", ["npz", "json"])
def test_a_bzip2_or_lzma_member_is_refused_unread(tmp_path, capsys, out, monkeypatch, method, name, form):
    # zipfile expands a bzip2 member's chunk whole even to read its header: a 1 017-byte .npz of one
    # honest 1 GiB array reached 7.8 GB, a 1 409-byte Polygraphy JSON carrying it 3.5 GB
    from onnx_precision.data import files as data_module

    model = _mlp(tmp_path, batch="N")
    payload = _npz_bytes({"x": np.zeros((2, 4), np.float32)}, method)
    data = tmp_path / f"d.{form}"
    if form == "npz":
        data.write_bytes(payload)
        what = "member 'x.npy'"
    else:
        _polygraphy_json(data, [{"x": payload}])
        what = "array 'x' (.npz member 'x.npy')"
    monkeypatch.setattr(data_module.zipfile.ZipFile, "open", lambda *a: pytest.fail("a member was opened"))
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--inputs", str(data)], capsys, out)
    assert line == (f"--inputs {data}: {what} is compressed with {name}; save feeds with np.savez or "
                    f"np.savez_compressed (stored or deflate members)")


def test_a_polygraphy_json_array_goes_through_the_npz_checks(tmp_path, capsys, out):
    # an .npz payload skipped the header check: its header against the model, and against its bytes
    import io
    import zipfile

    model = _mlp(tmp_path, batch="N")
    data = tmp_path / "d.json"
    _polygraphy_json(data, [{"x": _npz_bytes({"x": np.zeros((2, 4), np.float32)})},
                            {"x": _npz_bytes({"x": np.zeros((2, 4, 1), np.float32)})}])
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--inputs", str(data)], capsys, out)
    assert line == f"{data} (feed 1): input 'x' has rank 3 (shape 2x4x1); the model expects rank 2 (Nx4)"
    _polygraphy_json(data, [{"x": _npz_bytes({"x": np.zeros((2, 4), np.float64)}, method=0)}])
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--inputs", str(data)], capsys, out)
    assert line == f"{data}: input 'x' has dtype float64; the model expects float32"
    # a header claiming 3.64 TiB over 16 bytes: np.load would allocate it before reading
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (250_000_000_000, 4)})
    lying = io.BytesIO()
    with zipfile.ZipFile(lying, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(16))
    _polygraphy_json(data, [{"x": lying.getvalue()}])
    line = _refused(["convert", model, "-o", str(out / "o.onnx"), "--inputs", str(data)], capsys, out)
    assert line == (f"--inputs {data}: array 'x' (.npz member 'x.npy') claims a 250000000000x4 float32 array "
                    f"(3.64 TiB) but holds 16 bytes")


def test_polygraphy_s_legacy_payloads_still_read(tmp_path):
    # latin-1 text of the .npy, and an .npz whose first array is the one (as Polygraphy decodes them)
    import io

    from onnx_precision.data import SampleSpec, load_samples

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    npy = io.BytesIO()
    np.save(npy, x)
    data = tmp_path / "d.json"
    _polygraphy_json(data, [{"x": npy.getvalue().decode("latin-1")},
                            {"x": _npz_bytes({"first": x + 1, "second": x + 2}, method=0)}])
    samples = load_samples(onnx.load(_mlp(tmp_path, batch="N")), SampleSpec(inputs=str(data)))
    assert [f["x"].tolist() for f in samples.feeds] == [x.tolist(), (x + 1).tolist()]


def test_one_feed_at_the_model_s_own_sizes_is_allowed_past_the_bound(tmp_path, small_bound):
    # a model whose one fixed-size feed is 128 KiB cannot be verified on less; two such feeds are refused
    from onnx_precision.data import SampleSpec, load_samples
    from onnx_precision.errors import DataError

    model = onnx.load(_mlp(tmp_path, batch=8192))
    data = tmp_path / "d"
    data.mkdir()
    (data / "0.npz").write_bytes(_npz_bytes({"x": np.ones((8192, 4), np.float32)}))
    assert load_samples(model, SampleSpec(inputs=str(data))).feeds[0]["x"].sum() == 8192 * 4
    (data / "1.npz").write_bytes(_npz_bytes({"x": np.ones((8192, 4), np.float32)}))
    with pytest.raises(DataError) as raised:
        load_samples(model, SampleSpec(inputs=str(data)))
    assert str(raised.value) == f"--inputs {data}: " + PAST_BOUND.format(size="256 KiB", feeds="2 feeds",
                                                                          bound="128 KiB")


def test_an_expanding_sample_file_from_python(tmp_path, small_bound, monkeypatch):
    from onnx_precision.convert.in_memory import convert_model
    from onnx_precision.errors import DataError

    data = tmp_path / "d.npz"
    data.write_bytes(_npz_bytes({"x": np.zeros((8192, 4), np.float32)}))
    _unread(small_bound, monkeypatch)
    with pytest.raises(DataError) as raised:
        convert_model(_mlp(tmp_path, batch="N"), str(data))
    assert str(raised.value) == f"--inputs {data}: " + PAST_BOUND.format(size="128 KiB", feeds="1 feed",
                                                                          bound="64 KiB")


def test_a_memory_budget_raises_the_bound_to_an_11th_of_it(tmp_path, capsys, out, small_bound, monkeypatch):
    # the bound at 64 KiB; --memory-budget 1M raises it to 1e6 // 11 bytes (88.8 KiB) in every command, the
    # held-out samples' too: 78.1 KiB of samples pass under it, 128 KiB do not
    from onnx_precision.analysis import AnalyzeOptions
    from onnx_precision.check import CheckOptions
    from onnx_precision.convert import ConvertOptions
    from onnx_precision.data import SampleSpec

    model = _mlp(tmp_path, batch="N")
    within, past = tmp_path / "within.npz", tmp_path / "past.npz"
    within.write_bytes(_npz_bytes({"x": np.full((5000, 4), 0.5, np.float32)}))
    past.write_bytes(_npz_bytes({"x": np.zeros((8192, 4), np.float32)}))
    convert = ["convert", model, "-o", str(out / "o.onnx"), "--mode", "static", "-q", "--inputs"]
    line = _refused([*convert, str(within)], capsys, out)
    assert line == f"--inputs {within}: " + PAST_BOUND.format(size="78.1 KiB", feeds="1 feed", bound="64 KiB")
    line = _refused([*convert, str(past), "--memory-budget", "1M"], capsys, out)
    assert line == f"--inputs {past}: " + PAST_BOUND.format(size="128 KiB", feeds="1 feed", bound="88.8 KiB")
    line = _refused([*convert, str(within), "--validation-inputs", str(past), "--memory-budget", "1M"],
                    capsys, out)
    assert line == (f"--validation-inputs {past}: "
                    + PAST_BOUND.format(size="128 KiB", feeds="1 feed", bound="88.8 KiB"))
    assert main([*convert, str(within), "--validation-inputs", str(within), "--memory-budget", "1M"]) == 0
    capsys.readouterr()
    assert main(["check", model, str(out / "o.onnx"), "--inputs", str(within), "--memory-budget", "1M",
                 "-q"]) == 0
    # the one value is the run's budget, whatever a spec given whole says
    for options in (ConvertOptions, CheckOptions, AnalyzeOptions):
        given = options(samples=SampleSpec(inputs=str(within), memory_budget=10**9), memory_budget=10**6)
        assert given.samples.memory_budget == 10**6
        assert options(samples=SampleSpec(memory_budget=10**9)).samples.memory_budget is None


def test_the_sample_bound_is_the_same_on_every_machine_without_a_budget():
    from onnx_precision.data import SampleSpec
    from onnx_precision.data.files import MAX_SAMPLE_BYTES, sample_bound
    from onnx_precision.errors import UsageError

    assert sample_bound(None) == MAX_SAMPLE_BYTES == 512 << 20
    assert sample_bound(4 << 30) == MAX_SAMPLE_BYTES  # 372 MiB: less than without it
    assert sample_bound(16 << 30) == (16 << 30) // 11
    with pytest.raises(UsageError) as raised:
        SampleSpec(memory_budget=512)
    assert str(raised.value) == ("--memory-budget 512: expected a memory size of at least 1M (8G, 512M, "
                                 "3.5GiB), or None")


# --- item 13: many layer patterns against many layers ---------------------------------------------------

def test_the_pattern_index_matches_as_each_pattern_does():
    # the index (one lookup per distinct prefix and suffix length) finds for every name exactly the
    # patterns that LayerSpec.matches accepts (trtexec's matchStringWithOneWildcard), in the order given
    from onnx_precision.trt.layer_precisions import _Patterns, parse_spec

    specs = parse_spec("*:fp16,block1/*:fp32,*/act:fp16,block1*act:fp32,ab*ba:fp32,aba*:fp16,*aba:fp32,"
                       "block12/*:fp32,*2/act:fp16,b*:fp32,block1/relu*:fp32,*block1/relu:fp16,x*y:fp32")
    specs += parse_spec("block1/*:fp32,*act:fp32", "--layer-output-types", output_types=True)
    names = ["", "a", "aba", "abba", "ababa", "block1/relu", "block1/act", "block12/act", "block2/act",
             "block1", "xy", "x", "y", "xzy", "block1/relu_3", "ONNXTRT_x", "block1act"]
    index = _Patterns(specs)
    for name in names:
        assert index.matching(name) == [s for s in specs if s.matches(name)], name
    # 'ab*ba' needs 4 characters: its ends may not overlap
    assert [s.text for s in index.matching("aba")] == ["*:fp16", "aba*:fp16", "*aba:fp32"]
    assert [s.text for s in index.matching("block1/act")] == ["*:fp16", "block1/*:fp32", "*/act:fp16",
                                                               "block1*act:fp32", "b*:fp32", "block1/*:fp32",
                                                               "*act:fp32"]


def test_a_pattern_that_matches_nothing_is_still_said_before_a_later_unknown_name():
    # patterns are matched against the layers once, after the entries are read; an entry at fault later
    # in the entries (an unknown name, a type that cannot be written) does not hide an earlier pattern's
    from test_trt_migration import mixed_model

    from onnx_precision.context import ModelContext
    from onnx_precision.errors import UsageError
    from onnx_precision.trt.layer_precisions import layer_pins, parse_spec

    ctx = ModelContext.of(mixed_model())
    for later in ("nope:fp32", "rl2:bf16"):  # bf16 in an FP16 run
        with pytest.raises(UsageError) as raised:
            layer_pins(ctx.model, parse_spec(f"rl2:fp32,node_of_q*:fp32,{later}"), renamed=ctx.renamed)
        assert str(raised.value) == ("--layer-precisions 'node_of_q*:fp32': the pattern 'node_of_q*' matches "
                                     "no layer in the model (nearest: node_of_r)")
