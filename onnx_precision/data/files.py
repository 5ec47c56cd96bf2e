"""Sample files read: an .npz, a directory of them, a Polygraphy JSON (and Polygraphy's JSON written back).

Every array's header is checked against the model's inputs, and what the arrays of a source claim all
together is bounded (:data:`MAX_SAMPLE_BYTES`, or more under a memory budget: :func:`sample_bound`), before
any array is read."""

from __future__ import annotations

import base64
import io
import math
import os
import re
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO

import numpy as np

from .. import user_files
from ..errors import DataError
from .inputs import InputInfo, check_array, shape_text

# What the arrays of one sample source (an .npz, a directory of them, a Polygraphy JSON) may expand
# to, all its feeds together, read from the arrays' headers before anything is decompressed: a
# file's size says nothing of it (a 4 MB deflate .npz holds 4 GiB; a 1 KB bzip2 one, 1 GiB, took a
# run to 7.8 GB), and a run holds several times its samples (128 MiB of them took a two-node MLP's
# run to 1.4 GB). One feed at the model's own fixed sizes (symbolic dimensions 1) is always allowed,
# however large: the model cannot be verified on less.
MAX_SAMPLE_BYTES = 512 << 20

# What a run holds for each byte of its samples, to raise that bound under a memory budget
# (--memory-budget B: B // 11, where that is more). Measured by scripts/bench_sample_memory.py on a
# two-node MLP (y = relu(x @ w), x [N, 4]: each node's output as large as its input), the peaks (VmHWM)
# of convert, check and analyze, each in a child, given one .npz of one feed: 64 MiB of samples 741, 715,
# 721 MiB; 128 MiB, 1383, 1316, 1322 MiB (the run alone, on an empty feed: 90 MiB): about 10x the
# samples over the run's own, 11x in all. The same 128 MiB as 8 feeds of 16 MiB took 806, 819, 640 MiB:
# one large feed is the worst case. A model whose activations outgrow its inputs holds more.
SAMPLE_MEMORY_FACTOR = 11


