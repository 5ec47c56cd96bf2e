"""What the oracle sees inside a model: per-tensor FP32 ranges and per-node FP16 error.

* :func:`reference_stats`: one FP32 run per sample that sees every float tensor of the main graph;
  per tensor the worst case over samples of max |x|, smallest nonzero |x|, the fraction of nonzero
  values FP16 flushes to zero, NaN/Inf counts; and the first node whose output turns non-finite
  from finite inputs in FP32 itself (that is the FP32 model's fault, never FP16's).
* :func:`layerwise`: per sample, the FP32 run and the plan's emulated run side by side; per node
  the error of its output against FP32 (scale-relative, as in :mod:`onnx_precision.judge.compare`) and
  the *first-divergence* nodes: where a value turns non-finite from finite inputs (an overflow
  happens there, even downstream of another one), or where a finite error above the tolerance's
  rtol appears while the node's inputs were still within it. Those are the search's first
  candidates. A tensor whose shape differs from FP32's (a duration rounded the other way sets the
  length of a Range) is a divergence too: the first node whose output is reshaped is named with the
  decision upstream that flipped (:data:`.twin.DECISIONS`), which joins the first candidates, and the
  nodes feeding that decision come first in the widening order. Where the plan's run itself stops on
  such shapes (two tensors no longer broadcast), no node's error is measured: the decisions that
  flipped (:class:`.blame.Decisions`) are named and are the first candidates.

Both run on an :class:`Inspectable`: a runner that can expose its intermediates (the emulation,
:class:`.emulator.Emulator` or :class:`.emulation_session.EmulationSession`); a runner offers them as its
``inspection`` (:class:`Inspector`), an optional capability. Where the runner has a twin graph
(:mod:`.twin`), one run per sample gives both, large tensors reduced to numbers inside the graph as
soon as they are made. Otherwise each run's tensors are reduced to numbers here and dropped before
the next run, so memory holds one run's (or one chunk's) intermediates at a time, whatever the
number of samples.

This module runs the inspection; what it finds, and how a tensor's numbers become it, are
:mod:`.ranges` (:class:`.ranges.TensorStats`, :class:`.ranges.ReferenceResult`) and
:mod:`.layerwise_error` (:class:`.layerwise_error.NodeError`, :class:`.layerwise_error.ShapeChange`,
:class:`.layerwise_error.LayerwiseResult`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx

from ..errors import InternalError
from ..float_types import LowPrecision
from ..judge import Tolerance
from ..plan import PrecisionPlan
from .blame import ShapesDiverged
from .layerwise_error import (
    CLOSE,
    RESHAPED,
    LayerwiseResult,
    NodeError,
    ShapeChange,
    TensorError,
    changed_shapes,
    merge_errors,
    tensor_error,
)
from .ranges import (
    ReferenceResult,
    TensorStats,
    first_nonfinite,
    is_float,
    merge_stats,
    merge_worst,
    tensor_stats,
)
from .sessions import Feed, owned
from .twin import FLOATS, INTS, TwinModel

log = logging.getLogger(__name__)

FIRST_CHUNK = 16  # at most this many tensors in a first chunk holding one of unknown size


class TwinRun(Protocol):
    """A twin graph's session: one run per sample gives the FP32 outputs, the plan's, and every
    compared tensor whole or summarised."""

    twin: TwinModel

    def run(self, feed: Feed) -> dict[str, np.ndarray]: ...


class Inspectable(Protocol):
    """What an inspection runs on: a runner that exposes the main graph's intermediates."""

    @property
    def model(self) -> onnx.ModelProto: ...
    @property
    def outputs(self) -> tuple[str, ...]: ...
    @property
    def producers(self) -> Mapping[str, str]: ...
    @property
    def low(self) -> LowPrecision: ...

    def run(self, plan: PrecisionPlan | None, feed: Feed, names: Sequence[str] | None = None,
            intermediates: bool | tuple[str, ...] = False) -> dict[str, np.ndarray]: ...
    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray: ...
    def twin(self, plan: PrecisionPlan | None, feed: Feed | None = None) -> TwinRun | None: ...
    def chunks(self, feed: Feed | None = None) -> Chunks: ...


class Inspection(Protocol):
    """A runner's optional capability to look inside: FP32 ranges and per-node error."""

    def reference(self, samples) -> ReferenceResult: ...
    def layerwise(self, plan: PrecisionPlan, samples, tol: Tolerance | None = None) -> LayerwiseResult: ...


