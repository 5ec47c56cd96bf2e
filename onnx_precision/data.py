"""Sample data: the feeds the oracle runs (from files, or synthesised from the model's inputs).

Sources (``--inputs``): an ``.npz`` (one feed), a directory of ``.npz`` files (one feed each, in
file-name order), or a Polygraphy JSON as ``polygraphy run --save-inputs`` writes it (a list of
feeds, read with Polygraphy's own loader); from Python, feeds in memory (``SampleSpec(feeds=...)``,
a list of dicts of arrays, :func:`in_memory_spec`). Without ``--inputs`` one feed is synthesised from the
model's input metadata with a seeded generator: floats uniform in ``[0, 1)`` and integers in
``[0, 100)`` (or below the size of the table an integer input indexes) unless ``--input-range``
says otherwise, symbolic dimensions from ``--input-shape``. A size is never invented but for a
leading batch dimension (axis 0 of an input of rank 2 or more), which is 1 unless given and said so
in the samples' description: a detector verified on a 1x1 image is not verified
(:class:`SymbolicDimensions`, exit 2). What overflows depends on the ranges, so synthetic data is
always labelled. A file's format is told from its content, whatever its name.

Every feed is checked against the model: names, dtypes, ranks and fixed dimensions; a mismatch is
a one-line :class:`DataError` naming the source and the input. NaN inside sample data is a
warning naming the input (the FP32 reference will carry it; FP16 is not blamed for it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import math
import os
import re
import sys
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

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


def load_samples(model: onnx.ModelProto, spec: SampleSpec) -> Samples:
    """The feeds ``spec`` describes, checked against ``model``'s inputs."""
    inputs = model_inputs(model)
    located: Sequence[tuple[str, Mapping[str, np.ndarray]]]
    if spec.feeds:
        count = len(spec.feeds)
        located = [(_feed_label(i, count > 1), feed) for i, feed in enumerate(spec.feeds)]
        source = f"{count} {IN_MEMORY_FEEDS}" if count > 1 else IN_MEMORY_FEEDS
    elif spec.inputs is None:
        return synthetic_samples(inputs, spec, index_bounds(model))
    else:
        located, source = _read_feeds(spec.inputs, spec.option, inputs)
    warnings: list[str] = []
    for where, feed in located:
        warnings.extend(validate_feed(feed, inputs, where))
    return Samples(tuple(dict(feed) for _, feed in located), False, source, tuple(warnings))


def sample_files(spec: SampleSpec) -> tuple[str, ...]:
    """The files ``spec`` reads samples from (none when synthetic), so that no output overwrites them."""
    path = spec.inputs
    if path is None:
        return ()
    if os.path.isdir(path):
        return _npz_files(path)
    return (path,)


# --- reading --------------------------------------------------------------------------------------

def _read_feeds(path: str, option: str, inputs: list[InputInfo],
                ) -> tuple[list[tuple[str, dict[str, np.ndarray]]], str]:
    """(where, feed) pairs, ``where`` naming the file (and the feed's index in a JSON list);
    ``option`` names the file in messages; each array is checked against ``inputs`` before it is
    read."""
    npz, polygraphy_json = (replace(kind, option=option)
                            for kind in (user_files.NPZ, user_files.POLYGRAPHY_JSON))
    if not os.path.exists(path):
        if re.fullmatch(r"[^:\s]+:\[?\d+([x,]\d+)*\]?(,[^:\s]+:\[?\d+([x,]\d+)*\]?)*", path):
            raise DataError(f"{path}: no such file or directory; it reads like input shapes (Polygraphy's "
                            f"--inputs takes shapes): give them with --input-shapes {path}")
        raise DataError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        files = _npz_files(path)
        if not files:
            raise DataError(f"{path}: directory contains no .npz files")
        return [(f, _read_npz(f, npz, inputs)) for f in files], f"{path} ({len(files)} .npz files)"
    # The content decides, not the name: a JSON saved as inputs.dat is still a JSON.
    if user_files.read_bytes(path, npz, _HEAD).lstrip()[:1] in (b"[", b"{"):
        feeds = _read_polygraphy_json(path, polygraphy_json)
        if len(feeds) == 1:
            return [(path, feeds[0])], path
        return [(f"{path} (feed {i})", feed) for i, feed in enumerate(feeds)], f"{path} ({len(feeds)} feeds)"
    return [(path, _read_npz(path, npz, inputs))], path


