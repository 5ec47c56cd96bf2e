"""Fixes, not only pins, for runtimes that sum in FP16: the means written as sums of pre-scaled terms.

Where the target accumulates a ``ReduceMean`` or ``GlobalAveragePool`` in FP16 (``webgpu``,
``fp16-accumulate``), each such node of the main graph over a static number of elements is written, when
it computes in FP16, as ``ReduceSum(x·2^-k)·2^k/N`` (:mod:`onnx_precision.target.sum_rewrite`: its running
sum cannot pass max|x|), and kept as it is when FP32. So a mean whose FP16 sum overflows stays FP16
instead of being pinned; the search still weighs the rewritten FP16 node against an FP32 pin, by
measuring it (the scaled terms lose bits below FP16's normal range). As the LayerNorm fusion does
(:mod:`.layer_norm`), the emulation of every plan computes each such node as it is written
(:func:`written_forms`), so what the search measures is the model written, and the plan says which
nodes are rewritten (:func:`rewrite_reasons`).
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from ..context import ModelContext
from ..graph import is_onnx_domain, onnx_opset
from ..plan import PrecisionPlan, Reason
from ..target.accumulation import FIRST_OPSET, SMALL_CONSTANT
from ..target.sum_rewrite import POWERS as LONGEST_SHIFT
from ..target.sum_rewrite import SumRewrite, form_of, marked, sum_rewrite
from ..typing_rules.constant_values import small_constant_arrays
from . import layer_norm


def sum_rewrites(ctx: ModelContext) -> Mapping[str, SumRewrite]:
    """Node -> how it is written where it computes in FP16 (none on a target that sums in FP32, or in
    another 16-bit type than FP16). Found once per context."""
    return ctx.memo(_sum_rewrites)


def _sum_rewrites(ctx: ModelContext) -> Mapping[str, SumRewrite]:
    fp16 = {op for op, how in ctx.target.accumulation.items() if how == "fp16"}
    if ctx.target.low.elem_type != onnx.TensorProto.FLOAT16 or onnx_opset(ctx.model, 13) < FIRST_OPSET:
        return {}
    candidates = [ref for ref in ctx.nodes if ref.node.op_type in fp16 and not ref.graph_path
                  and is_onnx_domain(ref.node.domain)]
    if not candidates:
        return {}
    constants = small_constant_arrays(ctx.model, ctx.base_dir, SMALL_CONSTANT)
    fixed = layer_norm.always_fp32(ctx)
    found = {}
    for ref in candidates:
        rewrite = None if ref.name in fixed else sum_rewrite(ref.node, ctx.types.get(ref.node.input[0]),
                                                             constants)
        if rewrite is not None:
            found[ref.name] = rewrite
    return found


def rewrite_forms(ctx: ModelContext) -> Mapping[str, onnx.NodeProto]:
    """Node -> the node whose FP16 emulation is its rewrite (:func:`.sum_rewrite.marked`)."""
    nodes = {ref.name: ref.node for ref in ctx.nodes if not ref.graph_path}
    return {name: marked(nodes[name], rewrite) for name, rewrite in sum_rewrites(ctx).items()}


def written_forms(ctx: ModelContext) -> Mapping[str, onnx.NodeProto]:
    """Node -> the node the written model computes in its place, which the emulation of every plan
    computes there: each decomposed LayerNorm's last Add as its LayerNormalization
    (:func:`.layer_norm.written_forms`, marked with its name: a target may pre-scale it,
    :func:`layer_norm_prescales`) and each mean rewritten for an FP16 accumulator."""
    fused = {name: form_of(form, name) for name, form in layer_norm.written_forms(ctx).items()}
    return {**fused, **rewrite_forms(ctx)}


def layer_norm_prescales(ctx: ModelContext, bounds: Mapping[str, float],
                         headroom: float) -> tuple[tuple[str, int], ...]:
    """(LayerNormalization, j) for each decomposed LayerNorm written as one (:mod:`.layer_norm`) whose
    statistics the target sums in FP16 and would pass 65504/``headroom`` on the samples (``bounds``: each
    FP16 sum's largest bound on them, :func:`onnx_precision.target.accumulation.proven_sums`), j the
    smallest with the sums of x·2^-j within it: Σ|x| is the mean's bound, Σx² = Σ(x - mean)² + N·mean²
    at most the variance's bound plus (Σ|x|)²/N. None where the target sums them in FP32."""
    target = ctx.target
    if target.accumulation.get("LayerNormalization") != "fp16" or target.normalizes_in_input_precision \
            or target.low.elem_type != onnx.TensorProto.FLOAT16:
        return ()
    limit = target.low.max / max(headroom, 1.0)
    shifts = []
    for ln in layer_norm.decomposed_layer_norms(ctx):
        row = ctx.types[ln.x].tensor_type.shape.dim[-1].dim_value  # static: LayerNormalization's scale
        if ln.mean not in bounds or ln.var not in bounds or not row:
            continue
        absolute = bounds[ln.mean]  # a ReduceMean's bound is its Σ|x|, before the division
        squares = bounds[ln.var] + absolute ** 2 / row
        shift = next((j for j in range(LONGEST_SHIFT + 1) if max(absolute * 2.0 ** -j,
                                                                  squares * 4.0 ** -j) < limit), None)
        if shift:  # 0: in range as it is; None: no FP16 power of two brings it in range
            shifts.append((ln.add, shift))
    return tuple(shifts)


def rewrite_reasons(ctx: ModelContext, plan: PrecisionPlan,
                    prescaled: Mapping[str, int] | None = None) -> PrecisionPlan:
    """``plan`` with a ``target`` reason, "rewritten: ...", on each 16-bit node written as its rewrite, and
    on each LayerNormalization written on x·2^-j (``prescaled``: name -> j, :func:`layer_norm_prescales`)."""
    reasons = {name: [Reason("target", f"rewritten: {rewrite.why}, as {ctx.target.title} sums it in FP16",
                             (("form", rewrite.form), ("length", str(rewrite.length or rewrite.dims))))]
               for name, rewrite in sum_rewrites(ctx).items() if plan.is_fp16(name)}
    reasons.update({name: [Reason("target", f"rewritten: LayerNormalization(x·2^-{j}, epsilon·2^-{2 * j}), "
                                            f"as {ctx.target.title} sums its statistics in FP16 and Σx² "
                                            f"passes 65504 on the samples", (("prescale", str(j)),))]
                    for name, j in (prescaled or {}).items() if plan.is_fp16(name)})
    if not reasons:
        return plan
    return plan.with_reasons(plan.precision(next(iter(reasons))), reasons)


def rewritten(ctx: ModelContext, plan: PrecisionPlan) -> tuple[str, ...]:
    """The nodes ``plan`` writes as their rewrite."""
    return tuple(name for name in sum_rewrites(ctx) if plan.is_fp16(name))
