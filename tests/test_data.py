"""Sample data: files, Polygraphy JSON, synthetic feeds, and one-line errors for bad data."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import parse

from onnx_precision.data import SampleSpec, load_samples
from onnx_precision.errors import DataError

MODEL = parse("""
<ir_version: 8, opset_import: ["" : 17]>
m (float[batch, 4] x, int64[2] idx) => (float[batch, 4] y) {
    y = Relu (x)
}
""")


def feed(batch: int = 2, **over) -> dict:
    out = {"x": np.arange(batch * 4, dtype=np.float32).reshape(batch, 4), "idx": np.array([0, 1], np.int64)}
    out.update(over)
    return out


def test_one_npz_is_one_feed(tmp_path):
    path = str(tmp_path / "data.npz")
    np.savez(path, **feed())
    samples = load_samples(MODEL, SampleSpec(inputs=path))
    assert len(samples.feeds) == 1 and not samples.synthetic and samples.source == path
    np.testing.assert_array_equal(samples.feeds[0]["x"], feed()["x"])


def test_a_directory_of_npz_is_one_feed_each_in_name_order(tmp_path):
    np.savez(str(tmp_path / "b.npz"), **feed(batch=3))
    np.savez(str(tmp_path / "a.npz"), **feed(batch=1))
    (tmp_path / "notes.txt").write_text("ignored")
    samples = load_samples(MODEL, SampleSpec(inputs=str(tmp_path)))
    assert [f["x"].shape[0] for f in samples.feeds] == [1, 3]
    assert samples.source == f"{tmp_path} (2 .npz files)"


def test_polygraphy_json_from_save_inputs(tmp_path, capsys):
    from polygraphy.json import save_json
    path = str(tmp_path / "inputs.json")
    save_json([feed(batch=1), feed(batch=2)], path)
    capsys.readouterr()
    samples = load_samples(MODEL, SampleSpec(inputs=path))
    assert [f["x"].shape for f in samples.feeds] == [(1, 4), (2, 4)]
    assert capsys.readouterr().out == ""  # Polygraphy's own log lines stay off our stdout


def test_synthetic_feeds_are_seeded_and_labelled():
    spec = SampleSpec(seed=3, input_shapes={"x": (5, 4)}, input_ranges={"x": (-2.0, 2.0)})
    a, b = load_samples(MODEL, spec), load_samples(MODEL, spec)
    assert a.synthetic and "synthetic, seed 3" in a.source and "the ranges decide what overflows" in a.source
    x = a.feeds[0]["x"]
    assert x.shape == (5, 4) and x.dtype == np.float32 and x.min() >= -2.0 and x.max() < 2.0
    assert x.tobytes() == b.feeds[0]["x"].tobytes()
    assert a.feeds[0]["idx"].dtype == np.int64 and a.feeds[0]["idx"].shape == (2,)
    other = load_samples(MODEL, SampleSpec(seed=4, input_shapes={"x": (5, 4)}))
    assert other.feeds[0]["x"].tobytes() != x.tobytes()


def test_a_batch_dimension_alone_defaults_to_one_and_the_samples_say_so():
    samples = load_samples(MODEL, SampleSpec())
    assert samples.feeds[0]["x"].shape == (1, 4)
    assert "; 'x' batch dimension batch set to 1;" in samples.source and samples.warnings == ()
    assert samples.guessed_shapes == (("x", "batchx4"),)


def test_other_symbolic_dimensions_are_never_invented():
    """A detector with dynamic H and W verified on a 1x3x1x1 image is not verified: refused, naming each."""
    from onnx import TensorProto, helper

    from onnx_precision.data.synthetic import SymbolicDimensions

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["t"], ["u"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, ["seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    model = helper.make_model(graph)
    with pytest.raises(SymbolicDimensions) as refused:
        load_samples(model, SampleSpec())
    assert str(refused.value) == (
        "symbolic dimensions with no size to verify at: input 'x' (Nx3xHxW): H (axis 2), W (axis 3); "
        "input 't' (seq): seq (axis 0); give sample data (--inputs DATA) or the sizes "
        "(--input-shape x:1x3x<H>x<W> --input-shape t:<seq>)")
    assert refused.value.exit_code == 2
    given = load_samples(model, SampleSpec(input_shapes={"x": (1, 3, 8, 8), "t": (5,)}))
    assert given.feeds[0]["x"].shape == (1, 3, 8, 8) and given.feeds[0]["t"].shape == (5,)


def test_synthetic_shape_too_big_to_allocate_is_a_data_error():
    # 2**60 x 4 float32 is past what numpy can address: it refuses before allocating anything.
    with pytest.raises(DataError,
                       match=r"^input 'x': no memory for a synthetic 1152921504606846976x4 float32"):
        load_samples(MODEL, SampleSpec(input_shapes={"x": (2 ** 60, 4)}))


def test_synthetic_flags_for_unknown_inputs_or_wrong_rank():
    with pytest.raises(DataError,
                       match=r"^--input-shape z: the model has no input 'z' \(model inputs: idx, x\)$"):
        load_samples(MODEL, SampleSpec(input_shapes={"z": (1,)}))
    with pytest.raises(DataError,
                       match=r"^--input-shape x:1x2x4: rank 3, but the model expects rank 2 \(batchx4\)$"):
        load_samples(MODEL, SampleSpec(input_shapes={"x": (1, 2, 4)}))
    with pytest.raises(DataError,
                       match=r"^--input-shape x:2x5: dimension 1 is fixed to 4 in the model \(batchx4\)$"):
        load_samples(MODEL, SampleSpec(input_shapes={"x": (2, 5)}))


@pytest.mark.parametrize("data, message", [
    (dict(feed(), z=np.zeros(1, np.float32)),
     "input 'z' is not an input of the model (model inputs: x, idx)"),
    ({"x": feed()["x"]}, "missing input 'idx' (shape 2, int64)"),
    (feed(x=np.zeros((2, 4), np.float64)), "input 'x' has dtype float64; the model expects float32"),
    (feed(x=np.zeros((2, 2, 4), np.float32)),
     "input 'x' has rank 3 (shape 2x2x4); the model expects rank 2 (batchx4)"),
    (feed(x=np.zeros((2, 5), np.float32)),
     "input 'x' has shape 2x5; the model expects batchx4 (dimension 1 must be 4)"),
])
def test_bad_data_is_a_one_line_error_naming_file_and_input(tmp_path, data, message):
    path = str(tmp_path / "bad.npz")
    np.savez(path, **data)
    with pytest.raises(DataError) as e:
        load_samples(MODEL, SampleSpec(inputs=path))
    assert str(e.value) == f"{path}: {message}"


def test_nan_in_sample_data_warns_naming_the_input(tmp_path):
    x = feed()["x"]
    x[0, 1] = np.nan
    path = str(tmp_path / "nan.npz")
    np.savez(path, **feed(x=x))
    samples = load_samples(MODEL, SampleSpec(inputs=path))
    want = f"{path}: input 'x' contains 1 NaN value(s); the FP32 reference inherits them"
    assert samples.warnings == (want,)  # printed once by the command, on stderr


def test_empty_directory_missing_path_and_unreadable_files(tmp_path):
    with pytest.raises(DataError, match=r": directory contains no \.npz files$"):
        load_samples(MODEL, SampleSpec(inputs=str(tmp_path)))
    missing = str(tmp_path / "nope.npz")
    with pytest.raises(DataError) as e:
        load_samples(MODEL, SampleSpec(inputs=missing))
    assert str(e.value) == f"{missing}: no such file or directory"
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"junk\.npz: cannot read as \.npz: not a zip archive"):
        load_samples(MODEL, SampleSpec(inputs=str(junk)))
    single = str(tmp_path / "single.npz")
    with open(single, "wb") as f:
        np.save(f, feed()["x"])  # an .npy under an .npz name: np.load returns a bare array
    with pytest.raises(DataError, match=r"single\.npz: not an \.npz archive \(a single array"):
        load_samples(MODEL, SampleSpec(inputs=single))
    bad_json = tmp_path / "in.json"
    bad_json.write_text("{not json")
    with pytest.raises(DataError, match=r"--inputs .*in\.json: not valid JSON: Expecting property name"):
        load_samples(MODEL, SampleSpec(inputs=str(bad_json)))
