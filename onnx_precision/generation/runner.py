"""Running a generation on any plan runner: prefill and K steps, each fed its own state.

:class:`GenerationRunner` wraps a :class:`~onnx_precision.oracle.PlanRunner` and is one: its
``run(plan, sample)`` runs the whole generation of one sample (step 0 the sample as given, then
``steps`` steps, each fed the candidate's own outputs of the step before) and returns the outputs it
compares under step-qualified names (``logits@step 7``, :func:`step_name`), in step order. The search's
prober, the comparison and its failure text then judge a generation as they judge one forward pass,
and name the first failing step without knowing there are steps.

A decoder's candidate is teacher-forced: each step is fed the FP32 reference's token (the reference
generation is run once per sample, its tokens kept), so every step's logits are compared on the same
prefix; :meth:`GenerationRunner.free_running` runs a candidate on its own greedy tokens, for
:func:`.tokens.token_agreement`.

A sample taught with its reference's outputs and tolerance (:meth:`GenerationRunner.teach`, as a run's basis
teaches it) stops a candidate's generation at its first step out of that tolerance: the steps after a
failure are not run (its state is already wrong), and :meth:`GenerationRunner.run` returns the outputs of
the steps that ran, the failing one last (a comparison restricted to them fails there). A probe that fails
at step 0 costs one forward pass, not K + 1. :meth:`GenerationRunner.within` runs the same generation over
fewer steps (the search's horizon), with what was taught.

Every step runs on the inner runner's session for the plan (K steps are K short runs, no session
built), and memory stays flat in K: a step's feed replaces the one before, and what a run keeps is
the compared outputs (a decode step's logits: [batch, 1, vocab]) and a few numbers per step
(:class:`GenerationRun`), never a step's KV cache or state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..errors import InternalError, UsageError
from ..judge import Comparison, Tolerance, compare_outputs, merge_comparisons
from ..oracle import PlanRunner
from ..plan import PrecisionPlan
from .description import Generation
from .inside import StepRanges
from .steps import Feed, first_feed, next_feed, position

_STEP = "@step "


def step_name(output: str, step: int) -> str:
    """``output`` at ``step``, as a generation's outputs are named: ``logits@step 7``."""
    return f"{output}{_STEP}{step}"


def split_step_name(name: str) -> tuple[str, int] | None:
    """(output, step) of a step-qualified name; None for a plain output name."""
    output, sep, step = name.rpartition(_STEP)
    return (output, int(step)) if sep and step.isdigit() else None


@dataclass(frozen=True)
class GenerationRun:
    """What one generation of one sample kept.

    ``outputs``: the compared outputs of every step, by step-qualified name, in step order.
    ``tokens`` ([batch, steps + 1], a decoder's): the argmax of each step's last-position logits (for a
    teacher-forced candidate, its own choice; the token it was fed is the reference's).
    ``margins``: the top-1 minus top-2 logit at those positions. ``peaks``: per float output, fed-back
    ones included, its max |value| at each step (of a KV cache, of the entries that step wrote: the
    cache's older entries do not change). ``positions``: the largest position each step computed
    (empty for a model fed none). ``lengths``: the length reached after each step (tokens, or chunks).
    ``stopped``: the step a judged candidate stopped at, out of its sample's tolerance (None: every step
    ran). ``feeds``: (step, its feed) for the steps asked to be kept (a reference's, for what one forward
    pass measures: ranges and sums at :func:`.inside.measured_steps`). ``inside`` (a reference's, once
    measured): the peaks inside the model at those steps.
    """

    outputs: Mapping[str, np.ndarray]
    steps: int
    unit: str
    peaks: Mapping[str, tuple[float, ...]]
    lengths: tuple[int, ...]
    positions: tuple[int, ...] = ()
    tokens: np.ndarray | None = None
    margins: np.ndarray | None = None
    teacher_forced: bool = False
    stopped: int | None = None
    feeds: tuple[tuple[int, Mapping[str, np.ndarray]], ...] = ()
    inside: StepRanges | None = None

    @property
    def steps_run(self) -> int:
        """The steps run after the first (``steps``, or fewer where a judged candidate stopped)."""
        return self.steps if self.stopped is None else self.stopped

    def at(self, output: str, step: int) -> np.ndarray:
        return self.outputs[step_name(output, step)]

    @property
    def nbytes(self) -> int:
        """The bytes of arrays it holds."""
        arrays = [*self.outputs.values(), *(a for a in (self.tokens, self.margins) if a is not None)]
        return sum(a.nbytes for a in arrays)


