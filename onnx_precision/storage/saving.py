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

import errno
import logging
import os
from dataclasses import dataclass
from typing import BinaryIO, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import InternalError, OutputError, WriteError
from . import external_data as ext
from .staging import StagingFolder

log = logging.getLogger(__name__)

PROTO_LIMIT = 2**31 - 1  # protobuf cannot serialise a message this large
SIZE_THRESHOLD = 1024  # onnx's default: smaller tensors stay inline
ALIGN_THRESHOLD = 1024 * 1024
ALIGNMENT = 64 * 1024
# What fails writing an output for the machine's reason, not the user's (:class:`WriteError`)
MACHINE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EIO", "EFBIG")
                           if hasattr(errno, name))


def data_location(path: str) -> str:
    """The data file name onnx's convention gives the weights of the model written to ``path``."""
    return os.path.basename(path) + ".data"


def check_output_path(path: str, input_paths: tuple[str, ...]) -> str:
    """The absolute target; raises :class:`OutputError` if it is an input, not a regular file
    (a directory, a device, a FIFO), a symbolic link, ``-``, or its directory is missing.

    Symbolic links are refused rather than written through or replaced: either would surprise
    someone (the link's target changes, or the link silently becomes a file).
    """
    if path == "-":
        raise OutputError("-: standard output is no file to write to; give a file name")
    target = os.path.abspath(path)
    for src in input_paths:
        same = os.path.abspath(src) == target or (
            os.path.exists(src) and os.path.exists(target) and os.path.samefile(src, target))
        if same:
            raise OutputError(f"{path}: output path is the input file; choose another output")
    if os.path.islink(target):
        raise OutputError(f"{path}: is a symbolic link; give the path of a regular file (links are not "
                          f"written through)")
    if os.path.isdir(target):
        raise OutputError(f"{path}: is a directory; give a file name")
    if os.path.exists(target) and not os.path.isfile(target):
        raise OutputError(f"{path}: exists and is not a regular file (a device or a FIFO); give a file name")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: directory '{directory}' does not exist")
    return target


class Outputs:
    """Every file one run writes, committed together.

    Each file is written under its final name into a private staging directory beside its target
    (so a model and its data file stay valid together, and a staged model can be loaded and
    verified before anything is in place), created with the permissions ``open()`` gives under the
    umask. :meth:`commit` moves them all into place; leaving the ``with`` block without a commit
    (an error, an interrupt) removes them, so a failed run leaves nothing behind; a run killed before
    it could leaves a folder the next run into that directory removes (:mod:`.staging`).
    """

    def __init__(self, input_paths: tuple[str, ...] = ()) -> None:
        self.input_paths = tuple(input_paths)
        self._staging: dict[str, StagingFolder] = {}  # target directory -> its staging folder
        self._staged: dict[str, str] = {}  # target -> staged file, in write order
        self._reserved: dict[str, str] = {}  # target -> the path as the user gave it

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def reserve(self, path: str) -> str:
        """Check ``path`` can be written and is not already an output of this run, before any work
        is done; the staging directory made here proves its directory is writable."""
        target = check_output_path(path, self.input_paths)
        if target in self._reserved:
            raise OutputError(f"{path}: given for two different outputs")
        self._reserved[target] = path
        self._stage_dir(target, path)
        return target

    def _stage_dir(self, target: str, path: str) -> str:
        directory = os.path.dirname(target)
        if directory not in self._staging:
            try:
                self._staging[directory] = StagingFolder(directory)
            except OSError as e:
                raise OutputError(f"{path}: cannot write in '{directory}': {e.strerror}") from e
        return self._staging[directory].path

    def stage(self, path: str, write: Callable[[str], None]) -> str:
        """Write one output with ``write(staged_path)``; returns the staged path."""
        target = self.target(path)
        staged = os.path.join(self._stage_dir(target, path), os.path.basename(target))
        try:
            write(staged)
        except OSError as e:
            error = WriteError if e.errno in MACHINE_ERRNOS else OutputError
            raise error(f"{path}: cannot write: {e.strerror or e}") from e
        self._staged[target] = staged
        return staged

    def stage_text(self, path: str, text: str) -> str:
        def write(staged: str) -> None:
            with open(staged, "w", encoding="utf-8") as f:
                f.write(text)

        return self.stage(path, write)

    def target(self, path: str) -> str:
        """The absolute target of ``path``, reserved now if it was not yet."""
        target = os.path.abspath(path)
        return target if target in self._reserved else self.reserve(path)

    def commit(self) -> tuple[str, ...]:
        """Move every staged file into place (in the order staged); returns the targets."""
        try:
            for target, staged in self._staged.items():
                os.replace(staged, target)
        except OSError as e:
            raise OutputError(f"{target}: cannot move into place: {e.strerror}") from e
        done = tuple(self._staged)
        self._staged.clear()
        self.discard()
        return done

    def discard(self) -> None:
        """Remove every staged file and staging directory (committed files stay)."""
        for staging in self._staging.values():
            staging.remove()
        self._staging.clear()
        self._staged.clear()


