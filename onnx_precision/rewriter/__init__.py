"""Write a precision plan into a model: FP16 nodes get float16 tensors, FP32 nodes are pinned by Casts.

The rules (see :mod:`onnx_precision.typing_rules` for which tensors of a node convert):

- A node's wide tensors are float32 or float64 (:data:`typing_rules.WIDE`; float64 stays as it is
  under ``--keep-float64``); an FP32 node keeps each in its own type, so a float64 node kept wide
  stays float64, and a Cast back from 16 bits writes the tensor's original type.

- A tensor is float16 iff its producer is an FP16 node that converts it (or it is an FP32 graph
  input and ``plan.fp16_io``). A consumer that needs the other type reads a Cast of it; there is
  one Cast per (tensor, type) in a graph, shared by every consumer, named from the tensor
  (``<tensor>_fp16`` / ``<tensor>_fp32``). Consumers in a subgraph that need an outer tensor
  converted share a Cast placed before the node that owns the subgraph.
- A float16 value widened by a Cast already in the model is narrowed back by reusing the Cast's
  input, never by a second Cast (the pair would cancel).
- Constant values (initializers and Constant nodes) are never Cast at run time: each is converted
  in place when every consumer needs the other type, kept when none does, and duplicated
  (``<name>_fp16``) when both do. Conversion goes through :func:`onnx_precision.storage.cast_initializer`.
- A 16-bit node with no 16-bit output (ArgMax, Shape, IsNaN) reads its float input as it is
  written, no Cast in front: reading a wide tensor it computes wide, and the plan the result carries
  (and the model's stamp hashes) says FP32 there, with why.
- Graph outputs keep their names and order: when the producer writes another type, the producer's
  tensor is renamed ``<name>_fp16``/``_fp32`` and the Cast writes the output name.
- Cast ``to``, ``dtype`` and ``Optional``'s ``type`` attributes and ConstantOfShape values follow the
  node's precision; control-flow bodies of an FP16 If/Loop/Scan take and give float16 values.
- Node names, graph I/O, IR version and opsets are kept; node order stays topological; value_info
  types follow the written types so the full checker passes.

By job: :mod:`.sides` (the types each side of a tensor needs, from the plan), :mod:`.casts` (the Casts
and DequantizeLinear copies, and what the model being written holds so far), :mod:`.constants`,
:mod:`.layer_norms` (the fused LayerNormalizations) and :mod:`.graph_writer` (the walk over graphs
and nodes that uses them); here, :func:`rewrite`: the plan resolved, written, stamped and read back
as written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

import onnx

from .. import policy
from ..context import ModelContext
from ..float_types import low_of
from ..graph import is_onnx_domain, walk_nodes
from ..plan import PrecisionPlan, Reason
from ..target import UNMEASURED, Measured
from .graph_writer import GraphWriter
from .sides import SUFFIX


@dataclass(frozen=True)
class RewriteResult:
    """The written model and what it took."""

    model: onnx.ModelProto
    plan: PrecisionPlan  # the resolved plan that was written
    casts_added: int  # the Casts the written model holds that the original did not (:func:`_cast_count`)
    initializers_converted: int  # converted in place
    initializers_duplicated: int  # one copy per type, because consumers of both kinds exist
    notes: tuple[str, ...] = ()
    changed: bool = True  # False: the graph and weights written as they were read (the stamp aside)


PROVENANCE = "onnx_precision."  # the prefix of the written model's metadata keys


def _stamp(model: onnx.ModelProto, plan: PrecisionPlan, ctx: ModelContext) -> None:
    """Record in the written model what wrote it: the tool's version, the plan's hash (its JSON's
    sha256, as ``--save-plan`` writes it) and the target the plan was made for."""
    from .. import __version__

    stamp = {"version": __version__, "plan_sha256": hashlib.sha256(plan.dumps().encode()).hexdigest(),
             "target": ctx.target.name}
    kept = {p.key: p.value for p in model.metadata_props if not p.key.startswith(PROVENANCE)}
    onnx.helper.set_model_props(model, {**kept, **{PROVENANCE + k: v for k, v in stamp.items()}})


def _flush_notes(ctx: ModelContext, plan: PrecisionPlan, shown: int = 3) -> list[str]:
    """Say which FP16 nodes lose tiny weight values to zero: harmless, but never silent. Only the
    notes of the node's own type count: a BF16 fallback node keeps the reason FP16 failed there."""
    flushed = [
        (name, r.detail)
        for name in plan.low_nodes
        for r in plan.decisions[name].reasons
        if r.source == "initializer"
        and r == policy.blockers(ctx, low_of(plan.precision(name))).notes.get(name)
    ]
    if not flushed:
        return []
    listed = "; ".join(f"{name}: {detail}" for name, detail in flushed[:shown])
    more = f"; and {len(flushed) - shown} more (see the plan)" if len(flushed) > shown else ""
    return [f"{len(flushed)} FP16 node(s) have weights whose tiniest values flush to zero: {listed}{more}"]


