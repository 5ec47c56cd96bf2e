"""Weights held once: a big single-file model is loaded without its weights (read from the file),
and onnxruntime sessions of the oracle get large weights by reference, not serialized."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main
from onnx_precision.context import load_model
from onnx_precision.errors import ModelLoadError
from onnx_precision.oracle.sessions import make_session
from onnx_precision.oracle.weights import by_reference
from onnx_precision.storage import light_load, read_array
from onnx_precision.storage.external_data import IN_MODEL_FILE_KEY

ROWS = 256  # 256x256 float32: 256 KiB per weight, over the 64 KiB by-reference threshold


def _mlp(path: str, huge_last: bool = False) -> dict[str, np.ndarray]:
    """x -> MatMul w1 -> Exp -> MatMul w2 -> y, weights inline; Exp overflows FP16 on big inputs."""
    rng = np.random.default_rng(0)
    weights: dict[str, np.ndarray] = {"w1": (rng.standard_normal((ROWS, ROWS)) / 16).astype(np.float32),
               "w2": (rng.standard_normal((ROWS, 128)) / 16).astype(np.float32),
               "bias": np.arange(4, dtype=np.float32),
               "ids": np.arange(ROWS * 64, dtype=np.int64)}  # 128 KiB of integers: could be a shape
    if huge_last:
        weights["w2"][0, 0] = 1e6  # no FP16 value: its MatMul is pinned FP32, its weight kept FP32
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Exp", ["h"], ["e"], name="exp"),
             helper.make_node("MatMul", ["e", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, ROWS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 128])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    np.savez(os.path.join(os.path.dirname(path), "x.npz"),
             x=np.random.default_rng(1).standard_normal((2, ROWS)).astype(np.float32) / 4)
    return weights


@pytest.fixture
def light_threshold(monkeypatch):
    monkeypatch.setattr(light_load, "LIGHT_LOAD_BYTES", 1024)


def test_a_big_inline_model_loads_its_weights_as_places_in_its_own_file(tmp_path, light_threshold):
    path = str(tmp_path / "m.onnx")
    weights = _mlp(path)
    ctx = load_model(path)
    tensors = {t.name: t for t in ctx.model.graph.initializer}
    for name in ("w1", "w2"):
        entries = {e.key: e.value for e in tensors[name].external_data}
        assert entries["location"] == "m.onnx" and entries[IN_MODEL_FILE_KEY] == "1"
        assert not tensors[name].raw_data
        np.testing.assert_array_equal(read_array(tensors[name], ctx.base_dir), weights[name])
    for name in ("bias", "ids"):  # small; integers
        assert tensors[name].raw_data and not tensors[name].external_data
    assert ctx.model.ByteSize() < 4096 + weights["ids"].nbytes


@pytest.mark.parametrize("argv", [["--mode", "all-fp16"], ["--max-probes", "8"]])
def test_the_written_model_is_byte_identical_whether_the_input_was_loaded_light_or_whole(
        tmp_path, monkeypatch, argv):
    path = str(tmp_path / "m.onnx")
    _mlp(path, huge_last=True)
    data = str(tmp_path / "x.npz")
    outputs = []
    for threshold in (1 << 62, 1024):  # whole, then light
        monkeypatch.setattr(light_load, "LIGHT_LOAD_BYTES", threshold)
        out = str(tmp_path / f"out{threshold}.onnx")
        assert main(["convert", path, "-o", out, "--inputs", data, "-q", *argv]) == 0
        outputs.append(open(out, "rb").read())
        assert not os.path.exists(out + ".data")  # inline in, inline out
    assert outputs[0] == outputs[1]
    written = onnx.load_from_string(outputs[1])
    kinds = {t.name: t.data_type for t in written.graph.initializer}
    assert kinds["w1"] == TensorProto.FLOAT16 and kinds["w2"] == TensorProto.FLOAT


def test_a_model_carrying_the_in_model_file_key_itself_is_refused(tmp_path):
    path = str(tmp_path / "m.onnx")
    _mlp(path)
    model = onnx.load(path)
    w = model.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "m.onnx"), (IN_MODEL_FILE_KEY, "1")):
        w.external_data.add(key=key, value=value)
    onnx.save(model, path)
    with pytest.raises(ModelLoadError,
                       match=f"tensor 'w1' uses the reserved external data keys.*{IN_MODEL_FILE_KEY}"):
        load_model(path)


def test_an_unexpected_layout_falls_back_to_a_whole_load(tmp_path, light_threshold):
    path = str(tmp_path / "m.onnx")
    _mlp(path)
    raw = open(path, "rb").read()
    graph_field = onnx.ModelProto(graph=onnx.GraphProto(name="again")).SerializeToString()
    open(path, "wb").write(raw + graph_field)  # a second graph field: protobuf merges the two
    assert light_load.load_light(path) is None
    ctx = load_model(path)
    assert ctx.model.graph.name == "again" and ctx.model.graph.initializer[0].raw_data


def test_a_truncated_big_model_is_one_clear_error(tmp_path, light_threshold):
    path = str(tmp_path / "m.onnx")
    _mlp(path)
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: len(raw) // 2])
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        load_model(path)


def test_a_session_gets_large_weights_by_reference_and_computes_the_same(tmp_path):
    path = str(tmp_path / "m.onnx")
    weights = _mlp(path)
    model = onnx.load(path)
    light, values = by_reference(model, str(tmp_path))
    assert sorted(values) == ["w1", "w2"]
    assert light.ByteSize() < 4096 + 2 * ROWS * 64 * 8  # the integers stay: shape inference may read them
    assert model.ByteSize() > 2 * ROWS * ROWS  # the input is untouched
    x = np.random.default_rng(2).standard_normal((2, ROWS)).astype(np.float32) / 4
    got = make_session(model, str(tmp_path)).run(["y"], {"x": x})[0]
    expected = np.exp(x @ weights["w1"]) @ weights["w2"]
    np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_an_in_memory_model_with_no_file_to_point_at_keeps_its_weights_in_the_proto(tmp_path):
    path = str(tmp_path / "m.onnx")
    _mlp(path)
    model = onnx.load(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    light, values = by_reference(model, str(empty))
    assert light is model and values == {}