class Inspector:
    """:class:`Inspection` on an :class:`Inspectable` (what an emulating runner offers)."""

    def __init__(self, session: Inspectable) -> None:
        self.session = session

    def reference(self, samples) -> ReferenceResult:
        return reference_stats(self.session, samples)

    def layerwise(self, plan: PrecisionPlan, samples, tol: Tolerance | None = None) -> LayerwiseResult:
        return layerwise(self.session, plan, samples, tol)


@dataclass(frozen=True)
class NodeStats:
    """What the oracle saw at one node's outputs (worst case over samples)."""

    max_abs: float | None = None
    min_nonzero_abs: float | None = None
    layerwise_error: float | None = None  # emulated FP16 error of the node's output vs FP32


def _captured(session: Inspectable, plan: PrecisionPlan | None, feed: Feed, chunk: tuple[str, ...] | None,
              first: bool) -> dict[str, np.ndarray]:
    """The tensors of ``chunk`` (None: every tensor the session exposes), with the graph outputs
    and, in the ``first`` chunk, the float graph inputs as fed."""
    values = session.run(plan, feed, intermediates=True if chunk is None else chunk)
    if first:
        for name, value in feed.items():
            if is_float(value):
                values.setdefault(name, session.fed_value(plan, name, value))
    return values


def reference_stats(session: Inspectable, samples) -> ReferenceResult:
    """FP32 ranges of every captured tensor over ``samples`` (a Samples or a sequence of feeds)."""
    return _inspect(session, None, _feeds(samples), Tolerance())[0]


def layerwise(session: Inspectable, plan: PrecisionPlan, samples, tol: Tolerance | None = None,
              ) -> LayerwiseResult:
    """Per-node error of ``plan`` against FP32 over ``samples`` (the FP32 intermediates are
    recomputed per sample, not kept between runs, to bound memory; :func:`inspect_plan` gives the
    reference statistics from the same runs)."""
    return inspect_plan(session, plan, samples, tol)[1]


def inspect_plan(session: Inspectable, plan: PrecisionPlan, samples, tol: Tolerance | None = None
                 ) -> tuple[ReferenceResult, LayerwiseResult]:
    """Reference statistics and the layerwise comparison of ``plan`` from two runs per sample."""
    ref, lw = _inspect(session, plan, _feeds(samples), tol or Tolerance())
    if lw is None:
        raise InternalError("inspect_plan: a plan was given but no layerwise result came back")
    return ref, lw


def _feeds(samples) -> Sequence[Feed]:
    return samples.feeds if hasattr(samples, "feeds") else tuple(samples)


def _inspect(session: Inspectable, plan: PrecisionPlan | None, feeds: Sequence[Feed],
             tol: Tolerance) -> tuple[ReferenceResult, LayerwiseResult | None]:
    """One run per sample of the session's twin graph (:meth:`Inspectable.twin`), or, where there
    is none, each chunk of tensors (:meth:`Inspectable.chunks`) captured by one FP32 run per sample
    (and one of ``plan``); values are reduced to numbers and dropped."""
    twin = session.twin(plan, feeds[0] if feeds else None)
    try:
        seen = (_twin_runs(session, twin, plan, feeds) if twin is not None else
                _captured_runs(session, plan, feeds))
    except ShapesDiverged as e:  # the plan's run stops where a flipped decision changed its shapes
        return _inspect(session, None, feeds, tol)[0], _stopped(e, feeds, session.model.graph.node)
    nodes = list(session.model.graph.node)
    order = {n.name: k for k, n in enumerate(nodes)}
    first_bad = [bad for bad in (first_nonfinite(nodes, f) for f in seen.finite) if bad is not None]
    first_node = min(first_bad, key=order.__getitem__) if first_bad else None
    reference = ReferenceResult(seen.stats, dict(session.producers), first_node, seen.outputs,
                                peaks=tuple(seen.peaks))
    if plan is None:
        return reference, None
    merged: dict[str, NodeError] = {}
    changes: dict[str, ShapeChange] = {}
    made = {n.name: n for n in nodes}
    producers = {t: made[n] for t, n in session.producers.items() if n in made}
    for sample, tensor_errors in enumerate(seen.errors):
        merge_errors(merged, nodes, tensor_errors, tol.rtol)
        for change in changed_shapes(nodes, producers, tensor_errors, tol.rtol, sample):
            changes.setdefault(change.node, change)
    ordered = {n.name: merged[n.name] for n in nodes if n.name in merged}
    shape_changes = tuple(sorted(changes.values(), key=lambda c: order[c.node]))
    # a reshaped node is where a flipped decision shows, not where to pin: its decisions are (itself
    # where none was found)
    flipped = {d for c in shape_changes for d in ([d for d, _ in c.decisions] or [c.node])}
    first = tuple(n.name for n in nodes
                  if n.name in flipped or (n.name in ordered and ordered[n.name].diverges))
    for change in shape_changes:
        log.info("note: %s", change.describe())
    return reference, LayerwiseResult(ordered, first, outputs=seen.plan_outputs, shape_changes=shape_changes)


