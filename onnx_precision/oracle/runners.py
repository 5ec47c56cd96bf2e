"""Plan runners: the seam between the search and an oracle.

A :class:`PlanRunner` runs precision plans of one model, one feed at a time, and counts what it
built and ran. The search, the prober and the report never ask which runner they have; what a
runner can do besides running is a capability it offers or not (``inspection``: FP32 ranges and
per-node error, which only an emulation can see).

* the emulation (:class:`.emulator.Emulator`, and the switch-graph
  :class:`.emulation_session.EmulationSession` it searches on): onnxruntime's CPU provider with every
  FP16 tensor rounded, the default;
* :func:`native_runner`: the plan written and run on an onnxruntime provider (CUDA, TensorRT), the
  real target, one session per plan;
* :func:`reference_runner`: the plan written and run in ``onnx.reference`` (numpy FP16 inside ops).

:func:`plan_runner` picks one by its ``--oracle`` name.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from ..context import ModelContext, load_model
from ..plan import PrecisionPlan
from ..policy import always_fp32
from ..rewriter import rewrite
from ..storage import is_external, model_tensors, save_model
from ..storage.staging import StagingFolder
from .inspection import Inspection
from .sessions import Feed
from .whole_runs import (
    NATIVE_PROVIDERS,
    REFERENCE,
    Executor,
    native_executor,
    native_oracle,
    reference_executor,
)


class PlanRunner(Protocol):
    """Runs precision plans of one model (None: the FP32 model) on one feed at a time."""

    @property
    def oracle(self) -> str:
        """What its results record: "emulate", "native:<provider>", "reference"."""
    @property
    def outputs(self) -> tuple[str, ...]:
        """The graph outputs :meth:`run` returns."""
    @property
    def switchable(self) -> frozenset[str]:
        """Nodes whose precision changes anything this runner computes (the search's nodes)."""
    @property
    def sessions_built(self) -> int: ...
    @property
    def probes_run(self) -> int: ...
    @property
    def inspection(self) -> Inspection | None:
        """FP32 ranges and per-node error of plans, where this runner can see inside."""

    def run(self, plan: PrecisionPlan | None, feed: Feed) -> Mapping[str, np.ndarray]: ...

    def searching(self) -> PlanRunner:
        """What runs the many plans of a search (itself, or a runner better at many plans)."""


class WrittenPlanRunner:
    """Runs each plan as the model the rewriter writes for it, executed by ``executor`` (one per
    plan, the last one kept: a probe runs one plan on every sample in turn)."""

    inspection: Inspection | None = None

    def __init__(self, ctx: ModelContext, oracle: str,
                 executor: Callable[[ModelContext], Executor]) -> None:
        self.ctx = ctx
        self.oracle = oracle
        self.executor = executor
        self.outputs = tuple(o.name for o in ctx.model.graph.output)
        self.sessions_built = 0
        self.probes_run = 0
        self._last: tuple[PrecisionPlan | None, Executor] | None = None
        self._dir: StagingFolder | None = None

    @property
    def switchable(self) -> frozenset[str]:
        return frozenset(n for n, t in self.ctx.typing.items() if t.has_float) - always_fp32(self.ctx)

    def searching(self) -> WrittenPlanRunner:
        return self

    def run(self, plan: PrecisionPlan | None, feed: Feed) -> dict[str, np.ndarray]:
        if self._last is None or self._last[0] is not plan:
            self._last = None  # the previous plan's session goes before the next one is built
            self._last = (plan, self.executor(self._written(plan)))
            self.sessions_built += 1
        self.probes_run += 1
        return self._last[1](feed)

    def _written(self, plan: PrecisionPlan | None) -> ModelContext:
        """The model the rewriter writes for ``plan`` (None: the FP32 model), as a context; one
        with external weights goes through a file (they are cast as they are written)."""
        if plan is None:
            return self.ctx
        model = rewrite(self.ctx, plan).model
        if not any(is_external(t) for t in model_tensors(model)):
            return ModelContext(model, "", self.ctx.base_dir,
                                custom_op_libraries=self.ctx.custom_op_libraries, target=self.ctx.target)
        if self._dir is None:
            # a staging folder, as a run's outputs have: a signal's forced end of the run removes it, one
            # left by a run killed outright goes when the next is made; else it goes with this runner
            self._dir = StagingFolder(tempfile.gettempdir())
            weakref.finalize(self, self._dir.remove)
        path = os.path.join(self._dir.path, "plan.onnx")
        save_model(model, path, source_dir=self.ctx.base_dir)
        return load_model(path, self.ctx.custom_op_libraries, self.ctx.target)


def native_runner(ctx: ModelContext, provider: str) -> WrittenPlanRunner:
    """Plans written and run natively on an onnxruntime ``provider``."""
    return WrittenPlanRunner(ctx, native_oracle(provider), lambda written: native_executor(written, provider))


def reference_runner(ctx: ModelContext) -> WrittenPlanRunner:
    """Plans written and run in ``onnx.reference`` (numpy FP16 inside every op)."""
    return WrittenPlanRunner(ctx, REFERENCE, reference_executor)


def plan_runner(oracle: str, ctx: ModelContext) -> PlanRunner | None:
    """The runner of ``--oracle`` ``oracle`` for ``ctx``'s model; None for ``emulate`` (the caller's
    emulator is the runner)."""
    if oracle == REFERENCE:
        return reference_runner(ctx)
    provider = NATIVE_PROVIDERS.get(oracle)  # names are checked first
    return None if provider is None else native_runner(ctx, provider)
