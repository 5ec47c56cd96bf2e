"""Drop-in replacements for onnxconverter-common's FP16 conversion, verified by the FP16 emulation.

A user of onnxconverter-common (1.16) changes one import::

    from onnxconverter_common import float16                  # before
    from onnx_precision import float16                        # after
    model16 = float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=["norm"])

    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision   # before
    from onnx_precision.float16 import auto_convert_mixed_precision                    # after
    model16 = auto_convert_mixed_precision(model, feed_dict, rtol=0.01, atol=0.001, keep_io_types=True)

Both take the same arguments, with the same defaults and meanings, and return a ModelProto; the
conversion is :func:`onnx_precision.convert.convert_model`'s (``mode="all-fp16"`` for the first,
``"auto"`` for the second), whose result also carries the plan and the report. The argument map:
``keep_io_types`` is ``not fp16_io``; ``node_block_list`` pins nodes by exact name (``keep_fp32``);
``op_block_list`` pins op types (``keep_fp32_ops``), by default onnxconverter-common's
:data:`DEFAULT_OP_BLOCK_LIST`; ``rtol``/``atol`` (numpy's defaults 1e-5/1e-8 filling the one not
given) judge every element of every output, ``|fp16 - fp32| <= atol + rtol * |fp32|``
(``Tolerance(error_stat="elemwise")``); ``feed_dict`` is the one sample.

The differences that remain:

* ``auto_convert_mixed_precision`` validates with the FP16 emulation (every FP16 tensor rounded
  through float16 inside an FP32 graph), not with onnxruntime's CPU provider, which computes FP16
  graphs in FP32 and hides overflow: where onnxconverter-common returns a model that overflows on
  a GPU (an L2 norm's sum of squares past 65504), this one keeps the culprits FP32. The plan comes
  from the risk rules, the FP32 ranges (a tensor within 2x of FP16's maximum on the sample stays
  FP32: the default headroom) and a search over all nodes, bodies of If/Loop/Scan included, not
  from bisecting the main graph's node list; progress goes to ``logging``, not ``print``.
* ``rtol``/``atol`` scale by the FP32 value; ``numpy.allclose`` as onnxconverter-common calls it
  scales by the FP16 one (the two bounds differ by at most ``rtol`` times the error itself).
* ``validate_fn(fp32_outputs, fp16_outputs)`` gates the returned model (its emulated outputs, FP16
  ones as float16 when ``keep_io_types`` is False) but does not steer the search: with
  ``validate_fn`` alone the search judges by onnx-precision's default tolerance (relative RMS
  error at most 0.05 per output), then ``validate_fn`` must accept the result.
* ``min_positive_val``/``max_finite_val``: nothing is clamped (onnxconverter-common moves every
  constant beyond 1e4 to 1e4 and every nonzero one below 1e-7 to 1e-7, silently changing values
  FP16 holds). A constant FP16 cannot hold (past 65504, or all its nonzero values below FP16's
  normal range) keeps its consumers FP32; others convert as a Cast rounds them. The arguments are
  accepted and unused; other values than the defaults warn.
* ``disable_shape_infer`` is accepted and unused: the types come from onnx shape inference on a
  copy without weights (the declared types where it fails). The input model is never changed
  (onnxconverter-common changes it in place when shape inference is disabled).
* A node without an FP16 kernel or schema stays FP32 whatever the block lists say; a blocked
  If/Loop/Scan keeps its own inputs and outputs FP32 while its bodies' nodes are decided one by one
  (onnxconverter-common leaves the bodies of a blocked node as they are); a ``node_block_list``
  name that no node has warns.
* The written graph: one Cast per tensor and type, named after the tensor (``x_cast_fp16``), shared
  by its consumers (onnxconverter-common: one per consumer, ``x_cast_to_<node>``); a constant both
  precisions read is kept in both; unnamed nodes are named (``node_of_<first output>``); the
  model's metadata says what wrote it (``onnx_precision.*``).
* ``keep_io_types`` is a bool, as in onnxconverter-common (onnxruntime.transformers' list of names
  is refused). ``model`` may also be a path, whose external data is read from beside it; a
  converted model over 2 GB cannot come back as a ModelProto (a one-line error says so):
  ``convert_model(path, ...).save(out)`` writes it, its weights streamed.
* Errors are :class:`onnx_precision.PrecisionError` s with one-line messages; where
  onnxconverter-common raises ``ValueError`` (a model already FP16 with ``check_fp16_ready``, no
  ``rtol`` nor ``validate_fn``, validation failing) the error is a ``ValueError`` too.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Union

import numpy as np
import onnx

from .context import ModelContext
from .convert import ConvertedModel, ConvertOptions, convert_model
from .errors import InternalError, SearchError, UsageError
from .graph import walk_nodes
from .storage import load_light
from .tolerance import Tolerance
from .vocab import Mode

logger = logging.getLogger(__name__)

# onnxconverter-common 1.16's float16.DEFAULT_OP_BLOCK_LIST: ops kept FP32 when op_block_list is None.
DEFAULT_OP_BLOCK_LIST = [
    "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer", "FeatureVectorizer",
    "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder",
    "RandomUniformLike", "SVMClassifier", "SVMRegressor", "Scaler", "TreeEnsembleClassifier",
    "TreeEnsembleRegressor", "ZipMap", "NonMaxSuppression", "TopK", "RoiAlign", "Resize", "Range", "CumSum",
    "Min", "Max", "Upsample",
]
_CLAMP_DEFAULTS = {"min_positive_val": 1e-7, "max_finite_val": 1e4}

Model = Union[onnx.ModelProto, str, "os.PathLike[str]"]
Outputs = list[np.ndarray]


class DropInError(UsageError, ValueError):
    """An argument onnxconverter-common refuses with ValueError (or that this module cannot honour)."""


class ValidationFailed(SearchError, ValueError):
    """No model passes: onnxconverter-common's "validation failed for ... model" ValueError."""


