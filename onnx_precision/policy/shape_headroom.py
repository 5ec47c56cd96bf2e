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

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from .. import rules
from ..context import ModelContext
from ..graph import attr, onnx_opset
from ..plan import PrecisionPlan, Reason
from ..typing_rules import tensor_types_at
from .accumulation_fix import sum_rewrites
from .pins import low_holders

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
    holders = low_holders(ctx)
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



# --- sums a target keeps in FP16 (issue 24): the size up to which a plan holds ----------------------------

@dataclass(frozen=True)
class SizeBound:
    """How far a sum kept in FP16 may grow: ``node``'s accumulator reached ``bound`` summing ``length``
    elements at the samples, and passes the type's largest value beyond ``longest`` (estimated: the
    bound scaled by the length, as a sum of terms of the samples' statistics grows)."""

    node: str
    axes: str  # the symbolic axes it sums over, "H×W"
    at_samples: str  # their sizes at the samples, "256×256"
    holds_to: str  # their sizes where it still holds, at the samples' aspect
    bound: float
    length: int
    longest: int

    def text(self, target: str, limit: float) -> str:
        return (f"FP16-safe up to {self.axes} = {self.holds_to} on {target}: beyond it '{self.node}' passes "
                f"{limit:g} (estimated: its FP16 accumulator reaches {self.bound:.4g} summing {self.length} "
                f"elements at {self.axes} = {self.at_samples} in the samples, scaled by the length; not run "
                f"at that size)")


def _summed(node: onnx.NodeProto, facts: rules.ModelFacts, opset: int) -> list[int] | None:
    """The axes of input 0 that ``node`` sums over, where an FP16 accumulator grows with them."""
    shape = facts.shape(node.input[0])
    if shape is None or not shape:
        return None
    rank = len(shape)
    op = node.op_type
    if op == "GlobalAveragePool":
        return list(range(2, rank))
    if op == "MatMul":
        return [rank - 1]
    if op == "Gemm":
        return [0 if attr(node, "transA", 0) else rank - 1]
    if op in ("Softmax", "LogSoftmax"):
        given = attr(node, "axis", -1 if opset >= 13 else 1)
        axis = (given if isinstance(given, int) else -1) % rank
        return [axis] if opset >= 13 else list(range(axis, rank))
    if op == "CumSum":
        along = facts.constant(node.input[1]) if len(node.input) > 1 else None
        return None if along is None else [int(np.ravel(along)[0]) % rank]
    if op.startswith("Reduce"):
        axes = rules.facts._reduce_axes(node, facts)
        if axes is None or (not axes and attr(node, "noop_with_empty_axes", 0)):
            return None
        return sorted(a % rank for a in axes) if axes else list(range(rank))
    return None  # a window (Conv, AveragePool) or a normalisation: not estimated here


_Sum = tuple[onnx.NodeProto, float, list[int], tuple[int, ...]]


def _sums(ctx: ModelContext, plan: PrecisionPlan, bounds: Mapping[str, float], sample_shapes: Shapes,
          ) -> list[_Sum]:
    """(node, bound, summed axes, input 0's shape at the samples) of each FP16 node whose bound was
    measured and whose summed axes are known at the samples, but a mean written as a sum of pre-scaled
    terms (:mod:`.accumulation_fix`), which no length makes pass max|x|."""
    facts = _facts_at(ctx, sample_shapes)
    opset = onnx_opset(ctx.model, 13)
    rewritten = sum_rewrites(ctx)  # written as sums of pre-scaled terms: within max|x| at any length
    found = []
    for ref in ctx.nodes:
        bound = bounds.get(ref.name)
        if bound is None or not plan.is_fp16(ref.name) or not np.isfinite(bound) or bound <= 0 \
                or ref.name in rewritten:
            continue
        axes = _summed(ref.node, facts, opset)
        shape = facts.shape(ref.node.input[0])
        if axes and shape is not None and all(shape[a] for a in axes):
            found.append((ref.node, bound, axes, tuple(int(d or 0) for d in shape)))
    return found


