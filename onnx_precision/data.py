"""Sample data: the feeds the oracle runs (from files, or synthesised from the model's inputs).

Sources (``--inputs``): an ``.npz`` (one feed), a directory of ``.npz`` files (one feed each, in
file-name order), or a Polygraphy JSON as ``polygraphy run --save-inputs`` writes it (a list of
feeds, decoded as Polygraphy's decoder does); from Python, feeds in memory (``SampleSpec(feeds=...)``,
a list of dicts of arrays, :func:`in_memory_spec`). Without ``--inputs`` one feed is synthesised from the
model's input metadata with a seeded generator: floats uniform in ``[0, 1)`` and integers in
``[0, 100)`` (or below the size of the table an integer input indexes) unless ``--input-range``
says otherwise, symbolic dimensions from ``--input-shape``. A size is never invented but for a
leading batch dimension (axis 0 of an input of rank 2 or more), which is 1 unless given and said so
in the samples' description: a detector verified on a 1x1 image is not verified
(:class:`SymbolicDimensions`, exit 2). What overflows depends on the ranges, so synthetic data is
always labelled. A file's format is told from its content, whatever its name.

Every feed is checked against the model: names, dtypes, ranks and fixed dimensions; a mismatch is
a one-line :class:`DataError` naming the source and the input. A file's arrays are checked on their
headers before any is read, and bounded by what they expand to, not by what the file weighs
(:data:`MAX_SAMPLE_BYTES`, all feeds of a source together). NaN inside sample data is a
warning naming the input (the FP32 reference will carry it; FP16 is not blamed for it).
"""

from __future__ import annotations

import base64
import io
import math
import os
import re
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO

import numpy as np
import onnx

from . import user_files
from .errors import DataError, ModelLoadError
from .graph import attr, is_onnx_domain

DEFAULT_RANGE = (0.0, 1.0)
# Integer inputs are mostly ids: [0, 1) would make every id 0. One that indexes a constant table
# (Gather) stays below the table's size instead.
DEFAULT_INT_RANGE = (0.0, 100.0)


@dataclass(frozen=True)
class SampleSpec:
    """Where feeds come from. ``inputs`` is an .npz (one feed), a directory of .npz (one feed
    each) or a Polygraphy JSON (``polygraphy run --save-inputs``); ``feeds`` are feeds in memory
    (input name -> array each); with neither, synthetic feeds from the model's input metadata, seeded."""

    inputs: str | None = None
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    feeds: tuple[Mapping[str, np.ndarray], ...] = ()
    option: str = "--inputs"  # the option that names ``inputs``, in messages about the file

    def __post_init__(self) -> None:
        if self.inputs is not None and self.feeds:
            raise DataError(f"samples: both a file ({self.inputs}) and {len(self.feeds)} feed(s) in memory; "
                            f"give one")
        for name, shape in self.input_shapes.items():
            problem = shape_problem(shape)
            if problem:
                raise DataError(f"--input-shape {name}:{_shape(shape)}: {problem}")


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


IN_MEMORY_FEEDS = "feeds given in memory"


def in_memory_spec(feeds: object, spec: SampleSpec | None = None) -> SampleSpec:
    """``spec`` (by default the defaults) with ``feeds``: one feed (a mapping of input name -> array)
    or a list of them; each value goes through ``np.asarray``. Anything else is a one-line
    :class:`DataError` saying what was expected."""
    listed: list[object]
    if isinstance(feeds, Mapping):
        listed = [feeds]
    elif isinstance(feeds, Sequence) and not isinstance(feeds, (str, bytes)) and feeds:
        listed = list(feeds)
    else:
        raise DataError(f"samples: expected a dict of input name -> numpy array, or a non-empty list of "
                        f"them; got {_type_name(feeds)}")
    out = []
    for i, feed in enumerate(listed):
        where = _feed_label(i, not isinstance(feeds, Mapping))
        if not isinstance(feed, Mapping):
            raise DataError(f"{where}: expected a dict of input name -> numpy array; got {_type_name(feed)}")
        arrays = {}
        for name, value in feed.items():
            if not isinstance(name, str):
                raise DataError(f"{where}: input names are strings; got {_type_name(name)} {name!r}")
            try:
                arrays[name] = np.asarray(value)
            except (TypeError, ValueError) as e:
                raise DataError(f"{where}: input '{name}' is not an array ({_type_name(value)}: {e})",
                                ) from None
        out.append(arrays)
    return replace(spec or SampleSpec(), inputs=None, feeds=tuple(out))


