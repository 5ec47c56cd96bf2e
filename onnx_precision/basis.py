"""What a run measured before it searched, as one value: its :class:`Basis`.

A measuring run (``convert``'s static and auto modes, ``check``) builds its basis once, right where its
samples are loaded, and every later step takes it whole: the search judges each plan by it, the rewriter
writes the LayerNormalizations it pre-scaled, the written model is verified by it and validated on
held-out samples by the same judging (:meth:`Basis.held_out`), ``check`` judges a candidate by it and the
report states it. Two steps that rebuilt the same measured state would drift; these read one value. A
basis holds:

* the samples;
* the reference it judges against (:class:`Reference`): per sample the reference's outputs and the
  tolerance that judges them, derived from the tolerance as given. For most models that is the model's
  own FP32 outputs, each judged by the tolerance as given (:class:`AsGiven`); for a quantized model, an
  unquantized reference's outputs, each sample's bound relative to its quantization error
  (:class:`~onnx_precision.quant_reference.QuantGate`): another way the tolerances were derived, read
  through the same interface, with its notes; for a model run over many steps (a decoder, a streaming
  model: :mod:`onnx_precision.generation`), its FP32 generation of each sample, run once, whose outputs at
  every step (``logits@step 7``) a candidate's teacher-forced generation is judged against
  (:class:`Generated`), its tokens teaching the candidates;
* the feeds one forward pass is measured on (:attr:`Basis.forward`: the ranges, the sums, the layerwise
  ranking, the FLOPs): the samples, or each sample's first and last steps' feeds in a generation, where
  what grows with the steps shows;
* what the samples showed of the target's 16-bit sums (:class:`Sums`): each accumulator's largest bound,
  the headroom kept over them, and what they prove: the sums in range and the LayerNormalizations to
  pre-scale (:class:`~onnx_precision.target.Measured`), which every emulation of the run spells alike.

It is measured in two steps, one function each, which ``convert`` and ``check`` share: :func:`sums`
(requires the model loaded for the run's target, its opset raised for BF16), then :func:`judged`
(requires the model's FP32 outputs on the samples: ``convert``'s search takes them from the reference
run it makes anyway, for the ranges, so that no session is built twice; ``check`` from a plain FP32 run,
:func:`measure`; a generation's, from :func:`generations`, run first: its last steps are measured too).
:func:`judged` ensures one reference output set and one tolerance per sample, each holding every
compared output of the model (at every step, in a generation; checked: it is cheap). Both commands load
their samples with :func:`run_samples` and tell the generation with :func:`generation_of`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from . import policy, quant_reference, quantized
from .context import ModelContext, Upgrade
from .data import Samples, SampleSpec, load_samples
from .errors import InternalError, PrecisionError, UsageError
from .judge import Comparison, Tolerance
from .options import GenerationOptions, Judging, default_of, flag_of
from .target import UNMEASURED, Measured, Target, Targeting
from .target.accumulation import proven_sums

if TYPE_CHECKING:  # the generation's runner imports the oracle, which a run that measures nothing never loads
    from .generation import Generation, GenerationRun, GenerationRunner
    from .oracle import PlanRunner

DEFAULT_HEADROOM = 2.0  # one binade of margin over the samples (see convert.choose)
AS_GIVEN = Judging()  # the default tolerance, no reference model


class Reference(Protocol):
    """What a run judges against, on its samples: per sample the reference's outputs and the tolerance that
    judges a candidate's, derived from the tolerance as ``given``."""

    @property
    def outputs(self) -> tuple[dict[str, np.ndarray], ...]: ...
    @property
    def tolerances(self) -> tuple[Tolerance, ...]: ...
    @property
    def given(self) -> Tolerance: ...

    @property
    def tolerance(self) -> Tolerance:
        """One tolerance every sample's pass is within (what a report states)."""

    @property
    def relative(self) -> Mapping[str, float]:
        """The outputs whose bound is relative to another error, with its margin (for the thin-pass note)."""

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        """What a report says of how ``verified`` (the written model, or a candidate) was judged."""

    def to_json(self, judged: Comparison | None) -> Mapping[str, object]:
        """The derivation as the JSON reports write it ({}: nothing to say)."""

    def on(self, ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]]) -> Reference:
        """The same reference and derivation on other samples of ``ctx``'s model (held-out samples)."""


