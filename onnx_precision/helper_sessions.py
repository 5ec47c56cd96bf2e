"""One-node onnxruntime sessions the tool builds for itself, counted apart from the model's.

Two helpers need onnxruntime on a single node: the typing rules learn whether onnxruntime loads
an op in FP16 (cached per op signature), and the fast FP16 cast converts large weights with one
Cast node. Their cost does not grow with the model, but they are sessions all the same, so reports
count them next to the sessions of the model.
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