def _feed_label(index: int, listed: bool) -> str:
    """How messages name an in-memory feed: ``samples[i]`` in a list, else ``samples``."""
    return f"samples[{index}]" if listed else "samples"


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


@dataclass(frozen=True)
class Samples:
    feeds: tuple[dict[str, np.ndarray], ...]
    synthetic: bool
    source: str  # a one-line description for reports ("synthetic, seed 0, uniform [0, 1)", "data.npz")
    warnings: tuple[str, ...] = ()
    # (input, model shape) of each synthetic input whose batch dimension was set to 1
    guessed_shapes: tuple[tuple[str, str], ...] = ()


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


@dataclass(frozen=True)
class FeedForm:
    """How a model's feeds may differ from its declared inputs when it runs over many steps
    (:mod:`.generation`): the inputs a feed may leave out (``optional``: a KV cache, a state, a mask, which
    ``complete`` makes as the first step's, and synthetic feeds leave to it), and those whose last axis may
    be longer than declared (``open_last``: a streaming model's signal, fed a chunk at a time)."""

    optional: frozenset[str] = frozenset()
    open_last: frozenset[str] = frozenset()
    complete: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] | None = None

    def inputs(self, declared: list[InputInfo]) -> list[InputInfo]:
        """What a feed's arrays are checked against: ``declared``, each ``open_last`` input's last
        dimension open."""
        return [replace(i, dims=i.dims[:-1] + ("?",)) if i.name in self.open_last and i.dims else i
                for i in declared]


ONE_PASS = FeedForm()  # feeds of one forward pass: every input the model declares, as declared


def load_samples(model: onnx.ModelProto, spec: SampleSpec, form: FeedForm = ONE_PASS) -> Samples:
    """The feeds ``spec`` describes, checked against ``model``'s inputs (as ``form`` lets them differ,
    each feed completed by it before it is checked)."""
    inputs = form.inputs(model_inputs(model))
    complete = form.complete or dict
    located: Sequence[tuple[str, Mapping[str, np.ndarray]]]
    if spec.feeds:
        count = len(spec.feeds)
        located = [(_feed_label(i, count > 1), feed) for i, feed in enumerate(spec.feeds)]
        source = f"{count} {IN_MEMORY_FEEDS}" if count > 1 else IN_MEMORY_FEEDS
    elif spec.inputs is None:
        synthesised = [i for i in inputs if i.name not in form.optional]
        made = synthetic_samples(synthesised, spec, index_bounds(model))
        return replace(made, feeds=tuple(complete(feed) for feed in made.feeds))
    else:
        located, source = _read_feeds(spec.inputs, spec.option, inputs)
    warnings: list[str] = []
    feeds = []
    expected = {i.name: i for i in inputs}
    for where, given in located:
        for name, value in given.items():  # what the feed gives is the model's, before it is completed
            _check_array(where, expected, name, value.shape, value.dtype)
        try:
            feed = complete(given)
        except DataError as e:
            raise DataError(f"{where}: {e}") from None
        warnings.extend(validate_feed(feed, inputs, where))
        feeds.append(feed)
    return Samples(tuple(feeds), False, source, tuple(warnings))


def sample_files(spec: SampleSpec) -> tuple[str, ...]:
    """The files ``spec`` reads samples from (none when synthetic), so that no output overwrites them."""
    path = spec.inputs
    if path is None:
        return ()
    if os.path.isdir(path):
        return _npz_files(path)
    return (path,)


# --- reading --------------------------------------------------------------------------------------

# What the arrays of one sample source (an .npz, a directory of them, a Polygraphy JSON) may expand
# to, all its feeds together, read from the arrays' headers before anything is decompressed: a
# file's size says nothing of it (a 4 MB deflate .npz holds 4 GiB; a 1 KB bzip2 one, 1 GiB, took a
# run to 7.8 GB), and a run holds several times its samples (128 MiB of them took a two-node MLP's
# run to 1.4 GB). One feed at the model's own fixed sizes (symbolic dimensions 1) is always allowed,
# however large: the model cannot be verified on less.
MAX_SAMPLE_BYTES = 512 << 20


