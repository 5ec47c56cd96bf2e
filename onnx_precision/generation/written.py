"""A written model's generation, judged by a run's basis: ``convert``'s written file (emulated, and on
``--oracle``'s runtime) and ``check``'s candidate are each run over the generation as every plan of the
search was, teacher-forced by the reference's tokens, and stopped at their first step out of tolerance.

:class:`ModelRunner` is a :class:`~onnx_precision.oracle.PlanRunner` of one model whatever the plan: one
session, built once, run once a step, which :class:`.runner.GenerationRunner` wraps as it wraps the search's
runners; :func:`model_runner` builds it for an oracle name; :func:`judge` compares its generation of each
sample with the basis' references.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..context import ModelContext, load_model, read_written
from ..judge import Comparison, Tolerance, compare_outputs
from ..oracle.emulation_session import EMULATE
from ..oracle.sessions import handed, make_session, run_session
from ..oracle.whole_runs import (
    NATIVE_PROVIDERS,
    REFERENCE,
    Executor,
    native_executor,
    native_oracle,
    reference_executor,
)
from ..oracle.written import emulate_model
from ..plan import PrecisionPlan
from ..target import Measured, Target
from ..vocab import OracleName
from .runner import GenerationRun, GenerationRunner, merge_ran


class ModelRunner:
    """Runs one model whatever the plan asked (a written model: its precisions are in the file), by
    ``executor`` (one session); counts its runs."""

    inspection = None
    switchable: frozenset[str] = frozenset()
    sessions_built = 1

    def __init__(self, executor: Executor, oracle: str, outputs: tuple[str, ...]) -> None:
        self.executor = executor
        self.oracle = oracle
        self.outputs = outputs
        self.probes_run = 0

    def run(self, plan: PrecisionPlan | None, feed: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        self.probes_run += 1
        return self.executor(feed)

    def searching(self) -> ModelRunner:
        return self


def model_runner(model: str | ModelContext, oracle: OracleName, custom_op_libraries: tuple[str, ...],
                 target: Target, measured: Measured) -> ModelRunner:
    """The runner of the model file ``model`` (or a model written in memory, as a context) for ``target``
    under ``oracle``: emulated (its 16-bit tensors rounded, the sums ``measured`` proves in range
    unchecked), natively on a provider, or in onnx.reference."""
    if oracle == "emulate":
        return _emulated(model, custom_op_libraries, target, measured)
    ctx = (model if model.target == target else replace(model, target=target)) if isinstance(
        model, ModelContext) else load_model(model, custom_op_libraries, target)
    outputs = tuple(o.name for o in ctx.model.graph.output)
    if oracle == REFERENCE:
        return ModelRunner(reference_executor(ctx), REFERENCE, outputs)
    provider = NATIVE_PROVIDERS[oracle]
    return ModelRunner(native_executor(ctx, provider), native_oracle(provider), outputs)


def _emulated(model: str | ModelContext, custom_op_libraries: tuple[str, ...], target: Target,
              measured: Measured) -> ModelRunner:
    """The emulated model's session, built once (a file read for it alone, as
    :func:`onnx_precision.oracle.whole_runs.run_emulated_file` reads one)."""
    if isinstance(model, ModelContext):
        base_dir = model.base_dir
        given = handed(emulate_model(model.model, base_dir, target, measured=measured), base_dir,
                       model.mapped_weights)
    else:
        proto, base_dir = read_written(model)
        given = handed(emulate_model(proto, base_dir, target, in_place=True, measured=measured), base_dir)
        del proto
    io = given.io
    session = make_session(given, base_dir, custom_op_libraries=custom_op_libraries)
    del given
    return ModelRunner(lambda feed: run_session(session, io, [feed])[0], EMULATE, tuple(io.outputs))


def judge(runner: GenerationRunner, plan: PrecisionPlan | None, feeds: Sequence[Mapping[str, np.ndarray]],
          references: Sequence[Mapping[str, np.ndarray]], tolerances: Sequence[Tolerance],
          ) -> tuple[Comparison, tuple[GenerationRun, ...]]:
    """The generation of each sample by what ``runner`` runs for ``plan`` (a :class:`ModelRunner`'s model
    whatever the plan; taught by a basis: teacher-forced, each stopped at its first failing step), compared
    with ``references`` over the steps it ran; the comparison over every sample, and each sample's run."""
    runs, compared = [], []
    for feed, reference, tolerance in zip(feeds, references, tolerances):
        run = runner.candidate(plan, feed)
        ran = [name for name in runner.outputs if name in run.outputs]
        compared.append(compare_outputs({n: reference[n] for n in ran}, {n: run.outputs[n] for n in ran},
                                        tolerance, runner.oracle))
        runs.append(run)
    return merge_ran(compared, runner.oracle), tuple(runs)
