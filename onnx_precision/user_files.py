"""The one door for the files a user hands in: a model, a plan, a layer-precisions file, sample data.

As Polygraphy reads every user file through ``util.load_file(src, description=...)`` and
``json/serde.py`` ``load_json``, every reader here goes through :func:`regular_file` first: the path
is looked at with ``stat`` before anything opens it (opening a FIFO for reading blocks until a writer
comes; ``/dev/zero`` never ends), only a regular file is read, and each kind of file has a size
bound, named in the message, past which it is refused rather than read until memory runs out. Every
problem is one line, ``OPTION PATH: problem``, raised as the kind's own
:class:`~onnx_precision.errors.PrecisionError`, so the process boundary never has to guess whether
an ``OSError``, ``ValueError`` or ``MemoryError`` came from the user's input.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass

from .errors import DataError, ModelLoadError, PlanError, PrecisionError, UsageError

_MiB = 1 << 20
_GiB = 1 << 30


@dataclass(frozen=True)
class FileKind:
    """One kind of user file: the option that names it ("" for a positional model path), what it is
    called in messages, the largest size read (None: no bound, the file is not read whole), and
    the error its problems raise."""

    option: str
    what: str
    max_bytes: int | None
    error: type[PrecisionError]

    def problem(self, path: str, text: str) -> PrecisionError:
        """The one-line error ``OPTION PATH: text``."""
        return self.error(f"{self.option} {path}: {text}" if self.option else f"{path}: {text}")


# The bounds are far above any real file of the kind (a plan of a 100 000-node model is ~15 MB, a
# trtexec script a few MB) and far below what would exhaust memory once parsed.
MODEL = FileKind("", "model", None, ModelLoadError)  # read by onnx, its weights left on disk
PLAN = FileKind("--plan", "plan JSON", 256 * _MiB, PlanError)
LAYER_PRECISIONS = FileKind("--layer-precisions-file", "layer-precisions file", 64 * _MiB, UsageError)
# An .npz is read member by member (each array's header checked before it is allocated); what its
# arrays expand to is bounded apart (data.files.MAX_SAMPLE_BYTES), this only what it weighs.
NPZ = FileKind("--inputs", ".npz of sample data", 16 * _GiB, DataError)
POLYGRAPHY_JSON = FileKind("--inputs", "Polygraphy JSON of sample data", 1 * _GiB, DataError)


def size_text(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps a number >= 1 (``256 MiB``)."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", _GiB), ("MiB", _MiB), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def _not_regular(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str, kind: FileKind) -> int:
    """The size of ``path``, once it is known to be a regular file within ``kind``'s bound (symlinks
    followed); else ``kind``'s one-line error. Nothing is opened."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise kind.problem(path, "no such file") from None
    except PermissionError:
        raise kind.problem(path, "permission denied") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise kind.problem(path, f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise kind.problem(path, f"not a file ({_not_regular(info.st_mode)}; give the {kind.what})")
    if kind.max_bytes is not None and info.st_size > kind.max_bytes:
        raise kind.problem(path, f"{size_text(info.st_size)}, more than a {kind.what} can sensibly be "
                                 f"({size_text(kind.max_bytes)} at most)")
    return info.st_size


def read_bytes(path: str, kind: FileKind, size: int | None = None) -> bytes:
    """The first ``size`` bytes of ``path`` (all of it by default, within ``kind``'s bound)."""
    regular_file(path, kind)
    limit = size if size is not None else kind.max_bytes
    try:
        with open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit + 1)
    except PermissionError:
        raise kind.problem(path, "permission denied") from None
    except OSError as e:
        raise kind.problem(path, f"cannot read: {e.strerror or e}") from None
    except MemoryError:
        raise kind.problem(path, "no memory to read it") from None
    if size is None and limit is not None and len(data) > limit:  # it grew after the stat
        raise kind.problem(path, f"more than a {kind.what} can sensibly be ({size_text(limit)} at most)")
    return data[:size] if size is not None else data


def read_text(path: str, kind: FileKind) -> str:
    """``path`` decoded as UTF-8 (a binary file given by mistake is one line)."""
    data = read_bytes(path, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise kind.problem(path, f"not a text file ({e.reason} at byte {e.start})") from None


def read_json(path: str, kind: FileKind) -> object:
    """``path`` parsed as JSON (plain values: no object hooks)."""
    return parse_json(read_text(path, kind), path, kind)


def parse_json(text: str, path: str, kind: FileKind) -> object:
    """``text``, the content of ``path``, parsed as JSON (plain values: no object hooks)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise kind.problem(path, f"not valid JSON: {e.msg} at line {e.lineno}") from None
    except RecursionError:  # e.g. 100 000 nested '['
        raise kind.problem(path, "not valid JSON: nested too deeply") from None
    except ValueError:  # not a JSONDecodeError: an integer past Python's int-string limit, raised by int()
        raise kind.problem(path, f"not readable JSON: an integer of more than {sys.get_int_max_str_digits()} "
                                 f"digits (Python's limit)") from None