def _read_feeds(path: str, option: str, inputs: list[InputInfo],
                ) -> tuple[list[tuple[str, dict[str, np.ndarray]]], str]:
    """(where, feed) pairs, ``where`` naming the file (and the feed's index in a JSON list);
    ``option`` names the file in messages. Every array's header is checked against ``inputs``, and
    what they claim all together against :data:`MAX_SAMPLE_BYTES`, before any array is read."""
    npz, polygraphy_json = (replace(kind, option=option)
                            for kind in (user_files.NPZ, user_files.POLYGRAPHY_JSON))
    if not os.path.exists(path):
        if re.fullmatch(r"[^:\s]+:\[?\d+([x,]\d+)*\]?(,[^:\s]+:\[?\d+([x,]\d+)*\]?)*", path):
            raise DataError(f"{path}: no such file or directory; it reads like input shapes (Polygraphy's "
                            f"--inputs takes shapes): give them with --input-shapes {path}")
        raise DataError(f"{path}: no such file or directory")
    expected = {i.name: i for i in inputs}
    if os.path.isdir(path):
        files = _npz_files(path)
        if not files:
            raise DataError(f"{path}: directory contains no .npz files")
        _check_expansion(path, npz, sum(_npz_claims(f, npz, expected) for f in files), len(files), inputs)
        return [(f, _load_npz(f, npz)) for f in files], f"{path} ({len(files)} .npz files)"
    # The content decides, not the name: a JSON saved as inputs.dat is still a JSON.
    if user_files.read_bytes(path, npz, _HEAD).lstrip()[:1] in (b"[", b"{"):
        located = _read_polygraphy_json(path, polygraphy_json, inputs)
        return located, path if len(located) == 1 else f"{path} ({len(located)} feeds)"
    _check_expansion(path, npz, _npz_claims(path, npz, expected), 1, inputs)
    return [(path, _load_npz(path, npz))], path


def _npz_files(directory: str) -> tuple[str, ...]:
    try:
        names = sorted(os.listdir(directory))
    except PermissionError:
        raise DataError(f"{directory}: permission denied") from None
    return tuple(os.path.join(directory, f) for f in names if f.endswith(".npz"))


_HEAD = 64  # bytes read to tell an .npz from a JSON


