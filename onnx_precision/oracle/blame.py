"""Whose fault is an onnxruntime failure: the user's model, the user's data, onnx-precision's, or the plan's?

The oracle's sessions run graphs derived from the user's model (the switch graph, emulations).
When onnxruntime rejects one, or fails while running it, :func:`blame` asks onnxruntime about the
user's model itself, as it is: if it fails to load, or fails on the same sample, the problem is
the user's and becomes one line (exit 2) saying what onnxruntime said, and for a model that only
fails on the synthetic feed, which input to give a shape. If the model itself loads and runs, the
derived graph is at fault: an :class:`~onnx_precision.errors.InternalError`.

Or the plan is: where its 16-bit rounding flips a decision that sets a shape (3.4995 rounds to 3, its FP16
value 3.5 to 4, and a Range over the rounded durations is 11 frames long, not 10), two tensors after it no
longer broadcast and onnxruntime stops the plan's run. The emulation asks :class:`Decisions` (the model's
first such decisions, run apart from what follows them) whether one flipped, and raises
:class:`ShapesDiverged`: a failing candidate, which the prober fails so that the search pins what flips
it, and which the layerwise inspection names.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Protocol

import numpy as np
import onnx
from onnx import helper

from ..context import ModelContext
from ..data import Samples
from ..errors import CustomOpError, DataError, InternalError, ModelLoadError, PrecisionError
from ..float_types import LowPrecision
from ..graph import is_onnx_domain, reads
from ..plan import PrecisionPlan
from ..typing_rules import WIDE
from .rounding import elem_types
from .sessions import Feed, make_session, ort_message, ort_text, run_session
from .twin import is_decision, resizable, sets_shapes


def is_ort_error(e: BaseException) -> bool:
    """Whether ``e`` is one of onnxruntime's own exceptions (a refused model, a failed run)."""
    return type(e).__module__.startswith("onnxruntime")


@contextmanager
def blame(ctx: ModelContext, samples: Samples | None = None) -> Iterator[None]:
    """Turn an onnxruntime error raised inside the block into the user's error or an internal one."""
    try:
        yield
    except Exception as e:
        if not is_ort_error(e):
            raise
        raise diagnose(ctx, samples, e) from e


def diagnose(ctx: ModelContext, samples: Samples | None, error: BaseException) -> Exception:
    """The error to raise for ``error``, raised by a session derived from ``ctx``'s model, after
    loading the model itself and running it on each of ``samples``' feeds."""
    try:
        session = make_session(ctx.model, ctx.base_dir, custom_op_libraries=ctx.custom_op_libraries)
    except PrecisionError as e:
        return e
    except Exception as e:
        if not is_ort_error(e):
            raise
        return load_error(ctx, e)
    feeds = samples.feeds if samples is not None else ()
    for i, feed in enumerate(feeds):
        try:
            run_session(session, ctx.model, [feed])
        except Exception as e:
            if not is_ort_error(e) or samples is None:
                raise
            return run_error(ctx, samples, i, e)
    return InternalError(f"onnxruntime rejects a graph derived from {ctx.path}, although the model itself "
                         f"loads and runs: {ort_message(error)}")


def load_error(ctx: ModelContext, e: BaseException) -> ModelLoadError:
    """One line for a model onnxruntime cannot load; a custom-domain op it has no kernel for gets
    what to do about it."""
    message = ort_message(e)
    functions = {(f.domain, f.name) for f in ctx.model.functions}
    custom = [ref.node for ref in ctx.nodes if not is_onnx_domain(ref.node.domain)
              and (ref.node.domain, ref.node.op_type) not in functions]
    named = [n for n in custom if f"{n.domain}:{n.op_type}" in message]
    if named or (custom and "is not a registered function/op" in message):
        node = (named or custom)[0]
        text = f"node '{node.name}' ({node.domain}:{node.op_type})"
        return CustomOpError(
            f"{ctx.path}: {text} is a custom op that onnxruntime has no kernel for, so the model cannot "
            f"be run; register its kernels with --ort-custom-op-library PATH, or convert with --mode static "
            f"or all-fp16 (custom ops stay FP32)", text)
    return ModelLoadError(f"{ctx.path}: onnxruntime cannot load the model: {message}")


