"""Writing a model, inline or with its weights in an external data file, atomically and streamed.

The model and its data file are written under temporary names beside the target and renamed
into place only when both are complete, so a failure leaves nothing half-written. Tensors still
external in the source (kept FP32 weights) are copied chunk by chunk; lazily cast tensors (see
:mod:`onnx_precision.storage.external_data`) are converted chunk by chunk on the way; so the weights
are never in memory, and a proto over 2 GB is never serialised.

The data file follows onnx's naming, ``<model file name>.data`` beside the model with a
relative location. Tensors are laid out in :func:`external_data.model_tensors` order; tensors
over 1 MB start on a 64 KB boundary (what onnxruntime's own saver does, so they can be
memory-mapped), within onnx's limit on padding. The same model gives the same bytes.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from typing import BinaryIO, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import InternalError, OutputError
from . import external_data as ext

log = logging.getLogger(__name__)

PROTO_LIMIT = 2**31 - 1  # protobuf cannot serialise a message this large
SIZE_THRESHOLD = 1024  # onnx's default: smaller tensors stay inline
ALIGN_THRESHOLD = 1024 * 1024
ALIGNMENT = 64 * 1024


def data_location(path: str) -> str:
    """The data file name onnx's convention gives the weights of the model written to ``path``."""
    return os.path.basename(path) + ".data"


def check_output_path(path: str, input_paths: tuple[str, ...]) -> str:
    """The absolute target; raises :class:`OutputError` if it is an input, a directory, or its
    directory is missing."""
    target = os.path.abspath(path)
    for src in input_paths:
        same = os.path.abspath(src) == target or (
            os.path.exists(src) and os.path.exists(target) and os.path.samefile(src, target))
        if same:
            raise OutputError(f"{path}: output path is the input file; choose another output")
    if os.path.isdir(target):
        raise OutputError(f"{path}: is a directory; give a file name")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: directory '{directory}' does not exist")
    return target


def _temp_beside(target: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp",
                               dir=os.path.dirname(target))
    os.close(fd)
    return tmp


def write_files(writers: list[tuple[str, Callable[[str], None]]]) -> None:
    """Write each (target, write) to a temporary file, then rename all into place, in order.

    The renames come only after every write succeeded; on failure every temporary is removed.
    """
    temps: list[str] = []
    try:
        for target, write in writers:
            temps.append(_temp_beside(target))
            write(temps[-1])
        for (target, _), tmp in zip(writers, temps):
            os.replace(tmp, target)
    except BaseException:
        for tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def atomic_write(path: str, write: Callable[[str], None], input_paths: tuple[str, ...] = ()) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path`` and rename it into place.

    Refuses to overwrite any of ``input_paths``; on failure nothing is left behind.
    """
    write_files([(check_output_path(path, tuple(input_paths)), write)])


def write_text(path: str, text: str, input_paths: tuple[str, ...] = ()) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write, input_paths)


def _resolved_ref(tensor: onnx.TensorProto, source_dir: str | None) -> ext.ExternalRef | None:
    if not ext.is_external(tensor):
        return None
    if source_dir is None and not ext.has_private_keys(tensor):
        raise ValueError(f"tensor '{tensor.name}' has external data but save_model was given no source_dir")
    return ext.external_ref(tensor, source_dir or ".")


def _inline_nbytes(tensor: onnx.TensorProto) -> int:
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    if tensor.data_type == onnx.TensorProto.UNDEFINED:
        return 0
    count = int(np.prod(tensor.dims, dtype=np.int64))
    return count * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize


@dataclass(frozen=True)
class _Sizes:
    inline: int  # bytes of tensor data in the proto
    external: int  # bytes external tensors will take when written
    source: int  # bytes external tensors take in their source files
    external_tensors: int


def _sizes(model: onnx.ModelProto, source_dir: str | None) -> _Sizes:
    inline = external = source = count = 0
    for tensor in ext.model_tensors(model):
        ref = _resolved_ref(tensor, source_dir)
        if ref is None:
            inline += _inline_nbytes(tensor)
        else:
            external += ref.nbytes
            source += ref.length
            count += 1
    return _Sizes(inline, external, source, count)


def _wants_external(model: onnx.ModelProto, sizes: _Sizes, external_data: bool | None, path: str) -> bool:
    """Whether to write a data file. A model over 2 GB, as read or as written, always gets one:
    its FP16 output may fit in one proto, but building that proto would hold all its weights."""
    if sizes.inline >= PROTO_LIMIT or sizes.source >= PROTO_LIMIT:
        too_big = True
    else:
        # ByteSize is safe here: what is in memory is under the limit.
        too_big = model.ByteSize() + sizes.external >= PROTO_LIMIT
    if too_big and external_data is False:
        log.info("%s: the model is over 2 GB; writing its weights to '%s'", path, data_location(path))
    if external_data is None:
        # Keep the input's layout: weights that were external stay external.
        return too_big or sizes.external_tensors > 0
    return external_data or too_big


def _check_sources_untouched(model: onnx.ModelProto, source_dir: str | None, targets: list[str],
                             path: str) -> None:
    for tensor in ext.model_tensors(model):
        ref = _resolved_ref(tensor, source_dir)
        if ref is None or not os.path.exists(ref.file):
            continue
        for target in targets:
            if os.path.exists(target) and os.path.samefile(ref.file, target):
                raise OutputError(f"{path}: writing would overwrite '{ref.location}', the external data of "
                                  f"tensor '{tensor.name}' in the input; choose another output")


def _serialize(model: onnx.ModelProto, path: str) -> bytes:
    size = model.ByteSize()
    if size >= PROTO_LIMIT:
        raise OutputError(f"{path}: the model without its weights is still {size} bytes, "
                          f"over protobuf's 2 GB limit")
    return model.SerializeToString(deterministic=True)


def _write_bytes(data: bytes) -> Callable[[str], None]:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return write


def _stream_tensor(ref: ext.ExternalRef, out: BinaryIO, buffer: np.ndarray) -> None:
    if not ref.is_lazy:
        for chunk in ext.iter_stored_chunks(ref, buffer):
            out.write(chunk)
        return
    for values in ext.iter_chunks(ref, buffer):
        out.write(np.ascontiguousarray(values).data)


def _read_whole(ref: ext.ExternalRef) -> bytes:
    parts = [np.ascontiguousarray(values).tobytes() for values in ext.iter_chunks(ref)]
    return b"".join(parts)


def _set_inline(tensor: onnx.TensorProto, raw: bytes) -> None:
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = raw


def _inline_raw(tensor: onnx.TensorProto) -> bytes | None:
    """The tensor's values as raw bytes if it is worth moving to the data file, else None."""
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    if _inline_nbytes(tensor) < SIZE_THRESHOLD:
        return None
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    # Through onnx's own converters: they pack 4-bit types and lay out bfloat16/float16 as stored.
    return numpy_helper.from_array(numpy_helper.to_array(tensor)).raw_data


