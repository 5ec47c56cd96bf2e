"""convert (files) and convert_model (memory) are two front doors of one conversion
(:func:`onnx_precision.convert.run.conversion`): what one does, the other does.

The load remedy (issue 23 §9) ran only on the CLI's path: in memory, the model onnxruntime cannot
load at its default options came back ``ort-load-failed`` where the CLI wrote the model with the
pins that load."""

from __future__ import annotations

import os

import onnx
import pytest
from test_load_remedy import _crash_while_fp16, gru_denoiser

from onnx_precision.cli import main
from onnx_precision.convert import convert_model


@pytest.mark.slow  # 2.1 s of CPU: two conversions, each loading its candidates in 4 child processes
def test_in_memory_the_load_remedy_pins_what_the_cli_pins_and_saves_its_bytes(tmp_path, monkeypatch):
    _crash_while_fp16(monkeypatch, "Transpose_5")
    denoiser, out = str(tmp_path / "denoiser.onnx"), str(tmp_path / "cli.onnx")
    onnx.save(gru_denoiser(), denoiser)
    assert main(["convert", denoiser, "-o", out, "-q"]) == 0
    converted = convert_model(gru_denoiser())
    assert converted.status == "passed"
    plan = converted.plan
    assert [n for n in plan.fp32_nodes if plan.decisions[n].reasons[-1].source == "load"] == ["Transpose_5"]
    assert any(n.startswith("the FP16 model as first written does not load") for n in converted.report.notes)
    saved = converted.save(tmp_path / "mem.onnx")
    with open(out, "rb") as cli, open(saved, "rb") as mem:
        assert cli.read() == mem.read()
    assert not os.path.exists(tmp_path / "mem.onnx.data")