def _npz_files(directory: str) -> tuple[str, ...]:
    try:
        names = sorted(os.listdir(directory))
    except PermissionError:
        raise DataError(f"{directory}: permission denied") from None
    return tuple(os.path.join(directory, f) for f in names if f.endswith(".npz"))


_HEAD = 64  # bytes read to tell an .npz from a JSON


def _read_npz(path: str, kind: user_files.FileKind, inputs: list[InputInfo]) -> dict[str, np.ndarray]:
    # Checked before np.load: it returns a bare array for an .npy, and takes anything that is
    # not a zip for a pickle and says so, which misleads about a text or ONNX file given by mistake.
    head = user_files.read_bytes(path, kind, _HEAD)
    if head.startswith(b"\x93NUMPY"):
        raise kind.problem(path, "not an .npz archive (a single array; save feeds with np.savez)")
    if not head.startswith(b"PK") or not zipfile.is_zipfile(path):
        raise kind.problem(path, "cannot read as .npz: not a zip archive, nor a Polygraphy JSON (save feeds "
                                 "with np.savez, or with polygraphy run --save-inputs)")
    try:
        _check_npz_headers(path, kind, inputs)
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
            RuntimeError) as e:
        # members are read lazily: a damaged archive fails here, on its CRC, header, version,
        # compression method or encryption flag (zipfile's RuntimeError)
        raise kind.problem(path, f"cannot read as .npz: {_first_line(e)}") from e
    except MemoryError:  # the headers hold what they claim, but not in this machine's memory
        raise kind.problem(path, "no memory to read its arrays") from None


def _claimed_bytes(path: str, kind: user_files.FileKind, what: str, shape: tuple[int, ...], dtype: np.dtype,
                   stored: int) -> int:
    """The bytes an .npy header of ``shape`` and ``dtype`` claims; more than the ``stored`` bytes
    that follow the header is a lie that np.load would allocate before finding out."""
    claimed = math.prod(shape) * dtype.itemsize
    if claimed > stored:
        raise kind.problem(path, f"{what} claims a {_shape(shape)} {dtype} array "
                                 f"({user_files.size_text(claimed)}) but holds "
                                 f"{user_files.size_text(max(stored, 0))}")
    return claimed


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _check_npz_headers(path: str, kind: user_files.FileKind, inputs: list[InputInfo]) -> None:
    """Check each member's array header against the model's inputs and against the bytes the member
    holds, before np.load allocates what the header claims (a 300-byte file may claim 10^12 floats)."""
    expected = {i.name: i for i in inputs}
    total = 0
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            name = member.filename.removesuffix(".npy")
            if name == member.filename:
                raise kind.problem(path, f"member '{member.filename}' is not an array (.npy); save feeds "
                                         f"with np.savez")
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                if version not in _NPY_HEADERS:
                    raise kind.problem(path, f"member '{member.filename}': .npy format "
                                             f"{version[0]}.{version[1]} (np.savez writes 1.0 or 2.0)")
                shape, _, dtype = _NPY_HEADERS[version](f)
                stored = member.file_size - f.tell()
            if dtype.hasobject:
                raise kind.problem(path, f"member '{member.filename}' holds Python objects (a pickle, never "
                                         f"loaded); feeds are numeric arrays")
            _check_array(path, expected, name, shape, dtype)
            total += _claimed_bytes(path, kind, f"member '{member.filename}'", shape, dtype, stored)
    if kind.max_bytes is not None and total > kind.max_bytes:
        raise kind.problem(path, f"its arrays hold {user_files.size_text(total)}, more than an {kind.what} "
                                 f"can sensibly be ({user_files.size_text(kind.max_bytes)} at most)")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_ARRAY_CLASS = "ndarray"  # the polygraphy_class of a numpy array: the one a feed holds