@dataclass(frozen=True)
class _Lesson:
    """What a runner was taught of one sample: its reference's tokens (a decoder's), and its reference's
    outputs with the tolerance that judges each step (None: candidates run every step, unjudged)."""

    tokens: np.ndarray | None
    outputs: Mapping[str, np.ndarray] | None = None
    tolerance: Tolerance | None = None


# what a runner was taught of each sample, by the sample's content
_Taught = dict[str, _Lesson]
# one step as it runs: (step, its feed, its outputs, a decoder's greedy choice and its margin)
_Step = tuple[int, dict[str, np.ndarray], Mapping[str, np.ndarray], np.ndarray | None, np.ndarray | None]


class GenerationRunner:
    """Runs generations of precision plans on ``runner`` (see the module docstring); a
    :class:`~onnx_precision.oracle.PlanRunner` itself, of the step-qualified outputs."""

    def __init__(self, runner: PlanRunner, generation: Generation, _taught: _Taught | None = None) -> None:
        missing = [f.output for f in generation.feedback if f.output not in runner.outputs]
        if missing:
            raise UsageError(f"the generation feeds back output '{missing[0]}', which the model does not "
                             f"have (outputs: {', '.join(runner.outputs)})")
        self.runner = runner
        self.generation = generation
        fed = generation.fed_outputs
        self.compared = tuple(o for o in runner.outputs if o not in fed)
        self.outputs = tuple(step_name(o, s) for s in range(generation.steps + 1) for o in self.compared)
        self._taught: _Taught = {} if _taught is None else _taught

    # --- the PlanRunner protocol ----------------------------------------------------------------------

    inspection = None  # an inner runner's view inside is of one forward pass, not of a generation

    @property
    def oracle(self) -> str:
        return self.runner.oracle

    @property
    def switchable(self) -> frozenset[str]:
        return self.runner.switchable

    @property
    def sessions_built(self) -> int:
        return self.runner.sessions_built

    @property
    def probes_run(self) -> int:
        """Forward passes run: a generation is ``steps + 1`` of them."""
        return self.runner.probes_run

    def run(self, plan: PrecisionPlan | None, feed: Feed) -> Mapping[str, np.ndarray]:
        """The compared outputs of ``plan``'s generation of the sample ``feed`` (None: the FP32 reference),
        up to the step it stopped at where the sample was taught a tolerance (see the module docstring)."""
        return self.generate(plan, feed).outputs

    def searching(self) -> GenerationRunner:
        """This generation on what runs the inner runner's search, with what it was taught."""
        inner = self.runner.searching()
        return self if inner is self.runner else GenerationRunner(inner, self.generation, self._taught)

    def within(self, steps: int) -> GenerationRunner:
        """This generation over its first ``steps`` steps after the first (a search's horizon), on the same
        runner, with what it was taught (the references' later steps are not compared)."""
        if steps == self.generation.steps:
            return self
        return GenerationRunner(self.runner, replace(self.generation, steps=steps), self._taught)

    # --- generations ----------------------------------------------------------------------------------

    def generate(self, plan: PrecisionPlan | None, sample: Feed, teacher_forced: bool = True
                 ) -> GenerationRun:
        """``plan``'s generation of ``sample``: the FP32 reference for None (whose tokens it keeps, to teach
        the candidates), else teacher-forced by those tokens (run first if no reference of the sample
        was run or taught), or on its own tokens where ``teacher_forced`` is False."""
        if plan is None:
            return self.reference(sample)
        return self.candidate(plan, sample, teacher_forced)

    def candidate(self, plan: PrecisionPlan | None, sample: Feed, teacher_forced: bool = True,
                  ) -> GenerationRun:
        """The generation of ``sample`` by what the inner runner runs for ``plan`` as a candidate, judged
        (stopped at its first failing step) where the sample was taught a tolerance: teacher-forced by the
        reference's tokens unless ``teacher_forced`` is False. ``plan`` None: what the inner runner runs
        for it (the model a written model's runner holds: ``check``'s candidate, ``convert``'s written
        model)."""
        if not teacher_forced:
            return self._generate(plan, sample, None)
        lesson = self._lesson(sample)
        return self._generate(plan, sample, lesson.tokens if self.generation.tokens else None, lesson)

    def reference(self, sample: Feed, keep: tuple[int, ...] = ()) -> GenerationRun:
        """The FP32 generation of ``sample`` (greedy on its own tokens), its tokens kept for candidates;
        ``keep``: the steps whose feeds the run keeps."""
        run = self._generate(None, sample, None, keep=keep)
        self._taught.setdefault(_key(sample), _Lesson(run.tokens))  # what was taught of it stays
        return run

    def teach(self, sample: Feed, reference: GenerationRun, tolerance: Tolerance | None = None) -> None:
        """Teacher-force candidates of ``sample`` with the tokens of ``reference``, a reference generation
        run elsewhere (by the run's measured basis, or on another runner); with ``tolerance`` (the
        sample's, step-qualified: :func:`step_tolerance`), a candidate stops at its first step out of it."""
        outputs = reference.outputs if tolerance is not None else None
        self._taught[_key(sample)] = _Lesson(reference.tokens, outputs, tolerance)

    def free_running(self, plan: PrecisionPlan | None, sample: Feed) -> GenerationRun:
        """``plan``'s generation of ``sample`` fed its own greedy tokens."""
        return self._generate(plan, sample, None)

    def feed_at(self, plan: PrecisionPlan | None, sample: Feed, step: int) -> dict[str, np.ndarray]:
        """The feed ``plan``'s generation of ``sample`` gives step ``step`` (teacher-forced, as :meth:`run`
        feeds it): one forward pass to look inside, where a comparison names a failing step."""
        if not 0 <= step <= self.generation.steps:
            raise InternalError(f"step {step} of a generation of {self.generation.steps} steps")
        forced = self._lesson(sample).tokens if plan is not None and self.generation.tokens else None
        for at, feed, *_ in self._walk(plan, sample, forced):
            if at == step:
                return feed
        raise InternalError(f"the generation ended before step {step}")

    def tolerance(self, tol: Tolerance) -> Tolerance:
        """``tol`` with each per-output setting of a compared output applied to it at every step."""
        return step_tolerance(tol, self.compared, self.generation.steps)

    def _lesson(self, sample: Feed) -> _Lesson:
        """What was taught of ``sample`` (its reference run first where nothing was)."""
        key = _key(sample)
        if key not in self._taught:
            self.reference(sample)
        return self._taught[key]

    def _walk(self, plan: PrecisionPlan | None, sample: Feed, forced: np.ndarray | None) -> Iterator[_Step]:
        """Each step of the generation as it runs: (step, its feed, its outputs, the greedy choice and its
        margin, a decoder's); the next step's feed is made once the consumer has seen this one's."""
        g = self.generation
        feed: dict[str, np.ndarray] = first_feed(g, sample)
        for step in range(g.steps + 1):
            values = self.runner.run(plan, feed)
            chosen, margin = _greedy(values[g.tokens.logits]) if g.tokens is not None else (None, None)
            yield step, feed, values, chosen, margin
            if step < g.steps:
                feed = next_feed(g, feed, values, forced[:, step] if forced is not None else chosen, sample,
                                 step + 1)

    def _generate(self, plan: PrecisionPlan | None, sample: Feed, forced: np.ndarray | None,
                  judged: _Lesson | None = None, keep: tuple[int, ...] = ()) -> GenerationRun:
        g = self.generation
        stopped = None
        feeds: list[tuple[int, Mapping[str, np.ndarray]]] = []
        kept: dict[str, np.ndarray] = {}
        peaks: dict[str, list[float]] = {}
        lengths: list[int] = []
        positions: list[int] = []
        tokens: list[np.ndarray] = []
        margins: list[np.ndarray] = []
        caches = {f.output: f.input for f in g.feedback if f.kind == "kv"}
        for step, feed, values, chosen, margin in self._walk(plan, sample, forced):
            for name in self.compared:
                kept[step_name(name, step)] = np.array(values[name], copy=True)  # not the session's memory
            for name, value in values.items():
                if np.issubdtype(np.asarray(value).dtype, np.floating):
                    written = _written(value, feed[caches[name]]) if name in caches else value
                    peaks.setdefault(name, []).append(_peak(written))
            lengths.append(_length(g, feed) if step == 0 else lengths[0] + step)
            at = position(g, feed)
            if at is not None:
                positions.append(at)
            if chosen is not None and margin is not None:
                tokens.append(chosen)
                margins.append(margin)
            if step in keep:
                feeds.append((step, dict(feed)))
            if judged is not None and not _passes(judged, kept, self.compared, step, self.runner.oracle):
                stopped = step
                break
        return GenerationRun(kept, g.steps, g.unit, {n: tuple(p) for n, p in peaks.items()}, tuple(lengths),
                             tuple(positions), np.stack(tokens, axis=1) if tokens else None,
                             np.stack(margins, axis=1) if margins else None, forced is not None, stopped,
                             tuple(feeds))


