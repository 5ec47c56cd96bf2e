"""Weights handed to onnxruntime by reference instead of inside the serialized model.

A session built from ``model.SerializeToString()`` holds the weights four times while it is being
built: in the proto, in the serialized bytes, in onnxruntime's parsed copy and in its tensors
(measured on GPT-2 small, 650 MB of weights: 5.6 GB peak, and 8 s of the 12.6 s build spent
copying). Instead, :func:`by_reference` gives onnxruntime a model whose large main-graph
initializers are stubs (dims and type, no data) and the values themselves as ``OrtValue`` views of
numpy arrays (``SessionOptions.add_initializer``, no copy): an external weight is a read-only
memory map of its data file, an inline one is read out of the proto once. The arrays must live
as long as the session: :func:`weighted_session` keeps them.

onnxruntime still checks that a stub's external ``location`` names an existing file in the model's
folder before it sees the override; it never reads it. An external weight keeps its own location;
an inline one borrows any existing file of the folder (:func:`_anchor`). A folder with no file
(an in-memory model with nowhere to point) keeps the inline weights in the proto.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import Message

from ..storage import element_count, external_location, is_external, read_array
from ..storage.external_data import INLINE_EXTERNAL_BYTES, SHAPE_TYPES, external_ref, is_packed, stored_bytes

# Smaller initializers stay in the proto: onnxruntime's shape inference inside If branches needs
# the values of shape-like constants (see storage.inline_small_external), and a stub saves nothing.
BY_REFERENCE_BYTES = INLINE_EXTERNAL_BYTES
_NOT_NUMERIC = frozenset({onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED})


def _by_reference_size(tensor: onnx.TensorProto) -> bool:
    if (tensor.data_type in _NOT_NUMERIC or tensor.data_type in SHAPE_TYPES or is_packed(tensor.data_type)
            or tensor.segment.ByteSize()):
        return False
    return stored_bytes(tensor.data_type, element_count(tensor)) >= BY_REFERENCE_BYTES


def _anchor(model: onnx.ModelProto, base_dir: str) -> str | None:
    """A file name in ``base_dir`` for stubs to point at: a data file of the model, else the first
    regular file of the folder, else None."""
    for tensor in model.graph.initializer:
        location = external_location(tensor)
        if location is not None and os.path.isfile(os.path.join(base_dir, location)):
            return location
    try:
        names = sorted(os.listdir(base_dir))
    except OSError:
        return None
    return next((n for n in names if n.isprintable() and os.path.isfile(os.path.join(base_dir, n))), None)


def _stub(tensor: onnx.TensorProto, location: str) -> onnx.TensorProto:
    stub = onnx.TensorProto(name=tensor.name, dims=tensor.dims, data_type=tensor.data_type,
                            data_location=onnx.TensorProto.EXTERNAL)
    stub.external_data.add(key="location", value=location)
    return stub


def _copy_fields(source, target, skip: str) -> None:
    """Copy every field of protobuf message ``source`` but ``skip`` into ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, Message):
            getattr(target, field.name).CopyFrom(value)
        elif not isinstance(value, (str, bytes, int, float)):  # a repeated field
            getattr(target, field.name).extend(value)
        else:
            setattr(target, field.name, value)


def without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph has no initializers (nothing else of it is left out)."""
    light = onnx.ModelProto()
    _copy_fields(model, light, "graph")
    _copy_fields(model.graph, light.graph, "initializer")
    return light


def _array(tensor: onnx.TensorProto, base_dir: str, shared: MutableMapping | None) -> np.ndarray:
    """The tensor's values; an external one is mapped once per ``shared`` (two maps of the same
    bytes would count twice in the process's resident memory)."""
    ref = external_ref(tensor, base_dir)
    if shared is None or ref is None or ref.is_lazy:
        return np.ascontiguousarray(read_array(tensor, base_dir))
    key = (ref.file, ref.offset, ref.data_type, tuple(tensor.dims))
    values = shared.get(key)
    if values is None:
        values = shared[key] = np.ascontiguousarray(read_array(tensor, base_dir))
    return values


def by_reference(model: onnx.ModelProto, base_dir: str, shared: MutableMapping | None = None,
                 ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``model`` with its large main-graph initializers as stubs, and their values by name
    (``model`` itself and no values when nothing qualifies or no anchor exists). ``shared`` keeps
    the maps of external data files for the next call (one per model context)."""
    large = [t for t in model.graph.initializer if _by_reference_size(t)]
    inline = [t for t in large if not is_external(t)]
    anchor = _anchor(model, base_dir) if inline else ""
    if not large or anchor is None:
        return model, {}
    values = {t.name: _array(t, base_dir, shared) for t in large}
    light = without_initializers(model)
    for tensor in model.graph.initializer:
        if tensor.name not in values:
            light.graph.initializer.append(tensor)
        else:
            light.graph.initializer.append(_stub(tensor, external_location(tensor) or anchor))
    return light, values


def _ort_value(values: np.ndarray) -> ort.OrtValue:
    """An OrtValue over ``values`` without a copy; an ml_dtypes array (bfloat16, the float8 types:
    numpy types that onnxruntime does not know, and refuses as 'string' arrays) goes as its bits
    with the ONNX type named."""
    if values.dtype.kind == "V":  # ml_dtypes' types are numpy 'void' types
        bits = values.view(np.dtype(f"u{values.dtype.itemsize}"))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            bits, onnx.helper.np_dtype_to_tensor_dtype(values.dtype))
    return ort.OrtValue.ortvalue_from_numpy(values)


def weighted_session(model: bytes, options: ort.SessionOptions, providers: list[str],
                     values: Mapping[str, np.ndarray]) -> ort.InferenceSession:
    """An onnxruntime session of ``model`` given the initializers ``values`` by reference; the
    session keeps the arrays (and their OrtValues) alive, as onnxruntime requires."""
    weights = {name: _ort_value(v) for name, v in values.items()}
    for name, value in weights.items():
        options.add_initializer(name, value)
    session = ort.InferenceSession(model, options, providers=providers)
    session._onnx_precision_weights = (weights, dict(values))
    return session
