"""Llama-architecture decoders of 1.2B and 7B parameters, built without torch and without holding them.

    python scripts/llama_models.py [--dir /tmp/onnx-precision-llama] llama-1b llama-7b

Each model is :func:`models.decoders.llama_decoder`'s graph (RMSNorm, rotary positions, a causal mask,
SwiGLU, grouped-query attention where ``kv_heads`` is below ``heads``) run once on a prompt: its past
keys and values are empty initializers and its presents are not outputs, so it is the model
``input_ids, attention_mask, position_ids -> logits`` that scale_models.py's torch export is (no
generation is inferred from it). Its weights are random (``numpy.random.default_rng``, one seed per
tensor: a rebuild gives the same bytes) and written tensor by tensor, a block of rows at a time, into
``model.onnx.data``: the builder is handed a one-element stand-in for each weight, and the written
proto is given each tensor's dims and place afterwards. What the builder holds is the graph and one
block (64 MB), whatever the model's size. Tensors over 1 MB start on a 64 KB boundary, as
onnx_precision.storage.saving lays out its own data files.

- ``llama-1b``: scale_models.py's ``llama`` configuration (hidden 2048, 24 layers, 32 heads, 4 key/value
  heads, MLP 5632, vocabulary 32000, untied head): 1.19B parameters, 4.75 GB; prompt of 64 tokens.
- ``llama-7b``: Llama-2-7B's (hidden 4096, 32 layers, 32 heads, MLP 11008, vocabulary 32000, untied):
  6.74B parameters, 27.0 GB; prompt of 16 tokens.

``DIR/NAME/model.onnx``, ``model.onnx.data`` and ``sample.npz``; ``DIR/NAME/done`` marks a finished build.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models.decoders import LlamaShape, llama_decoder, llama_prefill  # noqa: E402

DEFAULT_DIR = "/tmp/onnx-precision-llama"
BLOCK_BYTES = 64 << 20
ALIGN_THRESHOLD, ALIGNMENT = 1 << 20, 64 << 10
INIT_STD = 0.02  # transformers' initializer_range for Llama


@dataclass(frozen=True)
class Spec:
    shape: LlamaShape
    prompt: int


SPECS = {
    "llama-1b": Spec(LlamaShape(layers=24, hidden=2048, heads=32, ffn=5632, vocab=32000, kv_heads=4), 64),
    "llama-7b": Spec(LlamaShape(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000), 16),
}


class _Writer:
    """Writes each weight the builder asks for into the data file and records where it went."""

    def __init__(self, out, location: str) -> None:
        self.out, self.location = out, location
        self.placed: dict[str, tuple[tuple[int, ...], int, int]] = {}  # name -> (dims, offset, length)

    def __call__(self, name: str, dims: tuple[int, ...]) -> np.ndarray:
        gen = np.random.default_rng(len(self.placed))
        length = int(np.prod(dims)) * 4
        if length > ALIGN_THRESHOLD:
            self.out.write(b"\0" * ((-self.out.tell()) % ALIGNMENT))
        offset = self.out.tell()
        if name.endswith("norm_w"):
            self.out.write(np.ones(dims, np.float32).tobytes())
        else:
            row = int(np.prod(dims[1:], dtype=np.int64)) * 4
            rows = max(1, BLOCK_BYTES // row)
            for start in range(0, dims[0], rows):
                block = gen.standard_normal((min(rows, dims[0] - start), *dims[1:]), dtype=np.float32)
                block *= INIT_STD
                self.out.write(block.data)
        self.placed[name] = (dims, offset, length)
        return np.zeros((1,) * len(dims), np.float32)


def build(directory: str, name: str) -> str:
    """Build ``name`` into ``directory/name`` unless done; the model file's path."""
    spec = SPECS[name]
    folder = os.path.join(directory, name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(os.path.join(folder, "done")):
        return path
    os.makedirs(folder, exist_ok=True)
    location = "model.onnx.data"
    with open(os.path.join(folder, location), "wb") as out:
        writer = _Writer(out, location)
        model = llama_decoder(name, spec.shape, writer)
    for tensor in model.graph.initializer:
        if tensor.name in writer.placed:
            dims, offset, length = writer.placed[tensor.name]
            tensor.ClearField("raw_data")
            del tensor.dims[:]
            tensor.dims.extend(dims)
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
                tensor.external_data.add(key=key, value=value)
    _run_once(model, spec.shape)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    ids = np.random.default_rng(0).integers(0, spec.shape.vocab, (1, spec.prompt))
    prefill = llama_prefill(spec.shape, ids)
    feed: dict[str, Any] = {k: v for k, v in prefill.items() if not k.startswith("past_")}
    np.savez(os.path.join(folder, "sample.npz"), **feed)
    open(os.path.join(folder, "done"), "w").close()
    return path


def _run_once(model: onnx.ModelProto, shape: LlamaShape) -> None:
    """The decoder as run once on a prompt: empty pasts as initializers, no presents among its outputs."""
    graph = model.graph
    pasts = [i for i in graph.input if i.name.startswith("past_key_values.")]
    for value in pasts:
        graph.input.remove(value)
        empty = onnx.TensorProto(name=value.name, data_type=onnx.TensorProto.FLOAT,
                                 dims=[1, shape.kv, 0, shape.head_dim])
        graph.initializer.append(empty)
    for value in [o for o in graph.output if o.name.startswith("present.")]:
        graph.output.remove(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("names", nargs="+", choices=sorted(SPECS))
    args = parser.parse_args(argv)
    for name in args.names:
        started = time.perf_counter()
        path = build(args.dir, name)
        size = os.path.getsize(path + ".data")
        print(f"{name}: {path} ({size / 1e9:.2f} GB of external data, {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