_ENCODED_HEAD = 16384  # base64 characters decoded to read an array's .npy header (numpy's cap is 10000 bytes)


def _check_encoded_arrays(path: str, kind: user_files.FileKind, tree: object) -> None:
    """Check every object of Polygraphy's JSON that names a ``polygraphy_class`` before Polygraphy's
    decoder builds it: only arrays make feeds, and each array's header must not claim more than its
    payload holds (np.load allocates what the header says before reading)."""
    stack: list[tuple[str, object]] = [("", tree)]
    while stack:  # not recursive: nesting is as deep as the JSON parser allowed
        key, node = stack.pop()
        if isinstance(node, list):
            stack.extend((key, item) for item in node)
        elif isinstance(node, dict):
            kind_name = node.get("polygraphy_class")
            if kind_name is None:
                stack.extend((str(k), v) for k, v in node.items())
            elif kind_name != _ARRAY_CLASS:
                raise kind.problem(path, f"'{key}' is a serialized {str(kind_name)!r} (polygraphy_class), "
                                         f"not an array; feeds are arrays, as 'polygraphy run --save-inputs' "
                                         f"writes them")
            elif isinstance(node.get("array"), str):
                _check_encoded_array(path, kind, key, node["array"])


def _check_encoded_array(path: str, kind: user_files.FileKind, key: str, payload: str) -> None:
    """The .npy header at the start of a base64 ``payload`` against the bytes the payload holds (a
    payload that is not base64, Polygraphy's legacy latin-1 form, is left to Polygraphy)."""
    try:
        head = base64.b64decode(payload[:_ENCODED_HEAD - _ENCODED_HEAD % 4], validate=True)
        f = io.BytesIO(head)
        version = np.lib.format.read_magic(f)
        shape, _, dtype = _NPY_HEADERS[version](f)
    except (ValueError, KeyError, binascii.Error):
        return  # not an .npy in base64: Polygraphy's decoder says what it is
    _claimed_bytes(path, kind, f"array '{key}'", shape, dtype, len(payload) * 3 // 4 - payload[-2:].count("=")
                   - f.tell())


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


def _read_polygraphy_json(path: str, kind: user_files.FileKind) -> list[dict[str, np.ndarray]]:
    from polygraphy.json import from_json
    from polygraphy.logger import G_LOGGER
    text = user_files.read_text(path, kind)
    _check_encoded_arrays(path, kind, user_files.parse_json(text, path, kind))
    try:
        # Polygraphy's logger prints to stdout (its "[I] Loading..." lines, a note that 'colored'
        # is missing) and its errors to stderr before raising them: its exception says it once.
        with contextlib.redirect_stdout(sys.stderr), G_LOGGER.verbosity(G_LOGGER.CRITICAL + 1):
            data = from_json(text)
    except MemoryError:
        raise kind.problem(path, "no memory to decode its arrays") from None
    except Exception as e:  # Polygraphy raises its own exception types for bad files
        raise kind.problem(path, f"cannot read as Polygraphy JSON: {_first_line(e)}") from e
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(f, Mapping) for f in data):
        raise DataError(f"{path}: expected a list of feeds (name -> array), "
                        f"as 'polygraphy run --save-inputs' writes")
    feeds = []
    for feed in data:
        if not all(isinstance(v, np.ndarray) for v in feed.values()):
            raise DataError(f"{path}: a feed holds something other than arrays")
        feeds.append({str(k): v for k, v in feed.items()})
    return feeds


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
