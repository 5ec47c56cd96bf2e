"""The decoders of models/decoders/: committed files match their builders, and one forward pass (what
was judged before generations) passes in FP16 on each of them, the growing state's included."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

from models import decoders
from models.decoders import generate
from onnx_precision.context import ModelContext
from onnx_precision.judge import Tolerance, compare_outputs
from onnx_precision.oracle import Emulator


def test_committed_files_are_what_the_builders_make():
    assert generate.stale() == []


def test_rebuild_is_byte_identical(tmp_path):
    generate.write_all(str(tmp_path))
    first = {p: (tmp_path / p).read_bytes() for p in generate.files_of("tiny_llama")}
    generate.write_all(str(tmp_path))
    assert first == {p: (tmp_path / p).read_bytes() for p in generate.files_of("tiny_llama")}
    files = ("genai_config.json", "model.onnx", "prefill.npz")
    assert sorted(first) == [os.path.join("tiny_llama", f) for f in files]


@pytest.mark.parametrize("name", sorted(decoders.BUILDERS))
def test_decoder_is_small_valid_and_its_prefill_passes_in_fp16(name):
    path = generate.model_path(name)
    assert os.path.getsize(path) < 100_000
    model = onnx.load(path)
    onnx.checker.check_model(model)
    with np.load(generate.prefill_path(name)) as data:
        feed = {k: data[k] for k in data.files}
    if name == "streaming_state":  # its sample is the stream: one pass is fed its first chunk
        feed["input"] = feed["input"][:, :64]
    ctx = ModelContext.of(model)
    emulator = Emulator(ctx)
    reference = emulator.run(None, feed)
    assert all(np.isfinite(v).all() for v in reference.values())
    assert compare_outputs(reference, emulator.run(ctx.all_low_plan(), feed), Tolerance(), "emulate").passed


def test_the_llamas_genai_config_names_its_tensors():
    config = json.loads(open(os.path.join(os.path.dirname(generate.model_path("tiny_llama")),
                                          "genai_config.json")).read())
    decoder = config["model"]["decoder"]
    model = decoders.tiny_llama().model
    inputs = {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    assert decoder["filename"] == "model.onnx" and decoder["num_hidden_layers"] == 2
    for i in range(2):
        assert decoder["inputs"]["past_key_names"] % i in inputs
        assert decoder["outputs"]["present_value_names"] % i in outputs