def sample_bound(memory_budget: int | None) -> int:
    """What the arrays of one sample source may expand to: :data:`MAX_SAMPLE_BYTES` (the same on every
    machine), or under ``memory_budget`` (the memory a run may hold) as much as a run holding
    :data:`SAMPLE_MEMORY_FACTOR` times its samples fits in, where that is more."""
    if memory_budget is None:
        return MAX_SAMPLE_BYTES
    return max(MAX_SAMPLE_BYTES, memory_budget // SAMPLE_MEMORY_FACTOR)


def read_feeds(path: str, option: str, inputs: list[InputInfo], memory_budget: int | None = None,
               ) -> tuple[list[tuple[str, dict[str, np.ndarray]]], str]:
    """(where, feed) pairs, ``where`` naming the file (and the feed's index in a JSON list);
    ``option`` names the file in messages. Every array's header is checked against ``inputs``, and
    what they claim all together against :func:`sample_bound` of ``memory_budget``, before any array is
    read."""
    npz, polygraphy_json = (replace(kind, option=option)
                            for kind in (user_files.NPZ, user_files.POLYGRAPHY_JSON))
    if not os.path.exists(path):
        if re.fullmatch(r"[^:\s]+:\[?\d+([x,]\d+)*\]?(,[^:\s]+:\[?\d+([x,]\d+)*\]?)*", path):
            raise DataError(f"{path}: no such file or directory; it reads like input shapes (Polygraphy's "
                            f"--inputs takes shapes): give them with --input-shapes {path}")
        raise DataError(f"{path}: no such file or directory")
    expected = {i.name: i for i in inputs}
    if os.path.isdir(path):
        files = npz_files(path)
        if not files:
            raise DataError(f"{path}: directory contains no .npz files")
        claimed = sum(_npz_claims(f, npz, expected) for f in files)
        _check_expansion(path, npz, claimed, len(files), inputs, memory_budget)
        return [(f, _load_npz(f, npz)) for f in files], f"{path} ({len(files)} .npz files)"
    # The content decides, not the name: a JSON saved as inputs.dat is still a JSON.
    if user_files.read_bytes(path, npz, _HEAD).lstrip()[:1] in (b"[", b"{"):
        located = _read_polygraphy_json(path, polygraphy_json, inputs, memory_budget)
        return located, path if len(located) == 1 else f"{path} ({len(located)} feeds)"
    _check_expansion(path, npz, _npz_claims(path, npz, expected), 1, inputs, memory_budget)
    return [(path, _load_npz(path, npz))], path


def npz_files(directory: str) -> tuple[str, ...]:
    try:
        names = sorted(os.listdir(directory))
    except PermissionError:
        raise DataError(f"{directory}: permission denied") from None
    return tuple(os.path.join(directory, f) for f in names if f.endswith(".npz"))


_HEAD = 64  # bytes read to tell an .npz from a JSON


def _check_expansion(path: str, kind: user_files.FileKind, claimed: int, feeds: int,
                     inputs: list[InputInfo], memory_budget: int | None) -> None:
    """Refuse a source whose arrays' headers claim more than :func:`sample_bound` of ``memory_budget``
    (or one feed at the model's fixed sizes, where that is more)."""
    bound = max(sample_bound(memory_budget), sum(_fixed_bytes(i) for i in inputs))
    if claimed > bound:
        raise kind.problem(path, f"its arrays expand to {user_files.size_text(claimed)} ({feeds} "
                                 f"feed{'s' if feeds > 1 else ''}), more than sample data can sensibly be "
                                 f"({user_files.size_text(bound)} at most, counted expanded, whatever the "
                                 f"file weighs); give fewer or smaller samples, or a larger --memory-budget "
                                 f"(a run holds about {SAMPLE_MEMORY_FACTOR}x its samples)")


def _fixed_bytes(info: InputInfo) -> int:
    """The bytes of one array of ``info`` at the model's fixed sizes, symbolic dimensions 1."""
    return math.prod(d if isinstance(d, int) and d > 0 else 1 for d in info.dims or ()) * info.dtype.itemsize


# What reading a damaged .npz or .npy raises: its magic, header, CRC or stream, its compression method
# (NotImplementedError) or its encryption flag (zipfile's RuntimeError).
_DAMAGED = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError)


def _npz_claims(path: str, kind: user_files.FileKind, expected: Mapping[str, InputInfo]) -> int:
    """The bytes the arrays of the .npz ``path`` claim, each one's header checked (:func:`_npy_claim`)."""
    # Told apart before zipfile: np.load returns a bare array for an .npy, and takes anything that is
    # not a zip for a pickle and says so, which misleads about a text or ONNX file given by mistake.
    head = user_files.read_bytes(path, kind, _HEAD)
    if head.startswith(b"\x93NUMPY"):
        raise kind.problem(path, "not an .npz archive (a single array; save feeds with np.savez)")
    if not head.startswith(b"PK") or not zipfile.is_zipfile(path):
        raise kind.problem(path, "cannot read as .npz: not a zip archive, nor a Polygraphy JSON (save feeds "
                                 "with np.savez, or with polygraphy run --save-inputs)")
    try:
        return _archive_claims(path, kind, path, path, expected)
    except _DAMAGED as e:
        raise kind.problem(path, f"cannot read as .npz: {_first_line(e)}") from e


def _archive_claims(archive_file: str | IO[bytes], kind: user_files.FileKind, path: str, where: str,
                    expected: Mapping[str, InputInfo], key: str = "") -> int:
    """The bytes the members of the zip ``archive_file`` (in ``path``) claim, each a feed's array
    named by its member; with ``key``, the payload of a Polygraphy JSON's array ``key`` (in feed
    ``where``), of which Polygraphy's decoder keeps the first member alone: only that one is checked
    and counted."""
    total = 0
    with zipfile.ZipFile(archive_file) as archive:
        members = archive.infolist()[:1] if key else archive.infolist()
        if key and not members:
            raise kind.problem(path, f"array '{key}' is an .npz holding no array")
        for member in members:
            what = f"member '{member.filename}'"
            what = f"array '{key}' (.npz {what})" if key else what
            name = member.filename.removesuffix(".npy")
            if name == member.filename:
                raise kind.problem(path, f"{what} is not an array (.npy); save feeds with np.savez")
            if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                method = _METHODS.get(member.compress_type, f"method {member.compress_type}")
                raise kind.problem(path, f"{what} is compressed with {method}; save feeds with np.savez or "
                                         f"np.savez_compressed (stored or deflate members)")
            with archive.open(member) as f:
                total += _npy_claim(f, member.file_size, kind, path, what, where, expected, key or name)
    return total