def _set_external(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(field)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _pad_to_alignment(out: BinaryIO, length: int) -> None:
    position = out.tell()
    if length > ALIGN_THRESHOLD and position % ALIGNMENT:
        out.write(b"\0" * (ALIGNMENT - position % ALIGNMENT))


def _write_data_file(model: onnx.ModelProto, source_dir: str | None, location: str, tmp: str) -> None:
    """Stream every external or sizeable tensor of ``model`` into ``tmp`` and point ``model`` at it."""
    buffer = ext.chunk_buffer()
    with open(tmp, "wb") as out:
        for tensor in ext.model_tensors(model):
            ref = _resolved_ref(tensor, source_dir)
            raw = _inline_raw(tensor) if ref is None else None
            if ref is not None:
                length = ref.nbytes
            elif raw is not None:
                length = len(raw)
            else:
                continue
            _pad_to_alignment(out, length)
            offset = out.tell()
            if ref is not None:
                _stream_tensor(ref, out, buffer)
            elif raw is not None:
                out.write(raw)
            written = out.tell() - offset
            if written != length:
                raise InternalError(f"tensor '{tensor.name}': wrote {written} bytes, not {length}")
            _set_external(tensor, location, offset, length)


def save_model(
    model: onnx.ModelProto,
    path: str,
    *,
    source_dir: str | None = None,
    external_data: bool | None = None,
    input_paths: tuple[str, ...] = (),
) -> None:
    """Write ``model`` to ``path`` atomically; ``model`` itself is not changed.

    ``source_dir``: the directory external tensors of ``model`` are relative to (the input model's).
    ``external_data``: True writes weights to ``<file name>.data`` beside ``path``; False writes one
    file unless the model is over 2 GB as read or as written (then external anyway); None keeps
    external what was external and goes external when over 2 GB. ``input_paths`` are never overwritten.
    """
    target = check_output_path(path, tuple(input_paths))
    sizes = _sizes(model, source_dir)
    if not _wants_external(model, sizes, external_data, path):
        if sizes.external_tensors == 0:
            write_files([(target, _write_bytes(_serialize(model, path)))])
            return
        inline = onnx.ModelProto()
        inline.CopyFrom(model)
        for tensor in ext.model_tensors(inline):
            ref = _resolved_ref(tensor, source_dir)
            if ref is not None:
                _set_inline(tensor, _read_whole(ref))
        write_files([(target, _write_bytes(_serialize(inline, path)))])
        return

    location = data_location(target)
    data_target = os.path.join(os.path.dirname(target), location)
    check_output_path(data_target, tuple(input_paths))
    _check_sources_untouched(model, source_dir, [target, data_target], path)
    # The copy holds only what is inline in memory already; external weights are streamed.
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def write_data(tmp: str) -> None:
        _write_data_file(out, source_dir, location, tmp)

    def write_model(tmp: str) -> None:
        _write_bytes(_serialize(out, path))(tmp)

    write_files([(data_target, write_data), (target, write_model)])