@dataclass(frozen=True)
class AsGiven:
    """The model's own FP32 outputs, each sample judged by the tolerance as given."""

    given: Tolerance
    outputs: tuple[dict[str, np.ndarray], ...]

    @property
    def tolerances(self) -> tuple[Tolerance, ...]:
        return (self.given,) * len(self.outputs)

    @property
    def tolerance(self) -> Tolerance:
        return self.given

    @property
    def relative(self) -> Mapping[str, float]:
        return {}

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        return ()

    def to_json(self, judged: Comparison | None) -> Mapping[str, object]:
        return {}

    def on(self, ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]]) -> AsGiven:
        from . import oracle  # onnxruntime: only a measuring run needs it

        return AsGiven(self.given, tuple(dict(o) for o in oracle.run_fp32(ctx, feeds).outputs))


@dataclass(frozen=True)
class Generated:
    """A generation's reference: per sample its FP32 generation (``runs``: the prefill, or first chunk, and
    ``generation.steps`` steps, greedy on its own tokens), whose compared outputs at every step
    (``logits@step 7``: :attr:`~onnx_precision.generation.GenerationRun.outputs`) a candidate's generation,
    teacher-forced by its tokens, is judged against, every step by the tolerance as ``given``."""

    given: Tolerance
    generation: Generation
    runs: tuple[GenerationRun, ...]
    compared: tuple[str, ...]  # the outputs compared at each step (those not fed back)

    @property
    def outputs(self) -> tuple[dict[str, np.ndarray], ...]:
        return tuple(dict(run.outputs) for run in self.runs)

    @property
    def tolerances(self) -> tuple[Tolerance, ...]:
        from .generation import step_tolerance

        return (step_tolerance(self.given, self.compared, self.generation.steps),) * len(self.runs)

    @property
    def tolerance(self) -> Tolerance:
        return self.given

    @property
    def relative(self) -> Mapping[str, float]:
        return {}

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        return ()

    def to_json(self, judged: Comparison | None) -> Mapping[str, object]:
        return {}

    def on(self, ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]]) -> Generated:
        return replace(self, runs=generations(ctx, feeds, self.generation).runs)


@dataclass(frozen=True)
class Generations:
    """What a generation's FP32 reference run measured (:func:`generations`): per sample its generation
    (``runs``) and the feeds one forward pass is measured on (``forward``: each sample's first and last
    steps' feeds: a KV cache of the whole length, a state grown over every step), with the sessions it
    built. ``stepped``: each sample's feeds at ``steps`` (the first, the eighths, the last:
    :func:`~onnx_precision.generation.inside.measured_steps`), where the ranges and the sums are measured,
    whose trend the generation's bound extrapolates (:meth:`measured` gives it the runs)."""

    generation: Generation
    runs: tuple[GenerationRun, ...]
    forward: tuple[dict[str, np.ndarray], ...]
    sessions: int
    stepped: tuple[dict[str, np.ndarray], ...] = ()
    steps: tuple[int, ...] = ()

    def measured(self, ctx: ModelContext, peaks: Sequence[Mapping[str, float]],
                 sums: Sequence[Mapping[str, float]] = ()) -> Generations:
        """Each run with what was measured inside ``ctx``'s model at its steps: ``peaks`` (the ranges') and
        ``sums`` (the target's 16-bit sums') per feed of :attr:`stepped`."""
        from .generation.inside import step_ranges

        inside = step_ranges(ctx, len(self.runs), self.steps, peaks, sums)
        return replace(self, runs=tuple(replace(run, inside=r) for run, r in zip(self.runs, inside)))


def forward_samples(samples: Samples, feeds: Sequence[dict[str, np.ndarray]]) -> Samples:
    """``samples``' description (source, warnings) over ``feeds``, each one forward pass's."""
    return Samples(tuple(feeds), samples.synthetic, samples.source, samples.warnings, samples.guessed_shapes)