# zipfile expands what it reads of a bzip2 or lzma member whole, with no bound on the output (deflate
# it bounds): reading the header of a 1 KB bzip2 member took 1 GiB, 2.2 GB of memory. numpy writes
# stored (np.savez) and deflate (np.savez_compressed) members only; the others are refused unread.
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _npy_claim(f: IO[bytes], size: int, kind: user_files.FileKind, path: str, what: str, where: str,
               expected: Mapping[str, InputInfo], name: str) -> int:
    """The bytes that the .npy at the start of ``f`` (``size`` bytes in all: ``what`` in ``path``, the
    array of input ``name`` in feed ``where``) claims, once its header is known to be a feed of the
    model's inputs ``expected``, to hold no Python objects and to claim no more than the bytes after
    it (np.load allocates what a header says before reading: a 300-byte file may claim 10^12 floats).
    The one check of every array of an .npz and of a Polygraphy JSON."""
    version = np.lib.format.read_magic(f)
    if version not in _NPY_HEADERS:
        raise kind.problem(path, f"{what}: .npy format {version[0]}.{version[1]} (np.savez writes 1.0 or "
                                 f"2.0)")
    shape, _, dtype = _NPY_HEADERS[version](f)
    if dtype.hasobject:
        raise kind.problem(path, f"{what} holds Python objects (a pickle, never loaded); feeds are numeric "
                                 f"arrays")
    check_array(where, expected, name, shape, dtype)
    claimed = math.prod(shape) * dtype.itemsize
    stored = max(size - f.tell(), 0)
    if claimed > stored:
        held = user_files.size_text(stored)
        raise kind.problem(path, f"{what} claims a {shape_text(shape)} {dtype} array "
                                 f"({user_files.size_text(claimed)}) but holds {held}")
    return claimed


def _load_npz(path: str, kind: user_files.FileKind) -> dict[str, np.ndarray]:
    """The arrays of the .npz ``path``, once :func:`_npz_claims` checked their headers."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in data.files}
    except _DAMAGED as e:  # members are read lazily: a damaged member's data fails here
        raise kind.problem(path, f"cannot read as .npz: {_first_line(e)}") from e
    except MemoryError:  # the headers hold what they claim, but not in this machine's memory
        raise kind.problem(path, "no memory to read its arrays") from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_ARRAY_CLASS = "ndarray"  # the polygraphy_class of a numpy array: the one a feed holds
_SAVED_BY = "as 'polygraphy run --save-inputs' writes them"


def _read_polygraphy_json(path: str, kind: user_files.FileKind, inputs: list[InputInfo],
                          memory_budget: int | None) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(where, feed) pairs of a Polygraphy JSON: a list of feeds, each input name ->
    ``{"array": payload, "polygraphy_class": "ndarray"}``. Decoded here as Polygraphy's decoder does
    (a base64 .npy; its legacy forms: latin-1 text, an .npz whose first array is the one) but through
    an .npz's checks: every payload's header against the model and the bytes it holds, and all of
    them against :func:`sample_bound` of ``memory_budget``, before any array is decoded."""
    feeds = _json_feeds(path, kind, user_files.read_json(path, kind))
    located = [(path if len(feeds) == 1 else f"{path} (feed {i})", feed) for i, feed in enumerate(feeds)]
    expected = {i.name: i for i in inputs}
    claimed = sum(_payload_claim(path, kind, where, expected, name, payload)
                  for where, feed in located for name, payload in feed.items())
    _check_expansion(path, kind, claimed, len(feeds), inputs, memory_budget)
    return [(where, {name: _payload_array(path, kind, name, payload) for name, payload in feed.items()})
            for where, feed in located]


