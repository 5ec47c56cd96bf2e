"""CTranslate2's model file (``model.bin``) read into numpy arrays, without ctranslate2: the layout
``ModelSpec._serialize`` (python/ctranslate2/specs/model_spec.py) writes and ``models::Model::load``
(src/models/model.cc) reads, binary versions 2-6. scripts/whisper_models.py reads faster-whisper's
Whisper tiny.en with it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# CTranslate2's DataType ids (include/ctranslate2/types.h; python/ctranslate2/specs/model_spec.py's
# _dtype_to_type_id), and binary versions 2-3's dtypes by item size (src/models/model.cc)
_CT2_DTYPES: tuple[np.dtype | None, ...] = (
    np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.float16),
    None)  # 5: bfloat16, which numpy does not hold
_CT2_ITEM_DTYPES: dict[int, np.dtype] = {4: np.dtype(np.float32), 2: np.dtype(np.int16), 1: np.dtype(np.int8)}
_CT2_VERSIONS = range(2, 7)


@dataclass(frozen=True)
class Ct2File:
    """A CTranslate2 ``model.bin``: its spec's name and revision, and its arrays by name, an alias
    holding the array it names."""

    spec: str
    revision: int
    arrays: Mapping[str, np.ndarray]


class _Cursor:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.path, self.at = data, path, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise SystemExit(f"{self.path}: ends at byte {len(self.data)}, inside a record")
        self.at += size
        return self.data[self.at - size:self.at]

    def unpack(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        """A uint16 length (the NUL included), the UTF-8 bytes, a NUL."""
        length = self.unpack("H")
        if length == 0:
            raise SystemExit(f"{self.path}: a string of length 0 at byte {self.at - 2}")
        return self.take(length)[:-1].decode("utf-8")


def read_ct2(path: str) -> Ct2File:
    """A CTranslate2 model file, laid out as ``ModelSpec._serialize`` writes it and the C++ loader
    (``models::Model::load``) reads it, little-endian: uint32 binary version; from version 2 the spec's
    name (a string) and uint32 revision; uint32 count of variables, each a name, uint8 rank, uint32 dims,
    then from version 4 a uint8 type id and uint32 byte count (before: a uint8 item size and a uint32
    count of items), and the raw bytes; from version 3 a uint32 count of aliases, each two strings
    (alias, the variable it names)."""
    with open(path, "rb") as f:
        cursor = _Cursor(f.read(), path)
    version = cursor.unpack("I")
    if version not in _CT2_VERSIONS:
        raise SystemExit(f"{path}: CTranslate2 binary version {version}; versions "
                         f"{_CT2_VERSIONS.start}-{_CT2_VERSIONS.stop - 1} are read")
    spec, revision = cursor.string(), cursor.unpack("I")
    arrays: dict[str, np.ndarray] = {}
    for _ in range(cursor.unpack("I")):
        name = cursor.string()
        dims = tuple(cursor.unpack("I") for _ in range(cursor.unpack("B")))
        if version >= 4:
            type_id, size = cursor.unpack("B"), cursor.unpack("I")
            dtype = _CT2_DTYPES[type_id] if type_id < len(_CT2_DTYPES) else None
        else:
            item = cursor.unpack("B")
            dtype, size = _CT2_ITEM_DTYPES.get(item), cursor.unpack("I") * item
        if dtype is None:
            raise SystemExit(f"{path}: variable '{name}' is of CTranslate2's bfloat16, which numpy does not "
                             f"hold, or of no type CTranslate2 defines")
        if size != int(np.prod(dims)) * dtype.itemsize:
            raise SystemExit(f"{path}: variable '{name}' {dims} holds {size} bytes, not its shape's")
        arrays[name] = np.frombuffer(cursor.take(size), dtype).reshape(dims)
    if version >= 3:
        for _ in range(cursor.unpack("I")):
            alias, target = cursor.string(), cursor.string()
            if target not in arrays:
                raise SystemExit(f"{path}: alias '{alias}' names '{target}', which the file does not hold")
            arrays[alias] = arrays[target]
    if cursor.at != len(cursor.data):
        raise SystemExit(f"{path}: {len(cursor.data) - cursor.at} bytes after the last record")
    return Ct2File(spec, revision, arrays)
