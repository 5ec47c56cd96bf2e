"""What a feed must hold: the model's inputs (:class:`InputInfo`, :func:`model_inputs`) and the checks of
an array, loaded or known by its header, against them (:func:`check_array`, :func:`validate_feed`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import DataError, ModelLoadError

MAX_DIM = 2**63 - 1  # ONNX dimensions are int64


def shape_problem(shape: Sequence[object]) -> str:
    """Why ``shape`` is no size of a tensor (each dimension an integer in [1, 2**63 - 1]), or ""."""
    bad = next((d for d in shape if isinstance(d, bool) or not isinstance(d, (int, np.integer))
                or not 1 <= d <= MAX_DIM), None)
    if not shape:
        return "no dimensions"
    if bad is not None:
        return f"dimension {bad} is not an integer from 1 to 2**63 - 1 (ONNX dimensions are int64)"
    return ""


@dataclass(frozen=True)
class InputInfo:
    """A graph input the user must feed: element type and dims (int, or str for symbolic/unknown)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str, ...] | None  # None: rank unknown

    def shape_text(self) -> str:
        return "x".join(str(d) for d in self.dims) if self.dims is not None else "?"


def model_inputs(model: onnx.ModelProto) -> list[InputInfo]:
    """The inputs a feed must provide (initializers listed as inputs have defaults and are left out)."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = _element_dtype(vi.name, tt.elem_type)
        dims = None
        if tt.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                         for d in tt.shape.dim)
        out.append(InputInfo(vi.name, dtype, dims))
    return out


def _element_dtype(name: str, elem_type: int) -> np.dtype:
    """The numpy dtype of graph input ``name``'s element type (float32 where none is given); a number
    that is no ONNX tensor type (999) is the model's fault, one line."""
    if not elem_type:
        return np.dtype(np.float32)
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except KeyError:
        raise ModelLoadError(f"input '{name}' has element type {elem_type}, which is no ONNX tensor type "
                             f"(onnx.TensorProto.DataType)") from None


def validate_feed(feed: Mapping[str, np.ndarray], inputs: list[InputInfo], where: str) -> list[str]:
    """Raise DataError for the first mismatch with the model; return warnings (NaN in the data)."""
    expected = {i.name: i for i in inputs}
    for name in feed:
        if name not in expected:
            check_array(where, expected, name, feed[name].shape, feed[name].dtype)
    for info in inputs:
        if info.name not in feed:
            raise DataError(f"{where}: missing input '{info.name}' (shape {info.shape_text()}, {info.dtype})")
        check_array(where, expected, info.name, feed[info.name].shape, feed[info.name].dtype)
    warnings = []
    for info in inputs:
        value = feed[info.name]
        if np.issubdtype(value.dtype, np.floating):
            nans = int(np.count_nonzero(np.isnan(value)))
            if nans:
                warnings.append(f"{where}: input '{info.name}' contains {nans} NaN value(s); "
                                f"the FP32 reference inherits them")
    return warnings


def check_array(where: str, expected: Mapping[str, InputInfo], name: str, shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
    """Raise DataError if an array ``name`` of ``shape`` and ``dtype`` is no feed of the model's
    inputs ``expected``: checked on a loaded array, or on an .npy header before it is loaded."""
    info = expected.get(name)
    if info is None:
        names = ", ".join(expected) or "none"
        raise DataError(f"{where}: input '{name}' is not an input of the model (model inputs: {names})")
    if dtype != info.dtype:
        raise DataError(f"{where}: input '{name}' has dtype {dtype}; the model expects {info.dtype}")
    if info.dims is None:
        return
    if len(shape) != len(info.dims):
        raise DataError(f"{where}: input '{name}' has rank {len(shape)} (shape {shape_text(shape)}); "
                        f"the model expects rank {len(info.dims)} ({info.shape_text()})")
    for axis, (got, want) in enumerate(zip(shape, info.dims)):
        if isinstance(want, int) and want > 0 and got != want:
            raise DataError(f"{where}: input '{name}' has shape {shape_text(shape)}; the model "
                            f"expects {info.shape_text()} (dimension {axis} must be {want})")


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"