def _json_feeds(path: str, kind: user_files.FileKind, data: object) -> list[dict[str, str]]:
    """Each feed of a Polygraphy JSON's parsed ``data``: input name -> its array's payload."""
    listed = [data] if isinstance(data, Mapping) else data
    if not isinstance(listed, list) or not listed or not all(isinstance(f, Mapping) for f in listed):
        raise kind.problem(path, f"expected a list of feeds (name -> array), {_SAVED_BY}")
    feeds = []
    for feed in listed:
        if "polygraphy_class" in feed:  # e.g. the RunResults of --save-outputs
            raise kind.problem(path, f"a serialized {str(feed['polygraphy_class'])!r} (polygraphy_class), "
                                     f"not a list of feeds (name -> array) {_SAVED_BY}")
        payloads = {}
        for name, value in feed.items():
            kind_name = value.get("polygraphy_class") if isinstance(value, Mapping) else None
            if kind_name is None:
                raise kind.problem(path, f"'{name}' is not a serialized array; feeds are arrays, {_SAVED_BY}")
            if kind_name != _ARRAY_CLASS:
                raise kind.problem(path, f"'{name}' is a serialized {str(kind_name)!r} (polygraphy_class), "
                                         f"not an array; feeds are arrays, {_SAVED_BY}")
            if not isinstance(value.get("array"), str):
                raise kind.problem(path, f"array '{name}' has no payload (its 'array' is not text)")
            payloads[name] = value["array"]
        feeds.append(payloads)
    return feeds


def _payload_bytes(path: str, kind: user_files.FileKind, name: str, payload: str) -> bytes:
    """The bytes of array ``name``'s payload: base64, else Polygraphy's legacy latin-1 text (as its
    decoder tries them)."""
    try:
        return base64.b64decode(payload, validate=True)
    except ValueError:  # binascii.Error, or a character past ASCII
        try:
            return payload.encode("latin-1")
        except UnicodeEncodeError:
            raise kind.problem(path, f"array '{name}': its payload is neither base64 nor latin-1 text",
                               ) from None


def _payload_claim(path: str, kind: user_files.FileKind, where: str, expected: Mapping[str, InputInfo],
                   name: str, payload: str) -> int:
    """The bytes array ``name`` of feed ``where`` claims, its .npy (or .npz) header checked."""
    data = _payload_bytes(path, kind, name, payload)
    try:
        if data.startswith(b"PK"):
            return _archive_claims(io.BytesIO(data), kind, path, where, expected, name)
        return _npy_claim(io.BytesIO(data), len(data), kind, path, f"array '{name}'", where, expected, name)
    except _DAMAGED as e:
        raise kind.problem(path, f"array '{name}': not an .npy nor an .npz ({_first_line(e)})") from e


def _payload_array(path: str, kind: user_files.FileKind, name: str, payload: str) -> np.ndarray:
    """Array ``name``, decoded once :func:`_payload_claim` checked its header."""
    try:
        loaded = np.load(io.BytesIO(_payload_bytes(path, kind, name, payload)), allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return loaded
        with loaded:  # an .npz: its first array, as Polygraphy's decoder returns
            return np.asarray(loaded[loaded.files[0]])
    except _DAMAGED as e:
        raise kind.problem(path, f"array '{name}': cannot decode: {_first_line(e)}") from e
    except MemoryError:
        raise kind.problem(path, "no memory to decode its arrays") from None


def polygraphy_feeds_json(feeds: Sequence[Mapping[str, np.ndarray]]) -> str:
    """The feeds as ``polygraphy run --save-inputs`` writes them (``--load-inputs`` reads them)."""
    from polygraphy.json import to_json

    return to_json([dict(feed) for feed in feeds]) + "\n"


def polygraphy_outputs_json(outputs: Sequence[Mapping[str, np.ndarray]], runner: str) -> str:
    """Per sample outputs as ``polygraphy run --save-outputs`` writes them (``--load-outputs`` reads
    them): one runner, ``runner``, with one iteration per sample."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import to_json

    results = RunResults()
    results.append((runner, [IterationResult(dict(out), runner_name=runner) for out in outputs]))
    return to_json(results) + "\n"
