"""Verifying a written model: choosing an oracle by name, and running the model under it.

:data:`ORACLES` is the one mapping from the names a user can give (``--oracle``) to the function
that runs a candidate model under that oracle; the CLI's choices come from it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Callable

import numpy as np

from ..context import ModelContext, load_model
from ..costs import PhaseCost
from ..errors import OracleUnavailable
from ..judge import (
    Comparison,
    Tolerances,
    compare_by_shape,
    compare_outputs,
    each_sample,
    merge_comparisons,
    not_run,
)
from ..plan import PrecisionPlan
from ..target import GENERIC, UNMEASURED, Measured, Target
from ..vocab import OracleName
from .blame import Diagnoses, ShapesDiverged, is_ort_error, named_stop
from .emulation_session import EMULATE
from .sessions import Feed
from .whole_runs import (
    NATIVE_PROVIDERS,
    OracleRun,
    run_emulated,
    run_emulated_file,
    run_native,
    run_reference,
)

# A candidate's outputs on the feeds, under one oracle; the emulation spells the sums the run measured in
# range unchecked (its basis' Measured), a runtime computes its sums itself
Oracle = Callable[[ModelContext, Sequence[Feed], Measured], OracleRun]


def _native(provider: str) -> Oracle:
    def run(ctx: ModelContext, feeds: Sequence[Feed], measured: Measured) -> OracleRun:
        return run_native(ctx, feeds, provider)
    return run


def _reference(ctx: ModelContext, feeds: Sequence[Feed], measured: Measured) -> OracleRun:
    return run_reference(ctx, feeds)


ORACLES: Mapping[OracleName, Oracle] = {
    "emulate": run_emulated,
    "reference": _reference,
    **{name: _native(provider) for name, provider in NATIVE_PROVIDERS.items()},
}


def require_oracle(oracle: str) -> None:
    """Fail before any work when ``oracle`` is unknown or names a provider this onnxruntime lacks."""
    if oracle not in ORACLES:
        raise OracleUnavailable(f"unknown oracle '{oracle}'; expected one of {', '.join(ORACLES)}")
    provider = NATIVE_PROVIDERS.get(oracle)  # checked just above
    if provider is not None:
        import onnxruntime as ort
        if provider not in ort.get_available_providers():
            raise OracleUnavailable(f"--oracle {oracle}: onnxruntime has no {provider} here "
                                    f"(install onnxruntime-gpu on a machine with the GPU stack)")


def run_candidate(candidate: ModelContext, feeds: Sequence[Feed], oracle: OracleName = "emulate",
                  measured: Measured = UNMEASURED) -> OracleRun:
    """The candidate's outputs on ``feeds`` under ``oracle`` (``measured``: what the run measured of the
    target's sums, :data:`ORACLES`); one session."""
    require_oracle(oracle)
    return ORACLES[oracle](candidate, feeds, measured)


def verify_written(
    written: ModelContext,
    feeds: Sequence[Feed],
    reference_outputs: Sequence[Mapping],
    tol: Tolerances,
    oracle: OracleName = "emulate",
) -> Comparison:
    """Run what was WRITTEN (emulated, or natively on a GPU provider) against the FP32 outputs the
    search already computed: one session, whatever happened before."""
    return _judged(run_candidate(written, feeds, oracle), feeds, reference_outputs, tol)


def _judged(run: OracleRun, feeds: Sequence[Feed], reference_outputs: Sequence[Mapping], tol: Tolerances,
            ) -> Comparison:
    candidates = only_reference_outputs(run, reference_outputs)
    return compare_by_shape(feeds, list(reference_outputs), candidates, tol, run.oracle)


def verify_output(
    output_path: str | ModelContext,
    feeds: Sequence[Feed],
    reference_outputs: Sequence[Mapping],
    tol: Tolerances,
    oracle: OracleName = "emulate",
    custom_op_libraries: tuple[str, ...] = (),
    target: Target = GENERIC,
    measured: Measured = UNMEASURED,
) -> tuple[Comparison, Comparison | None, tuple[PhaseCost, ...]]:
    """Verify the file ``convert`` wrote, read back from disk (or the model written in memory, as a
    context): emulated (always; its sums spelled as the run ``measured`` them) and natively on
    ``oracle``'s provider when one is named. Returns (emulated, native or None, phase costs)."""
    started = time.perf_counter()
    emulated = _emulated(output_path, feeds, custom_op_libraries, target, measured)
    verified = _judged(emulated, feeds, reference_outputs, tol)
    phases = [PhaseCost("verify", time.perf_counter() - started, sessions=1, probes=1)]
    native = None
    if oracle != "emulate":
        started = time.perf_counter()
        written = _written(output_path, custom_op_libraries, target)  # read again: the emulation took its own
        native = verify_written(written, feeds, reference_outputs, tol, oracle)
        phases.append(PhaseCost(f"native {oracle}", time.perf_counter() - started, sessions=1, probes=1))
    return verified, native, tuple(phases)


