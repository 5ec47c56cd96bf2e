"""TypeProto helpers: element types of tensors, sequences and optionals, and their schema strings."""

from __future__ import annotations

import onnx
from onnx import TensorProto

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16
DOUBLE = TensorProto.DOUBLE
# The element types a 16-bit node converts: float32, and float64 unless the run keeps it wide
# (--keep-float64). A tensor a node keeps wide keeps its own type: float64 stays float64.
WIDE = (FLOAT, DOUBLE)


def _innermost_tensor(tp: onnx.TypeProto | None) -> onnx.TypeProto.Tensor | None:
    """The tensor type inside a tensor, sequence-of-tensor or optional type; None if there is none."""
    while tp is not None:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            return tp.tensor_type
        if kind == "sequence_type":
            tp = tp.sequence_type.elem_type
        elif kind == "optional_type":
            tp = tp.optional_type.elem_type
        else:
            return None
    return None


def elem_type(tp: onnx.TypeProto | None) -> int | None:
    """The element type of a tensor, sequence-of-tensor or optional type; None if unknown."""
    tensor = _innermost_tensor(tp)
    return (tensor.elem_type or None) if tensor is not None else None


def with_elem_type(tp: onnx.TypeProto, elem: int) -> onnx.TypeProto:
    """A copy of ``tp`` (shape kept) whose innermost tensor element type is ``elem``."""
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    tensor = _innermost_tensor(out)
    if tensor is not None:
        tensor.elem_type = elem
    return out


def is_tensor(tp: onnx.TypeProto | None) -> bool:
    return tp is not None and tp.WhichOneof("value") == "tensor_type"


def type_name(elem: int) -> str:
    """The schema spelling of an element type: "float16"."""
    return _ELEM_NAMES.get(elem, "?")


def type_string(tp: onnx.TypeProto | None, elem: int | None = None) -> str | None:
    """The schema spelling of a type, e.g. ``seq(tensor(float16))``; ``elem`` overrides the element."""
    if tp is None:
        return None
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        e = elem if elem is not None else tp.tensor_type.elem_type
        return f"tensor({_ELEM_NAMES.get(e, '?')})"
    if kind in ("sequence_type", "optional_type"):
        inner = type_string(getattr(tp, kind).elem_type, elem)
        return None if inner is None else f"{'seq' if kind == 'sequence_type' else 'optional'}({inner})"
    return None


_ELEM_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float", TensorProto.FLOAT16: "float16", TensorProto.DOUBLE: "double",
    TensorProto.BFLOAT16: "bfloat16", TensorProto.INT8: "int8", TensorProto.INT16: "int16",
    TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool", TensorProto.STRING: "string", TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
}


def shapeless(tp: onnx.TypeProto) -> onnx.TypeProto:
    out = with_elem_type(tp, elem_type(tp) or 0)
    inner = out
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = getattr(inner, inner.WhichOneof("value")).elem_type
    if inner.WhichOneof("value") == "tensor_type":
        inner.tensor_type.ClearField("shape")
    return out


def rank_only(tp: onnx.TypeProto) -> onnx.TypeProto:
    """``tp`` with every dimension symbolic (rank kept): a probe does not depend on sizes."""
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    inner = out
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = getattr(inner, inner.WhichOneof("value")).elem_type
    if inner.WhichOneof("value") == "tensor_type" and inner.tensor_type.HasField("shape"):
        for k, dim in enumerate(inner.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"d{k}"
    return out
