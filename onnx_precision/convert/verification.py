"""The written model checked, and the run's verdict: :func:`verify` runs the written model by the run's basis
(emulated, natively on ``--oracle``'s runtime, emulated on every runtime of the registry, loaded at
onnxruntime's defaults, on held-out samples), and
:func:`conversion_status` and :func:`share_gate` decide the status from the search and the verification."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ..context import ModelContext
from ..costs import PhaseCost
from ..data import SampleSpec
from ..errors import InternalError
from ..float_types import low_of
from ..flops import FlopShares
from ..judge import Comparison
from ..outcome import AutoResult, Verification
from ..plan import PrecisionPlan
from ..target import UNMEASURED, Target
from ..vocab import Status
from .options import ConvertOptions

if TYPE_CHECKING:
    from ..basis import Basis
    from ..generation.verdict import GenerationVerdict

OVERLAPPED_LOAD_BYTES = 1 << 30  # written models below this are loaded by onnxruntime during verification


def verify(ctx: ModelContext, staged_model: str | ModelContext, auto_result: AutoResult,
           options: ConvertOptions, write: PhaseCost) -> Verification:
    """The written model read back (or written in memory, as a context) and checked: emulated,
    natively on ``--oracle``'s runtime, emulated on every runtime of the registry (:func:`..runtimes.judge`)
    and, when the first two pass, loaded by onnxruntime at its default options in a child process."""
    from .. import oracle, runtimes

    # A small model's default load runs in a child while this process verifies (a large one's after
    # it: two copies of its weights at once would double the run's memory); it is waited for only
    # when everything else passed.
    # onnxruntime's CPU provider has no BF16 kernels: a BF16 model is verified by emulating the
    # written file, and never loaded there
    loads = all(low_of(d.precision).cpu_kernels
                for d in auto_result.plan.decisions.values() if d.precision.is_low)
    early = loads and auto_result.passed and _stored_bytes(staged_model) < OVERLAPPED_LOAD_BYTES
    budget = options.judging.memory_budget
    loading = oracle.DefaultLoad(staged_model, ctx.custom_op_libraries, budget) if early else None
    basis = auto_result.basis
    generation = None
    try:
        with oracle.blame(ctx, basis.samples):
            if basis.generation is None:
                verified, native, phases = oracle.verify_output(
                    staged_model, basis.samples.feeds, basis.references, basis.tolerances, options.oracle,
                    ctx.custom_op_libraries, ctx.target, basis.measured)
            else:
                verified, native, phases, generation = _verify_generation(ctx, staged_model, auto_result,
                                                                          options)
            table = runtimes.judge(staged_model, ctx, basis, verified, auto_result.plan)
        phases += (table.cost,)
        default_load = ""
        if loads and auto_result.passed and verified.passed and (native is None or native.passed):
            started = time.perf_counter()
            loading = loading or oracle.DefaultLoad(staged_model, ctx.custom_op_libraries, budget)
            default_load = loading.problem()
            phases += (PhaseCost("default load", time.perf_counter() - started),)
    finally:
        if loading is not None:
            loading.cancel()
    validation, failure = None, ""
    if options.validation_inputs:
        started = time.perf_counter()
        held_out = SampleSpec(inputs=options.validation_inputs, option="--validation-inputs",
                              memory_budget=budget)
        validation, failure = _validate(ctx, staged_model, held_out, basis, auto_result.plan)
        phases += (PhaseCost("validation", time.perf_counter() - started, sessions=2, probes=2),)
    return Verification(verified, native, default_load, (write,) + phases, validation, failure, table,
                        generation)


def _verify_generation(ctx: ModelContext, staged_model: str | ModelContext, auto_result: AutoResult,
                       options: ConvertOptions,
                       ) -> tuple[Comparison, Comparison | None, tuple[PhaseCost, ...], GenerationVerdict]:
    """The written model judged over the basis' generation as every plan was (teacher-forced by the
    reference's tokens, each sample stopped at its first failing step): emulated, and on ``--oracle``'s
    runtime when one is named; with the verdict of the emulated run (its bound, its tokens)."""
    from ..basis import Generated
    from ..generation.verdict import verdict
    from ..generation.written import judge, model_runner

    basis = auto_result.basis
    generation, references = basis.generation, basis.reference
    if generation is None or not isinstance(references, Generated):
        raise InternalError("a generation's verification of a basis judged on one forward pass")
    phases = []
    judged: dict[str, tuple[Comparison, tuple]] = {}
    for oracle in dict.fromkeys(("emulate", options.oracle)):
        started = time.perf_counter()
        written = model_runner(staged_model, oracle, ctx.custom_op_libraries, ctx.target,
                               basis.measured if oracle == "emulate" else UNMEASURED)
        runner = basis.generation_runner(written)
        judged[oracle] = judge(runner, None, basis.samples.feeds, basis.references, basis.tolerances)
        phases.append(PhaseCost("verify" if oracle == "emulate" else f"native {oracle}",
                                time.perf_counter() - started, sessions=1, probes=1))
    verified, runs = judged["emulate"]
    native = judged[options.oracle][0] if options.oracle != "emulate" else None
    found = verdict(ctx, auto_result.plan, generation, references.runs, runs, verified, ctx.target.low)
    return verified, native, tuple(phases), found


def _validate(ctx: ModelContext, staged_model: str | ModelContext, spec: SampleSpec, basis: Basis,
              plan: PrecisionPlan) -> tuple[Comparison, str]:
    """The written model (of ``plan``) on the held-out samples ``spec``, judged as ``basis`` judges the
    run's own (:meth:`..basis.Basis.held_out`: against the FP32 model ``ctx`` on them, or a quantized model's
    reference, each held-out sample within its own bound; a generation's over it, every sum checked); one
    whose run stops because a decision flips under ``plan`` fails naming it."""
    from .. import oracle
    from ..basis import run_samples

    held_out = run_samples(ctx, spec, basis.generation)
    with oracle.blame(ctx, held_out):
        judged = basis.held_out(ctx, held_out)
        if basis.generation is None:
            comparison, failure = oracle.validate_written(staged_model, held_out.feeds, judged.references,
                                                          judged.tolerances, ctx.custom_op_libraries,
                                                          ctx.target, (oracle.Emulator(ctx), plan))
        else:
            from ..generation.written import judge, model_runner

            runner = judged.generation_runner(model_runner(staged_model, "emulate", ctx.custom_op_libraries,
                                                           ctx.target, UNMEASURED))
            comparison = judge(runner, None, held_out.feeds, judged.references, judged.tolerances)[0]
            failure = "" if comparison.passed else comparison.failure()
    return comparison, failure and f"held-out {failure} ({spec.inputs})"


def _stored_bytes(model_path: str | ModelContext) -> int:
    """The written model's bytes on disk, its external data file included (in memory, its proto's)."""
    if isinstance(model_path, ModelContext):
        return model_path.model.ByteSize()
    data = model_path + ".data"
    return os.path.getsize(model_path) + (os.path.getsize(data) if os.path.exists(data) else 0)


def conversion_status(auto_result: AutoResult, verification: Verification | None, target: Target,
                      ) -> tuple[Status, str, tuple[str, ...]]:
    """The run's status and message, and warnings to add: the search's, unless the written model
    fails the emulated check (a bug), fails natively, or, where the target runs on onnxruntime,
    cannot be loaded at onnxruntime's default options (elsewhere that is a warning; a load not checked
    for want of memory is a warning everywhere)."""
    status, message = auto_result.status, auto_result.message
    if status != "passed" or verification is None:
        return status, message, ()
    if not verification.verified.passed:
        return "failed", "the written model fails the emulated check (a bug: please report it)", ()
    native = verification.native
    if native is not None and not native.passed:
        return "failed", f"the written model fails on {native.oracle} (passes emulated)", ()
    if verification.validation_failure:
        return "failed", f"the written model fails {verification.validation_failure}", ()
    if verification.generation is not None and not verification.generation.holds:
        return "failed", verification.generation.length_text(), ()
    if verification.default_load:
        from ..oracle.default_load import LoadFailure

        failure = LoadFailure.of(verification.default_load)
        if failure.for_memory:  # not checked for want of memory: no failure of the model
            return status, message, (verification.default_load,)
        if target.onnxruntime_kernels(target.low):
            return "ort-load-failed", f"the written model passes, but {verification.default_load}", ()
        cpu_only = failure.cpu_only
        return status, message, (f"{verification.default_load} ({target.title} builds the model; "
                                 f"onnxruntime is not the target{', and ' + cpu_only if cpu_only else ''})",)
    return status, message, ()


def share_gate(status: Status, message: str, plan: PrecisionPlan, shares: FlopShares,
               minimum: float | None) -> tuple[Status, str]:
    """--min-16bit-share: a plan that passes with less of its estimated FLOPs in 16 bits than ``minimum``
    percent (the share the summary gives, ``shares``), or whose share counts compute of unknown cost, fails,
    and its message says why (:meth:`..flops.FlopShares.short_of`)."""
    if minimum is None or status not in ("passed", "ort-load-failed"):
        return status, message
    why = shares.short_of(plan, minimum)
    return ("failed", why + (f"; {message}" if message else "")) if why else (status, message)