def run_error(ctx: ModelContext, samples: Samples, index: int, e: BaseException) -> DataError:
    """One line for a model that loads but fails on sample ``index``: on a synthetic feed whose
    batch dimension was set to 1, it names the input to give a shape."""
    message = ort_message(e)
    if samples.synthetic and samples.guessed_shapes:
        name, dims = samples.guessed_shapes[0]
        return DataError(
            f"{ctx.path}: onnxruntime cannot run the model on the synthetic feed, where input '{name}' "
            f"({dims}) got 1 for its batch dimension ({message}); give its real shape with "
            f"--input-shape {name}:{dims}, the symbolic dimension replaced by its size (or real data with "
            f"--inputs)")
    if samples.synthetic:
        return DataError(f"{ctx.path}: onnxruntime cannot run the model on the synthetic feed ({message}); "
                         f"give real data with --inputs, or --input-range and --input-shape")
    where = f" (feed {index})" if len(samples.feeds) > 1 else ""
    return DataError(f"{samples.source}{where}: onnxruntime cannot run the model on this sample: {message}")


class ShapesDiverged(InternalError):
    """A plan's 16-bit run that onnxruntime stopped because a decision flipped: a duration rounded the other
    way sets the length of a Range, and two tensors downstream no longer broadcast. A failing candidate,
    which the prober fails with :attr:`why` so that the search pins what flips it; anywhere else it is
    still an internal error (nothing should run such a plan)."""

    def __init__(self, flips: tuple[Flip, ...], feeding: tuple[str, ...], message: str, feed: Feed) -> None:
        self.flips = flips
        self.feeding = feeding  # the nodes upstream of the flipped decisions, nearest first
        self.message = message  # onnxruntime's innermost status
        self.feed = feed  # the sample the run stopped on
        super().__init__(self.why)

    @property
    def why(self) -> str:
        """'its 16-bit run stops on shapes that differ from FP32's: the decision of 'round' (Round) flipped (1
        of 4 elements), and what follows it no longer fits together (onnxruntime: ...)'."""
        flipped = ", ".join(f"'{f.node}' ({f.op_type}) flipped ({f.differ} of {f.size} elements)"
                            for f in self.flips)
        return (f"its 16-bit run stops on shapes that differ from FP32's: the decision of {flipped}, and "
                f"what follows it no longer fits together (onnxruntime: {self.message})")


@dataclass(frozen=True)
class Flip:
    """A decision whose outputs differ between FP32 and a plan on one feed."""

    node: str
    op_type: str
    differ: int  # elements of its outputs that differ from FP32's (all of one whose shape differs)
    size: int


class Runs(Protocol):
    """What runs plans of one model (an emulator of it): the outputs of ``plan`` (None: FP32) on ``feed``."""

    def run(self, plan: PrecisionPlan | None, feed: Feed) -> Mapping[str, np.ndarray]: ...


# Why a plan's run (plan, feed) failed with onnxruntime's error, where a flipped decision made shapes that
# no longer fit together (:class:`Decisions`); None: another failure
Diagnose = Callable[[PrecisionPlan, Feed, BaseException], ShapesDiverged | None]


class Diagnoses(Protocol):
    """What tells why a plan's run failed (an emulator of the model: :meth:`.emulator.Emulator.diverged`)."""

    def diverged(self, plan: PrecisionPlan, feed: Feed, error: BaseException) -> ShapesDiverged | None: ...


