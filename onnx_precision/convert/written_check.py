"""Is a written model one that onnx accepts, and one onnxruntime loads? Checked before anything is
moved into place.

The load-time checks of an input model are :mod:`onnx_precision.validation`'s; :func:`check_written`
is the check of what the rewriter wrote, which tells the user's model at fault from the rewriter at
fault. :func:`load_remedies` answers a written model that onnxruntime cannot load at its default
options (:mod:`onnx_precision.oracle.default_load`) with the same plan and a few more FP32 pins, the
nodes of the pattern that fails: a model every consumer loads as it is, instead of a session option
each must set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx

from ..context import ModelContext
from ..errors import InternalError, ModelLoadError
from ..plan import PrecisionPlan, Reason
from ..rewriter import RewriteResult, rewrite
from ..storage import fits_one_proto, inline_copy
from ..validation import CHECK_ERRORS, checkable_copy, checker_message

if TYPE_CHECKING:  # the oracle stack is loaded by the runs that measure, when they need it
    from ..oracle.default_load import LoadFailure


def check_written(staged: str | onnx.ModelProto, ctx: ModelContext) -> None:
    """The model written at ``staged`` (checked by path: it may be over 2 GB), or the rewritten model
    itself (its weights in files seen as inputs), passes onnx's full check. When it does not, the
    input gets the same check: failing it, the input is at fault (:class:`ModelLoadError`); passing
    it, the rewriter is (:class:`InternalError`)."""
    checked = staged if isinstance(staged, str) else checkable_copy(staged, ctx.base_dir)
    try:
        onnx.checker.check_model(checked, full_check=True)
    except CHECK_ERRORS as written:
        try:
            onnx.checker.check_model(checkable_copy(ctx.model, ctx.base_dir), full_check=True)
        except CHECK_ERRORS as e:
            raise ModelLoadError(f"{ctx.path}: onnx rejects the model (full check): "
                                 f"{checker_message(e)}") from e
        raise InternalError(f"the written model fails onnx's full check, while {ctx.path} passes it: "
                            f"{checker_message(written)}") from written


@dataclass(frozen=True)
class LoadRemedy:
    """A rewrite that onnxruntime loads at its default options where the plan first written did not
    (``failure``): the same plan with ``pins`` kept FP32."""

    pins: tuple[str, ...]
    result: RewriteResult
    failure: LoadFailure

    def note(self, low: str) -> str:
        """What the run says of it (``low``: the 16-bit type's name, "FP16")."""
        failure, optimizer = self.failure, self.failure.optimizer
        found = "" if not optimizer else f", in {optimizer} (" + (
            "onnxruntime's message names it)" if failure.named_nodes else "disabling it loads the model)")
        where = f"; {failure.cpu_only}: the pins are for CPU loads, a GPU provider does not run it" \
            if failure.cpu_only else ""
        return (f"the {low} model as first written does not load at onnxruntime's default options: "
                f"{failure.outcome}{found}; keeping {', '.join(self.pins)} FP32 avoids it: the written model "
                f"loads{where}")


def load_remedies(ctx: ModelContext, written: RewriteResult, problem: str,
                  write: Callable[[PrecisionPlan], RewriteResult] | None = None) -> Iterator[LoadRemedy]:
    """Rewrites of ``written``'s plan with FP32 pins that may avoid ``problem`` (the default load's
    sentence, :class:`.LoadFailure`), the fewest pins first (:func:`.pin_candidates`), each yielded
    once onnxruntime loads it at its default options in a child process: the caller verifies it and
    stops at the one it takes. A model whose weights are in files (a model file read light,
    :func:`..storage.load_light`) is handed to the child with them inline (:func:`..storage.inline_copy`);
    none is tried when they would pass protobuf's limit. ``write``: how a plan is written (:func:`.rewrite`
    by default)."""
    from ..oracle.default_load import LoadFailure, default_load_outcome, pin_candidates

    if not fits_one_proto(written.model, ctx.base_dir):
        return
    failure = LoadFailure.of(problem)
    why = Reason("load", f"onnxruntime at default options cannot load the model with it 16-bit "
                         f"({failure.optimizer or failure.outcome}); FP32 it loads")
    write = write or (lambda plan: rewrite(ctx, plan))
    for pins in pin_candidates(ctx, written.plan.low_nodes, failure):
        pinned = write(written.plan.with_fp32(pins, why))
        if not default_load_outcome(inline_copy(pinned.model, ctx.base_dir), ctx.custom_op_libraries):
            yield LoadRemedy(pins, pinned, failure)
