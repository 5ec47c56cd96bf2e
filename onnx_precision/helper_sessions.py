"""Small onnxruntime sessions the tool builds for itself, counted apart from the model's.

Two helpers need onnxruntime on small graphs of their own: the typing rules learn whether
onnxruntime loads each op signature in FP16 (all signatures in one probe model, then one by one
only if that fails; cached per process), and the fast FP16 cast converts large weights with one
Cast node. They are sessions all the same, so reports count them next to the model's.
"""

from __future__ import annotations

import onnxruntime as ort

_built = 0


def build(model_bytes: bytes, options: ort.SessionOptions) -> ort.InferenceSession:
    global _built
    _built += 1
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def built() -> int:
    """How many helper sessions this process has built so far."""
    return _built