class Decisions:
    """The first decisions of ``ctx``'s model that can change shapes (:func:`.twin.sets_shapes`: none
    upstream of them does), run apart from what follows them: the model cut to them and the nodes feeding
    them, run by ``emulate`` (the emulation every plan runs on, given the cut model). Where a plan's run
    fails, a decision among them whose outputs differ from FP32's is why: what follows computes on other
    shapes. One per emulator: a search meets such a plan at every probe that leaves the decision's inputs
    16-bit."""

    _busy = False  # a diagnosis under way: a failure of its own runs is not diagnosed again

    def __init__(self, ctx: ModelContext, emulate: Callable[[ModelContext], Runs]) -> None:
        self.ctx = ctx
        self.emulate = emulate

    @cached_property
    def _elems(self) -> Mapping[str, int]:
        return elem_types(self.ctx.model, self.ctx.types)

    @cached_property
    def _first(self) -> tuple[onnx.NodeProto, ...]:
        elems = self._elems
        after = resizable(self.ctx.model.graph, elems)
        return tuple(n for n in self.ctx.model.graph.node
                     if sets_shapes(n, elems) and not any(i in after for i in n.input))

    @cached_property
    def _rounding(self) -> dict[str, str]:
        """The main graph's decisions that round a float made by a node from the samples to a whole number
        (the first ones or not: in FP32 each sees its own value), each with that input: where a 16-bit node
        upstream moves it across a boundary, the decision flips. Not one computed from weights alone (a
        bias's quantisation rounded in the graph): it is the same on every sample, and no sample moves it."""
        elems = self._elems
        graph = self.ctx.model.graph
        fed = {i.name for i in graph.input} - {t.name for t in graph.initializer}
        for node in graph.node:  # topological: what the samples reach
            if any(name in fed for name in reads(node)):
                fed.update(o for o in node.output if o)
        # what a rounding made is a whole number in either precision: the decision that made it is the one
        # that can flip (a Cast to int64 of a Round's output is none)
        made = {o for n in graph.node if n.op_type not in _WHOLE for o in n.output if o}
        return {n.name: n.input[0] for n in graph.node if _boundaries(n) and n.input[0] in made & fed
                and elems.get(n.input[0]) in WIDE}

    def _emulated(self, outputs: Sequence[str]) -> Runs:
        """The runs of the model cut to ``outputs``, loaded as the run loaded the model (its target's 16-bit
        type, its float64 kept or not)."""
        cut = cut_to(self.ctx.model, list(dict.fromkeys(outputs)))
        ctx = ModelContext.of(cut, self.ctx.base_dir, self.ctx.path, self.ctx.custom_op_libraries)
        return self.emulate(replace(ctx, target=self.ctx.target, keep_float64=self.ctx.keep_float64))

    @cached_property
    def _cut(self) -> Runs:
        """The runs of the model cut to its first decisions."""
        return self._emulated([o for n in self._first for o in n.output if o])

    @cached_property
    def _rounded(self) -> Runs:
        """The runs of the model cut to the inputs of its decisions that round (:attr:`_rounding`)."""
        return self._emulated(list(self._rounding.values()))

    def flipped(self, plan: PrecisionPlan, feed: Feed) -> tuple[Flip, ...]:
        """The first decisions whose outputs differ between FP32 and ``plan`` on ``feed``: a whole-number
        rounding, a comparison or an index by its values, an op whose shape values set by its shape."""
        if not self._first:
            return ()
        fp32, low = self._cut.run(None, feed), self._cut.run(plan, feed)
        flips = []
        for node in self._first:
            outputs = [o for o in node.output if o in fp32]
            differ = sum(_differ(fp32[o], low[o], exact=is_decision(node) and (
                node.op_type in _WHOLE or not np.issubdtype(fp32[o].dtype, np.floating))) for o in outputs)
            if differ:
                flips.append(Flip(node.name, node.op_type, differ, sum(int(fp32[o].size) for o in outputs)))
        return tuple(flips)

    def near_edges(self, plan: PrecisionPlan, failed: bool, feeds: Sequence[Feed], low: LowPrecision,
                   ) -> tuple[Edge, ...]:
        """The decisions that round an input ``plan`` keeps FP32 (any input, where the run ``failed``)
        to a value within :data:`KNIFE_EDGE` steps of ``low`` of their boundary on one of ``feeds``, those
        whose whole numbers set a shape first (:attr:`_shaping`), then the nearest, each at its nearest:
        where the samples sit so, any 16-bit node upstream can flip the decision. Nothing runs where no
        such decision is (the model cut to those decisions' inputs, in FP32, once per feed, where one is)."""
        producers = {o: n.name for n in self.ctx.model.graph.node for o in n.output if o}
        fp32 = set(plan.fp32_nodes)
        watched = {node: tensor for node, tensor in self._rounding.items()
                   if failed or producers[tensor] in fp32}
        if not watched:
            return ()
        ops = {n.name: n for n in self.ctx.model.graph.node}
        nearest: dict[str, Edge] = {}
        for sample, feed in enumerate(feeds):
            values = self._rounded.run(None, feed)
            for node, tensor in watched.items():
                edge = _nearest(ops[node], sample, np.asarray(values[tensor]), low, producers[tensor] in fp32)
                if edge is not None and edge.steps <= KNIFE_EDGE and (
                        node not in nearest or edge.steps < nearest[node].steps):
                    nearest[node] = edge
        shaping = self._shaping
        return tuple(sorted((replace(e, sets_shapes=e.node in shaping) for e in nearest.values()),
                            key=lambda e: (not e.sets_shapes, e.steps)))

    @cached_property
    def _shaping(self) -> frozenset[str]:
        """The rounding decisions whose whole numbers reach an input that sets a shape (a Range's bounds,
        an Expand's or a Reshape's shape, ...) through integers alone: a flip there changes a length (a
        duration rounded the other way); elsewhere it moves a value by one (a bias's quantum)."""
        graph = self.ctx.model.graph
        elems = self._elems
        consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in graph.node:
            for k, name in enumerate(node.input):
                consumers.setdefault(name, []).append((node, k))
        found = set()
        for decision in (n for n in graph.node if n.name in self._rounding):
            queue, seen = deque(o for o in decision.output if o), set()
            while queue and decision.name not in found:
                tensor = queue.popleft()
                for node, k in consumers.get(tensor, ()):
                    if k in _SHAPE_INPUTS.get(node.op_type, ()):
                        found.add(decision.name)
                    elif node.name not in seen and (node.op_type in _WHOLE | _KEEPS_WHOLE or all(
                            _is_integer(elems.get(o)) for o in node.output if o)):
                        seen.add(node.name)
                        queue.extend(o for o in node.output if o)
        return frozenset(found)

    def feeding(self, flips: Sequence[Flip]) -> tuple[str, ...]:
        """The nodes upstream of ``flips``' decisions, nearest first (any error on them can flip one)."""
        producers = {o: n for n in self.ctx.model.graph.node for o in n.output if o}
        made = {n.name: n for n in self.ctx.model.graph.node}
        found: dict[str, None] = {}
        queue = deque(made[f.node] for f in flips)
        while queue:
            for name in queue.popleft().input:
                node = producers.get(name)
                if node is not None and node.name not in found:
                    found[node.name] = None
                    queue.append(node)
        return tuple(found)

    def diverged(self, plan: PrecisionPlan | None, feed: Feed, error: BaseException) -> ShapesDiverged | None:
        """Why a run of ``plan`` (a graph derived from the model for it) on ``feed`` failed with ``error``,
        where onnxruntime raised it because one of the first decisions flipped; None where it did not (the
        FP32 model's run, another error, no decision flipped, the decisions themselves do not run): the
        failure is another's, :func:`blame` tells whose."""
        if plan is None or not is_ort_error(error) or Decisions._busy:
            return None
        Decisions._busy = True
        try:
            flips = self.flipped(plan, feed)
        except Exception as e:
            if not is_ort_error(e):
                raise
            return None
        finally:
            Decisions._busy = False
        if not flips:
            return None
        return ShapesDiverged(flips, self.feeding(flips), _status(ort_message(error)), feed)


