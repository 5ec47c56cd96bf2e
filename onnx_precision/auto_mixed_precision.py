"""onnxconverter-common's ``auto_mixed_precision`` module, by the same name: change only the import.

::

    from onnxconverter_common import auto_mixed_precision      # before
    from onnx_precision import auto_mixed_precision            # after
    model16 = auto_mixed_precision.auto_convert_mixed_precision(model, feed_dict, validate_fn,
                                                               rtol=0.01, atol=0.001, keep_io_types=True)

:func:`auto_convert_mixed_precision` is :mod:`onnx_precision.float16`'s (validated by the FP16
emulation, ``validate_fn`` asked of every plan the search probes; the module docstring there lists
the differences). The two onnxruntime helpers run onnxruntime's CPU provider, as
onnxconverter-common's do. Its bisection state (``SegmentList``, ``NodeSegment``) has no
counterpart: the search here is :mod:`onnx_precision.search`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from . import cancel
from .float16 import auto_convert_mixed_precision

__all__ = ["auto_convert_mixed_precision", "get_tensor_values_using_ort", "add_missing_dtypes_using_ort"]

logger = logging.getLogger(__name__)


def get_tensor_values_using_ort(model: onnx.ModelProto, input_feed: Mapping[str, np.ndarray],
                                output_names: Sequence[str] | None = None,
                                sess_options: ort.SessionOptions | None = None) -> list[np.ndarray]:
    """onnxconverter-common's helper: ``model`` run on ``input_feed`` by onnxruntime's CPU provider,
    its outputs, or the values named ``output_names`` (any the graph computes), in that order.
    ``model`` is left as it was."""
    if output_names is None:
        return cancel.run(_cpu_session(model.SerializeToString(), sess_options), None, dict(input_feed))
    declared = list(model.graph.output)
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=name) for name in output_names)
    try:
        serialized = model.SerializeToString()
    finally:  # the caller's outputs back, whatever happened
        del model.graph.output[:]
        model.graph.output.extend(declared)
    return cancel.run(_cpu_session(serialized, sess_options), list(output_names), dict(input_feed))


def _cpu_session(model: bytes, sess_options: ort.SessionOptions | None) -> ort.InferenceSession:
    return ort.InferenceSession(model, sess_options, providers=["CPUExecutionProvider"])


def add_missing_dtypes_using_ort(model: onnx.ModelProto, feed_dict: Mapping[str, np.ndarray],
                                 outputs_per_iter: int = 100) -> onnx.ModelProto:
    """onnxconverter-common's helper: a value_info (element type, no shape) appended to ``model``
    for every node output that has none, its type the one onnxruntime computes on ``feed_dict``
    (``outputs_per_iter`` values per session); ``model`` itself, changed."""
    graph = model.graph
    known = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    missing = [name for node in graph.node for name in node.output if name not in known]
    logger.info("Adding missing dtypes for %d outputs", len(missing))
    for start in range(0, len(missing), outputs_per_iter):
        names = missing[start:start + outputs_per_iter]
        values = get_tensor_values_using_ort(model, feed_dict, names)
        graph.value_info.extend(
            onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), None)
            for name, value in zip(names, values))
    return model
