"""FP32 -> FP16 conversion of large arrays at vector speed, bit-identical to numpy's.

numpy converts float32 to float16 element by element in software (about 100 MB/s of input on
our CI machines), which made it most of the time of converting a multi-GB model. onnxruntime's
``Cast`` uses the CPU's conversion instructions and is about 15x faster. Both round to nearest
even and overflow to inf; over all 2**32 float32 inputs they differ only in the payload of
signalling NaNs, which we redo with numpy so the output is numpy's, bit for bit.

The fast path is used only after a self-check on the values where conversions differ
(halfway cases, subnormals, the overflow boundary); if onnxruntime is unavailable or disagrees,
numpy is used.
"""

from __future__ import annotations

import functools
import logging

import numpy as np

from .. import cancel

log = logging.getLogger(__name__)

# Below this many elements the session call costs more than it saves.
MIN_FAST_ELEMENTS = 1 << 16


def _numpy_half(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float16)


def _probe_values() -> np.ndarray:
    """float32 values around every FP16 rounding hazard, plus random bit patterns."""
    specials = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e5, np.inf, -np.inf,
                         2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-14, 2.0**-15 * 1.5, 1e-10,
                         1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-20], dtype=np.float32)
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**32, size=1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.concatenate([specials, -specials, patterns])
    return values[~np.isnan(values)]


@functools.lru_cache(maxsize=1)
def _session():  # -> onnxruntime.InferenceSession | None
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        from .. import helper_sessions

        graph = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "to_float16",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = helper_sessions.build(model.SerializeToString(), options)
        probe = _probe_values()
        got = cancel.run(session, None, {"x": probe})[0]
    except Exception as e:  # any failure just means the slow path
        log.debug("fast FP16 conversion unavailable: %s", e)
        return None
    if not np.array_equal(got.view(np.uint16), _numpy_half(probe).view(np.uint16)):
        log.debug("onnxruntime's Cast disagrees with numpy on this machine; using numpy")
        return None
    return session


def to_float16(values: np.ndarray) -> np.ndarray:
    """``values.astype(np.float16)``, faster for large float32 arrays (same bits)."""
    if values.dtype != np.float32 or values.size < MIN_FAST_ELEMENTS:
        return _numpy_half(values)
    session = _session()
    if session is None:
        return _numpy_half(values)
    flat = np.ascontiguousarray(values).reshape(-1)
    half = cancel.run(session, None, {"x": flat})[0]
    # NaN test on the bits: numpy's float16 isnan is itself a slow software loop.
    magnitude = np.bitwise_and(half.view(np.uint16), np.uint16(0x7FFF))
    if magnitude.max() > _HALF_INF_BITS:
        nan = magnitude > _HALF_INF_BITS
        half[nan] = _numpy_half(flat[nan])
    return half.reshape(values.shape)


_HALF_INF_BITS = 0x7C00