@contextmanager
def named_stop(diagnose: Diagnose | None, plan: PrecisionPlan | None, feed: Feed) -> Iterator[None]:
    """onnxruntime's error out of a run of ``plan`` (its emulation, or a model written from it) on ``feed``
    raised as :class:`ShapesDiverged` where ``diagnose`` (:meth:`.emulator.Emulator.diverged`, of the FP32
    model) finds one of the model's first decisions flipped under ``plan``; as it is otherwise, or where no
    plan or diagnosis is known."""
    try:
        yield
    except Exception as e:
        diverged = None if plan is None or diagnose is None else diagnose(plan, feed, e)
        if diverged is None:
            raise
        try:
            raise diverged from e
        finally:
            # the exception's traceback holds this frame: a local holding the exception would make a
            # cycle, keeping the emulator in these frames and its sessions alive until the collector runs
            del diverged


KNIFE_EDGE = 4.0  # steps of the 16-bit type: a decision on a value this near its boundary is on a knife edge
# float32 steps (3e-5 relative): a value this near a boundary was computed to be on it, up to float32's
# rounding over a few ops (Kokoro-82M int8's quantised biases before their Floor: 921.00006, 123.9995)
WHOLE_BY_CONSTRUCTION = 256


@dataclass(frozen=True)
class Edge:
    """A rounding decision's FP32 input nearest its boundary over the samples, and how near: in steps
    of the run's 16-bit type at that value."""

    node: str
    op_type: str
    sample: int
    value: float
    boundary: float
    steps: float
    kept: bool  # whether the plan keeps the node that makes its input FP32
    sets_shapes: bool = False  # whether its whole numbers set a shape (Decisions._shaping)

    @property
    def distance(self) -> float:
        return abs(self.value - self.boundary)


def _boundaries(node: onnx.NodeProto) -> bool:
    """Whether ``node`` rounds a float to a whole number (Round, Floor, Ceil, a Cast to an integer type
    but bool), where the value it is given sets what it decides."""
    if node.op_type == "Cast":
        return is_decision(node) and not any(a.name == "to" and a.i == onnx.TensorProto.BOOL
                                              for a in node.attribute)
    return node.op_type in _WHOLE


