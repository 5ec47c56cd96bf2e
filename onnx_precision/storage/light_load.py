"""Loading a large single-file model without holding its weights in memory.

``onnx.load`` of a model whose weights are inline (``raw_data``) holds them all in the proto for
the whole run, and every copy of the proto (the switch graph, a session's serialized bytes) holds
them again. :func:`load_light` reads the file's protobuf wire format instead, parses the model
without the ``raw_data`` of its large main-graph initializers, and returns where those bytes lie
in the file; :func:`point_into_model_file` then makes each such tensor an external tensor whose
"data file" is the model file itself, so everything that reads weights (memory-mapped, chunk by
chunk) reads them from there, as for any external data. The tensors carry
:data:`~.external_data.IN_MODEL_FILE_KEY`, so a writer keeps the output in one file, as the
input was.

Only files of at least :data:`LIGHT_LOAD_BYTES` are read this way; a wire format this reader does
not expect (a second graph field, a tensor with two ``raw_data`` fields, groups) falls back to
``onnx.load``.
"""

from __future__ import annotations

import mmap
import os

import onnx

from .external_data import IN_MODEL_FILE_KEY, INLINE_EXTERNAL_BYTES, SHAPE_TYPES

# From 1 MB a file is read light (it was 32 MB): the read is no slower (the 26 MB dynamic-quant model of
# scripts/bench_quantized.py: 38 ms, onnx.load 53 ms), and weights parsed into the proto stay there for
# the whole run and are copied out again for each onnxruntime session (weights.by_reference), where a
# weight in the file is one map of it.
LIGHT_LOAD_BYTES = 1 << 20

# ModelProto.graph, GraphProto.initializer, TensorProto.data_type and .raw_data
_GRAPH, _INITIALIZER, _DATA_TYPE, _RAW_DATA = 7, 5, 2, 9
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5

Moved = list[tuple[int, int, int]]  # (index in graph.initializer, offset in the file, length)


class _Unexpected(Exception):
    """The file is not laid out as this reader expects: load it whole instead."""


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unexpected
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, field start, value start, field end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        begin = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value = pos
        if wire == _VARINT:
            pos = _varint(buf, pos)[1]
        elif wire == _FIXED64:
            pos += 8
        elif wire == _LEN:
            length, value = _varint(buf, pos)
            pos = value + length
        elif wire == _FIXED32:
            pos += 4
        else:
            raise _Unexpected
        if pos > end:
            raise _Unexpected
        yield number, wire, begin, value, pos


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _light_tensor(buf, start: int, end: int) -> tuple[bytes, int, int] | None:
    """The tensor without its raw_data, and where raw_data lies; None when it is small, absent or
    of a type onnxruntime's shape inference may need the values of (SHAPE_TYPES)."""
    raw = []
    data_type = 0
    for number, wire, _, value, stop in _fields(buf, start, end):
        if number == _RAW_DATA and wire == _LEN:
            raw.append((value, stop))
        elif number == _DATA_TYPE and wire == _VARINT:
            data_type = _varint(buf, value)[0]
    if len(raw) > 1:
        raise _Unexpected
    if not raw or raw[0][1] - raw[0][0] < INLINE_EXTERNAL_BYTES or data_type in SHAPE_TYPES:
        return None
    kept = b"".join(buf[begin:stop] for number, _, begin, _, stop in _fields(buf, start, end)
                    if number != _RAW_DATA)
    return kept, raw[0][0], raw[0][1] - raw[0][0]


def _light_graph(buf, start: int, end: int, moved: Moved) -> list:
    """The graph's field without the moved raw_data, as pieces (views of ``buf`` where they are its
    bytes: one copy of the model, in the join, not one per level)."""
    parts = []
    index = 0
    for number, wire, begin, value, stop in _fields(buf, start, end):
        if number == _INITIALIZER and wire == _LEN:
            light = _light_tensor(buf, value, stop)
            if light is not None:
                kept, offset, length = light
                moved.append((index, offset, length))
                parts.append(_length_delimited(_INITIALIZER, kept))
            else:
                parts.append(buf[begin:stop])
            index += 1
        else:
            parts.append(buf[begin:stop])
    return [_encode_varint(_GRAPH << 3 | _LEN) + _encode_varint(sum(len(p) for p in parts)), *parts]


def load_light(path: str, at_least: int | None = None) -> tuple[onnx.ModelProto, Moved] | None:
    """The model at ``path`` without the bytes of its large inline initializers, and where they
    are; None when the file is under ``at_least`` bytes (by default :data:`LIGHT_LOAD_BYTES`) or they
    are under half of it, holds no such initializer, or is laid out otherwise (then ``onnx.load`` it).
    A file that does not parse raises protobuf's DecodeError, as onnx.load does."""
    size = os.path.getsize(path)
    at_least = LIGHT_LOAD_BYTES if at_least is None else at_least
    if size < at_least:
        return None
    moved: Moved = []
    graphs = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        buf = memoryview(mapped)
        parts: list = []
        try:
            for number, wire, begin, value, stop in _fields(buf, 0, size):
                if number == _GRAPH and wire == _LEN:
                    graphs += 1
                    parts.extend(_light_graph(buf, value, stop, moved))
                else:
                    parts.append(buf[begin:stop])
            light = b"".join(parts)
        except _Unexpected:
            light = None
        del parts  # the views of the map, released before it closes
        buf.release()
    if light is None or graphs != 1 or sum(length for _, _, length in moved) < at_least // 2:
        return None
    return onnx.ModelProto.FromString(light), moved


# Messages nested deeper than this do not parse: the default recursion limit of protobuf's upb, C++
# and Python decoders alike (a model file's ModelProto is depth 1).
PROTOBUF_DEPTH_LIMIT = 100


class _TooDeep(Exception):
    def __init__(self, graphs: int) -> None:
        super().__init__(graphs)
        self.graphs = graphs


def graphs_past_depth_limit(path: str) -> int | None:
    """How many graphs nest (the main graph and the subgraphs within it) where the messages of the
    model file ``path`` first nest past :data:`PROTOBUF_DEPTH_LIMIT`, read from its wire format; None
    where they never do, or the file is not laid out as protobuf messages."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        try:
            _walk(mapped, 0, len(mapped), onnx.ModelProto.DESCRIPTOR, 1, 0)
        except _TooDeep as e:
            return e.graphs
        except _Unexpected:
            return None
    return None


def _walk(buf, start: int, end: int, descriptor, depth: int, graphs: int) -> None:
    """Each message field of buf[start:end], a ``descriptor`` message at ``depth``, walked in turn."""
    if depth > PROTOBUF_DEPTH_LIMIT:
        raise _TooDeep(graphs)
    graphs += descriptor is onnx.GraphProto.DESCRIPTOR
    for number, wire, _, value, stop in _fields(buf, start, end):
        field = descriptor.fields_by_number.get(number)
        if field is not None and wire == _LEN and field.message_type is not None:
            _walk(buf, value, stop, field.message_type, depth + 1, graphs)


def point_into_model_file(model: onnx.ModelProto, moved: Moved, location: str) -> None:
    """Make each moved initializer an external tensor stored at its place in the model file."""
    for index, offset, length in moved:
        tensor = model.graph.initializer[index]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length)),
                           (IN_MODEL_FILE_KEY, "1")):
            tensor.external_data.add(key=key, value=value)
