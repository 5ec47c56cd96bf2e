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
from ..judge import Comparison, Tolerances, compare_by_shape, compare_outputs, each_sample, merge_comparisons
from ..target import GENERIC, UNMEASURED, Measured, Target
from ..vocab import OracleName
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
                     ) -> tuple[Comparison, str]:
    """The written model (a file, or a context in memory), emulated, on held-out samples the search
    never saw (every sum checked: the run's proofs hold on its own samples): the comparison over them
    all and, where one fails, which sample and how ("" when all pass)."""
    run = _emulated(output_path, feeds, custom_op_libraries, target, UNMEASURED)
    per_sample = [compare_outputs(ref, cand, t, run.oracle) for ref, cand, t in
                  zip(reference_outputs, only_reference_outputs(run, reference_outputs),
                      each_sample(tol, len(reference_outputs)))]
    merged = merge_comparisons(per_sample, run.oracle)  # judged together, it may fail where no sample does
    failing = next((i for i, c in enumerate(per_sample) if not c.passed), None)
    if failing is not None:
        return merged, per_sample[failing].failure(failing, len(per_sample))
    return merged, "" if merged.passed else merged.failure()


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
