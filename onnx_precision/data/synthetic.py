"""Synthetic feeds: one seeded feed from the model's input metadata, where no sample data is given.

Floats uniform in ``[0, 1)`` and integers in ``[0, 100)`` (or below the size of the table an integer input
indexes, :func:`index_bounds`) unless ``--input-range`` says otherwise; symbolic dimensions from
``--input-shape``, and none invented but a leading batch dimension (:class:`SymbolicDimensions`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import DataError
from ..graph import attr, is_onnx_domain
from .inputs import InputInfo, shape_text

DEFAULT_RANGE = (0.0, 1.0)
# Integer inputs are mostly ids: [0, 1) would make every id 0. One that indexes a constant table
# (Gather) stays below the table's size instead.
DEFAULT_INT_RANGE = (0.0, 100.0)


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Graph input -> the size of the constant table it indexes (a Gather or GatherElements of an
    initializer or a Constant along the indexed axis): its ids must stay below it."""
    sizes = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and is_onnx_domain(node.domain) and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                sizes[node.output[0]] = list(value.dims)
    inputs = {vi.name for vi in model.graph.input}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type not in ("Gather", "GatherElements") or not is_onnx_domain(node.domain):
            continue
        if len(node.input) < 2 or node.input[1] not in inputs or node.input[0] not in sizes:
            continue
        dims = sizes[node.input[0]]
        axis = int(attr(node, "axis", 0))  # type: ignore[call-overload]  # an INT attribute
        axis += len(dims) if axis < 0 else 0
        if 0 <= axis < len(dims) and dims[axis] > 0:
            bounds[node.input[1]] = min(bounds.get(node.input[1], dims[axis]), dims[axis])
    return bounds


@dataclass(frozen=True)
class SyntheticFeed:
    """One synthetic feed, the one-line description of how it was made, and (input, model shape) of each
    input whose batch dimension was set to 1."""

    feed: dict[str, np.ndarray]
    source: str
    guessed_shapes: tuple[tuple[str, str], ...]


def synthetic_feed(inputs: list[InputInfo], seed: int, input_shapes: Mapping[str, tuple[int, ...]],
                   input_ranges: Mapping[str, tuple[float, float]], bounds: Mapping[str, int] | None = None,
                   ) -> SyntheticFeed:
    """One feed seeded with ``seed`` from the input metadata (see the module docstring for the defaults),
    the shapes and ranges given for some inputs; ``bounds`` caps integer inputs that index a table
    (:func:`index_bounds`)."""
    bounds = bounds or {}
    known = {i.name for i in inputs}
    for flag, names in (("--input-shape", input_shapes), ("--input-range", input_ranges)):
        for name in names:
            if name not in known:
                raise DataError(f"{flag} {name}: the model has no input '{name}' (model inputs: "
                                f"{', '.join(sorted(known)) or 'none'})")
    unsized = [(info, axes) for info in inputs if info.name not in input_shapes
               and (axes := unsized_axes(info))]
    if unsized:
        raise SymbolicDimensions(unsized)
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    guessed = []
    batches = []
    int_ranges: dict[str, tuple[float, float]] = {}
    for info in inputs:
        given = input_shapes.get(info.name)
        shape = _synthetic_shape(info, given)
        if given is None and info.dims is not None and info.dims and not _sized(info.dims[0]):
            guessed.append((info.name, info.shape_text()))
            batches.append(f"'{info.name}' batch dimension {info.dims[0]} set to 1")
        lo, hi = input_ranges.get(info.name) or _default_range(info, bounds)
        if info.name not in input_ranges and np.issubdtype(info.dtype, np.integer):
            int_ranges[info.name] = (lo, hi)
        try:
            feed[info.name] = _random(rng, info.dtype, shape, lo, hi)
        except (MemoryError, ValueError):  # numpy: no memory, or "array is too big" to address
            raise DataError(f"input '{info.name}': no memory for a synthetic {shape_text(shape)} "
                            f"{info.dtype} array; give a smaller --input-shape") from None
    shown = {**input_ranges, **int_ranges}
    ranges = ", ".join(f"{n}: [{lo:g}, {hi:g})" for n, (lo, hi) in shown.items())
    source = f"synthetic, seed {seed}, uniform [{DEFAULT_RANGE[0]:g}, {DEFAULT_RANGE[1]:g})" + \
             (f" ({ranges})" if ranges else "") + "".join(f"; {b}" for b in batches) + \
             "; the ranges decide what overflows"
    return SyntheticFeed(feed, source, tuple(guessed))


