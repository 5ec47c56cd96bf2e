"""Tensors whose data lives outside the model proto: checking, chunked reading, lazy casts.

A model over 2 GB cannot be one protobuf, so its weights sit in a file beside it. We load such
models with ``load_external_data=False`` and never pull the weights in whole: ranges are
computed chunk by chunk, and converting an external tensor (FP32 -> FP16) only records the
conversion. The converted tensor stays external, pointing at the *source* file, with a private
key naming the element types it goes through; :mod:`onnx_precision.storage.saving` resolves it by
streaming the source chunk by chunk into the output's data file. Nothing here ever holds a
whole external tensor except :func:`read_array` on a lazy tensor, which the caller asked for.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from io import BufferedReader

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import InternalError, ModelLoadError
from ..float_types import LOW_TYPES
from ..graph import graphs
from . import fast_cast

# Private keys on a lazily converted tensor. They never reach a written model: saving resolves
# every lazy tensor. The chain lists the element types from the file's type up to (not
# including) the tensor's own data_type, so a cast of a cast stays exact.
CAST_CHAIN_KEY = "onnx_precision.cast_chain"
BASE_DIR_KEY = "onnx_precision.base_dir"
# Marks a tensor whose "data file" is the model file itself (see light_load): a writer keeps it inline.
IN_MODEL_FILE_KEY = "onnx_precision.in_model_file"
_PRIVATE_KEYS = (CAST_CHAIN_KEY, BASE_DIR_KEY, IN_MODEL_FILE_KEY)

# Bytes read from a data file at a time: bounds memory whatever the tensor's size.
CHUNK_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ExternalRef:
    """Where an external tensor's bytes are, and which element types they go through."""

    tensor_name: str
    location: str  # as written in the proto, relative to ``directory``
    directory: str  # the directory the location is relative to
    file: str  # path of the data file
    offset: int
    length: int  # bytes stored in the file
    chain: tuple[int, ...]  # element types: chain[0] is stored in the file, data_type follows the last
    data_type: int  # the tensor's element type (what readers get)
    count: int  # number of elements
    in_model_file: bool = False  # inline in the model file as read (see light_load)

    @property
    def stored_type(self) -> int:
        return self.chain[0]

    @property
    def is_lazy(self) -> bool:
        return len(self.chain) > 1 or self.chain[0] != self.data_type

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's values in its own element type (what a writer stores)."""
        return stored_bytes(self.data_type, self.count)


def model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the graph that can hold weights, in a stable order: each graph's initializers,
    then its nodes' tensor attributes and subgraphs, depth first (the functions' are
    :func:`function_tensors`)."""
    yield from _graph_tensors(model.graph)


def function_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor attribute of the model's functions' nodes, their subgraphs included. The load
    reads those kept in files into the model (:func:`inline_function_tensors`)."""
    for function in model.functions:
        yield from _node_tensors(function.node)


def all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """:func:`model_tensors`, then :func:`function_tensors`."""
    yield from model_tensors(model)
    yield from function_tensors(model)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.TensorProto]:
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _graph_tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graph_tensors(sub)


def element_count(tensor: onnx.TensorProto) -> int:
    """How many values ``tensor`` holds, from its dims (1 for a scalar), as a Python int: an int64
    product wraps (``[2**32, 2**32]`` is 0), and a length check against it would pass."""
    return math.prod(tensor.dims)


def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def external_location(tensor: onnx.TensorProto) -> str | None:
    """The data file an external tensor names, or None for an inline tensor."""
    if not is_external(tensor):
        return None
    for entry in tensor.external_data:
        if entry.key == "location":
            return entry.value
    return None


def external_files(model: onnx.ModelProto, base_dir: str) -> tuple[str, ...]:
    """The data files ``model``'s tensors name (its subgraphs' and functions' too), each once, as
    absolute paths under ``base_dir``, for a list of files no output may overwrite: no location is
    checked here (the load refuses one out of ``base_dir``), and one holding a NUL names no file."""
    locations = dict.fromkeys(external_location(t) for t in all_tensors(model) if is_external(t))
    return tuple(os.path.abspath(os.path.join(base_dir, location)) for location in locations
                 if location and "\x00" not in location)