def convert_float_to_float16(
    model: Model,
    min_positive_val: float = 1e-7,
    max_finite_val: float = 1e4,
    keep_io_types: bool = False,
    disable_shape_infer: bool = False,
    op_block_list: Iterable[str] | None = None,
    node_block_list: Iterable[str] | None = None,
    check_fp16_ready: bool = True,
) -> onnx.ModelProto:
    """onnxconverter-common's ``float16.convert_float_to_float16``: every node FP16 but the blocked
    ones (and those FP16 cannot compute or hold), unverified; see the module docstring for the
    differences. The warnings of the conversion are issued as Python warnings."""
    _unused_clamps(min_positive_val=min_positive_val, max_finite_val=max_finite_val)
    options = _options(model, "all-fp16", keep_io_types, op_block_list, node_block_list, check_fp16_ready)
    converted = convert_model(model, options=options)
    _warn(converted)
    return converted.model


def auto_convert_mixed_precision(
    model: Model,
    feed_dict: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
    validate_fn: Callable[[Outputs, Outputs], bool] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    keep_io_types: bool = False,
) -> onnx.ModelProto:
    """onnxconverter-common's ``auto_mixed_precision.auto_convert_mixed_precision``: as few FP32
    nodes as keep the outputs on ``feed_dict`` within ``rtol``/``atol`` (and ``validate_fn``),
    judged by the FP16 emulation; see the module docstring for the differences."""
    if rtol is None and atol is not None:
        rtol = 1e-5
    if atol is None and rtol is not None:
        atol = 1e-8
    if rtol is None and validate_fn is None:
        raise DropInError("Argument `validate_fn` and `rtol` cannot both be `None`.")
    options = _options(model, "auto", keep_io_types, None, None, check_fp16_ready=True)
    if rtol is not None and atol is not None:
        options = replace(options, tolerance=Tolerance(error_stat="elemwise", rtol=rtol, atol=atol))
    try:
        converted = convert_model(model, feed_dict, options)
    except SearchError as e:
        raise ValidationFailed(f"validation failed: {e}") from e
    if converted.report is not None and converted.report.status == "ort-load-failed":
        warnings.warn(f"the converted model passes, but {converted.report.message}", stacklevel=2)
    elif not converted.passed:
        message = converted.report.message if converted.report is not None else converted.status
        raise ValidationFailed(f"validation failed for final fp16 model: {message}")
    if validate_fn is not None:
        _validate(converted, validate_fn)
    _warn(converted)
    return converted.model


