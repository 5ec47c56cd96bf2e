"""Oracles by name: one mapping, the CLI's choices, and the onnx.reference oracle end to end."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from models import generate
from onnx_precision.cli import main
from onnx_precision.oracle import ORACLES
from onnx_precision.target import ORACLE_NAMES


def test_every_oracle_name_has_one_runner():
    assert set(ORACLES) == set(ORACLE_NAMES) == {"emulate", "reference", "cuda", "tensorrt", "webgpu"}


def test_the_check_on_the_gpu_names_its_oracle_from_the_table():
    """The check a run suggests on the GPU runs on the run's own native oracle where onnxruntime-gpu has it,
    else CUDA's (WebGPU's is no onnxruntime-gpu provider), oracle and provider read from one table."""
    from onnx_precision.native_oracles import CUDA, TENSORRT
    from onnx_precision.suggested import RunArgs
    from onnx_precision.target import GENERIC

    chosen = {o: RunArgs("m.onnx", "o.onnx", oracle=o).native_oracle for o in ORACLE_NAMES}
    assert chosen == {"emulate": CUDA, "cuda": CUDA, "tensorrt": TENSORRT, "webgpu": CUDA, "reference": CUDA}
    line = GENERIC.commands.next_step(onnx.ModelProto(), RunArgs("m.onnx", "o.onnx", oracle="tensorrt"))
    assert line == ("onnx-precision check m.onnx o.onnx --oracle tensorrt  # checks it on the GPU "
                    "(onnxruntime-gpu's TensorRT provider) as this run judged it")


def test_convert_and_check_with_the_reference_oracle(tmp_path, capsys):
    model, data = generate.model_path("l2_normalize"), generate.data_path("l2_normalize")
    out = str(tmp_path / "o.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "--oracle", "reference", "-q"]) == 0
    report = json.load(open(tmp_path / "o.report.json"))
    assert report["outputs"]["native"]["oracle"] == "reference" and report["outputs"]["native"]["passed"]
    assert main(["check", model, out, "--inputs", data, "--oracle", "reference"]) == 0
    printed = capsys.readouterr().out
    assert "oracle: reference (onnx.reference: FP16 arithmetic inside every op" in printed


def test_the_reference_oracle_fails_an_all_fp16_model_that_overflows(tmp_path):
    model, data = generate.model_path("l2_normalize"), generate.data_path("l2_normalize")
    out = str(tmp_path / "all.onnx")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "-q"]) == 0
    assert main(["check", model, out, "--inputs", data, "--oracle", "reference", "-q"]) == 1


def test_check_verbose_adds_the_tolerance_and_where_each_output_fails(tmp_path, capsys):
    model, data = generate.model_path("l2_normalize"), generate.data_path("l2_normalize")
    out = str(tmp_path / "all.onnx")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", model, out, "--inputs", data, "-v"]) == 1
    printed = capsys.readouterr().out
    assert "tolerance: rms: rel RMS err <= 0.05" in printed
    assert "  y: 64 elements compared (0 left out: FP32 non-finite)" in printed and "    fails: " in printed


@pytest.mark.parametrize("argv", [["convert", "m.onnx", "-o", "o.onnx", "--max-probes", "0"],
                                  ["check", "a.onnx", "b.onnx", "--target", "tensorrt",
                                   "--trt-version", "abc"],
                                  ["frob"]])
def test_a_usage_mistake_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0] and err[0].endswith("(see --help)")
    assert os.listdir(tmp_path) == []
