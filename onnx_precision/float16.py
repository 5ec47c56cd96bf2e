"""Drop-in replacements for onnxconverter-common's FP16 conversion, verified by the FP16 emulation.

A user of onnxconverter-common (1.16) changes one import: its modules have the same names here
(this one, :mod:`onnx_precision.auto_mixed_precision`,
:mod:`onnx_precision.auto_mixed_precision_model_path`)::

    from onnxconverter_common import float16                  # before
    from onnx_precision import float16                        # after
    model16 = float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=["norm"])

    from onnxconverter_common import auto_mixed_precision     # before
    from onnx_precision import auto_mixed_precision           # after
    model16 = auto_mixed_precision.auto_convert_mixed_precision(model, feed_dict, rtol=0.01, atol=0.001)

The names onnxconverter-common exports at its top level are in these modules
(``from onnx_precision.float16 import convert_float_to_float16``); the README's drop-in section
lists the few names not provided. The helpers (:func:`convert_np_to_float16`,
:func:`convert_tensor_float_to_float16`, :func:`check_if_fp16_ready`, the graph edits of
:mod:`onnx_precision.float16_helpers`) do what onnxconverter-common's do, clamping included:
that is what they are called for; the conversions below never call them.

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
* ``validate_fn(fp32_outputs, fp16_outputs)`` is asked of every sample of every plan the search
  probes, as onnxconverter-common asks it of each attempt, and of the converted model: the
  candidate's outputs are the emulated ones, in the types the converted model outputs. With
  ``validate_fn`` alone it decides, but a new NaN/Inf where FP32 is finite always fails.
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

from .context import read_model_file
from .convert import ConvertedModel, ConvertOptions, convert_model
from .convert.in_memory import SampleInput
from .errors import SearchError, UsageError
from .float16_helpers import (
    add_cast_node,
    add_new_value_info,
    find_donwstream_node_by_input_name,
    find_upstream_node_by_output_name,
    remove_identity_node_from_graph,
    remove_identity_node_from_model,
    remove_unnecessary_cast_node,
    sort_graph_node,
    sort_topology,
)
from .graph import walk_nodes
from .judge import Tolerance
from .vocab import Mode

logger = logging.getLogger(__name__)

# onnxconverter-common 1.16's float16 names this module has (the README's drop-in section lists the
# ones it has not: the steps of onnxconverter-common's own conversion), then its own.
__all__ = [
    "DEFAULT_OP_BLOCK_LIST", "FLOAT16", "FLOAT32", "add_cast_node", "add_new_value_info",
    "check_if_fp16_ready", "convert_float_to_float16", "convert_float_to_float16_model_path",
    "convert_np_to_float16", "convert_tensor_float_to_float16", "find_donwstream_node_by_input_name",
    "find_upstream_node_by_output_name", "make_value_info_from_tensor", "remove_identity_node_from_graph",
    "remove_identity_node_from_model", "remove_unnecessary_cast_node", "sort_graph_node", "sort_topology",
    "auto_convert_mixed_precision", "DropInError", "ValidationFailed",
]

# onnxconverter-common 1.16's float16.DEFAULT_OP_BLOCK_LIST: ops kept FP32 when op_block_list is None.
DEFAULT_OP_BLOCK_LIST = [
    "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer", "FeatureVectorizer",
    "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder",
    "RandomUniformLike", "SVMClassifier", "SVMRegressor", "Scaler", "TreeEnsembleClassifier",
    "TreeEnsembleRegressor", "ZipMap", "NonMaxSuppression", "TopK", "RoiAlign", "Resize", "Range", "CumSum",
    "Min", "Max", "Upsample",
]
_CLAMP_DEFAULTS = {"min_positive_val": 1e-7, "max_finite_val": 1e4}
FLOAT32 = onnx.TensorProto.FLOAT  # onnxconverter-common's names of the two element types
FLOAT16 = onnx.TensorProto.FLOAT16

Model = Union[onnx.ModelProto, str, "os.PathLike[str]"]
Outputs = list[np.ndarray]


class DropInError(UsageError, ValueError):
    """An argument onnxconverter-common refuses with ValueError (or that this module cannot honour)."""


class ValidationFailed(SearchError, ValueError):
    """No model passes: onnxconverter-common's "validation failed for ... model" ValueError."""


def convert_np_to_float16(np_array: np.ndarray, min_positive_val: float = 1e-7,
                          max_finite_val: float = 1e4) -> np.ndarray:
    """onnxconverter-common's ``float16.convert_np_to_float16``, with its meaning: ``np_array`` as
    float16, each finite nonzero magnitude first clamped into [``min_positive_val``,
    ``max_finite_val``] (0, NaN and ±inf unchanged), with its warnings. A clamp is what this
    helper is asked for; :func:`convert_float_to_float16` never calls it."""
    x = np.asarray(np_array)
    _warn_truncated(x, min_positive_val, max_finite_val)
    finite = np.isfinite(x)
    clamped = np.where(finite & (x > 0), np.clip(x, min_positive_val, max_finite_val), x)
    clamped = np.where(finite & (x < 0), np.clip(x, -max_finite_val, -min_positive_val), clamped)
    return np.asarray(clamped).astype(np.float16)


