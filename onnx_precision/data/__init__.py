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
(:class:`.synthetic.SymbolicDimensions`, exit 2). What overflows depends on the ranges, so synthetic data is
always labelled. A file's format is told from its content, whatever its name.

Every feed is checked against the model: names, dtypes, ranks and fixed dimensions; a mismatch is
a one-line :class:`DataError` naming the source and the input. A file's arrays are checked on their
headers before any is read, and bounded by what they expand to, not by what the file weighs
(:data:`.files.MAX_SAMPLE_BYTES`, all feeds of a source together; more under a memory budget,
:func:`.files.sample_bound`). NaN inside sample data is a warning naming the input (the FP32 reference
will carry it; FP16 is not blamed for it).

By job: where feeds come from and loading them, here (:class:`SampleSpec`, :func:`load_samples`, and
:class:`FeedForm`, how a generation's feeds differ from one forward pass's); what a feed must hold and the
checks of an array against it (:mod:`.inputs`); sample files read (:mod:`.files`); synthetic feeds
(:mod:`.synthetic`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from ..errors import DataError, UsageError
from ..options import budget_problem
from .files import npz_files, read_feeds
from .inputs import InputInfo, check_array, model_inputs, shape_problem, shape_text, validate_feed
from .synthetic import index_bounds, synthetic_feed


@dataclass(frozen=True)
class SampleSpec:
    """Where feeds come from. ``inputs`` is an .npz (one feed), a directory of .npz (one feed
    each) or a Polygraphy JSON (``polygraphy run --save-inputs``); ``feeds`` are feeds in memory
    (input name -> array each); with neither, synthetic feeds from the model's input metadata, seeded.
    ``memory_budget``, the memory the run may hold, raises the bound on what a file's arrays may expand to
    (:func:`.files.sample_bound`); ``convert``, ``check`` and ``analyze`` set it from their
    :attr:`..options.Judging.memory_budget` (``--memory-budget``)."""

    inputs: str | None = None
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    feeds: tuple[Mapping[str, np.ndarray], ...] = ()
    option: str = "--inputs"  # the option that names ``inputs``, in messages about the file
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        problem = budget_problem(self.memory_budget)
        if problem:
            raise UsageError(f"--memory-budget {self.memory_budget!r}: expected {problem}")
        if self.inputs is not None and self.feeds:
            raise DataError(f"samples: both a file ({self.inputs}) and {len(self.feeds)} feed(s) in memory; "
                            f"give one")
        for name, shape in self.input_shapes.items():
            problem = shape_problem(shape)
            if problem:
                raise DataError(f"--input-shape {name}:{shape_text(shape)}: {problem}")


def command_spec(samples: object, memory_budget: int | None) -> SampleSpec:
    """A command's ``samples`` option, once it is a :class:`SampleSpec` (else a one-line UsageError), with
    the run's ``memory_budget`` (its Judging's, the one value: a spec's own gives way to it)."""
    if not isinstance(samples, SampleSpec):
        raise UsageError(f"samples {samples!r}: expected an onnx_precision.data.SampleSpec")
    return replace(samples, memory_budget=memory_budget)


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
        made = synthetic_feed(synthesised, spec.seed, spec.input_shapes, spec.input_ranges,
                              index_bounds(model))
        return Samples((complete(made.feed),), True, made.source, guessed_shapes=made.guessed_shapes)
    else:
        located, source = read_feeds(spec.inputs, spec.option, inputs, spec.memory_budget)
    warnings: list[str] = []
    feeds = []
    expected = {i.name: i for i in inputs}
    for where, given in located:
        for name, value in given.items():  # what the feed gives is the model's, before it is completed
            check_array(where, expected, name, value.shape, value.dtype)
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
        return npz_files(path)
    return (path,)
