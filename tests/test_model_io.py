"""External data: chunked ranges, lazy FP16 casts, streamed atomic saving, one-line errors."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.context import load_model
from onnx_precision.errors import ModelLoadError, OutputError
from onnx_precision.storage import (
    cast_initializer,
    external_data,
    read_array,
    save_model,
    saving,
    value_range,
)


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 48)) * 3).astype(np.float32)
    # values that must round, overflow to inf, become subnormal or flush to zero in FP16
    w[0, :6] = [1 + 2**-12, 70000.0, -1e5, 3e-6, 1e-9, -0.0]
    return {
        "w": w,
        "keep": rng.standard_normal((32, 48)).astype(np.float32),
        "bias": np.arange(48, dtype=np.float32) / 7,
        "tiny": np.array([0.5, -2.0], dtype=np.float32),
    }


def fp16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return values.astype(np.float16)


def build(directory, location: str = "weights.bin", name: str = "model.onnx") -> str:
    """A MatMul/Add model whose initializers all live in one external data file."""
    w = weights()
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "bias"], ["y"], name="add"),
         helper.make_node("MatMul", ["z", "keep"], ["k"], name="keep_mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 48]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 48])],
        [numpy_helper.from_array(a, n) for n, a in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(str(directory), name)
    onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=0)
    return path


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def initializers(model: onnx.ModelProto) -> dict[str, TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def to_fp16(model: onnx.ModelProto, base_dir: str, names=("w", "bias")) -> onnx.ModelProto:
    """The loaded model with some initializers replaced by cast_initializer's FP16 copies."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, t in enumerate(out.graph.initializer):
        if t.name in names:
            out.graph.initializer[i].CopyFrom(cast_initializer(t, base_dir, TensorProto.FLOAT16, t.name))
    return out


def test_external_round_trip_keeps_values_and_names_data_file_like_onnx(tmp_path):
    src = build(tmp_path / "")
    loaded = load_model(src)
    out = str(tmp_path / "out.onnx")
    save_model(loaded.model, out, source_dir=loaded.base_dir, external_data=True, input_paths=(src,))
    written = onnx.load(out)  # onnx's own loader resolves our locations
    expected = weights()
    for t in written.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), expected[t.name])
    raw = onnx.load(out, load_external_data=False)
    locations = {e.value for t in raw.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"out.onnx.data"}
    # even 'tiny' (8 bytes): what was external in the source stays external
    assert all(t.data_location == TensorProto.EXTERNAL for t in raw.graph.initializer)
    onnx.checker.check_model(out, full_check=True)