# Element types packed several to a byte in storage (numpy holds them one per byte).
_PACKED_BITS = {getattr(onnx.TensorProto, name): bits for name, bits in (
    ("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(onnx.TensorProto, name)}


def _itemsize(data_type: int) -> int:
    """Bytes per element in storage; 1 for packed types, which are only ever copied as bytes."""
    return (
        1 if data_type in _PACKED_BITS else np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    )


def is_packed(data_type: int) -> bool:
    """Whether elements of ``data_type`` are stored several to a byte (4-bit, 2-bit types)."""
    return data_type in _PACKED_BITS


def stored_bytes(data_type: int, count: int) -> int:
    """Bytes that ``count`` elements of ``data_type`` take in raw storage."""
    bits = _PACKED_BITS.get(data_type)
    return count * _itemsize(data_type) if bits is None else (count * bits + 7) // 8


def _np_dtype(data_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type))


def external_ref(
    tensor: onnx.TensorProto, base_dir: str, model_path: str | None = None
) -> ExternalRef | None:
    """The tensor's external storage, or None for an inline tensor. Malformed entries raise
    :class:`ModelLoadError` naming the tensor."""
    if not is_external(tensor):
        return None
    info = {e.key: e.value for e in tensor.external_data}
    prefix = f"{model_path}: " if model_path else ""
    location = info.get("location")
    if not location:
        raise ModelLoadError(f"{prefix}tensor '{tensor.name}' is marked external but names no data file")
    if any(d < 0 for d in tensor.dims):
        raise ModelLoadError(f"{prefix}tensor '{tensor.name}' has a negative dimension in its shape "
                             f"{list(tensor.dims)}")
    try:
        offset = int(info.get("offset", 0))
        chain = (
            tuple(int(t) for t in info[CAST_CHAIN_KEY].split(","))
            if CAST_CHAIN_KEY in info
            else (tensor.data_type,)
        )
        count = element_count(tensor)
        stored_size = stored_bytes(chain[0], count)
        length = int(info["length"]) if "length" in info else stored_size
    except (ValueError, TypeError, KeyError) as e:
        raise ModelLoadError(f"{prefix}tensor '{tensor.name}' has unreadable external data entries ({e})"
                             ) from e
    if offset < 0 or length != stored_size:
        raise ModelLoadError(
            f"{prefix}tensor '{tensor.name}' in '{location}': external data length {length} "
            f"at offset {offset} "
            f"does not match its shape {list(tensor.dims)} ({stored_size} bytes)"
        )
    directory = os.path.abspath(info.get(BASE_DIR_KEY, base_dir))
    _check_inside(location, directory, f"{prefix}tensor '{tensor.name}'")
    return ExternalRef(
        tensor.name,
        location,
        directory,
        os.path.join(directory, location),
        offset,
        length,
        chain,
        tensor.data_type,
        count,
        IN_MODEL_FILE_KEY in info,
    )


def _check_inside(location: str, directory: str, what: str) -> None:
    """Refuse a data file outside the model's directory: an absolute path, ``..``, or a symlink out.

    onnx.load refuses these too. Reading them would copy any local file into the converted
    model's data file, which its user may then publish.
    """
    if "\x00" in location:  # no path holds one (os.path raises ValueError on it)
        raise ModelLoadError(f"{what}: external data location {location!r} holds a NUL byte; no file is "
                             f"called that")
    if os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise ModelLoadError(f"{what}: external data location '{location}' is an absolute path; "
                             f"only files inside the model's directory are read")
    root = os.path.realpath(directory)
    target = os.path.realpath(os.path.join(directory, location))
    if os.path.commonpath([root, target]) != root:
        raise ModelLoadError(f"{what}: external data location '{location}' leads outside the model's "
                             f"directory ({target}); refusing to read it")


def refuse_private_keys(model: onnx.ModelProto, model_path: str) -> None:
    """A model read from disk may not carry the keys this package uses for its own lazy tensors
    (a hostile one could point them anywhere)."""
    for tensor in all_tensors(model):
        if has_private_keys(tensor):
            raise ModelLoadError(f"{model_path}: tensor '{tensor.name}' uses the reserved external data keys "
                                 f"{', '.join(_PRIVATE_KEYS)}")


def check_ref(ref: ExternalRef, model_path: str | None = None) -> None:
    """Raise :class:`ModelLoadError` if the data file is missing or too short for the tensor."""
    prefix = f"{model_path}: " if model_path else ""
    if not os.path.isfile(ref.file):
        raise ModelLoadError(
            f"{prefix}external data file '{ref.location}' of tensor '{ref.tensor_name}' is missing"
        )
    size = os.path.getsize(ref.file)
    if ref.offset + ref.length > size:
        raise ModelLoadError(
            f"{prefix}external data file '{ref.location}' is truncated: "
            f"tensor '{ref.tensor_name}' needs bytes "
            f"{ref.offset}..{ref.offset + ref.length} but the file has {size}"
        )


def check_model_external_data(model: onnx.ModelProto, base_dir: str, model_path: str | None = None) -> None:
    """Check every external tensor's file (the functions' too) lies in ``base_dir``, exists and is long
    enough (no data is read)."""
    for tensor in all_tensors(model):
        ref = external_ref(tensor, base_dir, model_path)
        if ref is not None:
            check_ref(ref, model_path)


def inline_function_tensors(model: onnx.ModelProto, base_dir: str) -> None:
    """Read the model's functions' external tensors (checked by :func:`check_model_external_data`)
    into it, in place. onnx's checker resolves a function's external data against the working
    directory, not ``base_dir``, and a writer lays out only the graph's tensors (:func:`model_tensors`):
    read in, a function's constants (small by nature) travel with every copy of the model."""
    for tensor in function_tensors(model):
        if is_external(tensor):
            tensor.CopyFrom(numpy_helper.from_array(np.asarray(read_array(tensor, base_dir)), tensor.name))


def cast_values(values: np.ndarray, to: int) -> np.ndarray:
    """``values`` in element type ``to`` as ONNX Cast computes them: numpy's float casts round to
    nearest even and overflow to inf (callers decide beforehand whether that is acceptable)."""
    if to in LOW_TYPES and values.dtype == np.float64:
        # onnxruntime's Cast from double to a 16-bit type goes through float (two roundings): the
        # values a Cast in the graph gives, which the emulation computes
        values = values.astype(np.float32)
    if to == onnx.TensorProto.FLOAT16 and values.dtype == np.float32:
        return fast_cast.to_float16(values)
    with np.errstate(over="ignore"):
        return values.astype(_np_dtype(to), copy=False)


def _cast(values: np.ndarray, chain: tuple[int, ...], data_type: int) -> np.ndarray:
    for step in chain[1:] + (data_type,):
        values = cast_values(values, step)
    return values


def chunk_buffer(nbytes: int | None = None) -> np.ndarray:
    """A read buffer of :data:`CHUNK_BYTES` (or less when ``nbytes`` is smaller), to reuse across
    tensors: a fresh one per tensor costs a zero fill and page faults each time."""
    return np.empty(min(CHUNK_BYTES, CHUNK_BYTES if nbytes is None else nbytes), dtype=np.uint8)


_local = threading.local()


def _shared_buffer() -> np.ndarray:
    """This thread's reusable buffer, for readers that consume their chunks before returning."""
    if getattr(_local, "buffer", None) is None or _local.buffer.size != CHUNK_BYTES:
        _local.buffer = chunk_buffer()
    return _local.buffer


def iter_stored_chunks(ref: ExternalRef, buffer: np.ndarray | None = None) -> Iterator[memoryview]:
    """The tensor's stored bytes, a chunk of (up to) ``len(buffer)`` bytes rounded down to whole
    elements at a time. Each chunk is a view of ``buffer``, valid until the next one is produced."""
    check_ref(ref)
    if buffer is None:
        buffer = chunk_buffer(ref.length)
    item = _itemsize(ref.stored_type)
    step = max(item, len(buffer) - len(buffer) % item)
    if step > len(buffer):
        buffer = chunk_buffer(step)
    view = memoryview(buffer)  # type: ignore[arg-type]  # numpy arrays are buffers
    with open(ref.file, "rb") as f:
        f.seek(ref.offset)
        remaining = ref.length
        while remaining:
            n = min(step, remaining)
            got = _read_exact(f, view[:n])
            if got < n:
                raise ModelLoadError(
                    f"external data file '{ref.location}' is truncated: tensor '{ref.tensor_name}' "
                    f"ends at byte {ref.offset + ref.length} but the file ends earlier"
                )
            yield view[:n]
            remaining -= n


def _read_exact(f: BufferedReader, view: memoryview) -> int:
    total = 0
    while total < len(view):
        n = f.readinto(view[total:])
        if not n:
            break
        total += n
    return total


def iter_chunks(ref: ExternalRef, buffer: np.ndarray | None = None) -> Iterator[np.ndarray]:
    """The tensor's values, flattened, in the tensor's own element type, a chunk at a time."""
    stored = _np_dtype(ref.stored_type)
    for chunk in iter_stored_chunks(ref, buffer):
        yield _cast(np.frombuffer(chunk, dtype=stored), ref.chain, ref.data_type)


def read_array(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """The tensor's values. Plain external data is memory-mapped (read on demand); a lazily cast
    tensor is converted in memory, since the caller asked for all of it."""
    ref = external_ref(tensor, base_dir)
    if ref is None:
        return numpy_helper.to_array(tensor)
    check_ref(ref)
    shape = tuple(tensor.dims)
    if ref.stored_type in _PACKED_BITS:  # unpacked by onnx, from bytes read whole
        packed = onnx.TensorProto(name=tensor.name, dims=tensor.dims, data_type=ref.stored_type)
        packed.raw_data = b"".join(bytes(chunk) for chunk in iter_stored_chunks(ref))
        return _cast(numpy_helper.to_array(packed), ref.chain, ref.data_type)
    if ref.count == 0:
        return np.zeros(shape, dtype=_np_dtype(ref.data_type))
    stored = np.memmap(ref.file, dtype=_np_dtype(ref.stored_type), mode="r", offset=ref.offset, shape=shape)
    return _cast(stored, ref.chain, ref.data_type) if ref.is_lazy else stored


def value_range(tensor: onnx.TensorProto, base_dir: str) -> tuple[float, float]:
    """(max |x|, smallest nonzero |x|) of a numeric tensor, reading external data in chunks;
    (0, inf) when it is empty or all zeros. NaN values are ignored."""
    ref = external_ref(tensor, base_dir)
    chunks = (
        iter_chunks(ref, _shared_buffer())
        if ref is not None
        else iter([numpy_helper.to_array(tensor).reshape(-1)])
    )
    max_abs, min_nonzero = 0.0, float("inf")
    scratch: np.ndarray | None = None
    for chunk in chunks:
        if chunk.dtype in _IEEE_BITS:
            bits = _IEEE_BITS[chunk.dtype]
            if scratch is None or scratch.size < chunk.size or scratch.dtype != bits:
                scratch = np.empty(chunk.size, dtype=bits)
            found = _ieee_range(chunk, scratch[: chunk.size])
        else:
            found = _generic_range(chunk)
        max_abs, min_nonzero = max(max_abs, found[0]), min(min_nonzero, found[1])
    return max_abs, min_nonzero


# For IEEE floats, |x| ordered as a number is |x|'s bit pattern ordered as an unsigned integer:
# two integer passes find the range, instead of float passes with NaN checks and a masked copy.
_IEEE_BITS: dict[np.dtype, np.dtype] = {
    np.dtype(np.float16): np.dtype(np.uint16),
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.uint64),
}


def _ieee_range(values: np.ndarray, scratch: np.ndarray) -> tuple[float, float]:
    if values.size == 0:
        return 0.0, float("inf")
    bits = scratch.dtype.type
    inf_bits = np.array(np.inf, dtype=values.dtype).view(scratch.dtype)
    sign = bits(1 << (8 * scratch.itemsize - 1))
    magnitude = np.bitwise_and(values.view(scratch.dtype), ~sign, out=scratch)
    largest = magnitude.max()
    if largest > inf_bits:  # a NaN: rare enough for the slow path
        return _generic_range(values)
    np.subtract(magnitude, bits(1), out=magnitude)  # zero wraps to the largest pattern
    smallest = int(magnitude.min()) + 1  # wraps back to 0 (no nonzero value) only as a Python int
    as_float = lambda b: float(np.array(b, dtype=scratch.dtype).view(values.dtype))  # noqa: E731
    has_nonzero = smallest <= int(np.iinfo(scratch.dtype).max)
    return as_float(largest), (as_float(smallest) if has_nonzero else float("inf"))


def _generic_range(values: np.ndarray) -> tuple[float, float]:
    with np.errstate(invalid="ignore"):  # a NaN of a type numpy casts by value (bfloat16, float8): NaN here
        magnitude = np.abs(values.astype(np.float64))  # float64: bfloat16 and ints (abs(-128) in int8) too
    magnitude = magnitude[~np.isnan(magnitude)]
    if magnitude.size == 0:
        return 0.0, float("inf")
    nonzero = magnitude[magnitude > 0]
    return float(magnitude.max()), (float(nonzero.min()) if nonzero.size else float("inf"))


def lazy_cast(tensor: onnx.TensorProto, base_dir: str, to: int, name: str) -> onnx.TensorProto:
    """An external tensor cast to element type ``to`` without reading it: still external, pointing at
    the source file, with the conversion recorded under the private keys."""
    ref = external_ref(tensor, base_dir)
    if ref is None:
        raise InternalError(f"lazy_cast: tensor '{tensor.name}' is not external")
    out = onnx.TensorProto()
    out.name = name
    out.dims.extend(tensor.dims)
    out.data_type = to
    out.data_location = onnx.TensorProto.EXTERNAL
    chain = ref.chain + (ref.data_type,) if ref.is_lazy else ref.chain
    entries = {
        "location": ref.location,
        "offset": str(ref.offset),
        "length": str(ref.length),
        BASE_DIR_KEY: ref.directory,
    }
    if chain != (to,):
        entries[CAST_CHAIN_KEY] = ",".join(str(t) for t in chain)
    if ref.in_model_file:
        entries[IN_MODEL_FILE_KEY] = "1"
    for key, value in entries.items():
        entry = out.external_data.add()
        entry.key, entry.value = key, value
    return out


def has_private_keys(tensor: onnx.TensorProto) -> bool:
    return any(e.key in _PRIVATE_KEYS for e in tensor.external_data)


def cast_initializer(tensor: onnx.TensorProto, base_dir: str, to: int, name: str) -> onnx.TensorProto:
    """A copy of ``tensor`` named ``name`` with element type ``to`` (values cast as ONNX Cast does:
    round to nearest even, never clamped).

    An external tensor is not read: the copy stays external and is converted chunk by chunk when
    :func:`onnx_precision.storage.save_model` writes it, so a large model is never held in memory.
    """
    if is_external(tensor):
        return lazy_cast(tensor, base_dir, to, name)
    return numpy_helper.from_array(cast_values(numpy_helper.to_array(tensor), to), name)


# Integer tensors may be shapes, axes or split sizes whose values onnxruntime's shape inference
# reads (Reshape, Split, Slice, ...); it cannot read them from a file, so they stay in the proto.
SHAPE_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})

# External tensors under this size are read into an in-memory model given to onnxruntime: its
# shape inference inside If branches needs the values of shape-like constants and cannot read them
# from an external file; weights stay external. A tensor of this size is a weight (a 256 x 256 int8
# matrix: on the dynamic-quant model of scripts/bench_quantized.py, 11 MB of its 26 MB were such
# tensors, parsed and serialized into every onnxruntime session when they stayed inline).
INLINE_EXTERNAL_BYTES = 1 << 16


def inline_small_external(model: onnx.ModelProto, base_dir: str) -> None:
    """Read external tensors under INLINE_EXTERNAL_BYTES into ``model`` (in place)."""
    for graph in graphs(model.graph):
        for i, init in enumerate(graph.initializer):
            if not is_external(init):
                continue
            if (
                stored_bytes(init.data_type, element_count(init))
                < INLINE_EXTERNAL_BYTES
            ):
                values = np.asarray(read_array(init, base_dir))
                graph.initializer[i].CopyFrom(numpy_helper.from_array(np.array(values), init.name))
