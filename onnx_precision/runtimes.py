"""Where a written plan holds: the written model judged under every runtime of the registry.

A run measures, searches and verifies under one target, but the file it writes is loaded by whatever
runtime its user has: a plan that holds where onnxruntime's CUDA kernels sum in FP32 can make NaN/Inf
where onnxruntime's WebGPU shaders sum in FP16. :func:`judge` emulates the written model once per
runtime of the registry (:func:`~onnx_precision.target.registry_like`: each target in the run's 16-bit
type), judges it by the run's basis (its samples, its reference, each sample's tolerance) and, where a
runtime fails, finds the first node where the error appears (:func:`first_failure`: the written model
emulated there against the FP32 model, node by node, by :func:`~onnx_precision.oracle.layerwise`). The
result is a frozen :class:`RuntimeTable`, which ``convert`` and ``check`` print and report; neither knows
how it is made.

The run's own target is judged as the run judged it (its basis' proofs: the sums the samples prove in
range go unchecked), reusing the verification's comparison where the caller has it; every other runtime
with every 16-bit sum checked, since a proof names the sums of the run's own target. One emulated session
per runtime (one for the runtimes that spell the written model alike), and for a failing one the
inspection's few: cheap next to a search.

Each runtime's written model runs through a plan runner (:class:`WrittenRunner`), which a decoder's
generation wraps as the search's runners (:meth:`.basis.Basis.generation_runner`): :func:`judged` runs one
forward pass per sample, or the generation over the search's horizon, teacher-forced.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from .basis import Basis
from .context import ModelContext, read_model_file, read_written
from .costs import PhaseCost
from .errors import ModelLoadError
from .float_types import LOW_TYPES, LowPrecision
from .format import number
from .judge import Comparison
from .plan import PrecisionPlan
from .rewriter import PROVENANCE
from .target import GENERIC, UNMEASURED, Measured, Target, recorded_target, registry_like
from .tradeoff import worst_output_text
from .typing_rules import tensor_types

if TYPE_CHECKING:  # onnxruntime: only a measuring run loads it
    from .oracle import Emulator
    from .oracle.inspection import Chunks


@dataclass(frozen=True)
class FirstFailure:
    """Where a runtime's error appears: the first node (in the written model's order) whose output turns
    NaN/Inf from finite inputs, or leaves the tolerance's rtol while its inputs are within it."""

    node: str
    op_type: str
    new_nonfinite: int  # NaN/Inf where FP32 is finite, over the samples
    max_rel_err: float
    # where the run stops because ``node``, a decision, flipped: how (ShapeChange.describe); "" where it ran
    stopped: str = ""

    def describe(self) -> str:
        if self.stopped:
            return self.stopped
        what = (f"makes {self.new_nonfinite} NaN/Inf from finite inputs" if self.new_nonfinite else
                f"max rel err {number(self.max_rel_err)}, its inputs within tolerance")
        return f"node '{self.node}' ({self.op_type}) {what}"

    def to_json(self) -> dict:
        return {"node": self.node, "op": self.op_type, "new_nonfinite": self.new_nonfinite,
                "max_rel_err": self.max_rel_err, **({"stopped": self.stopped} if self.stopped else {})}

    @staticmethod
    def from_json(obj: Mapping) -> FirstFailure:
        return FirstFailure(str(obj["node"]), str(obj["op"]), int(obj["new_nonfinite"]),
                            float(obj["max_rel_err"]), str(obj.get("stopped", "")))


@dataclass(frozen=True)
class RuntimeVerdict:
    """The written model on one runtime: passed or not, its worst output, and where a failure starts."""

    runtime: str  # the target's name, as results record it ("webgpu", "tensorrt 10.8")
    passed: bool
    worst: str  # the worst output and its statistic, or its new NaN/Inf (tradeoff.worst_output_text)
    first: FirstFailure | None = None  # None: passed, or no node was found where the error appears
    as_run: bool = False  # the run's own target, judged as the run did (its proofs); else every sum checked

    @property
    def detail(self) -> str:
        """What a failing runtime's verdict says beyond its name: the first node where its error appears
        ("first: node 'x' (MatMul) makes 4 NaN/Inf from finite inputs"), else its worst output."""
        return "" if self.passed else f"first: {self.first.describe()}" if self.first else self.worst

    def to_json(self) -> dict:
        return {"runtime": self.runtime, "passed": self.passed, "worst": self.worst,
                "first_failure": None if self.first is None else self.first.to_json(), "as_run": self.as_run}

    @staticmethod
    def from_json(obj: Mapping) -> RuntimeVerdict:
        first = obj.get("first_failure")
        return RuntimeVerdict(str(obj["runtime"]), bool(obj["passed"]), str(obj["worst"]),
                              None if first is None else FirstFailure.from_json(first), bool(obj["as_run"]))