def test_cast_initializer_is_lazy_and_exact_fp16(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    w = initializers(loaded.model)["w"]
    lazy = cast_initializer(w, loaded.base_dir, TensorProto.FLOAT16, "w_fp16")
    assert lazy.name == "w_fp16" and lazy.data_type == TensorProto.FLOAT16
    assert lazy.data_location == TensorProto.EXTERNAL and not lazy.HasField("raw_data")
    expected = fp16(weights()["w"])
    got = read_array(lazy, loaded.base_dir)
    assert got.dtype == np.float16
    assert got.view(np.uint16).tolist() == expected.view(np.uint16).tolist()  # bit-exact, incl. -0 and inf
    assert got[0, 1] == np.inf and got[0, 2] == -np.inf and got[0, 4] == 0


def test_converted_tensors_written_exact_and_kept_tensors_copied_bytewise(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    model = to_fp16(loaded.model, loaded.base_dir)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    for name in ("y",):
        next(o for o in model.graph.output if o.name == name).type.tensor_type.elem_type = TensorProto.FLOAT16
    out = str(tmp_path / "fp16.onnx")
    save_model(model, out, source_dir=loaded.base_dir, input_paths=(src,))

    written = {t.name: t for t in onnx.load(out).graph.initializer}
    w = weights()
    for name in ("w", "bias"):
        got = numpy_helper.to_array(written[name])
        assert got.dtype == np.float16
        assert got.view(np.uint16).tolist() == fp16(w[name]).view(np.uint16).tolist()
    for name in ("keep", "tiny"):
        assert written[name].data_type == TensorProto.FLOAT
        assert numpy_helper.to_array(written[name]).tobytes() == w[name].tobytes()
    # the written model runs, and its FP16 MatMul+Add is the FP16 rounding of the source
    session = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    x = np.full((2, 64), 0.25, np.float16)
    z = np.ones((2, 32), np.float32)
    y, k = session.run(["y", "k"], {"x": x, "z": z})
    assert y.dtype == np.float16 and k.dtype == np.float32
    np.testing.assert_allclose(k, z @ w["keep"], rtol=1e-5, atol=1e-5)
    finite = np.isfinite(fp16(w["w"])).all(axis=0)  # columns without the weights that overflowed
    expected = x.astype(np.float32) @ fp16(w["w"]).astype(np.float32) + fp16(w["bias"]).astype(np.float32)
    np.testing.assert_allclose(y[:, finite].astype(np.float32), expected[:, finite], rtol=2e-3, atol=2e-2)


def test_save_does_not_modify_the_input_files_or_the_model(tmp_path):
    src = build(tmp_path)
    data = str(tmp_path / "weights.bin")
    before = (digest(src), digest(data))
    loaded = load_model(src)
    model = to_fp16(loaded.model, loaded.base_dir)
    snapshot = model.SerializeToString(deterministic=True)
    save_model(model, str(tmp_path / "a.onnx"), source_dir=loaded.base_dir, input_paths=(src,))
    save_model(model, str(tmp_path / "b.onnx"), source_dir=loaded.base_dir, external_data=False)
    assert (digest(src), digest(data)) == before
    assert model.SerializeToString(deterministic=True) == snapshot


def test_output_is_deterministic(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    model = to_fp16(loaded.model, loaded.base_dir)
    digests = []
    for name in ("one", "two"):
        os.mkdir(tmp_path / name)
        out = str(tmp_path / name / "out.onnx")
        save_model(model, out, source_dir=loaded.base_dir)
        digests.append((digest(out), digest(out + ".data")))
    assert digests[0] == digests[1]


def test_external_false_writes_a_single_file_and_inline_model_can_go_external(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    single = str(tmp_path / "single.onnx")
    save_model(to_fp16(loaded.model, loaded.base_dir), single, source_dir=loaded.base_dir,
               external_data=False)
    assert not os.path.exists(single + ".data")
    inline = onnx.load(single, load_external_data=False)
    assert all(t.data_location != TensorProto.EXTERNAL for t in inline.graph.initializer)
    np.testing.assert_array_equal(numpy_helper.to_array(initializers(inline)["w"]),
                                  fp16(weights()["w"]))

    # an inline model written with external_data=True: tensors of 1 KB and more go to the data file
    again = str(tmp_path / "again.onnx")
    save_model(inline, again, external_data=True)
    raw = initializers(onnx.load(again, load_external_data=False))
    assert raw["w"].data_location == TensorProto.EXTERNAL
    assert raw["tiny"].data_location != TensorProto.EXTERNAL
    assert (numpy_helper.to_array(initializers(onnx.load(again))["keep"]).tobytes()
            == weights()["keep"].tobytes())


def test_a_model_over_the_proto_limit_as_read_or_written_keeps_a_data_file(tmp_path, monkeypatch):
    src = build(tmp_path)
    loaded = load_model(src)
    fp16_model = to_fp16(loaded.model, loaded.base_dir, names=("w", "keep", "bias"))
    source_bytes = sum(int(np.prod(t.dims)) * 4 for t in loaded.model.graph.initializer)
    # the limit sits between the FP16 output's size and the FP32 source's: as read, it is over
    monkeypatch.setattr(saving, "PROTO_LIMIT", source_bytes - 1)
    out = str(tmp_path / "forced.onnx")
    save_model(fp16_model, out, source_dir=loaded.base_dir, external_data=False)
    assert os.path.exists(out + ".data")
    monkeypatch.setattr(saving, "PROTO_LIMIT", source_bytes + 1)
    save_model(fp16_model, str(tmp_path / "one.onnx"), source_dir=loaded.base_dir, external_data=False)
    assert not os.path.exists(str(tmp_path / "one.onnx.data"))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_initializer_range_handles_zeros_nan_inf_and_signs(dtype):
    cases = {(0.0, -0.0): (0.0, np.inf), (): (0.0, np.inf), (np.nan, -5.0, 2.0, 0.0): (5.0, 2.0),
             (np.inf, -1.0): (np.inf, 1.0), (-7.0,): (7.0, 7.0), (3.0, -2.0**-24, 0.0): (3.0, 2.0**-24)}
    for values, expected in cases.items():
        tensor = numpy_helper.from_array(np.array(values, dtype=dtype), "t")
        assert value_range(tensor, ".") == expected, (dtype, values)


def test_initializer_range_reads_in_chunks(tmp_path, monkeypatch):
    src = build(tmp_path)
    loaded = load_model(src)
    monkeypatch.setattr(external_data, "CHUNK_BYTES", 100)  # many chunks, not a multiple of rows
    w = np.abs(weights()["w"])
    max_abs, min_nonzero = value_range(initializers(loaded.model)["w"], loaded.base_dir)
    assert max_abs == float(w.max()) == 1e5
    assert min_nonzero == float(w[w > 0].min()) == np.float32(1e-9)
    # the range of a lazy FP16 copy is the range of the FP16 values
    lazy = cast_initializer(initializers(loaded.model)["w"], loaded.base_dir, TensorProto.FLOAT16, "w16")
    assert value_range(lazy, loaded.base_dir) == (np.inf, float(np.float16(3e-6)))


def test_cast_of_a_lazy_cast_applies_both_roundings(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    w = initializers(loaded.model)["w"]
    half = cast_initializer(w, loaded.base_dir, TensorProto.FLOAT16, "w16")
    back = cast_initializer(half, loaded.base_dir, TensorProto.FLOAT, "w32")
    expected = fp16(weights()["w"]).astype(np.float32)
    np.testing.assert_array_equal(read_array(back, loaded.base_dir), expected)
    model = onnx.ModelProto()
    model.CopyFrom(loaded.model)
    initializers(model)["w"].CopyFrom(back)
    initializers(model)["w32"].name = "w"
    out = str(tmp_path / "roundtrip.onnx")
    save_model(model, out, source_dir=loaded.base_dir)
    np.testing.assert_array_equal(numpy_helper.to_array(initializers(onnx.load(out))["w"]), expected)


def test_large_tensors_are_aligned(tmp_path):
    big = np.arange(300_000, dtype=np.float32)  # 1.2 MB: over the alignment threshold
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [300_000])],
        [numpy_helper.from_array(np.ones(1000, np.float32), "a"), numpy_helper.from_array(big, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = str(tmp_path / "aligned.onnx")
    save_model(model, out, external_data=True)
    raw = initializers(onnx.load(out, load_external_data=False))
    offsets = {n: int(next(e.value for e in t.external_data if e.key == "offset")) for n, t in raw.items()}
    assert offsets["a"] == 0 and offsets["b"] == saving.ALIGNMENT
    np.testing.assert_array_equal(numpy_helper.to_array(initializers(onnx.load(out))["b"]), big)


def test_packed_int4_external_tensor_loads_reads_and_copies(tmp_path):
    values = np.array([1, -2, 3, -4, 5, 7, -8], dtype=np.int8)  # 7 values: 4 bytes, the last half empty
    tensor = numpy_helper.from_array(values.astype(helper.tensor_dtype_to_np_dtype(TensorProto.INT4)), "q")
    graph = helper.make_graph([helper.make_node("Identity", ["q"], ["y"], name="id")], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.INT4, [7])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    src = str(tmp_path / "int4.onnx")
    onnx.save(model, src, save_as_external_data=True, location="int4.bin", size_threshold=0)
    assert os.path.getsize(tmp_path / "int4.bin") == 4
    loaded = load_model(src)
    q = initializers(loaded.model)["q"]
    assert read_array(q, loaded.base_dir).astype(np.int8).tolist() == values.tolist()
    out = str(tmp_path / "copy.onnx")
    save_model(loaded.model, out, source_dir=loaded.base_dir)
    assert (numpy_helper.to_array(initializers(onnx.load(out))["q"]).astype(np.int8).tolist()
            == values.tolist())


def one_line(error: Exception) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_missing_data_file_is_a_one_line_error(tmp_path):
    src = build(tmp_path)
    os.unlink(tmp_path / "weights.bin")
    with pytest.raises(ModelLoadError) as err:
        load_model(src)
    assert one_line(err.value) == f"{src}: external data file 'weights.bin' of tensor 'w' is missing"


def test_truncated_data_file_is_a_one_line_error(tmp_path):
    src = build(tmp_path)
    data = tmp_path / "weights.bin"
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size - 4)
    with pytest.raises(ModelLoadError) as err:
        load_model(src)
    text = one_line(err.value)
    assert text.startswith(f"{src}: external data file 'weights.bin' is truncated: tensor 'tiny' needs bytes")
    assert f"the file has {size - 4}" in text


def test_data_file_truncated_after_loading_fails_the_save_and_writes_nothing(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    model = to_fp16(loaded.model, loaded.base_dir)
    with open(tmp_path / "weights.bin", "r+b") as f:
        f.truncate(100)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ModelLoadError, match="'weights.bin' is truncated: tensor 'w'"):
        save_model(model, str(tmp_path / "out.onnx"), source_dir=loaded.base_dir)
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temporary left behind


def test_output_equal_to_input_is_refused(tmp_path):
    src = build(tmp_path)
    loaded = load_model(src)
    with pytest.raises(OutputError, match="output path is the input file"):
        save_model(loaded.model, src, source_dir=loaded.base_dir, input_paths=(src,))
    assert onnx.load(src) is not None


def test_output_whose_data_file_is_the_inputs_data_file_is_refused(tmp_path):
    src = build(tmp_path, location="out.onnx.data")  # out.onnx would write its weights over the input's
    before = digest(str(tmp_path / "out.onnx.data"))
    loaded = load_model(src)
    with pytest.raises(OutputError) as err:
        save_model(loaded.model, str(tmp_path / "out.onnx"), source_dir=loaded.base_dir, input_paths=(src,))
    assert "'out.onnx.data', the external data of tensor 'w' in the input" in one_line(err.value)
    assert not os.path.exists(tmp_path / "out.onnx")
    assert digest(str(tmp_path / "out.onnx.data")) == before



def test_fast_fp16_conversion_gives_numpy_bits_for_every_kind_of_value():
    from onnx_precision.storage import fast_cast

    rng = np.random.default_rng(3)
    patterns = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    # signalling/quiet NaN, 2**-25 (ties to 0)
    patterns[:4] = [0x7F800001, 0xFF800001, 0x7FC00000, 0x33000000]
    values = patterns.view(np.float32)
    assert values.size >= fast_cast.MIN_FAST_ELEMENTS
    assert fast_cast.to_float16(values).view(np.uint16).tolist() == fp16(values).view(np.uint16).tolist()
