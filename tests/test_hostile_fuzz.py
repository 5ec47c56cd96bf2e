"""Fuzz (issue 10): the example models and their sample files, truncated and bit-flipped at seeded
offsets. Each case ends one of the documented ways, and the input is never changed:

* exit 0 with a model that passes onnx's full check;
* exit 2 with one line on stderr and nothing written;
* (auto only) exit 1 with one line, no model and the report: a flipped weight or sample value can
  make the FP32 model itself non-finite, or leave no plan within tolerance.

Most cases run ``--mode all-fp16`` (milliseconds each); a few run ``auto``, and the sample files
(which only the measuring modes read) run ``auto``. The cases are drawn once from a fixed seed.
"""

from __future__ import annotations

import glob
import os
import random

import onnx
import pytest
from conftest import battery

from onnx_precision.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(p[:-5] for p in glob.glob(os.path.join(ROOT, "models", "*.onnx"))
                  if os.path.exists(p[:-5] + ".npz"))
SEED = 10
MODEL_CASES_PER_EXAMPLE = 120  # all-fp16
AUTO_MODEL_CASES_PER_EXAMPLE = 8
DATA_CASES_PER_EXAMPLE = 15  # auto


def _mutation(rng: random.Random, size: int) -> tuple[str, int, int]:
    """("truncate", offset, 0) or ("flip", offset, bit)."""
    if rng.random() < 0.5:
        return "truncate", rng.randrange(size), 0
    return "flip", rng.randrange(size), rng.randrange(8)


def _cases() -> list[tuple[str, str, str, str, int, int]]:
    """(example, file suffix, mode, mutation, offset, bit), drawn from :data:`SEED`."""
    rng = random.Random(SEED)
    cases = []
    for stem in EXAMPLES:
        name = os.path.basename(stem)
        model_size = os.path.getsize(stem + ".onnx")
        data_size = os.path.getsize(stem + ".npz")
        for _ in range(MODEL_CASES_PER_EXAMPLE):
            cases.append((name, ".onnx", "all-fp16", *_mutation(rng, model_size)))
        for _ in range(AUTO_MODEL_CASES_PER_EXAMPLE):
            cases.append((name, ".onnx", "auto", *_mutation(rng, model_size)))
        for _ in range(DATA_CASES_PER_EXAMPLE):
            cases.append((name, ".npz", "auto", *_mutation(rng, data_size)))
    return cases


def _mutated(data: bytes, mutation: str, offset: int, bit: int) -> bytes:
    if mutation == "truncate":
        return data[:offset]
    flipped = bytearray(data)
    flipped[offset] ^= 1 << bit
    return bytes(flipped)


@pytest.mark.parametrize("example, suffix, mode, mutation, offset, bit", battery(_cases()),
                         ids=lambda v: str(v))
def test_a_damaged_input_ends_a_documented_way(tmp_path, capsys, example, suffix, mode, mutation, offset,
                                                bit):
    stem = os.path.join(ROOT, "models", example)
    model, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    for path, source in ((model, stem + ".onnx"), (data, stem + ".npz")):
        content = open(source, "rb").read()
        with open(path, "wb") as f:
            f.write(_mutated(content, mutation, offset, bit) if source.endswith(suffix) else content)
    inputs = {p: open(p, "rb").read() for p in (model, data)}
    out = tmp_path / "out"
    out.mkdir()

    code = main(["convert", model, "-o", str(out / "o.onnx"), "--mode", mode, "--inputs", data, "-q"])

    err = capsys.readouterr().err.strip().splitlines()
    written = sorted(os.listdir(out))
    assert {p: open(p, "rb").read() for p in inputs} == inputs  # the input is never changed
    if code == 0:
        assert err == [] and "o.onnx" in written
        onnx.checker.check_model(str(out / "o.onnx"), full_check=True)
    elif code == 2:
        assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
        assert written == []
    else:
        assert code == 1 and mode == "auto", (code, err)
        assert len(err) == 1 and err[0].startswith("onnx-precision: error: "), err
        assert written == ["o.report.json", "o.report.md", "o.report.tradeoff.svg"]