def failing_step(comparison: Comparison) -> int | None:
    """The step of the first failing output of a generation's comparison (the earliest: its outputs are in
    step order); None where it passes or names no step."""
    bad = next((m for m in comparison.outputs if not m.passed), None)
    at = split_step_name(bad.name) if bad is not None else None
    return at[1] if at is not None else None


def merge_ran(per_sample: Sequence[Comparison], oracle: str) -> Comparison:
    """The worst case of several samples' comparisons (:func:`~onnx_precision.judge.merge_comparisons`),
    over the outputs every sample compared: a generation judged step by step stops each sample at its first
    failing step, and the earliest of them is among the steps every sample ran."""
    common = set.intersection(*({m.name for m in c.outputs} for c in per_sample)) if per_sample else set()
    cut = [c if len(c.outputs) == len(common) else
           replace(c, outputs=(kept := tuple(m for m in c.outputs if m.name in common)),
                   passed=all(m.passed for m in kept))
           for c in per_sample]
    return merge_comparisons(cut, oracle)


def step_tolerance(tol: Tolerance, compared: tuple[str, ...], steps: int) -> Tolerance:
    """``tol`` with each per-output setting of a compared output applied to it at every step 0..``steps``
    (the tolerance a generation's step-qualified outputs are judged by)."""
    if not tol.per_output:
        return tol
    return replace(tol, per_output=tuple((step_name(name, s), t) for name, t in tol.per_output
                                         if name in compared for s in range(steps + 1)))


