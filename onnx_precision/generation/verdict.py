"""What a run says of a generation: its description, how far the written plan holds and its tokens.

:class:`GenerationVerdict` is the value ``convert`` and ``check`` hand their reports: the generation's
one-line description, the steps the written model was judged over (all of them, or the step it fails at),
the bound of the plan (:func:`.bound.hold_bound` of the FP32 reference's generation, leaving out the
tensors the plan keeps FP32: :func:`wide_tensors`), whether it holds to ``--max-length``, and a decoder's
tokens (:func:`.tokens.token_agreement` of the written model's teacher-forced generation).

A teacher-forced generation and a free-running one are the same run up to the first step where the
candidate's own choice differs from the reference's token (both are fed the same tokens until then): the
free-running tokens first leave the reference's exactly there, so one generation gives both.

:func:`length_pins` are the pins ``--max-length`` asks for before a search: where the bound says a value
passes the type's maximum before that length, a state's path (and what reads it), any other tensor's
producer and consumers, a 16-bit sum's node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..context import ModelContext
from ..errors import InternalError
from ..float_types import FP16, LOW_TYPES, LowPrecision
from ..judge import Comparison
from ..plan import PrecisionPlan, Reason
from ..policy import low_holders
from ..typing_rules import elem_type
from .bound import Growth, HoldBound, hold_bound
from .description import Generation
from .runner import GenerationRun, failing_step, split_step_name
from .tokens import TokenAgreement, token_agreement

# A reference token whose top-1 logit leads the runner-up by less than this many times the plan's largest
# logit error could be flipped by that error: the free-running comparison stops counting there.
CLEAR_MARGIN = 2.0
# The steps a fit needs before its extrapolation decides anything (a --max-length pin, or a failure): over
# 4 steps tiny_llama's cache entries fit a geometric growth (x1.42 a step, past 65504 at ~41 tokens) that
# 64 steps show flat. A value measured past the limit, or positions (exact), decide whatever the steps.
MIN_FIT_STEPS = 8


def decisive(growth: Growth) -> bool:
    """Whether ``growth``'s step past its limit is measured, exact (positions) or fitted over enough steps
    (:data:`MIN_FIT_STEPS`) to act on."""
    span = growth.window[1] - growth.window[0] + 1
    return growth.over_at is not None and (growth.model == "measured" or growth.kind == "position"
                                           or span >= MIN_FIT_STEPS)


def decisive_limit(bound: HoldBound) -> tuple[int, Growth] | None:
    """The length at which the soonest decisive growth of ``bound`` breaks, with it (None: none does)."""
    found = next((g for g in bound.growths if decisive(g)), None)
    return None if found is None or found.over_at is None else (bound.start + found.over_at, found)


@dataclass(frozen=True)
class GenerationVerdict:
    """The written model's generation, judged (see the module docstring). ``failing``: the step the
    written model fails at and how (None: it passes every step). ``agreement`` (a decoder's): its tokens
    against the reference's over every sample; ``min_margin``: the reference's top-1 margin counted clear
    (:data:`CLEAR_MARGIN` times the plan's largest logit error); ``margins``: the reference's smallest top-1
    margin over the samples at each step."""

    generation: Generation
    bound: HoldBound
    failing: tuple[int, str] | None = None
    agreement: TokenAgreement | None = None
    min_margin: float = 0.0
    margins: tuple[float, ...] = ()

    def clear_match(self, steps: int) -> bool:
        """Whether the free-running tokens match FP32's on the first ``steps`` steps where FP32's top-1
        margin is clear (all of them, where fewer are clear)."""
        a = self.agreement
        if a is None or a.first_divergence is None:
            return True
        clear = [s for s, m in enumerate(self.margins) if m >= self.min_margin][:steps]
        return all(s < a.first_divergence for s in clear)

    @property
    def max_length(self) -> int | None:
        return self.generation.max_length

    @property
    def holds(self) -> bool:
        """Whether the plan holds to ``--max-length`` (or the config's), where one is asked, as far as the
        steps judged can tell (:func:`decisive`)."""
        if self.max_length is None:
            return True
        limit = decisive_limit(self.bound)
        return self.failing is None and (limit is None or self.max_length < limit[0])

    def lines(self) -> list[str]:
        """The summary's lines: "generation: decoder: 2 KV pairs fed back, greedy, 64 steps (optimum names)",
        the bound (or the failing step) and a decoder's tokens."""
        lines = [f"generation: {self.generation.summary()} ({self.generation.source})"]
        if self.failing is not None:
            step, why = self.failing
            lines.append(f"generation: fails at step {step} of {self.generation.steps}: {why}")
        else:
            lines.append(f"generation: {self.bound.describe()}")
        if self.max_length is not None:
            lines.append(f"generation: {self.length_text()}")
        if self.agreement is not None:
            lines.append(f"tokens: {self.tokens_text()}")
        return lines

    def length_text(self) -> str:
        """Whether the plan holds to the length asked."""
        asked = f"--max-length {self.max_length}"
        if self.failing is not None:
            return f"{asked}: the plan fails within the steps judged"
        first, decided = self.bound.first, decisive_limit(self.bound)
        if self.holds:
            if first is None or self.bound.holds(self.max_length or 0) or (decided and decided[1] is first):
                return f"{asked}: the plan holds to it"
            return (f"{asked}: the plan holds to it as far as {self.generation.steps} steps tell: too few to "
                    f"extrapolate '{first.tensor}' ({first.text()}) past them; --steps {MIN_FIT_STEPS * 2} "
                    f"or more judges it")
        if decided is None:  # not holding and not failing: a decisive growth breaks before the length
            raise InternalError("a plan that does not hold to its --max-length with nothing that breaks")
        limit, growth = decided
        approx = "" if growth.model == "measured" or growth.kind == "position" else "~"
        return (f"{asked}: the plan does not hold to it: '{growth.tensor}' ({growth.text()}) breaks "
                f"{self.bound.low} at {approx}{limit} {self.bound.unit}")

    def tokens_text(self) -> str:
        """"teacher-forced top-1 agrees with FP32 on 65 of 65 steps (100%); free-running greedy matches FP32
        for all 64 steps"."""
        a = self.agreement
        if a is None:
            return ""
        head = f"teacher-forced top-1 agrees with FP32 on {a.agreeing} of {a.compared} steps ({a.share:.0%})"
        at = a.first_divergence
        if at is None:
            return f"{head}; free-running greedy matches FP32 on all {len(self.margins)} steps"
        margin = self.margins[at]
        tie = "a near tie" if margin < self.min_margin else "clear"
        clear = sum(m >= self.min_margin for m in self.margins[:at])
        return (f"{head}; free-running greedy matches FP32 up to step {at}, where FP32's top-1 margin is "
                f"{margin:.3g} ({tie}: {CLEAR_MARGIN:g}x the plan's largest logit error is "
                f"{self.min_margin:.3g}); {clear} of the {at} steps before it had a clear margin")

    def to_json(self) -> dict[str, object]:
        g, a = self.generation, self.agreement
        first = self.bound.first
        return {
            "description": g.summary(), "kind": g.kind, "source": g.source, "steps": g.steps,
            "feedback": [{"output": f.output, "input": f.input, "kind": f.kind} for f in g.feedback],
            "failing_step": None if self.failing is None else self.failing[0],
            "failure": None if self.failing is None else self.failing[1],
            "bound": {"text": self.bound.describe(), "verified_length": self.bound.verified_length,
                      "unit": self.bound.unit, "limit_length": self.bound.limit_length,
                      "first": None if first is None else {
                          "tensor": first.tensor, "kind": first.kind, "limit": first.limit,
                          "model": first.model, "how": first.text()}},
            "max_length": g.max_length, "holds_max_length": self.holds,
            "tokens": None if a is None else {
                "compared": a.compared, "agreeing": a.agreeing, "top1_agreement": a.share,
                "free_running_divergence": a.first_divergence, "first_unclear": a.first_unclear,
                "min_margin": self.min_margin, "clear_32": self.clear_match(32)},
        }


def verdict(ctx: ModelContext, plan: PrecisionPlan, generation: Generation,
            references: Sequence[GenerationRun], runs: Sequence[GenerationRun], judged: Comparison,
            low: LowPrecision = FP16) -> GenerationVerdict:
    """The verdict of the written ``plan`` of ``ctx``'s model, whose generations ``runs`` (teacher-forced,
    one per sample) ``judged`` compares with the ``references``: the bound is the tightest over the
    samples' reference generations, the tokens counted over every sample."""
    wide, wide_sums = wide_tensors(ctx, plan, generation), wide_nodes(ctx, plan)
    bounds = [hold_bound(r, low, wide, generation.positions, wide_sums) for r in references]
    bound = min(bounds, key=lambda b: (b.limit_length is None, b.limit_length or 0))
    step = failing_step(judged)
    failing = None if judged.passed or step is None else (step, judged.failure())
    if generation.tokens is None:
        return GenerationVerdict(generation, bound, failing)
    margin = CLEAR_MARGIN * _logit_error(judged, generation.tokens.logits)
    agreements = [token_agreement(r, c, margin) for r, c in zip(references, runs)
                  if c.tokens is not None and r.tokens is not None and c.stopped is None]
    margins = np.min([r.margins.min(axis=0) for r in references if r.margins is not None], axis=0)
    return GenerationVerdict(generation, bound, failing, _together(agreements), margin,
                             tuple(float(m) for m in margins))


def _logit_error(judged: Comparison, logits: str) -> float:
    """The largest absolute error of the logits over the steps compared."""
    errors = [m.max_abs_err for m in judged.outputs if (split_step_name(m.name) or ("",))[0] == logits]
    finite = [e for e in errors if np.isfinite(e)]
    return max(finite, default=0.0)


def _together(agreements: Sequence[TokenAgreement]) -> TokenAgreement | None:
    """Several samples' agreements as one: counts summed, the earliest step of each kind."""
    if not agreements:
        return None

    def earliest(values: list[int | None]) -> int | None:
        found = [v for v in values if v is not None]
        return min(found) if found else None

    return TokenAgreement(agreements[0].steps, sum(a.compared for a in agreements),
                          sum(a.agreeing for a in agreements),
                          earliest([a.first_divergence for a in agreements]),
                          earliest([a.first_unclear for a in agreements]))


def wide_tensors(ctx: ModelContext, plan: PrecisionPlan, generation: Generation) -> frozenset[str]:
    """The tensors of the main graph no 16-bit node of ``plan`` holds (their producer and every consumer
    compute in FP32: :func:`onnx_precision.policy.low_holders`), and the position input where no 16-bit node
    reads its values (they stay exact past the 16-bit type's integers)."""
    holders = low_holders(ctx)
    graph = ctx.model.graph
    names = {v.name for v in (*graph.input, *graph.output)} | {t for ref in ctx.nodes if not ref.graph_path
                                                               for t in ref.node.output if t}
    positions = generation.positions
    wide = {t for t in names if t != positions and not any(plan.is_low(n) for n in holders.get(t, ()))}
    if positions is not None and not _read_low(ctx, plan, positions):
        wide.add(positions)
    return frozenset(wide)


def wide_nodes(ctx: ModelContext, plan: PrecisionPlan) -> frozenset[str]:
    """The nodes ``plan`` keeps FP32: a sum among them accumulates in FP32, whatever the target."""
    return frozenset(ref.name for ref in ctx.nodes if not plan.is_low(ref.name))


def _read_low(ctx: ModelContext, plan: PrecisionPlan, tensor: str) -> bool:
    """Whether a 16-bit node computes on the values of the integer ``tensor``: the first float node on any
    path from it (a Cast to float, the positions' rotary angles) is 16-bit."""
    todo, seen = [tensor], set()
    while todo:
        for ref in ctx.index.consumers.get(todo.pop(), ()):
            if ref.name in seen:
                continue
            seen.add(ref.name)
            floats = [o for o in ref.node.output if o and _is_float(ctx, o)]
            if floats:
                if plan.is_low(ref.name):
                    return True
            else:
                todo.extend(o for o in ref.node.output if o)
    return False


def _is_float(ctx: ModelContext, tensor: str) -> bool:
    elem = elem_type(ctx.types.get(tensor))
    return elem in LOW_TYPES or elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def length_pins(ctx: ModelContext, plan: PrecisionPlan, generation: Generation,
                references: Sequence[GenerationRun], low: LowPrecision = FP16) -> dict[str, Reason]:
    """Node -> why, for ``--max-length``: each value the bound of ``plan`` (the references' generations)
    says passes ``low``'s maximum before that length is kept FP32 where it is made and read. A state keeps
    its path FP32, and every node that reads a tensor of it (their values are the state's size); any other
    tensor (a residual inside the model, a logit) its producer and consumers; a sum the target keeps in
    16 bits its node. Positions are the decoder rules' to keep FP32
    (:mod:`onnx_precision.policy.decoder_pins`): where they stop being exact before that length, nothing is
    pinned here and the verdict says the plan does not hold."""
    length = generation.max_length
    if length is None:
        return {}
    from ..rules.decoder.states import state_paths

    paths = {path.output: path for path in state_paths(ctx, generation).values()}
    holders = low_holders(ctx)
    wide, wide_sums = wide_tensors(ctx, plan, generation), wide_nodes(ctx, plan)
    pins: dict[str, Reason] = {}
    for reference in references:
        bound = hold_bound(reference, low, wide, generation.positions, wide_sums)
        for growth in bound.growths:
            if growth.kind == "position" or not decisive(growth) or growth.over_at is None \
                    or bound.start + growth.over_at >= length:
                continue
            if growth.kind == "value" and growth.tensor in paths:
                path = paths[growth.tensor]
                tensors = {t for ref in ctx.nodes if ref.name in path.nodes for t in ref.node.output if t}
                readers = {r.name for t in tensors for r in ctx.index.consumers.get(t, ())}
                kept: tuple[str, ...] = (*path.nodes, *sorted(readers))
                what = f"state '{growth.tensor}' passes {growth.limit:g}"
            else:
                kept = (growth.tensor,) if growth.kind == "sum" else holders.get(growth.tensor, ())
                what = growth.what(low.name)
            why = Reason("headroom", f"--max-length {length}: {what} at ~{bound.start + growth.over_at} "
                                     f"{bound.unit} ({growth.text()})")
            pins.update({n: why for n in kept if plan.is_low(n) and n not in pins})
    return pins
