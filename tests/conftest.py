"""Shared test set-up: the repo root on sys.path (for ``models``) and a tiny-model helper."""

from __future__ import annotations

import os
import sys

import onnx
import onnx.parser
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def parse(text: str, ir_version: int = 8) -> onnx.ModelProto:
    """A model from ONNX text, with an IR version onnxruntime accepts."""
    model = onnx.parser.parse_model(text)
    model.ir_version = ir_version
    return model


def unfused(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` importing opset 16 (the examples' ops are the same there), before
    LayerNormalization: its decomposed LayerNorms are written, and emulated, node by node, as an
    exporter below opset 17 leaves them. From 17 the rewriter writes each as one LayerNormalization
    with FP32 statistics, and FP16 breaks none of layernorm_eps's or the transformer's LayerNorms."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for opset in copy.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 16
    return copy


def pytest_terminal_summary(terminalreporter):
    """The ONNX node cases tests/test_conformance.py left out at collection, counted by reason,
    when it was collected (it parametrizes only the cases that can apply)."""
    harness = sys.modules.get("conformance_harness")
    if harness is not None:
        terminalreporter.write_line(harness.selection_summary())


@pytest.fixture
def save(tmp_path):
    """Write a model into the test's temp dir and return its path."""
    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> str:
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path
    return _save