@dataclass(frozen=True)
class RuntimeTable:
    """The written model judged on every runtime of the registry (see the module docstring)."""

    verdicts: tuple[RuntimeVerdict, ...]
    cost: PhaseCost = field(default=PhaseCost("runtimes", 0.0), compare=False)  # what judging them took

    @property
    def holds(self) -> tuple[RuntimeVerdict, ...]:
        return tuple(v for v in self.verdicts if v.passed)

    @property
    def fails(self) -> tuple[RuntimeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)

    def line(self) -> str:
        """Which runtimes the plan holds on and which it fails on, the runtimes failing alike together with
        their first node: "holds on: generic, tensorrt 10.8; fails on: webgpu, openvino-gpu (first: node
        'x' (MatMul) makes 16 NaN/Inf from finite inputs)"."""
        alike: dict[str, list[str]] = {}
        for v in self.fails:
            alike.setdefault(v.detail, []).append(v.runtime)
        fails = "; ".join(f"{', '.join(names)} ({detail})" for detail, names in alike.items())
        return self._holds() + (f"; fails on: {fails}" if fails else "")

    def short(self) -> str:
        """:meth:`line` without the failures' detail (the ``next:`` line's)."""
        fails = ", ".join(v.runtime for v in self.fails)
        return self._holds() + (f"; fails on: {fails}" if fails else "") + " (emulated on the samples)"

    def _holds(self) -> str:
        return f"holds on: {', '.join(v.runtime for v in self.holds) or 'none'}"

    def to_json(self) -> list[dict]:
        return [v.to_json() for v in self.verdicts]

    @staticmethod
    def from_json(obj: Sequence[Mapping]) -> RuntimeTable:
        return RuntimeTable(tuple(RuntimeVerdict.from_json(v) for v in obj))


def judge(written: str | ModelContext, model: ModelContext, basis: Basis, own: Comparison | None = None,
          plan: PrecisionPlan | None = None) -> RuntimeTable:
    """``written`` (the file a run wrote and checked, or the model it wrote in memory, as a context) judged
    under every runtime of the registry like ``model``'s target (:func:`~.target.registry_like`), by
    ``basis``; ``model``: the FP32 model as the run measured it (its target, its custom-op libraries).
    ``own``: the comparison the run already made under its own target, reused (None: judged here too).
    ``plan``: the plan ``written`` was written from, which names the decision that flipped where a
    runtime's run stops on shapes that no longer fit together (None: such a stop is onnxruntime's error)."""
    from .oracle import Emulator

    started, sessions, probes = time.perf_counter(), 0, 0
    fp32 = Emulator(model)  # the FP32 side of every failing runtime's inspection: its sessions shared
    read = Written.of(written, model.custom_op_libraries)  # read once, emulated once per runtime
    # runtimes that spell the written model alike (no op it builds from layers, no sum it keeps in FP16)
    # compute alike: judged once
    judged_by: dict[bytes, tuple[Comparison, FirstFailure | None]] = {}
    verdicts = []
    for target in registry_like(model.target):
        as_run = target is model.target
        runner = WrittenRunner(read, fp32, target, basis.measured if as_run else UNMEASURED, plan)
        if runner.spelled not in judged_by:
            comparison = own if as_run and own is not None else judged(runner, basis)
            first = None if comparison.passed else first_failure(runner, basis)
            judged_by[runner.spelled] = comparison, first
        comparison, first = judged_by[runner.spelled]
        sessions, probes = sessions + runner.sessions_built, probes + runner.probes_run
        verdicts.append(RuntimeVerdict(target.name, comparison.passed,
                                       worst_output_text(comparison, basis.tolerance), first, as_run))
    cost = PhaseCost("runtimes", time.perf_counter() - started, sessions=sessions + fp32.sessions_built,
                     probes=probes + fp32.probes_run)
    return RuntimeTable(tuple(verdicts), cost)


