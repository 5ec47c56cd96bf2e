"""Probing plans on the samples: does a plan pass every sample, and how far are its outputs?

A :class:`Prober` runs plans on one :class:`~onnx_precision.oracle.PlanRunner` (the emulation, a
native provider, onnx.reference: it never asks which). It stops at the first failing sample and
tries that sample first next time (the sample that broke the last probe is the likeliest to break
the next); where every sample passes alone, the samples are judged together too (the bounds a
quantized model's gate holds over them: :func:`onnx_precision.judge.merge_comparisons`). It
remembers the last probe's per-output errors, so every probe can become a trade-off point, and the
comparison of the last plan that passed, which the full comparison of the same
precisions takes rather than running it again (a decoder's generation: seconds). :meth:`Prober.on`
carries that state over to another runner (the one a search runs on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import InternalError
from ..generation.runner import merge_ran
from ..judge import Comparison, Tolerance, Tolerances, compare_outputs, each_sample, not_run
from ..oracle import PlanRunner
from ..oracle.blame import ShapesDiverged
from ..plan import PrecisionPlan
from ..tradeoff import output_errors


class Prober:
    """Does a plan pass every sample on ``runner``? ``tolerance``: one for every sample, or one per
    sample (its first says which statistic the trade-off reads: they all share it). ``order`` (the
    samples, likeliest to fail first) and ``last_errors`` start it where another prober stopped
    (:meth:`on`)."""

    def __init__(self, runner: PlanRunner, feeds: Sequence[Mapping[str, np.ndarray]],
                 refs: Sequence[Mapping[str, np.ndarray]], tolerance: Tolerances,
                 order: Sequence[int] | None = None, last_errors: Mapping[str, float] | None = None,
                 last_detail: str = "") -> None:
        self.runner = runner
        self.feeds = feeds
        self.refs = refs
        self.tolerances = each_sample(tolerance, len(feeds))
        self.tolerance: Tolerance = tolerance if isinstance(tolerance, Tolerance) else self.tolerances[0]
        self.order = list(range(len(feeds)) if order is None else order)
        self.last_detail = last_detail
        self.last_errors: dict[str, float] = dict(last_errors or {})  # output -> worst error, last probe
        self._passed: tuple[frozenset, Comparison] | None = None  # the last probe, where it passed

    def on(self, runner: PlanRunner) -> Prober:
        """A prober of the same samples on ``runner``, starting from this one's state."""
        return Prober(runner, self.feeds, self.refs, self.tolerances, self.order, self.last_errors,
                      self.last_detail)

    def _compare(self, plan: PrecisionPlan, i: int) -> Comparison:
        ref = self.refs[i]
        try:
            values = self.runner.run(plan, self.feeds[i])
        except ShapesDiverged as e:  # a decision flipped, and what follows it no longer fits together
            comparison = not_run({name: ref[name] for name in self.runner.outputs if name in ref}, e.why,
                                 self.runner.oracle)
            self.last_errors.update(output_errors(comparison, self.tolerance))
            return comparison
        # the runner's outputs, of those it ran: a generation stops at its first failing step
        # (:class:`~onnx_precision.generation.GenerationRunner`), and its later steps are not compared
        ran = [name for name in self.runner.outputs if name in values]
        comparison = compare_outputs({name: ref[name] for name in ran}, {name: values[name] for name in ran},
                                     self.tolerances[i], self.runner.oracle)
        if comparison.passed and len(ran) < len(self.runner.outputs):
            missing = next(name for name in self.runner.outputs if name not in values)
            raise InternalError(f"the runner left out output '{missing}' of a plan whose outputs pass")
        for name, error in output_errors(comparison, self.tolerance).items():
            self.last_errors[name] = max(self.last_errors.get(name, 0.0), error)
        return comparison

    def passes(self, plan: PrecisionPlan) -> tuple[bool, str]:
        self.last_errors, self._passed = {}, None
        per_sample = {}
        for i in list(self.order):
            comparison = per_sample[i] = self._compare(plan, i)
            if not comparison.passed:
                self.order.remove(i)
                self.order.insert(0, i)
                self.last_detail = comparison.failure(i, len(self.feeds))
                return False, self.last_detail
        merged = merge_ran([per_sample[i] for i in sorted(per_sample)], self.runner.oracle)
        if not merged.passed:  # each sample within its own ceiling, not the samples together
            self.last_detail = merged.failure()
            return False, self.last_detail
        self._passed = (_precisions(plan), merged)
        return True, ""

    def comparison(self, plan: PrecisionPlan) -> Comparison:
        """The full comparison over every sample (for the report): the last probe's, where it passed with
        the same precisions (its errors are the last ones), else run."""
        if self._passed is not None and self._passed[0] == _precisions(plan):
            return self._passed[1]
        self.last_errors, self._passed = {}, None
        per_sample = [self._compare(plan, i) for i in range(len(self.feeds))]
        failing = [i for i, c in enumerate(per_sample) if not c.passed]
        merged = merge_ran(per_sample, self.runner.oracle)
        if failing:
            self.last_detail = per_sample[failing[0]].failure(failing[0], len(self.feeds))
        elif not merged.passed:
            self.last_detail = merged.failure()
        return merged


def _precisions(plan: PrecisionPlan) -> frozenset:
    """What a runner runs of ``plan``: each node's precision (its reasons change nothing)."""
    return frozenset((name, d.precision) for name, d in plan.decisions.items())