def generations(ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]], generation: Generation,
                ) -> Generations:
    """The FP32 generation of each of ``feeds`` (samples of ``generation``, as :func:`run_samples` loads
    them), emulated as every plan is, on one session (requires ``ctx`` as the run measures it)."""
    from .generation import GenerationRunner
    from .generation.inside import measured_steps
    from .oracle import Emulator

    runner = GenerationRunner(Emulator(ctx), generation)
    steps = measured_steps(generation.steps)
    runs, forward, stepped = [], [], []
    for feed in feeds:
        run = runner.reference(feed, keep=steps)
        kept = [(step, dict(fed)) for step, fed in run.feeds]
        stepped += [fed for _, fed in kept]
        forward += [fed for step, fed in kept if step in (0, generation.steps)]
        runs.append(replace(run, feeds=()))  # the basis keeps what it compares, not the steps' caches
    return Generations(generation, tuple(runs), tuple(forward), runner.sessions_built, tuple(stepped), steps)


@dataclass(frozen=True)
class Sums:
    """What the samples showed of the target's 16-bit sums: each FP16 accumulator's largest bound on them,
    and what those bounds prove with ``headroom`` kept over the samples (:class:`~.target.Measured`)."""

    headroom: float = DEFAULT_HEADROOM  # 0: off (nothing proven), else at least 1
    bounds: Mapping[str, float] = field(default_factory=dict)  # node -> its accumulator's largest bound
    measured: Measured = UNMEASURED
    sessions: int = 0  # built to measure the bounds (one where the target sums in FP16, else none)
    each: tuple[Mapping[str, float], ...] = ()  # per sample, node -> its accumulator's bound on it


def sums(ctx: ModelContext, samples: Samples, headroom: float = DEFAULT_HEADROOM) -> Sums:
    """What ``samples`` show of the sums ``ctx``'s target keeps in FP16 (requires ``ctx`` loaded for the
    run's target: its accumulation table decides which sums); ``headroom``: 0 (off) or at least 1."""
    from .oracle.accumulated import AccumulationBounds, largest

    if headroom != 0 and not headroom >= 1.0:
        raise PrecisionError(f"--headroom {headroom:g}: must be 0 (off) or at least 1 "
                             f"(1 = pin only what overflows on the samples)")
    accumulated = AccumulationBounds(ctx)  # where the target sums in FP16: what each such sum reaches
    each = accumulated.each(samples.feeds)
    bounds = largest(each)
    # the sums the samples prove in range are emulated without their check, and the LayerNorms whose FP16
    # statistics they show past 65504 as written on x·2^-j, in every plan measured and in the written
    # model's verification alike
    measured = Measured(proven_sums(bounds, ctx.target.low, headroom),
                        policy.layer_norm_prescales(ctx, bounds, headroom))
    return Sums(headroom, bounds, measured, accumulated.sessions_built, tuple(each))


@dataclass(frozen=True)
class Basis:
    """What a run measured before it searched (see the module docstring)."""

    samples: Samples
    reference: Reference
    sums: Sums = Sums()
    # a generation's first and last steps' feeds (:class:`Generations`); None: the samples themselves
    forward_feeds: tuple[dict[str, np.ndarray], ...] | None = None

    def __post_init__(self) -> None:
        count = len(self.samples.feeds)
        if (len(self.reference.outputs), len(self.reference.tolerances)) != (count, count):
            raise InternalError(f"a basis of {count} sample(s) with {len(self.reference.outputs)} reference "
                                f"output set(s) and {len(self.reference.tolerances)} tolerance(s)")

    @property
    def generation(self) -> Generation | None:
        """The generation every plan is judged over (None: one forward pass)."""
        return self.reference.generation if isinstance(self.reference, Generated) else None

    def generation_runner(self, runner: PlanRunner) -> GenerationRunner:
        """``runner`` running this basis' generation, taught each sample's reference (its tokens force a
        candidate's) and tolerance (a candidate stops at its first step out of it)."""
        from .generation import GenerationRunner

        if not isinstance(self.reference, Generated):
            raise InternalError("a generation's runner of a basis judged on one forward pass")
        judging = GenerationRunner(runner, self.reference.generation)
        for sample, run, tolerance in zip(self.samples.feeds, self.reference.runs, self.tolerances):
            judging.teach(sample, run, tolerance)
        return judging

    @property
    def forward(self) -> Samples:
        """The feeds one forward pass is measured on: the samples, or a generation's first and last steps'
        (see the module docstring)."""
        if self.forward_feeds is None:
            return self.samples
        return forward_samples(self.samples, self.forward_feeds)

    @property
    def references(self) -> tuple[dict[str, np.ndarray], ...]:
        """Per sample, the outputs a plan's are judged against."""
        return self.reference.outputs

    @property
    def tolerances(self) -> tuple[Tolerance, ...]:
        """Per sample, the tolerance that judges it."""
        return self.reference.tolerances

    @property
    def tolerance(self) -> Tolerance:
        """The one tolerance a report states (every sample's is within it)."""
        return self.reference.tolerance

    @property
    def given(self) -> Tolerance:
        """The tolerance as the user gave it."""
        return self.reference.given

    @property
    def relative(self) -> Mapping[str, float]:
        return self.reference.relative

    @property
    def measured(self) -> Measured:
        """What every emulation of the run spells alike: the sums in range, the LayerNorms pre-scaled."""
        return self.sums.measured

    @property
    def headroom(self) -> float:
        return self.sums.headroom

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        """What the report says of the judging of ``verified`` (a quantized model's: its gate)."""
        return self.reference.notes(verified)

    def to_json(self, judged: Comparison | None) -> Mapping[str, object]:
        return self.reference.to_json(judged)

    def held_out(self, ctx: ModelContext, samples: Samples) -> Basis:
        """The same judging on the held-out ``samples``: the reference run on them, each judged as the run's
        own; nothing proven (a proof holds on the samples that made it: every sum stays checked)."""
        return Basis(samples, self.reference.on(ctx, samples.feeds), Sums(self.headroom))


