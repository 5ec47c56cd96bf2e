"""Ops whose ``onnx.reference`` implementation departs from the ONNX specification in FP16.

onnx.reference (1.23) computes LayerNormalization's and RMSNormalization's statistics in the input's
type, although both schemas say ``stash_type`` (default 1, float32) is the type they are computed in:
their function bodies cast X to ``stash_type`` first, normalise there, and cast back to X's type
before the scale (and bias). With FP16 inputs that squares and sums rows in FP16, so a row whose
RMS deviation passes sqrt(65504 / H) gets an infinite variance that no runtime computes (onnxruntime's
CUDA kernels and TensorRT's normalization layer compute these statistics in FP32). These classes
follow the function bodies; :func:`.whole_runs.reference_executor` registers them.
"""

from __future__ import annotations

import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype
from onnx.reference.op_run import OpRun


def _stashed(x: np.ndarray, axis: int, stash_type: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
    stash = tensor_dtype_to_np_dtype(1 if stash_type is None else stash_type)
    axis = axis + x.ndim if axis < 0 else axis
    return x.astype(stash), tuple(range(axis, x.ndim))


class LayerNormalization(OpRun):
    op_domain = ""

    def _run(self, X, Scale, B=None, axis=None, epsilon=None, stash_type=None):  # noqa: N803 (the spec's names)
        x, axes = _stashed(X, -1 if axis is None else axis, stash_type)
        eps = 1e-5 if epsilon is None else epsilon
        mean = x.mean(axis=axes, keepdims=True)
        deviation = x - mean
        inv_std_dev = np.reciprocal(np.sqrt((deviation * deviation).mean(axis=axes, keepdims=True) + eps))
        y = (deviation * inv_std_dev).astype(X.dtype) * Scale
        if B is not None:
            y = y + B
        return y.astype(X.dtype), mean, inv_std_dev


class RMSNormalization(OpRun):
    op_domain = ""

    def _run(self, X, scale, axis=None, epsilon=None, stash_type=None):  # noqa: N803 (the spec's names)
        x, axes = _stashed(X, -1 if axis is None else axis, stash_type)
        eps = 1e-5 if epsilon is None else epsilon
        normalized = x * np.reciprocal(np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps))
        return ((normalized.astype(X.dtype) * scale).astype(X.dtype),)


SPEC_OPS = (LayerNormalization, RMSNormalization)
