"""The rounding every emulation is made of: ``Cast(to=FLOAT16 or BFLOAT16) -> Cast(to=FLOAT)`` pairs
(``to=DOUBLE`` for a float64 tensor: the graph around it stays as it is), fresh names."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..float_types import FP16, LowPrecision
from ..graph import fresh_name, model_names
from ..typing_rules import is_tensor, tensor_types

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16


def elem_types(model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto] | None = None) -> dict[str, int]:
    """Element type of every *tensor* whose type is known (sequences and optionals are left out:
    Cast cannot round them, so the emulation leaves them exact)."""
    types = tensor_types(model) if types is None else types
    return {name: tp.tensor_type.elem_type for name, tp in types.items() if is_tensor(tp)}


class Names:
    """Fresh tensor names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taken = model_names(model)

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)


def round_nodes(src: str, dst: str, names: Names, low: LowPrecision = FP16, wide: int = FLOAT,
                ) -> list[onnx.NodeProto]:
    """``dst`` = ``src`` rounded to ``low`` and back to ``wide``, its own type (float32 or float64)."""
    half = names.fresh(f"{src}__{low.precision}")
    return [
        helper.make_node("Cast", [src], [half], to=low.elem_type, name=names.fresh(half + "__cast")),
        helper.make_node("Cast", [half], [dst], to=wide, name=names.fresh(dst + "__cast")),
    ]


def round_wide(values: np.ndarray, low: LowPrecision) -> np.ndarray:
    """float32 or float64 ``values`` as ``low`` stores them, back in their own type: a float64 value
    through float32 first, as onnxruntime's Cast from double computes it (and the rewriter writes it,
    :func:`onnx_precision.storage.external_data.cast_values`)."""
    values = np.asarray(values)
    return low.round(values.astype(np.float32, copy=False)).astype(values.dtype, copy=False)


# External tensors up to this size are read into the emulation graph: onnxruntime's shape
# inference inside If branches needs the values of shape-like constants and cannot read them from


def round_fp16(a: np.ndarray) -> np.ndarray:
    """float32 values as FP16 stores them (overflow to Inf, flush to zero, low bits dropped)."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(np.float16).astype(np.float32)


# Ops whose outputs only move, select or sign-flip input values (and constants that are rounded as