def judged(ctx: ModelContext, samples: Samples, judging: Judging, found: Sums,
           fp32: Sequence[Mapping[str, np.ndarray]] | Generations) -> Basis:
    """The basis of a run on ``ctx``'s model and ``samples``: ``fp32`` (requires: the model's FP32 outputs
    on them, from whichever run the caller makes of it, or a generation's reference runs of them,
    :func:`generations`) judged by ``judging`` (a quantized model's gate, or the tolerance as given), with
    what the samples showed of the target's sums (``found``: :func:`sums`). Ensures every reference holds
    each of the model's compared outputs (at every step of a generation)."""
    outputs = {o.name for o in ctx.model.graph.output}
    if isinstance(fp32, Generations):
        basis = Basis(samples, _generated(ctx, judging, fp32), found, fp32.forward)
        from .generation import step_name

        outputs = {step_name(name, step) for name in outputs - fp32.generation.fed_outputs
                   for step in range(fp32.generation.steps + 1)}
    else:
        reference: Reference | None = quant_reference.gate(
            ctx, samples.feeds, judging.tolerance, judging.reference_model, judging.quant_margin, fp32)
        if reference is None:  # not quantized, and no reference model: the model itself in FP32
            reference = AsGiven(judging.tolerance, tuple(dict(o) for o in fp32))
        basis = Basis(samples, reference, found)
    missing = next((outputs - set(r) for r in basis.references if outputs - set(r)), None)
    if missing:
        raise InternalError(f"the basis' reference has no output {sorted(missing)[0]!r} of {ctx.path}")
    return basis


def _generated(ctx: ModelContext, judging: Judging, found: Generations) -> Generated:
    """The reference of a generation, judged by the tolerance as given: a quantized model's gate judges one
    forward pass, which a generation's steps do not have yet."""
    if judging.reference_model is not None or quantized.of(ctx).qdq:
        raise UsageError(f"{ctx.path}: a quantized model's generation is not judged yet (its quantization "
                         f"gate compares one forward pass); --no-generation judges one")
    fed = found.generation.fed_outputs
    compared = tuple(o.name for o in ctx.model.graph.output if o.name not in fed)
    return Generated(judging.tolerance, found.generation, found.runs, compared)


def generation_of(ctx: ModelContext, options: GenerationOptions) -> Generation | None:
    """The generation ``ctx``'s model runs, per ``options`` over what its names or its ``genai_config.json``
    say (:func:`onnx_precision.generation.infer_generation`); None for a model run once."""
    from .context import IN_MEMORY
    from .generation.infer import infer_generation

    # a model in memory has no folder for a genai_config.json to sit beside
    return infer_generation(ctx.model, options, "" if ctx.path == IN_MEMORY else ctx.path)


