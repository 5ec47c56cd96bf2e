"""onnxconverter-common's ``auto_mixed_precision_model_path`` module, by the same name: change only
the import.

::

    from onnxconverter_common import auto_mixed_precision_model_path      # before
    from onnx_precision import auto_mixed_precision_model_path            # after
    auto_mixed_precision_model_path.auto_convert_mixed_precision_model_path(
        "model.onnx", feed, "out/model.fp16.onnx", ["CUDAExecutionProvider"], rtol=0.01, atol=0.001)

The search and its validation are :func:`onnx_precision.float16.auto_convert_mixed_precision`'s (the
FP16 emulation; ``customized_validate_func`` asked of every plan probed). Where this differs: the
weights go to ``<target file name>.data`` beside the model, which names that file (``location``
is accepted; another name warns); ``provider`` is accepted and unused (the emulation computes FP16
as a GPU does, on the CPU); ``verbose`` is unused (progress goes to ``logging``). Nothing is
written unless a model passes (then the target's folder is made, as there, and the files
written atomically).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .float16 import DropInError, Outputs, mixed_precision
from .judge import Tolerance
from .storage import data_location

__all__ = ["auto_convert_mixed_precision_model_path"]


def auto_convert_mixed_precision_model_path(
    source_model_path: str,
    input_feed: Mapping[str, np.ndarray],
    target_model_path: str,
    provider: Sequence[str] | None,
    location: str | None = None,
    customized_validate_func: Callable[[Outputs, Outputs], bool] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    keep_io_types: bool = True,
    verbose: bool = False,
) -> None:
    """onnxconverter-common's ``auto_convert_mixed_precision_model_path``: the model at
    ``source_model_path`` with as few FP32 nodes as keep its outputs on ``input_feed`` within
    ``rtol``/``atol`` (1e-3/1e-5 by default), or, where ``customized_validate_func`` is given,
    accepted by it alone (as there); written to ``target_model_path``, its weights external."""
    if not isinstance(source_model_path, str):
        raise TypeError("auto_convert_mixed_precision_model_path only accepts model Path (String),"
                        "you can use auto_convert_mixed_precision for the ModelProto.")
    if not isinstance(input_feed, dict):
        raise DropInError("input_feed should be a dictionary such as "
                          "{'modelInput': input_x.astype(np.float32)}")
    if not os.path.exists(source_model_path):
        raise DropInError(f"source_model_path does not exist: {source_model_path}")
    written = data_location(target_model_path)
    if location is not None and location != written:
        warnings.warn(f"location: the weights are written to '{written}' beside the model, which names "
                      f"that file (not '{location}')", stacklevel=2)
    tolerance = None if customized_validate_func is not None else Tolerance(
        error_stat="elemwise", rtol=1e-3 if rtol is None else rtol, atol=1e-5 if atol is None else atol)
    converted = mixed_precision(source_model_path, input_feed, tolerance, customized_validate_func,
                                keep_io_types, "validation failed for fp32 model")
    folder = os.path.dirname(target_model_path)
    if folder:  # onnxconverter-common makes the target's folder
        os.makedirs(folder, exist_ok=True)
    converted.save(target_model_path, external_data=True)