def _check_expansion(path: str, kind: user_files.FileKind, claimed: int, feeds: int,
                     inputs: list[InputInfo]) -> None:
    """Refuse a source whose arrays' headers claim more than :data:`MAX_SAMPLE_BYTES` (or one feed at
    the model's fixed sizes, where that is more)."""
    bound = max(MAX_SAMPLE_BYTES, sum(_fixed_bytes(i) for i in inputs))
    if claimed > bound:
        raise kind.problem(path, f"its arrays expand to {user_files.size_text(claimed)} ({feeds} "
                                 f"feed{'s' if feeds > 1 else ''}), more than sample data can sensibly be "
                                 f"({user_files.size_text(bound)} at most, counted expanded, whatever the "
                                 f"file weighs); give fewer or smaller samples")


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
    _check_array(where, expected, name, shape, dtype)
    claimed = math.prod(shape) * dtype.itemsize
    stored = max(size - f.tell(), 0)
    if claimed > stored:
        held = user_files.size_text(stored)
        raise kind.problem(path, f"{what} claims a {_shape(shape)} {dtype} array "
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
                          ) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(where, feed) pairs of a Polygraphy JSON: a list of feeds, each input name ->
    ``{"array": payload, "polygraphy_class": "ndarray"}``. Decoded here as Polygraphy's decoder does
    (a base64 .npy; its legacy forms: latin-1 text, an .npz whose first array is the one) but through
    an .npz's checks: every payload's header against the model and the bytes it holds, and all of
    them against :data:`MAX_SAMPLE_BYTES`, before any array is decoded."""
    feeds = _json_feeds(path, kind, user_files.read_json(path, kind))
    located = [(path if len(feeds) == 1 else f"{path} (feed {i})", feed) for i, feed in enumerate(feeds)]
    expected = {i.name: i for i in inputs}
    claimed = sum(_payload_claim(path, kind, where, expected, name, payload)
                  for where, feed in located for name, payload in feed.items())
    _check_expansion(path, kind, claimed, len(feeds), inputs)
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


# --- checking -------------------------------------------------------------------------------------

def validate_feed(feed: Mapping[str, np.ndarray], inputs: list[InputInfo], where: str) -> list[str]:
    """Raise DataError for the first mismatch with the model; return warnings (NaN in the data)."""
    expected = {i.name: i for i in inputs}
    for name in feed:
        if name not in expected:
            _check_array(where, expected, name, feed[name].shape, feed[name].dtype)
    for info in inputs:
        if info.name not in feed:
            raise DataError(f"{where}: missing input '{info.name}' (shape {info.shape_text()}, {info.dtype})")
        _check_array(where, expected, info.name, feed[info.name].shape, feed[info.name].dtype)
    warnings = []
    for info in inputs:
        value = feed[info.name]
        if np.issubdtype(value.dtype, np.floating):
            nans = int(np.count_nonzero(np.isnan(value)))
            if nans:
                warnings.append(f"{where}: input '{info.name}' contains {nans} NaN value(s); "
                                f"the FP32 reference inherits them")
    return warnings


def _check_array(where: str, expected: Mapping[str, InputInfo], name: str, shape: tuple[int, ...],
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
        raise DataError(f"{where}: input '{name}' has rank {len(shape)} (shape {_shape(shape)}); "
                        f"the model expects rank {len(info.dims)} ({info.shape_text()})")
    for axis, (got, want) in enumerate(zip(shape, info.dims)):
        if isinstance(want, int) and want > 0 and got != want:
            raise DataError(f"{where}: input '{name}' has shape {_shape(shape)}; the model "
                            f"expects {info.shape_text()} (dimension {axis} must be {want})")


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


# --- synthetic feeds -------------------------------------------------------------------------------

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


def synthetic_samples(inputs: list[InputInfo], spec: SampleSpec, bounds: Mapping[str, int] | None = None,
                      ) -> Samples:
    """One seeded feed from the input metadata (see the module docstring for the defaults);
    ``bounds`` caps integer inputs that index a table (:func:`index_bounds`)."""
    bounds = bounds or {}
    known = {i.name for i in inputs}
    for flag, names in (("--input-shape", spec.input_shapes), ("--input-range", spec.input_ranges)):
        for name in names:
            if name not in known:
                raise DataError(f"{flag} {name}: the model has no input '{name}' (model inputs: "
                                f"{', '.join(sorted(known)) or 'none'})")
    unsized = [(info, axes) for info in inputs if info.name not in spec.input_shapes
               and (axes := unsized_axes(info))]
    if unsized:
        raise SymbolicDimensions(unsized)
    rng = np.random.default_rng(spec.seed)
    feed: dict[str, np.ndarray] = {}
    warnings: list[str] = []
    guessed = []
    batches = []
    int_ranges: dict[str, tuple[float, float]] = {}
    for info in inputs:
        given = spec.input_shapes.get(info.name)
        shape = _synthetic_shape(info, given)
        if given is None and info.dims is not None and info.dims and not _sized(info.dims[0]):
            guessed.append((info.name, info.shape_text()))
            batches.append(f"'{info.name}' batch dimension {info.dims[0]} set to 1")
        lo, hi = spec.input_ranges.get(info.name) or _default_range(info, bounds)
        if info.name not in spec.input_ranges and np.issubdtype(info.dtype, np.integer):
            int_ranges[info.name] = (lo, hi)
        try:
            feed[info.name] = _random(rng, info.dtype, shape, lo, hi)
        except (MemoryError, ValueError):  # numpy: no memory, or "array is too big" to address
            raise DataError(f"input '{info.name}': no memory for a synthetic {_shape(shape)} {info.dtype} "
                            f"array; give a smaller --input-shape") from None
    shown = {**spec.input_ranges, **int_ranges}
    ranges = ", ".join(f"{n}: [{lo:g}, {hi:g})" for n, (lo, hi) in shown.items())
    source = f"synthetic, seed {spec.seed}, uniform [{DEFAULT_RANGE[0]:g}, {DEFAULT_RANGE[1]:g})" + \
             (f" ({ranges})" if ranges else "") + "".join(f"; {b}" for b in batches) + \
             "; the ranges decide what overflows"
    return Samples((feed,), True, source, tuple(warnings), tuple(guessed))


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
            raise DataError(f"--input-shape {info.name}:{_shape(given)}: rank {len(given)}, but the model "
                            f"expects rank {len(info.dims)} ({info.shape_text()})")
        for axis, (got, want) in enumerate(zip(given, info.dims or ())):
            if isinstance(want, int) and want > 0 and got != want:
                raise DataError(f"--input-shape {info.name}:{_shape(given)}: dimension {axis} is fixed "
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
