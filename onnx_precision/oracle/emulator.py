"""Emulating precision plans with the cheapest sessions for the work asked.

The switch graph (:func:`.switch_builder.build_switch_model`) runs any plan without a rebuild, but it puts
every node behind Ifs: on a 26 000-node graph its onnxruntime session takes 35 s to build where the
model's own takes 1.6 s. Most conversions never need it: the FP32 reference, the caller's plan and
the plan with headroom pins are three plans, and when that plan passes nothing is searched.
:class:`Emulator` therefore runs each plan it is asked for on a *baked* session (the same graph
builder with that one plan's Casts in place and no If, as fast to build as the model), keeps the
last two (of plain plan probes, the last one), and builds the switch graph only when
:meth:`Emulator.searching` says many plans follow; from then on every plan runs there (unless a run
costs more than a build: then each plan of the search gets a baked session of its own). Values are
the same either way: a baked plan runs the same kernels on the same rounded values as the switch
graph's branches (tested).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np
import onnx
import onnxruntime as ort

from .. import cancel
from ..context import ModelContext
from ..float_types import LOW_TYPES, LowPrecision, low_of
from ..graph import graphs
from ..plan import PrecisionPlan
from ..policy import always_fp32, held_in, layer_norm_pins, written_forms
from ..policy.resolution import dequantize_copies, group_pins
from ..storage import element_count, model_tensors
from ..target import UNMEASURED, Measured
from ..typing_rules import tensor_types
from .blame import Decisions, Diagnose, Edge, ShapesDiverged, named_stop
from .emulation_session import EMULATE, EmulationSession, FloatIO, as_fp32
from .inspection import Chunks, Inspector
from .rounding import FLOAT, elem_types
from .sessions import Feed, cast_feed, handed, make_session, session_options
from .switch_builder import EmulationSource, SwitchBuilder
from .switch_graph import captured
from .twin import TwinModel, TwinUnavailable, build_twin_model

# Searches on baked sessions are considered only where a baked session takes this long to build.
SLOW_BUILD_S = 0.05
# Baked sessions kept at once: a layerwise comparison without the twin graph alternates two capturing
# ones (FP32 and the plan's); of the sessions that only probe a plan, the last one alone.
KEPT = 2
# Bytes of intermediates one capturing run may expose: at least this, or a quarter of the weights
# (a model's activations grow with its weights; a run and its FP32 twin stay under half of them).
MIN_CAPTURE_BYTES = 256 << 20

# A plan as the emulation sees it: its 16-bit nodes, each with its type ("fp16", "bf16")
Lows = frozenset[tuple[str, str]]
# (the plan's 16-bit nodes, or None for FP32; the intermediates captured: all, none, or those names)
_Key = tuple[Lows | None, bool | tuple[str, ...]]


class Emulator:
    """Runs plans of ``ctx``'s model by emulation (see the module docstring); counts the sessions
    it built and the runs, as :class:`EmulationSession` does."""

    def __init__(self, ctx: ModelContext, threads: int | None = None,
                 measured: Measured = UNMEASURED) -> None:
        self.ctx = ctx
        # what the run measured of the target's sums (its basis'): every session spells them so, as the
        # written model's check does
        self.measured = measured
        self.model = ctx.model
        self.threads = threads
        self.sessions_built = 0
        self.build_seconds = 0.0  # spent building sessions
        self.probes_run = 0
        self.kept = KEPT
        self._baked: OrderedDict[_Key, EmulationSession] = OrderedDict()
        self._switched: EmulationSession | None = None
        self._searching_baked = False
        self._last: tuple[PrecisionPlan, Lows] | None = None
        self._baked_builds: list[float] = []  # seconds per baked session built
        self._baked_runs: list[float] = []    # seconds per run of one on one sample

    def searching(self) -> EmulationSession | Emulator:
        """What runs the many plans of a search: the switch-graph session (built on the first call;
        baked sessions are dropped), or, where building a baked session has cost no more than
        running one (long sequences, big images: the run dominates), this emulator itself, one
        baked session per plan and only one kept: the switch graph's Ifs hold both precisions'
        buffers (scripts/bench_twin.py phases, decoder at seq 1024: the search phase peaks at
        6.2 GB on baked sessions against 7.1 GB on the switch graph)."""
        if self._switched is not None:
            return self._switched
        if self._searching_baked or self._rebuilding_pays():
            self._searching_baked = True
            self.kept = 1
            return self
        self._baked.clear()
        start = time.perf_counter()
        self._switched = EmulationSession(self.ctx, capture_intermediates=False, threads=self.threads,
                                          measured=self.measured, diagnose=self._diagnose)
        self.build_seconds += time.perf_counter() - start
        self.sessions_built += 1
        return self._switched

    def _rebuilding_pays(self) -> bool:
        if not self._baked_builds or not self._baked_runs:
            return False
        build = max(self._baked_builds)
        # A build of milliseconds is a small model's: its switch graph is as cheap, and a choice made
        # on millisecond timings would flip with the machine's load (and change the report).
        return SLOW_BUILD_S <= build <= sorted(self._baked_runs)[len(self._baked_runs) // 2]

    @cached_property
    def switchable(self) -> frozenset[str]:
        """Nodes whose precision changes anything in the emulation (as the switch graph's
        :attr:`EmulationSession.switchable`, without building it)."""
        fp32 = as_fp32(self.ctx)
        types = self.ctx.types if fp32 is self.model else tensor_types(fp32)
        source = EmulationSource(fp32, self.ctx.typing, self.ctx.base_dir, fixed=always_fp32(self.ctx),
                                 target=self.ctx.target)
        builder = SwitchBuilder(fp32, source, types)
        return frozenset(n.name for g in graphs(fp32.graph) for n in g.node if builder.switchable(n))

    def _lows(self, plan: PrecisionPlan) -> Lows:
        """The 16-bit nodes of ``plan`` as written (with its LayerNorm pins and its quantized groups
        each in one type)."""
        if self._last is None or self._last[0] is not plan:
            fp32 = always_fp32(self.ctx)
            written = group_pins(self.ctx, layer_norm_pins(self.ctx, plan))
            held = self._held
            lows = frozenset((n, p.value) for n in self.ctx.node_ops if (p := written.precision(n)).is_low
                             and (n not in fp32 or n in held.get(p.value, ())))
            self._last = (plan, lows)
        return self._last[1]

    @cached_property
    def _held(self) -> Mapping[str, frozenset[str]]:
        """Per 16-bit type, the nodes :func:`~onnx_precision.policy.always_fp32` holds that compute in it
        (:func:`~onnx_precision.policy.held_in`: a constant the target's type cannot hold, this one can)."""
        return {low.precision: held_in(self.ctx, low) for low in LOW_TYPES.values()}

    @cached_property
    def _decisions(self) -> Decisions:
        # the model cut to its first decisions, emulated as this model is (its sums spelled alike); the
        # lambda holds the settings, not this emulator: a cycle back to it would keep its sessions, and the
        # weights they map, alive past its last use (see _diagnose)
        threads, measured = self.threads, self.measured
        return Decisions(self.ctx, lambda cut: Emulator(cut, threads, measured))

    @property
    def _diagnose(self) -> Diagnose:
        """:meth:`diverged` for the sessions this emulator keeps, without a reference back to it: a
        cycle would keep every session (and the weights it maps) alive until Python's cycle collector
        ran, past the emulator's last use (1.66x the model held by scripts/bench_large_model.py's auto
        conversion, where its bound is 1.3x)."""
        method = weakref.WeakMethod(self.diverged)

        def diagnose(plan: PrecisionPlan, feed: Feed, error: BaseException) -> ShapesDiverged | None:
            diverged = method()
            return None if diverged is None else diverged(plan, feed, error)
        return diagnose

    def diverged(self, plan: PrecisionPlan, feed: Feed, error: BaseException) -> ShapesDiverged | None:
        """Why ``plan``'s run on ``feed`` failed with ``error``, where onnxruntime stopped because one of
        the model's first decisions flipped and the shapes after it no longer fit together
        (:class:`.blame.Decisions`: a failing candidate); None where that is not why."""
        return self._decisions.diverged(plan, feed, error)

    def near_edges(self, plan: PrecisionPlan, failed: bool, feeds: Sequence[Feed]) -> tuple[Edge, ...]:
        """The model's rounding decisions whose FP32 input, kept FP32 by ``plan`` (any, where the run
        ``failed``), lies on ``feeds`` within a few 16-bit steps of a boundary
        (:meth:`.blame.Decisions.near_edges`: the model cut to them, run only where it has such decisions)."""
        return self._decisions.near_edges(plan, failed, feeds, self.ctx.target.low)

    def mixed(self, plan: PrecisionPlan | None) -> bool:
        """Whether ``plan`` has 16-bit nodes in a type other than the target's: the switch graph
        rounds every node in that one type, so such a plan runs on a baked session of its own."""
        low = self.ctx.target.low.precision
        return plan is not None and any(p != low for _, p in self._lows(plan))

    def session(self, plan: PrecisionPlan | None, capture: bool | tuple[str, ...] = False,
                ) -> EmulationSession:
        """The session that runs ``plan`` (capturing every intermediate when ``capture`` is True,
        those named when it is a tuple)."""
        if self._switched is not None and not self.mixed(plan):
            return self._switched
        fp16 = None if plan is None else self._lows(plan)
        keys: tuple[_Key, ...] = ((fp16, capture), (fp16, True)) if capture is not True else ((fp16, True),)
        for key in keys:
            if key in self._baked:
                self._baked.move_to_end(key)
                return self._baked[key]
        if fp16 is not None and capture is False:
            # one plan probe's session at a time: a plan is measured on every sample at once, and the
            # caller's plan, once the base plan is measured, is not again; each session holds the
            # model's weights (the 26 MB dynamic-quant encoder-decoder of scripts/bench_quantized.py:
            # 100 MB each, two of them its peak)
            for probe in [k for k in self._baked if k[0] is not None and k[1] is False]:
                del self._baked[probe]
        while len(self._baked) >= self.kept:
            self._baked.popitem(last=False)
        start = time.perf_counter()
        built = EmulationSession(self.ctx, capture_intermediates=capture, threads=self.threads,
                                 baked={} if fp16 is None else _types(fp16), fp32_model=fp16 is None,
                                 measured=self.measured, diagnose=self._diagnose)
        self._baked_builds.append(time.perf_counter() - start)
        self.build_seconds += self._baked_builds[-1]
        self.sessions_built += 1
        self._baked[(fp16, capture)] = built
        return built

    oracle = EMULATE

    @property
    def inspection(self) -> Inspector:
        """Ranges and per-node error, from the twin graph where it can be built."""
        return Inspector(self)

    @property
    def low(self) -> LowPrecision:
        return self.ctx.target.low

    def run(self, plan: PrecisionPlan | None, feed: Feed, names: Sequence[str] | None = None,
            intermediates: bool | tuple[str, ...] = False) -> dict[str, np.ndarray]:
        """As :meth:`EmulationSession.run`, on the session :meth:`session` gives."""
        session = self.session(plan, capture=intermediates)
        self.probes_run += 1
        if isinstance(intermediates, tuple):
            return session.run(plan, feed, names, intermediates)
        start = time.perf_counter()
        values = session.run(plan, feed, names, intermediates)
        if session is not self._switched and not intermediates:
            self._baked_runs.append(time.perf_counter() - start)
        return values

    def twin(self, plan: PrecisionPlan | None, feed: Feed | None = None) -> TwinSession | None:
        """A session of the twin graph comparing ``plan`` (None: the FP32 model alone) with FP32
        inside one run (:mod:`.twin`), or None where the model cannot be twinned or a search
        already runs every plan on the switch graph. ``feed`` gives symbolic input dims values."""
        if self._switched is not None:
            return None
        dims = _symbol_values(self.model, feed or {})
        budget = self._budget

        def whole(tensors: tuple[str, ...], twinned: bool) -> frozenset[str]:
            sizes = sorted((size, t) for t in tensors if (size := self._bytes(t, dims)) is not None)
            picked, total = [], 0.0
            for size, tensor in sizes:
                total += size * (2 if twinned else 1)
                if total > budget:
                    break
                picked.append(tensor)
            return frozenset(picked)

        fp32 = as_fp32(self.ctx)
        start = time.perf_counter()
        try:
            lows = None if plan is None else _types(self._lows(plan))
            source = EmulationSource(fp32, self.ctx.typing, self.ctx.base_dir,
                                     self.ctx.types if fp32 is self.model else None,
                                     always_fp32(self.ctx) - frozenset(lows or ()), self.ctx.target,
                                     self.measured, written_forms(self.ctx), dequantize_copies(self.ctx))
            model = build_twin_model(source, lows, plan is not None and plan.fp16_io, whole)
        except TwinUnavailable:
            return None
        self._baked.clear()  # the twin holds both: never three copies of the model at once
        options = twin_session_options(self.threads)
        ctx = self.ctx
        # the twin's proto (a copy of the weights) is gone before onnxruntime parses its bytes and
        # while it runs: on the 26 MB dynamic-quant model of scripts/bench_quantized.py, 16 MB of the
        # search's peak
        given = handed(model.model, ctx.base_dir, ctx.mapped_weights)
        model = model.without_weights()
        session = make_session(given, ctx.base_dir, options=options,
                               custom_op_libraries=ctx.custom_op_libraries)
        dtypes = given.io.dtypes
        del given
        self.build_seconds += time.perf_counter() - start
        self.sessions_built += 1
        return TwinSession(model, session, self, dtypes, plan)

    @cached_property
    def _budget(self) -> int:
        weights = sum(4 * element_count(t) for t in model_tensors(self.model) if t.data_type == FLOAT)
        return max(MIN_CAPTURE_BYTES, weights // 4)

    def chunks(self, feed: Feed | None = None) -> Chunks:
        """The main graph's float tensors in chunks a capturing run may hold (see :class:`Chunks`);
        ``feed`` gives the symbolic input dims their values."""
        feed_dims = _symbol_values(self.model, feed or {})
        if self._switched is not None:
            return Chunks((), (), 0, whole=True)
        tensors = captured(self.model, elem_types(self.model, self.ctx.types), self.outputs, True)
        return Chunks(tensors, [self._bytes(t, feed_dims) for t in tensors], self._budget)

    def _bytes(self, tensor: str, dims: Mapping[str, int]) -> float | None:
        """The float32 or float64 tensor's bytes from its inferred shape (``dims``: symbolic dims' values)."""
        tp = self.ctx.types.get(tensor)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        count = 4 if tp.tensor_type.elem_type == FLOAT else 8  # float32 or float64 (captured: WIDE)
        for d in tp.tensor_type.shape.dim:
            value = d.dim_value if d.dim_value > 0 else dims.get(d.dim_param)
            if not value:
                return None
            count *= value
        return float(count)

    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray:
        """As :meth:`EmulationSession.fed_value` (no session needed)."""
        return self._io.fed(plan, name, value, self.low)

    @cached_property
    def _io(self) -> FloatIO:
        return FloatIO(self.model)

    @cached_property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.model.graph.output)

    @cached_property
    def producers(self) -> Mapping[str, str]:
        """Main-graph value -> the node that outputs it."""
        return {v: ref.name for v, ref in self.ctx.index.producers.items() if not ref.graph_path}


class TwinSession:
    """A twin graph's session: one run per sample gives the FP32 outputs, the plan's, and every
    compared tensor whole or summarised (see :class:`.twin.TwinModel`)."""

    def __init__(self, twin: TwinModel, session: ort.InferenceSession, emulator: Emulator,
                 dtypes: Mapping[str, np.dtype], plan: PrecisionPlan | None = None) -> None:
        self.twin = twin  # without its weights (:meth:`.TwinModel.without_weights`): the session has them
        self.session = session
        self.emulator = emulator
        self._dtypes = dtypes  # its inputs' (:class:`.sessions.Io`)
        self._fetches = twin.fetches()
        self.plan = plan  # the plan twinned with FP32 (None: the FP32 model alone)

    def run(self, feed: Feed) -> dict[str, np.ndarray]:
        self.emulator.probes_run += 1
        # the plan's side stops where a flipped decision changed its shapes
        with named_stop(self.emulator.diverged, self.plan, feed):
            values = cancel.run(self.session, self._fetches, cast_feed(feed, self._dtypes))
        return dict(zip(self._fetches, values))


def twin_session_options(threads: int | None) -> ort.SessionOptions:
    """A twin graph's session options: run once per sample, in the graph's order, so that each
    FP32 tensor dies once its twin is compared (see .twin). With onnxruntime's arena: without it,
    Kokoro-82M int8's analyze peaked at 2375 MB against 1494 MB with it (the system allocator kept
    what the twin's thousands of short-lived tensors freed); the 26 MB dynamic-quant benchmark's
    peak is 5 MB higher with it (231 MB)."""
    options = session_options(threads)
    options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    # onnxruntime gives each further reader of a DequantizeLinear (the summary comparing its output)
    # a copy of the DQ, appended to the graph, which the priority order ran after every plan node:
    # the FP32 chain it feeds waited, and all its tensors with it (Kokoro-82M int8: 4.4 GB, 1.3 GB
    # without the copies). Only DQ placement changes here; with optimisations off, nothing else.
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return options


def _types(lows: Lows) -> dict[str, LowPrecision]:
    return {node: low_of(precision) for node, precision in lows}


def _symbol_values(model: onnx.ModelProto, feed: Feed) -> dict[str, int]:
    """Symbolic input dims and their values in ``feed``."""
    values: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name in feed and vi.type.HasField("tensor_type"):
            for d, n in zip(vi.type.tensor_type.shape.dim, np.shape(feed[vi.name])):
                if d.dim_param:
                    values[d.dim_param] = int(n)
    return values
