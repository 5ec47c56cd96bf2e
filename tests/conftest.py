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


@pytest.fixture
def save(tmp_path):
    """Write a model into the test's temp dir and return its path."""
    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> str:
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path
    return _save
