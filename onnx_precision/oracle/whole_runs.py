"""Whole-model runs under each oracle: the FP32 model, a written FP16/mixed model emulated, natively
on a provider, or in ``onnx.reference``; each gives an :class:`OracleRun` over several samples.

* ``emulate``: :func:`run_emulated` runs a written model with every FP16 tensor rounded
  (:func:`.written.emulate_model`), on onnxruntime's CPU provider;
* ``native:<provider>``: :func:`run_native` runs the real model on a provider. On the CPU provider
  this HIDES overflow (it computes FP16 nodes in FP32), so it warns;
* ``reference``: :func:`run_reference` runs the real model in ``onnx.reference`` (numpy FP16
  arithmetic throughout, slow and pessimistic).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from ..context import ModelContext, read_written
from ..errors import ReferenceFailure
from ..storage import is_external, model_tensors, read_array
from ..target import GENERIC, UNMEASURED, Measured, Target
from ..target import NATIVE_PROVIDERS as NATIVE_PROVIDERS  # each runtime's (the registry of targets)
from .emulation_session import EMULATE, as_fp32
from .sessions import Feed, Handed, cast_feed, handed, input_dtypes, make_session, run_session
from .written import emulate_model

log = logging.getLogger(__name__)

Executor = Callable[[Feed], dict[str, np.ndarray]]  # one model's outputs for one feed

REFERENCE = "reference"


def native_oracle(provider: str) -> str:
    return f"native:{provider}"


@dataclass(frozen=True)
class OracleRun:
    """Outputs of one oracle over several samples (one dict per sample)."""

    oracle: str
    outputs: tuple[dict[str, np.ndarray], ...]


def run_fp32(ctx: ModelContext, feeds: Sequence[Feed]) -> OracleRun:
    """The FP32 model as the oracle runs it (same session options as the switch graph; FP16
    tensors it already holds emulated, see :func:`as_fp32`)."""
    fp32 = as_fp32(ctx)
    session = make_session(fp32, ctx.base_dir, custom_op_libraries=ctx.custom_op_libraries,
                           shared=ctx.mapped_weights)
    return OracleRun("fp32", run_session(session, fp32, feeds))


def run_emulated(ctx: ModelContext, feeds: Sequence[Feed], measured: Measured = UNMEASURED) -> OracleRun:
    """A written FP16/mixed model, emulated on CPU (every FP16 tensor rounded; the sums ``measured`` proves
    in range unchecked)."""
    def emulated() -> tuple[Handed, str]:
        model = emulate_model(ctx.model, ctx.base_dir, ctx.target, measured=measured)
        return handed(model, ctx.base_dir, ctx.mapped_weights), ctx.base_dir
    return _emulated_run(emulated, ctx.custom_op_libraries, feeds)


def run_emulated_file(path: str, feeds: Sequence[Feed], custom_op_libraries: tuple[str, ...] = (),
                      target: Target = GENERIC, measured: Measured = UNMEASURED) -> OracleRun:
    """:func:`run_emulated` on the model file ``path`` that this run wrote and checked, for ``target``,
    read for this run alone (:func:`.context.read_written`: its weights stay in the file): emulated in
    place, no copy of its proto beside the emulation (on the 26 MB dynamic-quant model of
    scripts/bench_quantized.py, 32 MB of the verification's peak)."""
    def emulated() -> tuple[Handed, str]:
        model, base_dir = read_written(path)
        model = emulate_model(model, base_dir, target, in_place=True, measured=measured)
        return handed(model, base_dir), base_dir
    return _emulated_run(emulated, custom_op_libraries, feeds)


def _emulated_run(emulated: Callable[[], tuple[Handed, str]], custom_op_libraries: Sequence[str],
                  feeds: Sequence[Feed]) -> OracleRun:
    """The outputs of the emulated model that ``emulated`` hands (with the folder of its external data).
    Only ``emulated`` holds the proto: it is gone before onnxruntime parses the bytes, and they
    before the run (see :class:`.sessions.Handed`)."""
    given, base_dir = emulated()
    io = given.io
    session = make_session(given, base_dir, custom_op_libraries=custom_op_libraries)
    del given
    return OracleRun(EMULATE, run_session(session, io, feeds))


def run_native(ctx: ModelContext, feeds: Sequence[Feed], provider: str = "CPUExecutionProvider") -> OracleRun:
    """The real model on ``provider``. On CPU, FP16 nodes are computed in FP32: overflow is hidden."""
    run = native_executor(ctx, provider)
    return OracleRun(native_oracle(provider), tuple(run(feed) for feed in feeds))


def native_executor(ctx: ModelContext, provider: str) -> Executor:
    """A function running ``ctx``'s model on ``provider``, one feed at a time (one session)."""
    if provider == "CPUExecutionProvider":
        log.warning("native oracle on CPUExecutionProvider: onnxruntime computes FP16 nodes in FP32 "
                    "on CPU and hides FP16 overflow; use the emulate oracle to see it")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    session = make_session(ctx.model, ctx.base_dir, providers=[provider], options=options,
                           custom_op_libraries=ctx.custom_op_libraries)
    return lambda feed: run_session(session, ctx.model, [feed])[0]


def run_reference(ctx: ModelContext, feeds: Sequence[Feed]) -> OracleRun:
    """The real model in onnx.reference.ReferenceEvaluator (:func:`reference_executor`)."""
    run = reference_executor(ctx)
    return OracleRun(REFERENCE, tuple(run(feed) for feed in feeds))


def reference_executor(ctx: ModelContext) -> Executor:
    """A function running ``ctx``'s model in onnx.reference.ReferenceEvaluator: numpy FP16 arithmetic
    inside every op, the pessimistic bound (GPU kernels accumulate in FP32).

    Known limits: it is slow (numpy, op by op); some ops compute internally in FP32 or FP64 there
    too (BatchNormalization's statistics, reductions numpy upcasts), so it is not pessimistic
    everywhere; it needs the weights in memory (fine for models well under the machine's memory).
    LayerNormalization and RMSNormalization compute their statistics in ``stash_type``, as the
    specification says and onnx.reference does not (:mod:`.reference_ops`). What it cannot build or run
    (a contrib op it does not implement, a failure of its own) raises :class:`..errors.ReferenceFailure`."""
    # onnx.reference is 12 MB of every run's memory once imported: only this oracle loads it
    from onnx.reference import ReferenceEvaluator

    from .reference_ops import SPEC_OPS

    model = ctx.model
    if any(is_external(t) for t in model_tensors(model)):
        model = onnx.ModelProto()
        model.CopyFrom(ctx.model)
        for tensor in model_tensors(model):
            if is_external(tensor):
                tensor.CopyFrom(onnx.numpy_helper.from_array(np.array(read_array(tensor, ctx.base_dir)),
                                                             tensor.name))
    what = ctx.path or "the model written for a plan"
    with _failing_alone(what):
        evaluator = ReferenceEvaluator(model, new_ops=list(SPEC_OPS))
    dtypes = input_dtypes(model)
    names = [o.name for o in model.graph.output]

    def run(feed: Feed) -> dict[str, np.ndarray]:
        with _failing_alone(what), np.errstate(all="ignore"):
            values = evaluator.run(None, cast_feed(feed, dtypes))
        return dict(zip(names, (np.asarray(v) for v in values)))
    return run


@contextmanager
def _failing_alone(what: str) -> Iterator[None]:
    """What onnx.reference raises building or running ``what`` (an op it does not implement, a failure of its
    own, whatever the error's type) as a :class:`ReferenceFailure` naming it; not a want of memory."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as e:
        lines = str(e).strip().splitlines()
        raise ReferenceFailure(what, type(e).__name__ + (f": {lines[0].rstrip('.')}" if lines else "")) from e
