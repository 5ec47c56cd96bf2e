"""TensorRT 10's per-layer precision flags, read back into FP32 pins for a Cast-pinned model.

TensorRT 10.12 deprecates and 11.0 removes trtexec's ``--layerPrecisions``/``--layerOutputTypes``
(Polygraphy's ``--layer-precisions`` sets the same builder field): a layer kept in FP32 by name for
TensorRT 10 must become a node kept in FP32 by Casts, which TensorRT 11 builds as written (strongly
typed). This module reads the flags and names the nodes; :func:`layer_pins` is the inverse of
:mod:`.flags`, which writes them for a plan.

The syntax is trtexec's (10.11 ``sampleOptions.cpp``): a comma list of ``layer:precision``, the name
being everything before the last ``:`` (or quoted, ``'name':precision``, quotes removed), a later entry
for a name replacing an earlier one, and at most one ``*`` per name (``matchStringWithOneWildcard``:
a prefix, anything, a suffix). A layer takes its exact entry, else a pattern's (``findPlausible``: the
first match in an unordered map, so which of two overlapping patterns won was arbitrary; here the more
specific one decides, and the run says so). ``--layerOutputTypes`` has the same form with
``type[+type...]``, one type per output. Polygraphy's ``--layer-precisions`` takes one
``layer:dtype`` per argument with TensorRT's Python names (``float32``, ``float16``); both are read
alike. A name is the one onnx-tensorrt gives (:mod:`.naming`) in any release that had the flags: the
node's name (``node_of_<first output>`` when unnamed), its further layers ``<name>_<k>``. As ``k``
depends on what the whole network registered before, an exact ``<name>_<k>`` names node ``<name>``
even where no release predicts that ``k``.

A layer asked in FP32 pins its node (a node is pinned whole: any FP32 layer keeps it FP32); so does an
FP32 output type, as a Cast-pinned node cannot compute in 16 bits and store FP32. The run's 16-bit type
(``fp16``) leaves a layer to the plan; any other type (int8, fp8, bf16 in an FP16 run) cannot be
written and is an error, as is a name or pattern that matches no layer (with the nearest names).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import onnx

from .. import user_files
from ..errors import UsageError
from ..float_types import LOW_PRECISIONS
from ..graph import walk_nodes
from ..plan import Reason
from ..render import from_ansi_c
from .naming import LayersCache, trt_layer_names
from .ops import variant_for
from .versions import RELEASES, TrtVersion

FP32 = "fp32"
PRECISION, OUTPUT_TYPE = "precision", "output type"  # trtexec keeps one map of each

# trtexec's type names (stringToValue<DataType>) and Polygraphy's (TensorRT's Python aliases).
_TRTEXEC_TYPES = (FP32, "fp16", "bf16", "int8", "fp8", "int4", "fp4", "int32", "int64", "bool", "uint8")
_TYPES = {**{t: t for t in _TRTEXEC_TYPES}, "float32": FP32,
          **{low.type_name: precision for precision, low in LOW_PRECISIONS.items()}}
_FLOAT_TYPES = (FP32, *LOW_PRECISIONS)
# An output type of a non-float output (an ArgMax's int32, a comparison's bool) says nothing of floats.
_NOT_FLOAT = frozenset({"int32", "int64", "bool", "uint8"})
_EXAMPLE = "e.g. sca_conv:fp32,head*:fp32 (trtexec) or sca_conv:float32 (Polygraphy)"
_SUFFIXED = re.compile(r"(.+)_\d+")
_NEAREST = 3


@dataclass(frozen=True)
class LayerSpec:
    """One entry: a layer name or a pattern with one ``*``, the type asked (``fp32``, ``fp16``,
    ``bf16``), whether it is a precision or an output type, and where it was read (``source``,
    ``text``: the option and the entry as written, for reasons and messages)."""

    layer: str
    precision: str
    kind: str
    source: str
    text: str

    @property
    def is_pattern(self) -> bool:
        return "*" in self.layer

    @property
    def specificity(self) -> int:
        """How much of a name the pattern fixes (its characters besides the ``*``)."""
        return len(self.layer) - self.layer.count("*")

    def matches(self, name: str) -> bool:
        """matchStringWithOneWildcard: equal, or ``prefix*suffix`` around anything."""
        prefix, star, suffix = self.layer.partition("*")
        if not star:
            return name == self.layer
        return len(name) >= len(prefix) + len(suffix) and name.startswith(prefix) and name.endswith(suffix)

    def said(self) -> str:
        return f"{self.source} {self.text}".strip()


@dataclass(frozen=True)
class LayerFlags:
    """TensorRT 10's per-layer flags as given: ``--layerPrecisions`` values (or Polygraphy
    ``--layer-precisions`` arguments), ``--layerOutputTypes`` values, and a file of command lines."""

    precisions: tuple[str, ...] = ()
    output_types: tuple[str, ...] = ()
    file: str | None = None

    def __bool__(self) -> bool:
        return bool(self.precisions or self.output_types or self.file)

    def specs(self) -> Iterator[LayerSpec]:
        """Every entry, parsed as it is read (the file's after the options'), so that
        :func:`layer_pins` refuses an unknown first name before the rest of a long file is parsed."""
        given = [spec for text in self.precisions for spec in parse_spec(text, "--layer-precisions")]
        given += [spec for text in self.output_types
                  for spec in parse_spec(text, "--layer-output-types", output_types=True)]
        return itertools.chain(given, _file_specs(self.file) if self.file else ())


def parse_spec(text: str, source: str = "--layer-precisions", *, output_types: bool = False,
               ) -> tuple[LayerSpec, ...]:
    """The entries of one ``--layerPrecisions`` value (trtexec's comma list) or one Polygraphy
    ``layer:dtype`` argument; with ``output_types``, of a ``--layerOutputTypes`` value. An entry
    whose outputs are all non-float says nothing and is dropped."""
    return tuple(_parsed(text, source, output_types))


def _parsed(text: str, source: str, output_types: bool) -> Iterator[LayerSpec]:
    """:func:`parse_spec`'s entries, one by one."""
    entries = _entries(text)
    if not entries:
        raise UsageError(f"{source} '{text}': no LAYER:PRECISION in it ({_EXAMPLE})")
    for entry in entries:
        name, value = _split(entry, source)
        kind = OUTPUT_TYPE if output_types else PRECISION
        precision = _output_type(value, entry, source) if output_types else _precision(value, entry, source)
        if precision:
            yield LayerSpec(name, precision, kind, source, entry)


def _entries(text: str) -> list[str]:
    """trtexec's split on ',', except that a piece with no ':' belongs to the next one: a Polygraphy
    argument is one entry, and its name may hold commas. Linear in the text: pieces are joined
    once, not grown one by one."""
    entries: list[str] = []
    pending: list[str] = []
    for piece in text.split(","):
        if not piece.strip() and not pending:
            continue
        pending.append(piece)
        if ":" in piece:
            entries.append(",".join(pending).strip())
            pending = []
    left = ",".join(pending)
    return entries + ([left.strip()] if left.strip(", ") else [])


def _split(entry: str, source: str) -> tuple[str, str]:
    """splitNameAndValue: ``'name':value`` (quotes removed) or the last ':'."""
    if "'" in entry:
        parts = entry.split("'")
        if len(parts) != 3 or not parts[2].startswith(":"):
            raise UsageError(f"{source} '{entry}': a quoted name is written 'NAME':PRECISION")
        name, value = parts[0] + parts[1], parts[2][1:]
    else:
        name, sep, value = entry.rpartition(":")
        if not sep:
            raise UsageError(f"{source} '{entry}': expected LAYER:PRECISION ({_EXAMPLE})")
    if not name:
        raise UsageError(f"{source} '{entry}': no layer name before ':'")
    if name.count("*") > 1:
        raise UsageError(f"{source} '{entry}': a name holds at most one '*' (trtexec's wildcard)")
    return name, value


def _type(value: str, entry: str, source: str) -> str:
    found = _TYPES.get(value.strip().lower())
    if found is None:
        raise UsageError(f"{source} '{entry}': '{value}' is not a TensorRT type (trtexec: fp32, fp16, bf16, "
                         f"int8, ...; Polygraphy: float32, float16, ...)")
    return found


def _not_written(found: str, entry: str, source: str) -> UsageError:
    return UsageError(f"{source} '{entry}': a layer in {found} cannot be written: the model is written in "
                      f"the run's 16-bit type with FP32 pins (fp32 or float32 pins a layer; fp16 or float16 "
                      f"leaves it to the plan)")


def _precision(value: str, entry: str, source: str) -> str:
    found = _type(value, entry, source)
    if found not in _FLOAT_TYPES:
        raise _not_written(found, entry, source)
    return found


def _output_type(value: str, entry: str, source: str) -> str:
    """An entry's types reduced to what they ask of float outputs: fp32 if any output must be FP32,
    the 16-bit type if all float outputs are 16-bit, "" if the layer has no float output."""
    types = [_type(t, entry, source) for t in value.split("+")]
    floats = [t for t in types if t not in _NOT_FLOAT]
    bad = [t for t in floats if t not in _FLOAT_TYPES]
    if bad:
        raise _not_written(bad[0], entry, source)
    return FP32 if FP32 in floats else floats[0] if floats else ""


# option -> whether it holds output types
_FILE_FLAGS = {"--layerPrecisions": False, "--layer-precisions": False, "--layerOutputTypes": True,
               "--layer-output-types": True}


def read_spec_file(path: str) -> tuple[LayerSpec, ...]:
    """Every ``--layerPrecisions``/``--layerOutputTypes`` value of the trtexec command lines in
    ``path`` and every ``--layer-precisions`` argument of its Polygraphy lines: a build script, or a
    ``--trt-flags`` file (whose lines per release are read together: their pins are one set)."""
    return tuple(_file_specs(path))


def _file_specs(path: str) -> Iterator[LayerSpec]:
    """:func:`read_spec_file`'s entries, yielded as each line is parsed."""
    text = user_files.read_text(path, user_files.LAYER_PRECISIONS)
    found = False
    for line in text.replace("\\\n", " ").splitlines():
        try:
            tokens = _shell_words(line)
        except ValueError as e:
            raise user_files.LAYER_PRECISIONS.problem(path, f"{e} in '{line.strip()}'") from None
        for flag, values in _flag_values(tokens):
            source = f"{path}: {flag}"
            for value in values:
                for spec in _parsed(value, source, _FILE_FLAGS[flag]):
                    found = True
                    yield spec
    if not found:
        raise user_files.LAYER_PRECISIONS.problem(
            path, "no --layerPrecisions, --layerOutputTypes or --layer-precisions in it")


# One piece of a shell word: '...' (literal), "..." (\" and \\ escaped), $'...' (ANSI-C: how the flags
# files we write quote a name holding a control character, render.for_shell), \c (c itself), or plain text.
_WORD_PART = re.compile(r"""'(?P<single>[^']*)'|"(?P<double>(?:[^"\\]|\\.)*)"|\$'(?P<ansi>(?:[^'\\]|\\.)*)'"""
                        r"""|\\(?P<escaped>.)|(?P<plain>[^\s'"\\$]+|\$)""", re.DOTALL)
_SPACE = re.compile(r"\s+")


def _shell_words(line: str) -> list[str]:
    """``line`` split into words as a POSIX shell does (``shlex.split(line, comments=True)``, with bash's
    ``$'...'``, but linear in the line: shlex grows each word one character at a time, quadratic in a
    word of a 100 000-entry ``--layerPrecisions``). A ``#`` starts a comment at the start of a word only,
    as in the shell (shlex also takes one inside a word). An unclosed quote is a ValueError."""
    words: list[str] = []
    at = _skip_space(line, 0)
    while at < len(line) and line[at] != "#":
        parts = []
        while at < len(line) and not line[at].isspace():
            part = _WORD_PART.match(line, at)
            if part is None:
                raise ValueError("No escaped character" if line[at] == "\\" else "No closing quotation")
            double, ansi = part.group("double", "ansi")
            parts.append(re.sub(r'\\(["\\])', r"\1", double) if double is not None else
                         from_ansi_c(ansi) if ansi is not None else
                         next(g for g in part.group("single", "escaped", "plain") if g is not None))
            at = part.end()
        words.append("".join(parts))
        at = _skip_space(line, at)
    return words


def _skip_space(line: str, at: int) -> int:
    space = _SPACE.match(line, at)
    return space.end() if space else at


def _flag_values(tokens: Sequence[str]) -> Iterable[tuple[str, list[str]]]:
    """(flag, values) of each per-layer flag in one command line: ``--flag=value``, or ``--flag`` and
    the arguments up to the next option."""
    for i, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        if flag not in _FILE_FLAGS:
            continue
        if eq:
            yield flag, [value]
            continue
        values = []
        for arg in tokens[i + 1:]:
            if arg.startswith("-"):
                break
            values.append(arg)
        yield flag, values


@dataclass(frozen=True)
class LayerPins:
    """What a spec pins: node -> the reasons it stays FP32 (for
    :meth:`~onnx_precision.plan.PrecisionPlan.with_fp32_reasons`), and notes for the user."""

    reasons: Mapping[str, tuple[Reason, ...]]
    notes: tuple[str, ...] = ()


class _ModelLayers:
    """Every node's layer names over the releases that had the flags, found by name."""

    def __init__(self, model: onnx.ModelProto, renamed: Sequence[tuple[str, str]]) -> None:
        originals = {new: old for old, new in renamed}
        self.names: dict[str, set[str]] = {}   # node -> its base and its layers' names in any release
        self.bases: dict[str, list[str]] = {}  # base -> its nodes, in onnx-tensorrt's order
        self.owners: dict[str, set[str]] = {}  # a layer's name in some release -> its nodes
        cache: LayersCache = {}
        for version in _distinct_releases(model):
            for n in trt_layer_names(model, version, original_names=originals, cache=cache):
                if n.node not in self.names:
                    self.names[n.node] = {n.base}
                    self.bases.setdefault(n.base, []).append(n.node)
                self.names[n.node].update(n.named)
                for name in n.named:
                    self.owners.setdefault(name, set()).add(n.node)

    def nodes_called(self, name: str) -> list[str]:
        """The nodes an exact name reaches: the first node of that name (TensorRT gives the bare name
        to the first), else the nodes a release gives a layer of that name, else, for
        ``<name>_<k>``, the nodes called ``<name>`` (``k`` is not predictable)."""
        if name in self.bases:
            return self.bases[name][:1]
        if name in self.owners:
            return [n for n in self.names if n in self.owners[name]]
        suffixed = _SUFFIXED.fullmatch(name)
        return list(self.bases.get(suffixed.group(1), ())) if suffixed else []

    def nearest(self, spec: LayerSpec) -> list[str]:
        """The node names closest to the entry's (a layer's ``_<k>`` is no better a guess)."""
        wanted = spec.layer.replace("*", "")
        return difflib.get_close_matches(wanted, sorted(self.bases), n=_NEAREST, cutoff=0.5)


def _distinct_releases(model: onnx.ModelProto) -> list[TrtVersion]:
    """The releases of :data:`RELEASES` that import the model's ops differently (one of each)."""
    ops = sorted({ref.node.op_type for ref in walk_nodes(model.graph)})
    seen: dict[tuple[int, ...], TrtVersion] = {}
    for version in RELEASES:
        seen.setdefault(tuple(id(variant_for(op, version)) for op in ops), version)
    return list(seen.values())


def layer_pins(model: onnx.ModelProto, specs: Iterable[LayerSpec], *, renamed: Sequence[tuple[str, str]] = (),
               low: str = "fp16") -> LayerPins:
    """The nodes of ``model`` that ``specs`` keep in FP32, as TensorRT 10 would have read them, with
    each pin's reason. ``renamed`` is the loader's (old, new) node renames (layers are named after the
    names in the file); ``low`` the run's 16-bit type, the one other precision a spec may ask.
    A name or pattern that reaches no layer is a :class:`UsageError` with the nearest names."""
    layers = _ModelLayers(model, renamed)
    exact: dict[str, dict[tuple[str, str], LayerSpec]] = {}  # node -> (kind, layer name) -> entry
    patterns: dict[tuple[str, str], LayerSpec] = {}         # (kind, pattern) -> entry, later replacing
    first_entry: dict[str, LayerSpec] = {}                   # pattern -> its first entry, for messages
    notes: list[str] = []
    try:
        for spec in specs:
            if spec.precision not in (FP32, low):
                raise _not_written(spec.precision, spec.text, spec.source)
            if spec.is_pattern:
                patterns[(spec.kind, spec.layer)] = spec
                first_entry.setdefault(spec.layer, spec)
                continue
            nodes = layers.nodes_called(spec.layer)
            if not nodes:
                raise _unmatched(spec, layers.nearest(spec))
            if len(nodes) > 1 and spec.precision == FP32:
                notes.append(f"{spec.source} '{spec.text}': '{spec.layer}' may be a layer of any of "
                             f"{', '.join(nodes)} (named alike in the file): all are pinned")
            for node in nodes:
                exact.setdefault(node, {})[(spec.kind, spec.layer)] = spec
    except UsageError as error:  # a pattern before the entry at fault that matches nothing is said first
        raise _unreached(layers, _Patterns(patterns.values()), first_entry.values()) or error from None
    index = _Patterns(patterns.values())
    unreached = _unreached(layers, index, first_entry.values())
    if unreached is not None:
        raise unreached
    reasons: dict[str, tuple[Reason, ...]] = {}
    clashes: dict[tuple[LayerSpec, tuple[LayerSpec, ...]], list[str]] = {}
    for node, names in layers.names.items():
        own = exact.get(node, {})
        found: dict[LayerSpec, list[str]] = {}  # entry -> the node's layers it pins
        for kind in (PRECISION, OUTPUT_TYPE):
            for name in sorted(names | {n for k, n in own if k == kind}):
                decided = own.get((kind, name)) or _pattern_for(name, kind, index, clashes)
                if decided is not None and decided.precision == FP32:
                    found.setdefault(decided, []).append(name)
        if found:
            reasons[node] = tuple(_reason(spec, pinned) for spec, pinned in found.items())
    for (best, others), clashing in clashes.items():
        more = ["..."] if len(clashing) > _NEAREST else []
        listed = ", ".join([f"'{n}'" for n in clashing[:_NEAREST]] + more)
        rivals = ", ".join(f"'{p.text}'" for p in others)
        notes.append(f"{len(clashing)} layer(s) ({listed}) match '{best.text}' and {rivals}: trtexec took "
                     f"either (it looks patterns up in an unordered map); '{best.text}', the most specific, "
                     f"decides here")
    return LayerPins(reasons, tuple(dict.fromkeys(notes)))


class _Patterns:
    """The patterns of a spec (``prefix*suffix``, in the order given), found for a layer name by its own
    ends: one dict lookup per distinct (prefix length, suffix length) among the patterns, however many
    they are. Trying each pattern on each layer took 20 000 patterns over a 20 000-node model past
    120 s (scripts/bench_layer_precisions.py)."""

    def __init__(self, patterns: Iterable[LayerSpec]) -> None:
        self.patterns = list(patterns)
        self._by_ends: dict[tuple[str, str], list[int]] = {}  # (prefix, suffix) -> positions
        for at, spec in enumerate(self.patterns):
            prefix, _, suffix = spec.layer.partition("*")
            self._by_ends.setdefault((prefix, suffix), []).append(at)
        self._lengths = sorted({(len(prefix), len(suffix)) for prefix, suffix in self._by_ends})

    def matching(self, name: str) -> list[LayerSpec]:
        """The patterns that match ``name`` (:meth:`LayerSpec.matches`), in the order given."""
        found = [at for prefix, suffix in self._lengths if prefix + suffix <= len(name)
                 for at in self._by_ends.get((name[:prefix], name[len(name) - suffix:]), ())]
        return [self.patterns[at] for at in sorted(found)]


def _unreached(layers: _ModelLayers, index: _Patterns, entries: Iterable[LayerSpec]) -> UsageError | None:
    """The error of the first of ``entries`` whose pattern (one of ``index``'s) matches no layer of any
    release, or None. Patterns are matched once, all together, after the entries are read: an entry
    at fault before the end is said after the patterns before it, as trtexec's order has it."""
    reached = {p.layer for names in layers.names.values() for name in names for p in index.matching(name)}
    first = next((p for p in entries if p.layer not in reached), None)
    return None if first is None else _unmatched(first, layers.nearest(first))


def _pattern_for(name: str, kind: str, patterns: _Patterns,
                 clashes: dict[tuple[LayerSpec, tuple[LayerSpec, ...]], list[str]]) -> LayerSpec | None:
    """The pattern that decides layer ``name``: the most specific that matches it (FP32 on a tie).
    Where matching patterns disagree, trtexec picked one of them arbitrarily: ``name`` is recorded
    in ``clashes`` under the patterns."""
    matching = [p for p in patterns.matching(name) if p.kind == kind]
    if not matching:
        return None
    best = max(matching, key=lambda p: (p.specificity, p.precision == FP32))
    if len({p.precision for p in matching}) > 1:
        clashes.setdefault((best, tuple(p for p in matching if p is not best)), []).append(name)
    return best


def _reason(spec: LayerSpec, names: Sequence[str]) -> Reason:
    if list(names) == [spec.layer]:
        return Reason("user", spec.said())
    return Reason("user", f"{spec.said()} (layer{'s' if len(names) > 1 else ''} {', '.join(names)})")


def _unmatched(spec: LayerSpec, nearest: list[str]) -> UsageError:
    what = f"the pattern '{spec.layer}' matches no layer" if spec.is_pattern else \
        f"no layer is called '{spec.layer}'"
    hint = (f"nearest: {', '.join(nearest)}" if nearest else
            "layers are named after the ONNX nodes, node_of_<first output> for an unnamed one")
    return UsageError(f"{spec.source} '{spec.text}': {what} in the model ({hint})")