def rewrite(ctx: ModelContext, plan: PrecisionPlan, fuse_layer_norms: bool = True,
            measured: Measured = UNMEASURED) -> RewriteResult:
    """Write ``plan`` into a copy of ``ctx``'s model.

    The rewriter writes resolved plans only: an unresolved one is resolved first
    (:func:`onnx_precision.policy.resolve`), so nodes that cannot be FP16 are written FP32 with their
    reason; the resolved plan comes back in the result. Nodes the plan does not name stay as they
    are. ``fuse_layer_norms``: decomposed LayerNorms are written as one LayerNormalization from opset
    17, the plan pinned to fit (:mod:`onnx_precision.policy.layer_norm`), as the emulation of a plan
    assumes, and where the target sums in FP16 each 16-bit mean over many elements is written as a sum of
    pre-scaled terms (:mod:`onnx_precision.policy.accumulation_fix`); off, every node is written as it is.
    ``measured``: what the run measured of the target's sums (its basis', :class:`~.target.Measured`), whose
    LayerNormalizations pre-scaled are written on x·2^-j where FP16, as every plan was emulated.
    """
    first = policy.resolve(ctx, plan)
    pinned = policy.layer_norm_pins(ctx, first) if fuse_layer_norms else first
    prescaled = dict(measured.prescaled) if fuse_layer_norms else {}
    reasoned = policy.rewrite_reasons(ctx, pinned, prescaled) if fuse_layer_norms else pinned
    resolved = policy.resolve(ctx, reasoned)
    out = onnx.ModelProto()
    out.CopyFrom(ctx.model)
    rewriter = GraphWriter(out, resolved, ctx, fuse_layer_norms, prescaled)
    rewriter.run()
    forced = [n for n in resolved.fp32_nodes if plan.is_low(n) and (pinned.is_low(n) or not first.is_low(n))]
    notes = list(rewriter.notes)
    if forced:
        notes.append(f"{len(forced)} node(s) kept FP32 because FP16 is not possible there")
    notes.extend(_flush_notes(ctx, resolved))
    written = _as_written(resolved, rewriter.reads_wide, ctx)
    casts, constants = rewriter.casts, rewriter.constants
    changed = any((casts.count, constants.converted, constants.duplicated, rewriter.layer_norms.fused,
                   rewriter.rewritten, rewriter.retyped))
    if changed or not any(p.key.startswith(PROVENANCE) for p in out.metadata_props):
        _stamp(out, written, ctx)  # a model converted again and left as it was keeps its stamp
    added = _cast_count(out) - _cast_count(ctx.model)
    return RewriteResult(out, written, added, constants.converted, constants.duplicated, tuple(notes),
                         changed)


def _cast_count(model: onnx.ModelProto) -> int:
    """The Casts of ``model``, its bodies' included: those between precisions are not all the rewriter
    writes (a mean rewritten for a target that sums in FP16 casts its scale, computed from a shape)."""
    return sum(1 for ref in walk_nodes(model.graph)
               if ref.node.op_type == "Cast" and is_onnx_domain(ref.node.domain))


def _as_written(plan: PrecisionPlan, reads_wide: Mapping[str, tuple[str, int]], ctx: ModelContext,
                ) -> PrecisionPlan:
    """``plan`` as the model is written: each 16-bit node that has no 16-bit output and reads a wide
    tensor as it is written (:meth:`.graph_writer.GraphWriter.read_wide`) computes wide, so the plan
    says FP32 and why (the plan's FP32 covers float64: the node keeps its tensor's type). Still
    resolved: an FP32 node that converts nothing blocks nothing."""
    if not reads_wide:
        return plan
    reasons = {}
    for name, (value, elem) in reads_wide.items():
        asked = plan.decisions[name]
        sources = "/".join(dict.fromkeys(r.source for r in asked.reasons))
        low = asked.precision.value
        planned = f"planned {low}: {sources}" if sources else f"planned {low}"
        reasons[name] = (Reason("type", f"reads '{value}' as it is written, {SUFFIX[elem].upper()}: "
                                        f"{ctx.node_ops[name]} has no {low} output, so no Cast puts its "
                                        f"input in {low} ({planned})"),)
    return replace(plan.with_fp32_reasons(reasons), resolved=True)
