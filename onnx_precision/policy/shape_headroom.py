"""Shape headroom: a sum over a longer axis than the samples had can pass what the samples showed.

Where a deployment profile's maximum shapes (``--trt-max-shapes``) are larger than any verified
shape along an axis that a node sums over (a reduction, CumSum, a MatMul/Gemm contraction), its
output can grow with the length: a sum over L values grows up to Lmax/L-fold (an L2 norm by the
square root of that). The growth is estimated from the FP32 ranges recorded on the samples, not
measured: a node whose output so scaled passes max/H is pinned FP32 with the factor in its reason.
(Verifying at the profile's extremes instead would need inputs of those shapes with the samples'
statistics, which synthetic data does not have: a longer sequence of real tokens is not noise.)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import rules
from ..context import ModelContext
from ..plan import PrecisionPlan, Reason
from ..typing_rules import tensor_types_at
from .pins import fp16_holders

# How an op's output grows with the length it sums over (a factor of the lengths' ratio).
GROWTH = {"ReduceSum": 1.0, "ReduceSumSquare": 1.0, "ReduceL1": 1.0, "ReduceL2": 0.5, "CumSum": 1.0,
          "MatMul": 1.0, "Gemm": 1.0}


Shapes = Mapping[str, tuple[int, ...]]  # graph input -> its shape


def shape_headroom_pins(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping, sample_shapes: Shapes,
                        max_shapes: Shapes, headroom: float) -> dict[str, Reason]:
    """Nodes to pin because what they hold in FP16 would pass max/``headroom`` at ``max_shapes``
    (the profile's) although it does not at ``sample_shapes`` (the largest verified, per input)."""
    pins: dict[str, Reason] = {}
    if headroom == 0 or not max_shapes:
        return pins
    low = ctx.target.low
    limit = low.max / headroom
    at_samples = _facts_at(ctx, sample_shapes)
    at_max = _facts_at(ctx, {**sample_shapes, **max_shapes})
    holders = fp16_holders(ctx)
    for ref in ctx.nodes:
        node = ref.node
        growth = GROWTH.get(node.op_type)
        if growth is None or ref.graph_path:
            continue
        length, longest = _length(node, at_samples), _length(node, at_max)
        s = stats.get(node.output[0])
        if not length or not longest or longest <= length or s is None or not np.isfinite(s.max_abs):
            continue
        factor = (longest / length) ** growth
        projected = s.max_abs * factor
        if projected <= limit:
            continue
        reason = Reason("headroom", f"'{node.output[0]}' reaches {s.max_abs:.4g} summing over {length} "
                                    f"elements; the profile's maximum shapes make it {longest} "
                                    f"({factor:.3g}x): up to {projected:.4g}, over {low.max:g}/{headroom:g}",
                        (("tensor", node.output[0]), ("factor", f"{factor:.4g}"), ("length", str(length)),
                         ("max_length", str(longest))))
        for holder in holders.get(node.output[0], (ref.name,)):
            if plan.is_low(holder) and holder not in pins:
                pins[holder] = reason
    return pins


def _facts_at(ctx: ModelContext, shapes: Shapes) -> rules.ModelFacts:
    """The rules' view of the model with its inputs at ``shapes`` (every value's shape inferred there)."""
    facts = rules.ModelFacts(ctx)
    facts.types = tensor_types_at(ctx.model, shapes)
    return facts


def _length(node, facts: rules.ModelFacts) -> int | None:
    if node.op_type in ("MatMul", "Gemm"):
        return rules.facts.contraction_depth(node, facts)
    if node.op_type == "CumSum":
        shape = facts.shape(node.input[0])
        axis = facts.constant(node.input[1]) if len(node.input) > 1 else None
        if shape is None or axis is None:
            return None
        return rules.facts.dim_of(shape, int(np.ravel(axis)[0]))
    length = rules.facts.reduction_length(node, facts)
    return None if length is None or length <= 0 else length


def largest(shapes: Mapping[str, list[tuple[int, ...]]]) -> dict[str, tuple[int, ...]]:
    """Per input, the largest size along each axis over the samples (one rank per input, else none)."""
    out = {}
    for name, seen in shapes.items():
        if len({len(s) for s in seen}) == 1:
            out[name] = tuple(int(max(dims)) for dims in zip(*seen))
    return out