def _stopped(diverged: ShapesDiverged, feeds: Sequence[Feed], nodes: Sequence[onnx.NodeProto],
             ) -> LayerwiseResult:
    """The layerwise result of a plan whose run stops on a sample (``diverged``) because one of the first
    decisions flipped: no node's error is measured, the decisions that flipped are the first candidates
    and the nodes feeding them come first in the widening order."""
    sample = next((i for i, feed in enumerate(feeds) if feed is diverged.feed), 0)
    decisions = tuple((f.node, f.op_type) for f in diverged.flips)
    change = ShapeChange(*decisions[0], sample, decisions, diverged.feeding, stopped=diverged.message)
    log.info("note: %s", change.describe())
    flipped = {name for name, _ in decisions}
    return LayerwiseResult({}, tuple(n.name for n in nodes if n.name in flipped), shape_changes=(change,))


@dataclass(frozen=True)
class _Seen:
    """What the runs of one inspection saw (per sample, but the stats: worst case)."""

    stats: dict[str, TensorStats]
    finite: list[dict[str, bool]]
    errors: list[dict[str, TensorError]]
    outputs: tuple[dict[str, np.ndarray], ...]
    plan_outputs: tuple[dict[str, np.ndarray], ...]
    peaks: list[dict[str, float]]


def _captured_runs(session: Inspectable, plan: PrecisionPlan | None, feeds: Sequence[Feed]) -> _Seen:
    stats: dict[str, TensorStats] = {}
    outputs: list[dict[str, np.ndarray]] = [{} for _ in feeds]
    cand_outputs: list[dict[str, np.ndarray]] = [{} for _ in feeds]
    finite: list[dict[str, bool]] = [{} for _ in feeds]
    errors: list[dict[str, TensorError]] = [{} for _ in feeds]
    peaks: list[dict[str, float]] = [{} for _ in feeds]
    chunks = session.chunks(feeds[0] if feeds else None)
    flush = session.low.flush
    first = True
    for chunk in chunks:
        for i, feed in enumerate(feeds):
            ref = _captured(session, None, feed, chunk, first)
            chunks.observed(ref)
            merge_stats(stats, ref, flush, peaks[i])
            if first:
                outputs[i] = {name: owned(ref[name]) for name in session.outputs if name in ref}
            finite[i].update((name, bool(np.isfinite(v).all())) for name, v in ref.items() if is_float(v))
            if plan is not None:
                cand = _captured(session, plan, feed, chunk, first)
                errors[i].update((name, tensor_error(ref[name], cand[name])) for name in ref
                                 if name in cand and is_float(ref[name]))
                if first:
                    cand_outputs[i] = {name: owned(cand[name]) for name in session.outputs if name in cand}
                del cand
            del ref
        first = False
    return _Seen(stats, finite, errors, tuple(outputs), tuple(cand_outputs), peaks)


def _twin_runs(session: Inspectable, run: TwinRun, plan: PrecisionPlan | None, feeds: Sequence[Feed],
               ) -> _Seen:
    twin = run.twin
    flush = session.low.flush
    stats: dict[str, TensorStats] = {}
    finite: list[dict[str, bool]] = []
    errors: list[dict[str, TensorError]] = []
    peaks: list[dict[str, float]] = []
    outputs, plan_outputs = [], []
    for feed in feeds:
        values = run.run(feed)
        seen: dict[str, tuple[TensorStats, TensorError | None]] = {}
        for name in twin.compared:
            if name in twin.whole:
                copy = twin.whole[name]
                seen[name] = (tensor_stats(values[name], flush),
                              None if copy is None else tensor_error(values[name], values[copy]))
            else:
                seen[name] = _summarised(*(values[n] for n in twin.summaries[name]))
        for name, value in feed.items():  # the float graph inputs, as each plan feeds them
            if is_float(value):
                fed = None if plan is None else session.fed_value(plan, name, value)
                seen[name] = (tensor_stats(value, flush), None if fed is None else tensor_error(value, fed))
        for name, (ref_stats, _) in seen.items():
            merge_worst(stats, name, ref_stats)
        finite.append({name: ref_stats.finite for name, (ref_stats, _) in seen.items()})
        peaks.append({name: ref_stats.peak for name, (ref_stats, _) in seen.items()})
        errors.append({name: error for name, (_, error) in seen.items() if error is not None})
        outputs.append({name: owned(values[name]) for name in twin.outputs})
        plan_outputs.append({name: owned(values[copy]) for name, copy in twin.plan_outputs.items()})
        del values
    return _Seen(stats, finite, errors, tuple(outputs), tuple(plan_outputs) if plan else (), peaks)


