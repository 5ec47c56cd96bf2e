"""Builders of the four models of issue 12's scale benchmark (random weights, nothing from a hub).

    python scripts/scale_models.py [--dir /tmp/onnx-precision-scale] [NAME ...]   # build what is missing
    python scripts/scale_models.py --list

Each model goes to ``DIR/NAME/model.onnx`` (``model.onnx.data`` beside it when its weights are
external) with one sample feed ``DIR/NAME/sample.npz``; ``DIR/NAME/done`` marks a finished build,
so a build that died is redone and a finished one is kept. ``scripts/bench_scale.py`` calls
:func:`ensure` in a child process, so the builder's memory (torch holds the weights, the exporter
a second copy) never counts against the benchmark.

Models (``MODELS``):

- ``cnn``: a ResNet-50-like CNN (bottleneck blocks 3-4-6-3, torch.nn, no torchvision), exported by
  ``torch.onnx.export`` at opset 17 (BatchNorm folded into the Convs), input 1x3x224x224;
- ``gpt2``: a GPT-2-small-like decoder (``transformers.GPT2Config()`` defaults: 12 layers, 768 wide,
  vocabulary 50257), eager attention, no KV cache, exported at opset 17, input_ids 1x128;
- ``lnstack``: 2400 decomposed LayerNorm blocks of 11 nodes each (``x = 0.5 * LN(x + c)``: Add,
  ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add, Mul), built with ``onnx.helper``:
  26401 nodes, 3.4 MB; values stay O(1) and errors do not accumulate, so its all-FP16 plan passes
  (``lnstackN``: N blocks, for profiling);
- ``llama``: a Llama-style decoder of ~1.19B parameters (hidden 2048, 24 layers, 32 heads, 4 KV
  heads, MLP 5632, vocabulary 32000, untied head), FP32 weights in one external data file
  (4.75 GB), input_ids 1x64; ``llama-1k`` is the same model at seq 1024 (its own export).

Weights come from ``torch.manual_seed(0)`` and the models' own initialisers; sample feeds from
``numpy.random.default_rng(0)``, so a rebuild gives the same model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DEFAULT_DIR = "/tmp/onnx-precision-scale"
OPSET = 17


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    build: Callable[[str], None]  # writes model.onnx (+ .data) and sample.npz into the directory


def paths(directory: str, name: str) -> tuple[str, str]:
    """The model file and its sample feed."""
    return os.path.join(directory, name, "model.onnx"), os.path.join(directory, name, "sample.npz")


# --- torch exports ----------------------------------------------------------------------------------


def _export(module, args: tuple, input_names: list[str], output_names: list[str], path: str) -> None:
    """torch.onnx.export with the TorchScript exporter at opset 17, eval mode, constants folded."""
    import torch

    module.eval()
    with torch.no_grad():
        torch.onnx.export(module, args, path, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, do_constant_folding=True, dynamo=False)


def _bottleneck(cin: int, width: int, stride: int):
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cout = 4 * width
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    return Bottleneck()


def build_cnn(directory: str) -> None:
    """ResNet-50 layout: stem, bottleneck stages of 3, 4, 6, 3 blocks, global pool, 1000-way Gemm."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(_bottleneck(cin, width, stride if i == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    model = nn.Sequential(*layers)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    _export(model, (torch.from_numpy(x),), ["input"], ["logits"], os.path.join(directory, "model.onnx"))
    np.savez(os.path.join(directory, "sample.npz"), input=x)


