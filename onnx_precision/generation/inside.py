"""What a run measured inside a model at a few of a generation's steps: what its bound extrapolates.

The runner keeps each output's peak at every step (:attr:`.runner.GenerationRun.peaks`). A tensor inside the
model (a layer's residual sum, an activation) is measured where one forward pass is measured: the FP32
ranges the run takes for its headroom pins (:mod:`onnx_precision.oracle.inspection`, each sample's
:attr:`~onnx_precision.oracle.ranges.ReferenceResult.peaks`) and, where the target sums in its 16-bit type,
each such sum's bound (:class:`onnx_precision.oracle.accumulated.AccumulationBounds`). A generation's
reference keeps the feeds of :func:`measured_steps` for them: the prefill, seven steps between and the
last. Two points cannot tell a trend from noise: on SmolLM2-135M the attention scores of layer 1 peak at
142, 122, 147, 136 and 186 at steps 0, 16, 32, 48 and 64; read at steps 0, 32 and 64 alone they rise at
every point, and a geometric fit through them passes 65504 at ~1 500 tokens. :func:`step_ranges` gives what
was measured at each sample's steps (:class:`StepRanges`), which its run holds
(:attr:`.runner.GenerationRun.inside`).

Only what computes is traced (:func:`traced`): a tensor that an op only moves or selects (a Reshape, the
Concat of a KV cache) holds values of its input, and the peak of one that holds a cache is the running
maximum of every step's entries (SmolLM2's ``present.9.value`` rises at every step measured, 3.8 to 4.7,
whatever the new entries do). The graph's inputs and outputs are traced at every step by the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..context import ModelContext
from ..errors import InternalError

# an op that moves or selects values, or changes their type (a Cast of a cache holds the cache)
_COPIES = frozenset({"Cast"})


@dataclass(frozen=True)
class StepRanges:
    """What one sample's reference measured inside the model at ``steps``: per traced tensor its max |value|
    at each (``peaks``), and per node whose sum the target keeps in its 16-bit type its accumulator's
    largest bound at each (``sums``; empty where the target sums nothing in 16 bits)."""

    steps: tuple[int, ...]
    peaks: Mapping[str, tuple[float, ...]]
    sums: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def measured_steps(steps: int) -> tuple[int, ...]:
    """The steps of a generation of ``steps`` steps after the first whose feeds one forward pass is measured
    on: the first (the prefill), its eighths and the last (0, 8, 16, ..., 64 for 64; every step up to 8).

    Eighths, not quarters: a level that shifts once between five steps reads as a growth. Whisper tiny.en's
    layer-0 attention scores peak at 50, 83, 128, 130 and 274 at steps 0, 16, 32, 48 and 64 (step 0 the
    2-token prefill, step 64 after its transcript ends at step 53); they rise at each, and a geometric fit
    (x1.024 a step) passes 65504 at ~292 tokens, where run in FP32 to 445 steps they peak at 468 (step 150)
    and stay under 210 from step 192. At steps 0, 8, ..., 64 they fall at 16 and at 40 (125 at step 8, 83 at
    16; 128, 91), and none of its 144 tensors traced rises at each of the nine steps. Each step more costs
    one more capture of the ranges.
    """
    return tuple(sorted({0, steps} | {k * steps // 8 for k in range(1, 8)}))


def traced(ctx: ModelContext) -> frozenset[str]:
    """The tensors of ``ctx``'s main graph whose peaks a generation's bound extrapolates from the steps
    measured: each output of a node that computes on values, but the graph's inputs and outputs (see the
    module docstring)."""
    return ctx.memo(_traced)


def _traced(ctx: ModelContext) -> frozenset[str]:
    from ..rules.decoder.common import MOVES

    ends = {v.name for v in (*ctx.model.graph.input, *ctx.model.graph.output)}
    return frozenset(t for ref in ctx.nodes if not ref.graph_path and ref.node.op_type not in MOVES | _COPIES
                     for t in ref.node.output if t and t not in ends)


def step_ranges(ctx: ModelContext, samples: int, steps: tuple[int, ...], peaks: Sequence[Mapping[str, float]],
                sums: Sequence[Mapping[str, float]] = ()) -> tuple[StepRanges, ...]:
    """What was measured inside ``ctx``'s model at the ``steps`` of each of ``samples`` samples: ``peaks`` and
    ``sums`` hold one mapping per feed measured, each sample's ``steps`` in turn (requires: as many; ``sums``
    may be empty, where the target sums nothing in 16 bits)."""
    count, n = samples * len(steps), len(steps)
    if len(peaks) != count or len(sums) not in (0, count):
        raise InternalError(f"{len(peaks)} ranges and {len(sums)} sums measured for {samples} sample(s) of "
                            f"{n} steps each")
    names = traced(ctx)

    def each(measured: Sequence[Mapping[str, float]], keep: frozenset[str] | None,
             ) -> dict[str, tuple[float, ...]]:
        common = set(measured[0]).intersection(*measured[1:]) if measured else set()
        return {t: tuple(m[t] for m in measured) for t in sorted(common) if keep is None or t in keep}

    return tuple(StepRanges(steps, each(peaks[k * n:(k + 1) * n], names),
                            each(sums[k * n:(k + 1) * n], None) if sums else {}) for k in range(samples))