def validate_written(output_path: str | ModelContext, feeds: Sequence[Feed],
                     reference_outputs: Sequence[Mapping], tol: Tolerances,
                     custom_op_libraries: tuple[str, ...] = (), target: Target = GENERIC,
                     written_from: tuple[Diagnoses, PrecisionPlan] | None = None,
                     ) -> tuple[Comparison, str]:
    """The written model (a file, or a context in memory), emulated, on held-out samples the search
    never saw (every sum checked: the run's proofs hold on its own samples): the comparison over them
    all and, where one fails, which sample and how ("" when all pass). ``written_from``: an emulator of
    the FP32 model and the plan the model was written from, which tell a held-out sample whose run a
    flipped decision stops (:func:`stopped_apart`)."""
    def run(some: Sequence[Feed]) -> OracleRun:
        return _emulated(output_path, some, custom_op_libraries, target, UNMEASURED)

    try:
        ran = run(feeds)
        per_sample = [compare_outputs(ref, cand, t, ran.oracle) for ref, cand, t in
                      zip(reference_outputs, only_reference_outputs(ran, reference_outputs),
                          each_sample(tol, len(reference_outputs)))]
    except Exception as e:
        stopped = (None if written_from is None else
                   stopped_apart(run, *written_from, feeds, reference_outputs, tol, e))
        if stopped is None:
            raise
        per_sample = stopped
    merged = merge_comparisons(per_sample, EMULATE)  # judged together, it may fail where no sample does
    failing = next((i for i, c in enumerate(per_sample) if not c.passed), None)
    if failing is not None:
        return merged, per_sample[failing].failure(failing, len(per_sample))
    return merged, "" if merged.passed else merged.failure()


def compared_apart(run: Callable[[Feed], Mapping[str, np.ndarray]], feeds: Sequence[Feed],
                   reference_outputs: Sequence[Mapping], tol: Tolerances, oracle: str,
                   ) -> tuple[list[Comparison], int]:
    """Each sample's comparison, its run apart (``run``), and how many samples stopped: one whose run a
    flipped decision stops (``run`` raises :class:`.blame.ShapesDiverged`) fails with the decision named."""
    per_sample, stopped = [], 0
    for feed, ref, t in zip(feeds, reference_outputs, each_sample(tol, len(reference_outputs))):
        try:
            values = run(feed)
        except ShapesDiverged as e:
            per_sample.append(not_run(ref, e.why, oracle))
            stopped += 1
            continue
        ran = {name: np.asarray(values[name]) for name in ref if name in values}
        per_sample.append(compare_outputs(ref, ran, t, oracle))
    return per_sample, stopped


def stopped_apart(run: Callable[[Sequence[Feed]], OracleRun], fp32: Diagnoses, plan: PrecisionPlan,
                  feeds: Sequence[Feed], reference_outputs: Sequence[Mapping], tol: Tolerances,
                  error: BaseException) -> list[Comparison] | None:
    """Where the emulated run (``run``) of a model written from ``plan`` on ``feeds`` together failed with
    ``error``: each sample's comparison, run apart, a sample whose run stops because a decision of the FP32
    model (``fp32``, an emulator of it) flips under ``plan`` failing with the decision named; None where
    ``error`` is not onnxruntime's, or a run apart fails otherwise, or none stops (the failure is another's:
    :func:`.blame.blame` tells whose)."""
    if not is_ort_error(error):
        return None

    def one(feed: Feed) -> Mapping[str, np.ndarray]:
        with named_stop(fp32.diverged, plan, feed):
            return run([feed]).outputs[0]
    try:
        per_sample, stopped = compared_apart(one, feeds, reference_outputs, tol, EMULATE)
    except Exception as e:
        if is_ort_error(e):
            return None
        raise
    return per_sample if stopped else None


def _written(model: str | ModelContext, custom_op_libraries: tuple[str, ...], target: Target) -> ModelContext:
    """The written model's context on ``target``: a file read back, or the context of one written in
    memory."""
    if isinstance(model, ModelContext):
        return model if model.target == target else replace(model, target=target)
    return load_model(model, custom_op_libraries, target)


def _emulated(model: str | ModelContext, feeds: Sequence[Feed], custom_op_libraries: tuple[str, ...],
              target: Target, measured: Measured) -> OracleRun:
    """The written model (:func:`_written`) emulated, the sums ``measured`` proves in range unchecked; a
    file is read back for that run alone (:func:`.whole_runs.run_emulated_file`)."""
    if isinstance(model, ModelContext):
        return run_emulated(_written(model, custom_op_libraries, target), feeds, measured)
    return run_emulated_file(model, feeds, custom_op_libraries, target, measured)


def only_reference_outputs(run: OracleRun, refs: Sequence[Mapping]) -> list[dict[str, np.ndarray]]:
    """Each candidate sample restricted to the reference's outputs."""
    return [
        {name: np.asarray(out[name]) for name in ref if name in out} for out, ref in zip(run.outputs, refs)
    ]