def size_bounds(ctx: ModelContext, plan: PrecisionPlan, bounds: Mapping[str, float], sample_shapes: Shapes,
                ) -> list[SizeBound]:
    """For each FP16 node of ``plan`` that sums over a symbolic axis of the model, the size up to which
    its accumulator (``bounds``: node -> the largest measured on the samples) stays within the type's
    range, tightest first."""
    limit = ctx.target.low.max
    declared = rules.ModelFacts(ctx)
    found = []
    for node, bound, axes, shape in _sums(ctx, plan, bounds, sample_shapes):
        model_shape = declared.shape(node.input[0])
        symbolic = [a for a in axes
                    if model_shape is None or len(model_shape) != len(shape) or not model_shape[a]]
        if not symbolic or bound >= limit:
            continue
        length = math.prod(shape[a] for a in axes)
        longest = int(length * limit / bound)
        grow = (longest / length) ** (1 / len(symbolic))
        found.append(SizeBound(node.name, "×".join(_dim_names(ctx, node.input[0], symbolic)),
                               "×".join(str(shape[a]) for a in symbolic),
                               "×".join(str(int(shape[a] * grow)) for a in symbolic), bound, length, longest))
    return sorted(found, key=lambda b: (b.longest / b.length, b.node))


def _dim_names(ctx: ModelContext, tensor: str, axes: list[int]) -> list[str]:
    t = ctx.types.get(tensor)
    dims = list(t.tensor_type.shape.dim) if t is not None and t.tensor_type.HasField("shape") else []
    return [dims[a].dim_param if a < len(dims) and dims[a].dim_param else f"axis {a}" for a in axes]


def accumulation_pins(ctx: ModelContext, plan: PrecisionPlan, bounds: Mapping[str, float],
                      sample_shapes: Shapes, max_shapes: Shapes, headroom: float) -> dict[str, Reason]:
    """FP16 nodes whose accumulator, summing over longer axes at the profile's ``max_shapes`` than at the
    samples, would pass max/``headroom``: pinned FP32 (a mean over a static length is rewritten instead,
    :mod:`.accumulation_fix`, and does not grow)."""
    if headroom == 0 or not max_shapes or not bounds:
        return {}
    low = ctx.target.low
    at_max = _facts_at(ctx, {**sample_shapes, **max_shapes})
    pins = {}
    for node, bound, axes, shape in _sums(ctx, plan, bounds, sample_shapes):
        grown = at_max.shape(node.input[0])
        if grown is None or len(grown) != len(shape) or any(not grown[a] for a in axes):
            continue
        length = math.prod(shape[a] for a in axes)
        longest = math.prod(int(grown[a] or 0) for a in axes)
        projected = bound * longest / length
        if longest > length and projected > low.max / headroom:
            pins[node.name] = Reason(
                "headroom", f"its FP16 accumulator ({ctx.target.title}) reaches {bound:.4g} summing "
                            f"{length} elements; the profile's maximum shapes make it {longest}: up to "
                            f"{projected:.4g}, over {low.max:g}/{headroom:g}",
                (("length", str(length)), ("max_length", str(longest))))
    return pins


def accumulation_reach(ctx: ModelContext, plan: PrecisionPlan, bounds: Mapping[str, float],
                       sample_shapes: Shapes) -> dict[str, str]:
    """Node -> how far its FP16 accumulator holds, estimated as :func:`size_bounds` does: the size of
    the symbolic axes it sums over ("H×W = 233×233"), else the number of terms ("54512 terms"), or
    "past it on the samples" (for ``analyze``'s accumulation column)."""
    limit = ctx.target.low.max
    symbolic = {b.node: b for b in size_bounds(ctx, plan, bounds, sample_shapes)}
    reach = {}
    for node, bound, axes, shape in _sums(ctx, plan, bounds, sample_shapes):
        if bound >= limit:
            reach[node.name] = "past it on the samples"
        elif node.name in symbolic:
            reach[node.name] = f"{symbolic[node.name].axes} = {symbolic[node.name].holds_to}"
        else:
            reach[node.name] = f"{int(math.prod(shape[a] for a in axes) * limit / bound)} terms"
    return reach