def _nearest(node: onnx.NodeProto, sample: int, values: np.ndarray, low: LowPrecision, kept: bool,
             ) -> Edge | None:
    """The element of ``values`` (what ``node`` rounds, on one sample) nearest a boundary of ``node``, in
    steps of ``low``: Round's at k + 0.5 (ONNX rounds half to even), Floor's and Ceil's at the integers, a
    Cast's (truncation towards zero) at the integers but 0; None where no value is finite."""
    x = values.astype(np.float64).ravel()
    x = x[np.isfinite(x)]
    if not x.size:
        return None
    if node.op_type == "Round":
        bounds = np.floor(x) + 0.5
    else:
        bounds = np.rint(x)
        if node.op_type == "Cast":
            bounds = np.where(bounds == 0, np.where(x < 0, -1.0, 1.0), bounds)
    exponent = np.frexp(np.abs(x))[1] - 1  # |x| in [2^e, 2^(e+1))
    step = np.where(np.abs(x) < low.min_normal, low.min_subnormal,
                    np.ldexp(1.0, exponent - low.significand_bits))
    # where the type's step is 1 or more (|x| >= 1024 in FP16) every value is within a step of a boundary,
    # and a value within float32's own rounding of one (WHOLE_BY_CONSTRUCTION of its steps) is a whole
    # number the graph computes as such: neither is particular to these samples
    distance = np.abs(x - bounds)
    whole = distance <= WHOLE_BY_CONSTRUCTION * np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)
    steps = np.where((step < 1) & ~whole, distance / step, np.inf)
    k = int(np.argmin(steps))
    if not np.isfinite(steps[k]):
        return None
    return Edge(node.name, node.op_type, sample, float(x[k]), float(bounds[k]), float(steps[k]), kept)


# (op, the inputs whose values set its output's shape): where a rounding's whole numbers reach one, a flip
# changes a length
_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Range": (0, 1, 2), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Reshape": (1,),
    "Resize": (2, 3), "Upsample": (1,), "Slice": (1, 2, 3, 4), "Pad": (1,), "OneHot": (1,), "TopK": (1,)}


# ops whose outputs are whole numbers where their inputs are: a rounding's durations clipped to at least 1
# (Kokoro-82M int8's '/encoder/Round' -> Clip -> Cast -> Gather -> CumSum -> Range), moved or selected
_KEEPS_WHOLE = frozenset({"Clip", "Max", "Min", "Relu", "Abs", "Neg", "Identity", "Squeeze", "Unsqueeze",
                          "Reshape", "Flatten", "Transpose", "Gather", "Slice", "Concat", "Expand", "Tile"})


def _is_integer(elem: int | None) -> bool:
    return elem is not None and elem != 0 and helper.tensor_dtype_to_np_dtype(elem).kind in "iub"


# decisions whose float outputs are whole numbers, equal between FP32 and a plan unless they flipped (a
# TopK's values are rounded as any float: its indices say whether it chose otherwise)
_WHOLE = frozenset({"Round", "Ceil", "Floor"})


def _differ(fp32: np.ndarray, low: np.ndarray, exact: bool) -> int:
    """How many elements of ``low`` differ from ``fp32``: all where the shapes differ, else (``exact``)
    those not equal; 0 where only the shape is compared."""
    if np.shape(fp32) != np.shape(low):
        return max(int(np.size(fp32)), 1)
    return int(np.count_nonzero(fp32 != low)) if exact else 0


def _status(message: str) -> str:
    """The innermost status of onnxruntime's ``message`` (a node's failure inside an If's branch inside
    the graph the oracle built, whose names are its own), without its source location and the check that
    failed: "Attempting to broadcast an axis by a dimension other than 1. 10 by 11"."""
    inner = ort_text(message.rpartition("Status Message: ")[2])
    return re.sub(r"^.*? was false\. ", "", inner) or message


def cut_to(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    """``model`` cut to the nodes that ``outputs`` need (their bodies' outer-scope reads included), with
    those as its outputs and only the initializers the kept nodes read."""
    producers = {o: n for n in model.graph.node for o in n.output if o}
    needed: set[str] = set()
    queue = deque(outputs)
    while queue:
        node = producers.get(queue.popleft())
        if node is not None and node.name not in needed:
            needed.add(node.name)
            queue.extend(reads(node))
    kept = [n for n in model.graph.node if n.name in needed]
    read = {name for n in kept for name in reads(n)}
    elems = elem_types(model)
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    del cut.graph.node[:], cut.graph.output[:], cut.graph.initializer[:]
    cut.graph.node.extend(kept)
    cut.graph.initializer.extend(t for t in model.graph.initializer if t.name in read)
    cut.graph.output.extend(helper.make_tensor_value_info(o, elems.get(o, 0), None) for o in outputs)
    return cut