def _default_range(info: InputInfo, bounds: Mapping[str, int]) -> tuple[float, float]:
    if np.issubdtype(info.dtype, np.integer):
        return (0.0, float(bounds[info.name])) if info.name in bounds else DEFAULT_INT_RANGE
    return DEFAULT_RANGE


def _sized(dim: int | str) -> bool:
    return isinstance(dim, int) and dim > 0


def unsized_axes(info: InputInfo) -> tuple[int, ...]:
    """The axes of ``info`` whose size the model leaves open and no default may invent: every
    symbolic dimension but a leading batch dimension (axis 0 of an input of rank 2 or more)."""
    if not info.dims:
        return ()
    first = 1 if len(info.dims) >= 2 else 0
    return tuple(axis for axis, d in enumerate(info.dims) if axis >= first and not _sized(d))


class SymbolicDimensions(DataError):
    """Symbolic dimensions that synthetic data would have to invent a size for."""

    def __init__(self, unsized: list[tuple[InputInfo, tuple[int, ...]]]) -> None:
        self.unsized = [(info.name, axes) for info, axes in unsized]
        named = "; ".join(f"input '{info.name}' ({info.shape_text()}): "
                          + ", ".join(f"{_dims(info)[a]} (axis {a})" for a in axes) for info, axes in unsized)
        example = " ".join(f"--input-shape {info.name}:" + "x".join(
            str(d) if _sized(d) else ("1" if a == 0 and a not in axes else f"<{d}>")
            for a, d in enumerate(_dims(info))) for info, axes in unsized)
        super().__init__(f"symbolic dimensions with no size to verify at: {named}; give sample data "
                         f"(--inputs DATA) or the sizes ({example})")


def _dims(info: InputInfo) -> tuple[int | str, ...]:
    return info.dims or ()


def _synthetic_shape(info: InputInfo, given: tuple[int, ...] | None) -> tuple[int, ...]:
    if given is not None:
        if info.dims is not None and len(given) != len(info.dims):
            raise DataError(f"--input-shape {info.name}:{shape_text(given)}: rank {len(given)}, but the "
                            f"model expects rank {len(info.dims)} ({info.shape_text()})")
        for axis, (got, want) in enumerate(zip(given, info.dims or ())):
            if isinstance(want, int) and want > 0 and got != want:
                raise DataError(f"--input-shape {info.name}:{shape_text(given)}: dimension {axis} is fixed "
                                f"to {want} in the model ({info.shape_text()})")
        return tuple(given)
    if info.dims is None:
        raise DataError(f"input '{info.name}' has no shape in the model; "
                        f"give --input-shape {info.name}:DIMxDIM...")
    if 0 in info.dims:
        # onnxruntime holds a 0 to its word: only empty tensors fit, and they measure nothing.
        raise DataError(f"input '{info.name}' has a zero-size dimension in the model ({info.shape_text()}): "
                        f"onnxruntime accepts only empty tensors for it, so there is nothing to measure; "
                        f"make that dimension symbolic or its real size, or convert with --mode all-fp16")
    # only a batch dimension is left to 1 here (the others were refused before)
    return tuple(d if isinstance(d, int) and d > 0 else 1 for d in info.dims)


def _random(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], lo: float, hi: float,
            ) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        # Integer inputs are usually indices: keep them small and in range unless told otherwise.
        low = int(np.floor(lo))
        return rng.integers(low, max(int(np.ceil(hi)), low + 1), size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)