def _options(model: object, mode: Mode, keep_io_types: object, op_block_list: Iterable[str] | None,
             node_block_list: Iterable[str] | None, check_fp16_ready: bool) -> ConvertOptions:
    """The ConvertOptions of onnxconverter-common's arguments, checked against the model."""
    proto = _model_proto(model)
    if not isinstance(keep_io_types, (bool, int, np.bool_)):
        raise DropInError(f"keep_io_types: expected a bool (True keeps the graph's inputs and outputs "
                          f"float32); got {type(keep_io_types).__name__}")
    if check_fp16_ready and _fp16_ready(proto):
        raise DropInError("The model is already converted to float16, if convert again, the model might be "
                          "wrong. If you are sure to convert again, please set check_fp16_ready=False.")
    nodes = list(walk_nodes(proto.graph))
    names = {ref.node.name for ref in nodes}
    ops = {ref.node.op_type for ref in nodes}
    blocked = list(dict.fromkeys(node_block_list or ()))
    for name in blocked:
        if name not in names:
            warnings.warn(f"node_block_list: the model has no node named '{name}'", stacklevel=3)
    block_ops = DEFAULT_OP_BLOCK_LIST if op_block_list is None else op_block_list
    return ConvertOptions(
        mode=mode,
        fp16_io=not keep_io_types,
        keep_fp32=tuple(f"^{re.escape(name)}$" for name in blocked if name in names),
        keep_fp32_ops=tuple(op for op in dict.fromkeys(block_ops) if op in ops))


def _model_proto(model: object) -> onnx.ModelProto:
    """The model to read the block lists against: ``model`` itself, or the file's graph (its
    weights left on disk, as :func:`onnx_precision.context.load_model` leaves them)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise DropInError(f"{path}: no such file")
        light = load_light(path)
        return light[0] if light is not None else onnx.load(path, load_external_data=False)
    raise DropInError(f"model: expected an onnx.ModelProto (or the path of an .onnx file); got "
                      f"{type(model).__name__}")


def _fp16_ready(model: onnx.ModelProto) -> bool:
    """onnxconverter-common's ``check_if_fp16_ready``: the main graph has a float16 input, output or
    value_info, a float16 initializer, or a Cast to float16."""
    graph = model.graph
    fp16 = onnx.TensorProto.FLOAT16
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    return (any(v.type.tensor_type.elem_type == fp16 for v in values)
            or any(t.data_type == fp16 for t in graph.initializer)
            or any(n.op_type == "Cast" and any(a.name == "to" and a.i == fp16 for a in n.attribute)
                   for n in graph.node))


def _unused_clamps(**given: float) -> None:
    changed = [name for name, value in given.items() if value != _CLAMP_DEFAULTS[name]]
    if changed:
        warnings.warn(f"{', '.join(changed)}: not used; onnx-precision never clamps constants (a constant "
                      f"FP16 cannot hold keeps its consumers FP32)", stacklevel=3)


def _validate(converted: ConvertedModel, validate_fn: Callable[[Outputs, Outputs], bool]) -> None:
    """``validate_fn`` on the FP32 outputs against themselves, then against the converted model's
    emulated outputs (in graph output order, float16 where the converted model outputs float16)."""
    from . import oracle

    if converted.auto is None:
        raise InternalError("validate_fn: an auto-mode conversion without the search's result")
    feeds = converted.auto.samples.feeds
    names = [o.name for o in converted.model.graph.output]
    written = ModelContext(converted.model, converted.source, converted.base_dir)
    emulated = oracle.run_emulated(written, feeds).outputs
    fp16 = {o.name for o in converted.model.graph.output
            if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    for reference, candidate in zip(converted.auto.reference_outputs, emulated):
        expected = [np.asarray(reference[n]) for n in names]
        if not validate_fn(expected, expected):
            raise ValidationFailed("validation failed for original fp32 model (validate_fn)")
        got = [np.asarray(candidate[n]).astype(np.float16) if n in fp16 else np.asarray(candidate[n])
               for n in names]
        if not validate_fn(expected, got):
            raise ValidationFailed("validation failed for final fp16 model (validate_fn, on the emulated "
                                   "FP16 outputs)")


def _warn(converted: ConvertedModel) -> None:
    for warning in converted.all_warnings:
        warnings.warn(warning, stacklevel=3)
    for note in converted.rewrite.notes:
        logger.info("%s", note)