def _warn_truncated(x: np.ndarray, min_positive_val: float, max_finite_val: float) -> None:
    """onnxconverter-common's warnings, in its words and order: each sign's extremes at or beyond a
    bound (±inf included, which it warns of and leaves)."""
    positive, negative = x[x > 0], x[x < 0]
    checks = []
    if positive.size:
        checks += [(positive.max(), positive.max() >= max_finite_val, max_finite_val),
                   (positive.min(), positive.min() <= min_positive_val, min_positive_val)]
    if negative.size:
        checks += [(negative.min(), negative.min() <= -max_finite_val, -max_finite_val),
                   (negative.max(), negative.max() >= -min_positive_val, -min_positive_val)]
    for value, beyond, bound in checks:
        if beyond:
            warnings.warn(f"the float32 number {value} will be truncated to {bound}", stacklevel=3)


def convert_tensor_float_to_float16(tensor: onnx.TensorProto, min_positive_val: float = 1e-7,
                                    max_finite_val: float = 1e4) -> onnx.TensorProto:
    """onnxconverter-common's ``float16.convert_tensor_float_to_float16``: a float ``tensor`` made
    float16 in place (and returned), its values through :func:`convert_np_to_float16`, stored where
    they were (``float_data`` as float16 bit patterns in ``int32_data``, ``raw_data`` as float16
    bytes); other types unchanged. A tensor whose data is in an external file is refused (there
    the values cannot be converted; onnxconverter-common retypes it and leaves the float32 bytes)."""
    if not isinstance(tensor, onnx.TensorProto):
        raise DropInError(f"Expected input type is an ONNX TensorProto but got {type(tensor)}")
    if tensor.data_type != FLOAT32:
        return tensor
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise DropInError(f"tensor '{tensor.name}': its data is in an external file; read it in first "
                          f"(onnx.external_data_helper.load_external_data_for_tensor)")
    tensor.data_type = FLOAT16
    if tensor.float_data:
        half = convert_np_to_float16(np.array(tensor.float_data), min_positive_val, max_finite_val)
        tensor.int32_data[:] = half.view(np.uint16).astype(np.int32).tolist()
        tensor.float_data[:] = []
    if tensor.raw_data:
        single = np.frombuffer(tensor.raw_data, dtype="<f4")
        half = convert_np_to_float16(single, min_positive_val, max_finite_val)
        tensor.raw_data = half.astype("<f2").tobytes()
    return tensor


def make_value_info_from_tensor(tensor: onnx.TensorProto) -> onnx.ValueInfoProto:
    """onnxconverter-common's ``float16.make_value_info_from_tensor``: the value_info of
    ``tensor``'s name, type and shape (its data not read: it may be external)."""
    return onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))


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
    options = _options(_model_proto(model), "all-fp16", keep_io_types, op_block_list, node_block_list,
                       check_fp16_ready)
    converted = convert_model(model, options=options)
    _warn(converted)
    return converted.model


def convert_float_to_float16_model_path(
    model_path: str | os.PathLike[str],
    min_positive_val: float = 1e-7,
    max_finite_val: float = 1e4,
    keep_io_types: bool = False,
) -> onnx.ModelProto:
    """onnxconverter-common's ``float16.convert_float_to_float16_model_path``: the model at
    ``model_path`` (its external data read from beside it) converted as
    :func:`convert_float_to_float16` converts it; the ModelProto comes back holding its weights."""
    if not isinstance(model_path, (str, os.PathLike)):
        raise DropInError(f"model_path: expected the path of an .onnx file; got {type(model_path).__name__}")
    return convert_float_to_float16(model_path, min_positive_val, max_finite_val, keep_io_types)


def auto_convert_mixed_precision(
    model: Model,
    feed_dict: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
    validate_fn: Callable[[Outputs, Outputs], bool] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    keep_io_types: bool = False,
) -> onnx.ModelProto:
    """onnxconverter-common's ``auto_mixed_precision.auto_convert_mixed_precision``: as few FP32
    nodes as keep the outputs on ``feed_dict`` within ``rtol``/``atol`` and ``validate_fn``
    (each judges every plan the search probes), judged by the FP16 emulation; see the module
    docstring for the differences."""
    if rtol is None and atol is not None:
        rtol = 1e-5
    if atol is None and rtol is not None:
        atol = 1e-8
    if rtol is None and validate_fn is None:
        raise DropInError("Argument `validate_fn` and `rtol` cannot both be `None`.")
    given = None if rtol is None or atol is None else Tolerance(error_stat="elemwise", rtol=rtol, atol=atol)
    return mixed_precision(model, feed_dict, given, validate_fn, keep_io_types,
                           "validation failed for original fp32 model").model