class _LogitsOnly:
    """Wraps a transformers causal LM so the export has one output and no KV cache."""

    @staticmethod
    def wrap(model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
                # An explicit all-ones mask: without one, transformers looks for packed sequences
                # with aten::diff, which the exporter does not support.
                mask = torch.ones_like(input_ids)
                return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits

        return Wrapped()


def _export_causal_lm(model, vocab: int, seq: int, directory: str, external: bool) -> None:
    import torch

    ids = np.random.default_rng(0).integers(0, vocab, size=(1, seq), dtype=np.int64)
    path = os.path.join(directory, "model.onnx")
    if not external:
        _export(_LogitsOnly.wrap(model), (torch.from_numpy(ids),), ["input_ids"], ["logits"], path)
    else:
        # Over 2 GB the exporter writes one file per weight; gather them into model.onnx.data.
        raw = os.path.join(directory, "raw")
        os.makedirs(raw, exist_ok=True)
        _export(_LogitsOnly.wrap(model), (torch.from_numpy(ids),), ["input_ids"], ["logits"],
                os.path.join(raw, "model.onnx"))
        del model
        _gather_external(os.path.join(raw, "model.onnx"), path)
        shutil.rmtree(raw)
    np.savez(os.path.join(directory, "sample.npz"), input_ids=ids)


def _gather_external(src: str, dst: str) -> None:
    """Rewrite ``src`` (weights in many files or inline) as ``dst`` with every tensor over 1 KiB in
    ``dst.data``, copying one tensor at a time (never the whole model in memory)."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(src, load_external_data=False)
    src_dir = os.path.dirname(os.path.abspath(src))
    location = os.path.basename(dst) + ".data"
    with open(os.path.join(os.path.dirname(os.path.abspath(dst)), location), "wb") as out:
        for tensor in _all_tensors(model.graph):
            if tensor.data_location == TensorProto.EXTERNAL:
                info = {e.key: e.value for e in tensor.external_data}
                with open(os.path.join(src_dir, info["location"]), "rb") as f:
                    f.seek(int(info.get("offset", 0)))
                    data = f.read(int(info["length"])) if "length" in info else f.read()
            elif tensor.raw_data and len(tensor.raw_data) > 1024:
                data = tensor.raw_data
            else:
                continue
            pad = (-out.tell()) % 64
            out.write(b"\0" * pad)
            offset = out.tell()
            out.write(data)
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
                tensor.external_data.add(key=key, value=value)
    with open(dst, "wb") as f:
        f.write(model.SerializeToString())


def _all_tensors(graph):
    import onnx

    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_tensors(attr.g)


def build_gpt2(directory: str) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    _export_causal_lm(model, config.vocab_size, 128, directory, external=False)


def llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=32,
                       num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
                       tie_word_embeddings=False, attn_implementation="eager")


def _build_llama(directory: str, seq: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    config = llama_config()
    model = LlamaForCausalLM(config)
    _export_causal_lm(model, config.vocab_size, seq, directory, external=True)


# --- onnx.helper builds ------------------------------------------------------------------------------


def build_lnstack(directory: str, blocks: int = 2400, width: int = 64, rows: int = 32) -> None:
    """``blocks`` times ``x = 0.5 * LayerNorm(x + c)`` with LayerNorm decomposed (11 nodes a block).

    The per-block constant ``c`` (std 2) makes each block contract the error of its input (by about
    4x), so FP16 rounding does not random-walk through the chain (a plain LayerNorm chain is scale
    invariant and passes its input's relative error on unchanged) and the all-FP16 plan passes.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    eps, two, half = const("eps", 1e-5), const("two", 2.0), const("half", 0.5)
    x = "x"
    for i in range(blocks):
        p = f"b{i}_"

        def node(op: str, inputs: list[str], name: str, p: str = p, **attrs) -> str:
            nodes.append(helper.make_node(op, inputs, [p + name], name=p + name, **attrs))
            return p + name

        shift = const(p + "shift", 2.0 * rng.standard_normal(width))
        gamma = const(p + "gamma", 1.0 + 0.1 * rng.standard_normal(width))
        beta = const(p + "beta", 0.1 * rng.standard_normal(width))
        h = node("Add", [x, shift], "in")
        mean = node("ReduceMean", [h], "mean", axes=[-1])
        d = node("Sub", [h, mean], "d")
        var = node("ReduceMean", [node("Pow", [d, two], "sq")], "var", axes=[-1])
        std = node("Sqrt", [node("Add", [var, eps], "var_eps")], "std")
        ln = node("Add", [node("Mul", [node("Div", [d, std], "norm"), gamma], "scaled"), beta], "ln")
        x = node("Mul", [ln, half], "out")
    nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
    graph = helper.make_graph(nodes, "lnstack",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, width])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.save(model, os.path.join(directory, "model.onnx"))
    np.savez(os.path.join(directory, "sample.npz"),
             x=rng.standard_normal((1, rows, width), dtype=np.float32))


def lnstack_spec(blocks: int) -> ModelSpec:
    name = "lnstack" if blocks == 2400 else f"lnstack{blocks}"
    return ModelSpec(name, f"stack of {blocks} decomposed LayerNorm blocks ({11 * blocks + 1} nodes)",
                     lambda d: build_lnstack(d, blocks))


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("cnn", "ResNet-50-like CNN, 1x3x224x224", build_cnn),
    ModelSpec("gpt2", "GPT-2-small-like decoder, seq 128", build_gpt2),
    lnstack_spec(2400),
    ModelSpec("llama", "Llama-style decoder, 1.19B params, seq 64", lambda d: _build_llama(d, 64)),
    ModelSpec("llama-1k", "Llama-style decoder, 1.19B params, seq 1024", lambda d: _build_llama(d, 1024)),
)}


def spec(name: str) -> ModelSpec:
    """A model of MODELS, or ``lnstackN``: a LayerNorm stack of N blocks (for profiling sizes)."""
    if name in MODELS:
        return MODELS[name]
    if name.startswith("lnstack") and name[len("lnstack"):].isdigit():
        return lnstack_spec(int(name[len("lnstack"):]))
    raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}, lnstackN")


def ensure(directory: str, name: str) -> tuple[str, str, float]:
    """Build ``name`` under ``directory`` unless a finished build is there; returns the model, the
    sample and the build's seconds (0 when cached)."""
    target = os.path.join(directory, name)
    if os.path.exists(os.path.join(target, "done")):
        return (*paths(directory, name), 0.0)
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    start = time.perf_counter()
    spec(name).build(target)
    seconds = time.perf_counter() - start
    with open(os.path.join(target, "done"), "w") as f:
        f.write(f"{seconds:.1f}\n")
    return (*paths(directory, name), seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="models to build (default: cnn gpt2 lnstack)")
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"model cache (default {DEFAULT_DIR})")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in MODELS.values():
            print(f"{m.name:<10} {m.description}")
        return 0
    for name in args.names or ["cnn", "gpt2", "lnstack"]:
        model, _, seconds = ensure(args.dir, name)
        size = sum(os.path.getsize(p) for p in (model, model + ".data") if os.path.exists(p))
        print(f"{name}: {model}, {size / 1e6:.1f} MB"
              + (f", built in {seconds:.1f} s" if seconds else ", cached"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
