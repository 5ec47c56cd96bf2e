"""CumSum as TensorRT 8.6 to 10.7 computes it in an FP16 network, in numpy.

Those releases import CumSum as a loop (``DEFINE_BUILTIN_OP_IMPORTER(CumSum)``: addLoop, an
iterator over the axis, a recurrence holding the running sum, one ElementWise SUM in the body).
The running sum is a tensor of the network, so in FP16 it is stored in FP16 after every step:
``s[t] = fp16(s[t-1] + fp16(x[t]))``. Once the sum is large, an increment below half the FP16
spacing at the sum changes nothing and the sum stalls (4096 increments of 0.5 stop at 1024, where
the spacing is 1), with no overflow anywhere. From 10.8 CumSum is one ICumulativeLayer, which
(like every single layer here) is taken to accumulate in FP32 and store its outputs in FP16.

This is the reference the Scan spelled in :mod:`.ops` is tested against, bit for bit.
"""

from __future__ import annotations

import numpy as np


def cumsum_fp16_loop(x: np.ndarray, axis: int = 0, *, exclusive: bool = False,
                     reverse: bool = False) -> np.ndarray:
    """The loop importer's CumSum of float32 ``x`` in an FP16 network, as float32 values
    (the input rounded to FP16, each partial sum rounded to FP16)."""
    with np.errstate(over="ignore"):
        data = np.moveaxis(np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32), axis, 0)
    order = range(data.shape[0] - 1, -1, -1) if reverse else range(data.shape[0])
    out = np.empty_like(data)
    total = np.zeros(data.shape[1:], dtype=np.float32)
    with np.errstate(over="ignore"):
        for t in order:
            before = total
            total = (total + data[t]).astype(np.float16).astype(np.float32)
            out[t] = before if exclusive else total
    return np.moveaxis(out, 0, axis)