def _passes(lesson: _Lesson, kept: Mapping[str, np.ndarray], compared: tuple[str, ...], step: int,
            oracle: str) -> bool:
    """Whether step ``step``'s outputs (in ``kept``) are within the lesson's tolerance of its reference's.
    A tolerance that judges the outputs together (``accept``) judges the whole generation, never a step."""
    if lesson.outputs is None or lesson.tolerance is None or lesson.tolerance.accept is not None:
        return True
    names = [step_name(name, step) for name in compared]
    reference = {name: lesson.outputs[name] for name in names if name in lesson.outputs}
    return compare_outputs(reference, {name: kept[name] for name in names}, lesson.tolerance, oracle).passed


def _length(generation: Generation, feed: Feed) -> int:
    """The length step 0 reaches on ``feed``: the sample's tokens (by its mask, which counts a cache the
    sample gives), or 1 chunk; each step after it adds 1."""
    if generation.tokens is None:
        return 1
    if generation.attention_mask:
        return int(np.shape(feed[generation.attention_mask])[-1])
    return int(np.shape(feed[generation.tokens.input_ids])[-1])


def _written(cache: np.ndarray, past: np.ndarray) -> np.ndarray:
    """The entries of ``cache`` a step wrote after its ``past``: those past the old length on the axis
    that grew (the whole cache where none did)."""
    grew = [axis for axis, (new, old) in enumerate(zip(cache.shape, past.shape)) if new != old]
    if not grew or cache.ndim != past.ndim:
        return cache
    return np.take(cache, np.arange(past.shape[grew[0]], cache.shape[grew[0]]), axis=grew[0])


def _peak(value: np.ndarray) -> float:
    """max |value| (NaN where it holds one; 0 for an empty tensor)."""
    return float(np.max(np.abs(value))) if np.size(value) else 0.0


def _greedy(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The argmax of the last position's logits per batch row, and its margin over the runner-up."""
    last = np.asarray(logits, dtype=np.float32)
    last = last.reshape(last.shape[0], -1, last.shape[-1])[:, -1, :]
    chosen = np.argmax(last, axis=-1)
    if last.shape[-1] < 2:
        return chosen, np.full(chosen.shape, np.inf, np.float32)
    top2 = np.partition(last, -2, axis=-1)[:, -2:]
    with np.errstate(invalid="ignore"):  # inf - inf: a NaN margin, where the logits overflowed
        return chosen, top2[:, 1] - top2[:, 0]


def _key(sample: Feed) -> str:
    """The sample's content, as a key: the same tokens teach a copy of it."""
    digest = hashlib.sha256()
    for name in sorted(sample):
        value = np.ascontiguousarray(sample[name])
        digest.update(f"{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()