def _summarised(floats: np.ndarray, ints: np.ndarray) -> tuple[TensorStats, TensorError | None]:
    """The statistics and the error of a tensor the twin graph summarised (see twin.summary_nodes)."""
    if (len(floats), len(ints)) not in ((2, 5), (4, 8)):
        raise InternalError(f"a twin summary has {len(floats)} floats and {len(ints)} counts")
    f = dict(zip(FLOATS, floats.tolist()))
    n = dict(zip(INTS, ints.tolist()))
    size = n["size"]
    resized = "plan_size" in n and n["plan_size"] != size
    if not size and not resized:
        return TensorStats(0.0, float("inf"), 0.0, 0, 0, 0), (CLOSE if "both_finite" in n else None)
    nan = size - n["finite"] - n["inf"]
    tiny = n["nonzero"] - n["above_flush"]
    # No finite nonzero value: the smallest nonzero is Inf (or none; the short path gives FLOAT32_MAX).
    least = float("inf") if f["max_finite_abs"] == 0 else f["min_nonzero_abs"]
    ref = TensorStats(float("inf") if n["inf"] else f["max_finite_abs"], least,
                      tiny / n["nonzero"] if n["nonzero"] else 0.0, nan, n["inf"], size)
    if "both_finite" not in n:
        return ref, None
    if resized:
        return ref, RESHAPED
    new_nonfinite = n["finite"] - n["both_finite"]
    plan_nonfinite = bool(new_nonfinite) or n["plan_finite"] < size
    if not n["both_finite"]:
        return ref, TensorError(0.0, 0.0, new_nonfinite, plan_nonfinite)
    err, scale = f["max_abs_err"], f["err_scale"]
    rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
    return ref, TensorError(err, rel, new_nonfinite, plan_nonfinite)


class Chunks:
    """Tensor names in consecutive chunks whose captured values fit ``budget`` bytes per run.

    Chunks are cut from each tensor's estimated bytes (``sizes``: from its inferred shape, with the
    sample's own input dims; None where unknown, then guessed as the median known size), times a
    correction learned from every chunk's actual bytes; a first chunk that holds an unknown size
    is kept to FIRST_CHUNK tensors. So a model whose intermediates fit is captured in one run, as
    before, and a long-context decoder a slice of layers at a time. ``whole``: one chunk of None,
    every tensor a switch-graph session captures."""

    def __init__(self, tensors: Sequence[str], sizes: Sequence[float | None], budget: int,
                 whole: bool = False) -> None:
        self.tensors = tuple(tensors)
        known = sorted(s for s in sizes if s is not None)
        guess = known[len(known) // 2] if known else float(64 << 10)
        self.sizes = {t: guess if s is None else s for t, s in zip(self.tensors, sizes)}
        self.unknown = {t for t, s in zip(self.tensors, sizes) if s is None}
        self.budget = budget
        self.whole = whole
        self.scale = 1.0  # actual bytes over estimated bytes, the worst chunk so far
        self.count = 0  # chunks given
        self._chunk: tuple[str, ...] = ()

    def __iter__(self):
        if self.whole:
            yield None
            return
        start = 0
        while start < len(self.tensors) or self.count == 0:
            end, total, guessed = start, 0.0, False
            while end < len(self.tensors):
                tensor = self.tensors[end]
                total += self.sizes[tensor] * self.scale
                if end > start and total > self.budget:
                    break
                end += 1
                guessed = guessed or tensor in self.unknown
                if self.count == 0 and guessed and end - start >= FIRST_CHUNK:
                    break
            self._chunk = self.tensors[start:end]
            self.count += 1
            yield self._chunk
            start = end

    def observed(self, values: Mapping[str, np.ndarray]) -> None:
        """Learn from the bytes one run's chunk actually took."""
        estimated = sum(self.sizes[t] for t in self._chunk if t in values)
        actual = sum(np.asarray(values[t]).nbytes for t in self._chunk if t in values)
        if estimated > 0:
            self.scale = max(self.scale, actual / estimated)