@dataclass(frozen=True)
class GenerationSamples(Samples):
    """A generation's samples (:func:`run_samples`): each the feed its first step starts from (a streaming
    signal whole), with the generation they run through, which every run of them judges whole."""

    generation: Generation = field(kw_only=True)


def unused_generation(options: GenerationOptions, generation: Generation | None) -> tuple[str, ...]:
    """The warning of a run given generation options (``--steps``, ...) for a model that runs none."""
    given = [spec.flags[0] for f in fields(options) if (spec := flag_of(f)) is not None
             and getattr(options, f.name) != default_of(f)]
    if generation is not None or options.off or not given:
        return ()
    return (f"{', '.join(given)}: the model feeds no output back as an input (no generation is inferred: "
            f"--feedback OUT=IN names one), so it is judged on one forward pass",)


def run_samples(ctx: ModelContext, spec: SampleSpec, generation: Generation | None) -> Samples:
    """The run's samples, checked against ``ctx``'s model: a generation's (:class:`GenerationSamples`) may
    leave out what its first step makes (an empty KV cache, a zero state, the mask and positions) and hold
    a streaming signal of many chunks (:func:`onnx_precision.generation.steps.feed_form`); each is
    completed as it starts."""
    if generation is None:
        return load_samples(ctx.model, spec)
    from .generation.steps import feed_form

    loaded = load_samples(ctx.model, spec, feed_form(generation))
    return GenerationSamples(**{f.name: getattr(loaded, f.name) for f in fields(Samples)},
                             generation=generation)


def generation_in(samples: Samples) -> Generation | None:
    """The generation ``samples`` run through (None: each is one forward pass's feed)."""
    return samples.generation if isinstance(samples, GenerationSamples) else None


# The model to measure, loaded for a target, its opset raised by an Upgrade (None: as given).
Load = Callable[[Target, "Upgrade | None"], ModelContext]


def measured_model(load: Load, targeting: Targeting, judging: Judging, samples: SampleSpec) -> ModelContext:
    """The model as a run measures it (requires: ``load`` gives the run's model for a target): loaded for
    the run's target, a BF16 run's opset raised to give its ops a bfloat16 type, or refused under
    ``judging.keep_opset`` (:func:`onnx_precision.opset_upgrade.for_run`, verified on ``samples``), float64
    compute converted or kept (``judging.keep_float64``), a decoder's mask sentinels written finite in the
    target's type (:func:`onnx_precision.policy.rewrite_decoder_hazards`, said in its notes). ``convert``,
    ``check`` and ``analyze`` measure the same model from the same options."""
    from . import opset_upgrade

    target = targeting.target
    upgrade = opset_upgrade.for_run(target, samples, targeting.custom_op_libraries, judging.keep_opset)
    loaded = replace(load(target, upgrade), keep_float64=judging.keep_float64)
    return policy.rewrite_decoder_hazards(loaded).ctx


def measure(ctx: ModelContext, samples: Samples, judging: Judging = AS_GIVEN,
            headroom: float = DEFAULT_HEADROOM) -> Basis:
    """The basis of a run on ``ctx``'s model (as the run measures it: loaded for its target, a BF16 run's
    opset raised) and ``samples``, judged by ``judging``, ``headroom`` kept over the samples: what
    :func:`sums` and :func:`judged` measure, the model's FP32 outputs by a plain FP32 run, or, for a
    generation's samples, its FP32 generations (:func:`generations`; ``convert``'s search takes the outputs
    from its reference run, which also gives the ranges), with the FP32 ranges at the steps measured, for
    the generation's bound. The caller names ``ctx`` and ``samples`` for
    onnxruntime's errors (:func:`onnx_precision.oracle.blame.blame`)."""
    from . import oracle  # onnxruntime: only a measuring run needs it

    generation = generation_in(samples)
    if generation is not None:
        found = generations(ctx, samples.feeds, generation)
        # the ranges and the sums at the steps measured: what the generation's bound extrapolates
        stepped = forward_samples(samples, found.stepped)
        summed = sums(ctx, stepped, headroom)
        ranges = oracle.Emulator(ctx).inspection.reference(stepped)
        return judged(ctx, samples, judging, summed, found.measured(ctx, ranges.peaks, summed.each))
    return judged(ctx, samples, judging, sums(ctx, samples, headroom),
                  oracle.run_fp32(ctx, samples.feeds).outputs)