def mixed_precision(model: Model, feeds: SampleInput, tolerance: Tolerance | None,
                    validate_fn: Callable[[Outputs, Outputs], bool] | None, keep_io_types: bool,
                    fp32_failure: str) -> ConvertedModel:
    """The auto drop-ins' conversion: outputs within ``tolerance`` (None: any, but no new NaN/Inf)
    and accepted by ``validate_fn`` on every plan probed; ``fp32_failure``: the error when
    ``validate_fn`` rejects FP32's outputs themselves. Raises :class:`ValidationFailed` where no
    plan passes."""
    proto = _model_proto(model)
    options = _options(proto, "auto", keep_io_types, None, None, check_fp16_ready=True)
    # onnxconverter-common judges by validate_fn alone when no rtol is given: every element may move
    judged = Tolerance(error_stat="elemwise", max_outside_fraction=1.0) if tolerance is None else tolerance
    if validate_fn is not None:
        judged = replace(judged, accept=_Steer(proto, validate_fn, keep_io_types, fp32_failure))
    try:
        options = replace(options, judging=replace(options.judging, tolerance=judged))
        converted = convert_model(model, feeds, options)
    except ValidationFailed:
        raise
    except SearchError as e:
        raise ValidationFailed(f"validation failed: {e}") from e
    if converted.report is not None and converted.report.status == "ort-load-failed":
        warnings.warn(f"the converted model passes, but {converted.report.message}", stacklevel=3)
    elif not converted.passed:
        message = converted.report.message if converted.report is not None else converted.status
        raise ValidationFailed(f"validation failed for final fp16 model: {message}")
    _warn(converted)
    return converted


class _Steer:
    """``validate_fn`` as the tolerance's ``accept``: asked of every sample of every plan the search
    probes (and of the converted model's verification), with the outputs onnxconverter-common gives
    it: lists in graph output order, FP32's first, the candidate's in the types the converted model
    outputs (float16 ones unless ``keep_io_types``). FP32's outputs against themselves are asked
    first, as onnxconverter-common does: a rejection there stops the conversion."""

    __name__ = "validate_fn"

    def __init__(self, model: onnx.ModelProto, validate_fn: Callable[[Outputs, Outputs], bool],
                 keep_io_types: bool, fp32_failure: str) -> None:
        self.validate_fn = validate_fn
        self.fp32_failure = fp32_failure
        self.names = [o.name for o in model.graph.output]
        # the converted model's float outputs: float32 with keep_io_types, else float16 (a probe's
        # emulated outputs come in the type each output's node computes in)
        float_type = np.float32 if keep_io_types else np.float16
        self.types = {o.name: float_type for o in model.graph.output
                      if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
        self.accepted_fp32: set[int] = set()  # the reference samples validate_fn accepted (their ids)

    def __call__(self, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray]) -> str:
        if any(name not in candidate for name in self.names):
            return ""  # the comparison already fails it, naming the missing output
        expected = [np.asarray(reference[name]) for name in self.names]
        if id(reference) not in self.accepted_fp32:
            if not self.validate_fn(expected, expected):
                raise ValidationFailed(f"{self.fp32_failure} (validate_fn)")
            self.accepted_fp32.add(id(reference))
        got = [np.asarray(candidate[name]) for name in self.names]
        got = [a.astype(self.types[name]) if name in self.types else a for name, a in zip(self.names, got)]
        return "" if self.validate_fn(expected, got) else "validate_fn rejects the outputs"


def _options(proto: onnx.ModelProto, mode: Mode, keep_io_types: object, op_block_list: Iterable[str] | None,
             node_block_list: Iterable[str] | None, check_fp16_ready: bool) -> ConvertOptions:
    """The ConvertOptions of onnxconverter-common's arguments, checked against the model."""
    if not isinstance(keep_io_types, (bool, int, np.bool_)):
        raise DropInError(f"keep_io_types: expected a bool (True keeps the graph's inputs and outputs "
                          f"float32); got {type(keep_io_types).__name__}")
    if check_fp16_ready and check_if_fp16_ready(proto.graph):
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
        return read_model_file(os.fspath(model))[0]
    raise DropInError(f"model: expected an onnx.ModelProto (or the path of an .onnx file); got "
                      f"{type(model).__name__}")


def check_if_fp16_ready(graph_proto: onnx.GraphProto) -> bool:
    """onnxconverter-common's ``float16.check_if_fp16_ready``: whether the graph has a float16
    input, output or value_info, a float16 initializer, or a Cast to float16 (its subgraphs not
    looked into)."""
    graph = graph_proto
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


def _warn(converted: ConvertedModel) -> None:
    for warning in converted.all_warnings:
        warnings.warn(warning, stacklevel=3)
    for note in converted.rewrite.notes:
        logger.info("%s", note)