def judged(runner: WrittenRunner, basis: Basis) -> Comparison:
    """The written model ``runner`` runs, on the basis' samples, judged by it as the verification judges it:
    one forward pass per sample, or a generation's over its first steps (the search's horizon, as its plans
    were judged: a whole generation on each runtime would cost the verification's as many times; each
    sample teacher-forced, stopped at its first failing step: :meth:`.basis.Basis.generation_runner`)."""
    if basis.generation is not None:
        from .generation import HORIZON
        from .generation.written import judge as judge_generation

        steps = basis.generation_runner(runner).within(min(HORIZON, basis.generation.steps))
        return judge_generation(steps, WRITTEN, basis.samples.feeds, basis.references, basis.tolerances)[0]
    from .judge import compare_by_shape, merge_comparisons
    from .oracle import OracleRun
    from .oracle.blame import ShapesDiverged
    from .oracle.verify import compared_apart, only_reference_outputs

    feeds = basis.samples.feeds
    try:
        run = OracleRun(runner.oracle, tuple(runner.run(WRITTEN, feed) for feed in feeds))
    except ShapesDiverged:  # a sample stops where a decision flipped: each judged apart
        per_sample = compared_apart(lambda feed: runner.run(WRITTEN, feed), feeds, basis.references,
                                    basis.tolerances, runner.oracle)[0]
        return merge_comparisons(per_sample, runner.oracle)
    return compare_by_shape(feeds, list(basis.references), only_reference_outputs(run, basis.references),
                            basis.tolerances, run.oracle)


def first_failure(runner: WrittenRunner, basis: Basis) -> FirstFailure | None:
    """The first node where the written model ``runner`` runs parts from the FP32 model on the basis'
    samples (:func:`~.oracle.layerwise` over the tensors both have); None where none was found (a
    candidate whose tensors the FP32 model does not name)."""
    from . import oracle

    result = oracle.layerwise(runner, WRITTEN, basis.forward.feeds, basis.tolerance)
    name = next(iter(result.first_divergence), None)
    if name is None:
        return None
    stop = next((change for change in result.shape_changes if change.stopped), None)
    if stop is not None:  # the run stops where a decision flipped: no node's error is measured
        made = runner.made(name)
        return FirstFailure(made.name, made.op_type, 0, float("inf"), stop.describe())
    error = result.nodes[name]
    made = runner.made(name)
    return FirstFailure(made.name, made.op_type, error.new_nonfinite, error.max_rel_err)


TARGET_KEY = PROVENANCE + "target"  # the metadata key of the target a written model was made for


@dataclass(frozen=True)
class JudgedAs:
    """The target a candidate is judged under, and why that one (as ``check`` says it)."""

    target: Target
    source: str  # "given", "recorded in the candidate, ...", "the default: the candidate records none"


def judged_as(candidate_path: str, given: Target, recorded: bool = True) -> JudgedAs:
    """The target ``check`` judges the candidate at ``candidate_path`` under: ``given``, but where it is the
    default (generic) and ``recorded`` (the caller named none), the one the candidate records (metadata
    :data:`TARGET_KEY`, as ``convert`` stamps it), in ``given``'s 16-bit type. A candidate that cannot be
    read records nothing here: its load says what is wrong with it."""
    if not recorded or given.name != GENERIC.name:
        return JudgedAs(given, "given")
    try:
        model, _ = read_model_file(candidate_path, light_from=0)
    except ModelLoadError:
        return JudgedAs(given, "the default: the candidate records none")
    name = next((p.value for p in model.metadata_props if p.key == TARGET_KEY), None)
    found = None if name is None else recorded_target(name, given.low, given.fallback)
    if found is None:
        what = "none" if name is None else f"{name!r}, no runtime of this version"
        return JudgedAs(given, f"the default: the candidate records {what}")
    return JudgedAs(found, f"recorded in the candidate, metadata {TARGET_KEY}; --target overrides it")


# The plan a WrittenRunner is asked for: the written model, run as it is written, whatever a plan says
WRITTEN = PrecisionPlan({})


@dataclass(frozen=True)
class Written:
    """A written model as the runtimes' runners read it, once: its proto (a file's weights left in the file,
    :func:`.context.read_written`), the folder its data is read from, the custom-op libraries its sessions
    register."""

    model: onnx.ModelProto
    base_dir: str
    libraries: tuple[str, ...] = ()

    @staticmethod
    def of(written: str | ModelContext, libraries: tuple[str, ...] = ()) -> Written:
        """The file ``written`` read, or the model written in memory."""
        if isinstance(written, ModelContext):
            return Written(written.model, written.base_dir, libraries)
        return Written(*read_written(written), libraries)

    @cached_property
    def types(self) -> Mapping[str, onnx.TypeProto]:
        """Every value's type: the written model's, whatever the runtime it is emulated on."""
        return tensor_types(self.model)

    @cached_property
    def inputs_low(self) -> Mapping[str, LowPrecision]:
        """The 16-bit graph inputs, by name, with their type."""
        return {vi.name: LOW_TYPES[vi.type.tensor_type.elem_type] for vi in self.model.graph.input
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in LOW_TYPES}


