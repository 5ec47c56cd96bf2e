"""Float constants (initializers, Constant values) and what a 16-bit copy of them would do."""

from __future__ import annotations

import numpy as np
import onnx

from ..float_types import FP16, LowPrecision
from ..graph import graphs, is_onnx_domain
from ..storage import element_count, read_array, value_range
from .types import FLOAT


def _flushes(min_nonzero_abs: float, low: LowPrecision) -> bool:
    return bool(np.isfinite(min_nonzero_abs) and min_nonzero_abs <= low.flush)


def value_problem(max_abs: float, min_nonzero_abs: float, low: LowPrecision = FP16) -> str | None:
    """Why a copy in ``low`` of values with this range would change them materially, or None.

    Overflow always matters. A value flushed to zero matters only when the whole tensor lies below
    FP16's normal range: otherwise the flushed values (< 3e-8) are smaller than the rounding error
    FP16 already makes on the tensor's own largest values (max |x| * 2**-11), and pinning every
    trained weight matrix that holds one such value would keep most of a real model in FP32.
    """
    if max_abs > low.max:
        return f"|x| up to {max_abs:.6g} exceeds the {low.name} maximum {low.max:g}"
    if _flushes(min_nonzero_abs, low) and max_abs < low.min_normal:
        return (f"nonzero |x| down to {min_nonzero_abs:.3g} would flush to zero in {low.name}, and all its "
                f"values lie below {low.name}'s normal range (max |x| {max_abs:.3g})")
    return None


def flush_note(max_abs: float, min_nonzero_abs: float, low: LowPrecision = FP16) -> str | None:
    """What converting values with this range flushes to zero although it is no problem, or None."""
    if max_abs <= low.max and max_abs >= low.min_normal and _flushes(min_nonzero_abs, low):
        return (f"nonzero |x| down to {min_nonzero_abs:.3g} flush to zero in {low.name}, less than the "
                f"rounding error of its largest values (max |x| {max_abs:.3g})")
    return None


def _finite_range(values: np.ndarray) -> tuple[float, float]:
    """(max |x|, min nonzero |x|) over the finite values: inf and NaN are exact in FP16."""
    a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    a = a[np.isfinite(a)]
    nonzero = a[a > 0]
    return (float(a.max()) if a.size else 0.0), (float(nonzero.min()) if nonzero.size else float("inf"))


def constant_verdict(tensor: onnx.TensorProto, base_dir: str, known_range: tuple[float, float] | None = None,
                     low: LowPrecision = FP16) -> tuple[str | None, str | None]:
    """(why a copy in ``low`` of this float constant would change it materially, what the copy
    flushes to zero harmlessly): either may be None. ``known_range`` is the tensor's
    :func:`value_range` when the caller has it (it is not read again)."""
    max_abs, min_nonzero = known_range if known_range is not None else value_range(tensor, base_dir)
    if max_abs == float("inf"):  # rare (e.g. a -inf mask): look again at the finite values only
        max_abs, min_nonzero = _finite_range(read_array(tensor, base_dir))
    return value_problem(max_abs, min_nonzero, low), flush_note(max_abs, min_nonzero, low)


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The float value a Constant/ConstantOfShape node carries as a tensor, if any."""
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr.t
    if node.op_type == "Constant":
        for attr in node.attribute:
            if attr.name == "value_float":
                return onnx.helper.make_tensor("value", FLOAT, [], [attr.f])
            if attr.name == "value_floats":
                return onnx.helper.make_tensor("value", FLOAT, [len(attr.floats)], list(attr.floats))
    return None


def constant_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Tensor name -> value for every initializer and dense Constant output, subgraphs included."""
    out: dict[str, onnx.TensorProto] = {}
    for graph in graphs(model.graph):
        for t in graph.initializer:
            out[t.name] = t
        for node in graph.node:
            if node.op_type == "Constant" and is_onnx_domain(node.domain) and node.output:
                value = constant_tensor(node)
                if value is not None:
                    out[node.output[0]] = value
    return out


def small_constant_arrays(model: onnx.ModelProto, base_dir: str, limit: int) -> dict[str, np.ndarray]:
    """The values of every constant (initializer or Constant output, subgraphs included) of at most
    ``limit`` elements: the ones read at build time (axes, shapes, epsilons)."""
    return {name: np.asarray(read_array(t, base_dir)) for name, t in constant_values(model).items()
            if element_count(t) <= limit}