def write_files(writers: list[tuple[str, Callable[[str], None]]], input_paths: tuple[str, ...] = ()) -> None:
    """Write each (target, write) and move them all into place together (see :class:`Outputs`)."""
    with Outputs(input_paths) as outputs:
        for target, write in writers:
            outputs.stage(target, write)
        outputs.commit()


def atomic_write(path: str, write: Callable[[str], None], input_paths: tuple[str, ...] = ()) -> None:
    """Call ``write(tmp)`` on a staged file and move it to ``path``.

    Refuses to overwrite any of ``input_paths``; on failure nothing is left behind.
    """
    write_files([(path, write)], tuple(input_paths))


def write_text(path: str, text: str, input_paths: tuple[str, ...] = ()) -> None:
    with Outputs(tuple(input_paths)) as outputs:
        outputs.stage_text(path, text)
        outputs.commit()


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
    in_model_file: int  # bytes of tensors inline in the input file, read from there (see light_load)


def _sizes(model: onnx.ModelProto, source_dir: str | None) -> _Sizes:
    inline = external = source = count = in_model_file = 0
    for tensor in ext.model_tensors(model):
        ref = _resolved_ref(tensor, source_dir)
        if ref is None:
            inline += _inline_nbytes(tensor)
        elif ref.in_model_file:
            in_model_file += ref.nbytes
        else:
            external += ref.nbytes
            source += ref.length
            count += 1
    return _Sizes(inline, external, source, count, in_model_file)


def _too_big(model: onnx.ModelProto, sizes: _Sizes) -> bool:
    """Whether the model is over 2 GB, as read or as written: its FP16 output may fit in one proto,
    but building that proto would hold all its weights."""
    if sizes.inline >= PROTO_LIMIT or sizes.source >= PROTO_LIMIT:
        return True
    # ByteSize is safe here: what is in memory is under the limit.
    return model.ByteSize() + sizes.external + sizes.in_model_file >= PROTO_LIMIT


def fits_one_proto(model: onnx.ModelProto, source_dir: str | None = None) -> bool:
    """Whether ``model`` with all its weights inline (:func:`inline_copy`) stays under protobuf's
    2 GB limit (as read and as written)."""
    return not _too_big(model, _sizes(model, source_dir))


def inline_copy(model: onnx.ModelProto, source_dir: str | None = None) -> onnx.ModelProto:
    """``model`` holding every weight: ``model`` itself when it does, else a copy with each external
    tensor read from ``source_dir`` (a lazily converted one converted on the way). Check
    :func:`fits_one_proto` first: the copy holds all the weights."""
    if not any(ext.is_external(t) for t in ext.model_tensors(model)):
        return model
    inline = onnx.ModelProto()
    inline.CopyFrom(model)
    for tensor in ext.model_tensors(inline):
        ref = _resolved_ref(tensor, source_dir)
        if ref is not None:
            _set_inline(tensor, _read_whole(ref))
    return inline


def _wants_external(model: onnx.ModelProto, sizes: _Sizes, external_data: bool | None, path: str) -> bool:
    """Whether to write a data file. A model over 2 GB, as read or as written, always gets one
    (:func:`_too_big`)."""
    too_big = _too_big(model, sizes)
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
        # as bytes: a bfloat16 chunk (an ml_dtypes array) exposes no buffer of its own type
        out.write(np.ascontiguousarray(values).view(np.uint8).data)


def _read_whole(ref: ext.ExternalRef) -> bytes:
    parts = [np.ascontiguousarray(values).tobytes() for values in ext.iter_chunks(ref)]
    return b"".join(parts)


def _set_inline(tensor: onnx.TensorProto, raw: bytes) -> None:
    del tensor.external_data[:]
    tensor.ClearField("data_location")  # as a tensor read inline has it: not set, not set to DEFAULT
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
    outputs: Outputs | None = None,
) -> str:
    """Write ``model`` to ``path``; ``model`` itself is not changed. Returns where the model file is
    now: ``path``, or its staged copy when ``outputs`` is given (the caller commits them).

    ``source_dir``: the directory external tensors of ``model`` are relative to (the input model's).
    ``external_data``: True writes weights to ``<file name>.data`` beside ``path``; False writes one
    file unless the model is over 2 GB as read or as written (then external anyway); None keeps
    external what was external and goes external when over 2 GB. ``input_paths`` are never overwritten.
    """
    if outputs is None:
        with Outputs(tuple(input_paths)) as own:
            save_model(model, path, source_dir=source_dir, external_data=external_data, outputs=own)
            own.commit()
        return os.path.abspath(path)
    target = outputs.target(path)
    sizes = _sizes(model, source_dir)
    if not _wants_external(model, sizes, external_data, path):
        return outputs.stage(path, _write_bytes(_serialize(inline_copy(model, source_dir), path)))

    location = data_location(target)
    data_target = os.path.join(os.path.dirname(target), location)
    outputs.reserve(data_target)
    _check_sources_untouched(model, source_dir, [target, data_target], path)
    # The copy holds only what is inline in memory already; external weights are streamed.
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def write_data(tmp: str) -> None:
        _write_data_file(out, source_dir, location, tmp)

    def write_model(tmp: str) -> None:
        _write_bytes(_serialize(out, path))(tmp)

    outputs.stage(data_target, write_data)
    return outputs.stage(path, write_model)