class WrittenRunner:
    """The written model emulated on ``target`` (its sums spelled as ``measured``), as a plan runner
    (:class:`~.oracle.PlanRunner`): any plan runs the written model as it is; None, the FP32 model (on
    ``fp32``, an emulator of it, which the runners of one model share). It can look inside
    (:class:`~.oracle.inspection.Inspectable`, for :func:`first_failure`): each side captures the tensors
    of a chunk of the FP32 model's that it holds, by the written model's names; nodes, order and producers
    are the written model's."""

    oracle = "emulate"
    inspection = None  # it is inspectable itself, as a written model against its FP32 model
    switchable: frozenset[str] = frozenset()  # no plan changes what it runs

    def __init__(self, written: Written, fp32: Emulator, target: Target, measured: Measured = UNMEASURED,
                 plan: PrecisionPlan | None = None) -> None:
        from .oracle import emulate_model

        self.written, self.fp32, self.low = written, fp32, target.low
        self.plan = plan  # what it was written from: where its run stops, which decision flipped (blame)
        self.emulated = emulate_model(written.model, written.base_dir, target, measured=measured,
                                      types=written.types)
        self.outputs = tuple(o.name for o in self.emulated.graph.output)
        self.held = frozenset(o for n in self.emulated.graph.node for o in n.output if o)
        # what the target's spelling made of the written model (the weights are the model's, whatever it)
        nodes = self.emulated.graph.node
        self.spelled = hashlib.sha256(b"".join(n.SerializeToString() for n in nodes)).digest()
        self._session: tuple[tuple[str, ...], Any] | None = None  # the chunk captured, and its session
        self.sessions_built = 0  # the written model's (the FP32 emulator counts its own)
        self.probes_run = 0

    def searching(self) -> WrittenRunner:
        return self

    def run(self, plan: PrecisionPlan | None, feed: Mapping[str, np.ndarray],
            names: Sequence[str] | None = None, intermediates: bool | tuple[str, ...] = False,
            ) -> dict[str, np.ndarray]:
        """The graph outputs of the written model (the FP32 model's for None) on ``feed``, with the
        tensors ``intermediates`` names that it holds."""
        if plan is None:
            return self.fp32.run(None, feed, names, intermediates)
        from . import cancel
        from .oracle.blame import named_stop
        from .oracle.sessions import cast_feed, input_dtypes, make_session

        chunk = tuple(n for n in (intermediates if isinstance(intermediates, tuple) else ())
                      if n in self.held and n not in self.outputs)
        if self._session is None or self._session[0] != chunk:
            self._session = None  # the last chunk's session goes before the next is built
            exposed = self.emulated
            if chunk:
                exposed = onnx.ModelProto()
                exposed.CopyFrom(self.emulated)
                exposed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in chunk)
            base_dir, libraries = self.written.base_dir, self.written.libraries
            self._session = (chunk, make_session(exposed, base_dir, custom_op_libraries=libraries))
            self.sessions_built += 1
        fetched = list(self.outputs + chunk)
        with named_stop(self.fp32.diverged, self.plan, feed):
            values = cancel.run(self._session[1], fetched, cast_feed(feed, input_dtypes(self.emulated)))
        self.probes_run += 1
        return dict(zip(fetched, values))

    # --- what an inspection asks (Inspectable) ------------------------------------------------------------

    @property
    def model(self) -> onnx.ModelProto:
        """The written model, whose nodes the inspection walks."""
        return self.written.model

    @cached_property
    def producers(self) -> Mapping[str, str]:
        return {o: n.name for n in self.written.model.graph.node for o in n.output if o}

    def made(self, name: str) -> onnx.NodeProto:
        """The node that made what node ``name`` shows: itself, or for a Cast between precisions that the
        FP32 model does not have (a written model's, reading a tensor the FP32 model does not name either:
        a fused LayerNormalization's output), the nearest node upstream that is not such a Cast."""
        nodes = {n.name: n for n in self.written.model.graph.node}
        node, own = nodes[name], self.fp32.ctx.node_ops
        while node.op_type == "Cast" and node.name not in own and node.input[0] in self.producers:
            node = nodes[self.producers[node.input[0]]]
        return node

    def chunks(self, feed: Mapping[str, np.ndarray] | None = None) -> Chunks:
        return self.fp32.chunks(feed)

    def twin(self, plan: PrecisionPlan | None, feed: Mapping[str, np.ndarray] | None = None) -> None:
        return None  # two models, not two plans of one: compared chunk by chunk

    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray:
        low = self.written.inputs_low.get(name) if plan is not None else None
        return value if low is None else low.round(value)
