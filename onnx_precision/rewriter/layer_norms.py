"""Decomposed LayerNorms written as one LayerNormalization each (from opset 17, the plan pinned to fit:
:mod:`onnx_precision.policy.layer_norm`), in the type of the pattern's tail and named after its last
Add, so that onnxruntime's LayerNormFusion cannot bind mixed types; and what the fused nodes alone read,
dropped after."""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from .. import policy
from ..context import ModelContext
from ..float_types import LOW_PRECISIONS
from ..graph import walk_nodes
from ..target.sum_rewrite import prescaled_layer_norm
from .casts import Casts, Scope, Written
from .constants import Constants
from .sides import FLOAT, FLOAT16, LOWS, Sides


class LayerNormFusion:
    """The decomposed LayerNorms of ``ctx`` to fuse (none unless ``fuse``), and the type each one
    written computes in (``fused``)."""

    def __init__(self, ctx: ModelContext, sides: Sides, casts: Casts, written: Written, fuse: bool,
                 prescaled: Mapping[str, int]) -> None:
        self.ctx = ctx
        self.sides = sides
        self.casts = casts
        self.written = written
        # decomposed LayerNorms written as one LayerNormalization, by their last node
        self.by_add = {ln.add: ln for ln in policy.decomposed_layer_norms(ctx)} if fuse else {}
        self.fused: list[int] = []  # the type each LayerNormalization written in their place computes in
        self.prescaled = prescaled  # LayerNormalizations written on x·2^-j where FP16 (name -> j)

    def fuse(self, scope: Scope, ln: policy.DecomposedLayerNorm) -> None:
        """Replace ``ln``'s nine written nodes by one LayerNormalization in the type of its tail (the
        plan gives Mul and Add one type, :func:`onnx_precision.policy.layer_norm_pins`), named after
        the last Add."""
        # the nine nodes were just written: look back from the end (a full scan per LayerNorm would
        # make a stack of thousands quadratic)
        at = {}
        for k in range(len(scope.nodes) - 1, -1, -1):
            if scope.nodes[k].name in ln.nodes:
                at[scope.nodes[k].name] = k
                if len(at) == len(ln.nodes):
                    break
        mul, add = scope.nodes[at[ln.mul]], scope.nodes[at[ln.add]]
        written = self.written.elem
        to = written.get(add.output[0], FLOAT)
        if to not in (FLOAT, *LOWS):
            return  # kept float64 (--keep-float64): LayerNormalization's stash_type 1 would take its
            # statistics to FP32; with no 16-bit member there is no mixed type for onnxruntime to bind
        scale, bias = mul.input[ln.scale_index], add.input[ln.bias_index]
        if written.get(scale, self.sides.orig(scale)) != to or written.get(bias, self.sides.orig(bias)) != to:
            return  # a constant kept in the other type: the nodes stay as they are
        x = self.casts.version(scope, ln.x, to)
        for k in sorted(at.values(), reverse=True):
            del scope.nodes[k]
        fused = ln.fused(x, scale, bias, add.output[0])
        shift = self.prescaled.get(ln.add)
        scope.nodes.extend([fused] if shift is None or to != FLOAT16 else
                           prescaled_layer_norm(fused, shift, self.written.fresh, FLOAT16))
        self.fused.append(to)

    def statistics(self) -> str:
        """Where the fused LayerNormalizations compute their statistics on the target: stash_type 1 asks
        for FP32, which a target that normalizes in its input's type does not apply to a 16-bit one
        (:attr:`.Target.normalizes_in_input_precision`)."""
        target = self.ctx.target
        low = [t for t in self.fused if t in LOWS]
        if not low or not target.normalizes_in_input_precision:
            return "statistics in FP32, stash_type 1"
        types = "/".join(p.name for p in LOW_PRECISIONS.values() if p.elem_type in low)
        wide = len(self.fused) - len(low)
        return (f"stash_type 1, which {target.title} does not apply: it computes the statistics of the "
                f"{len(low)} {types} one(s) in {types}, their input's type"
                + (f"; the {wide} FP32 one(s) in FP32" if wide else ""))

    def clean_up(self, model: onnx.ModelProto, constants: Constants) -> str:
        """Drop from ``model`` what the fused nodes alone read, uncounted (a Cast to one of them, a
        Pow's exponent, an epsilon now an attribute), and say what was fused ("" where nothing was)."""
        if not self.fused:
            return ""
        self.casts.count -= _drop_dead_casts(model.graph, self.casts.added)
        # what the fused nodes alone read is gone, and not counted as converted or kept in both types
        given = {i.name: i.data_type for i in self.ctx.model.graph.initializer}
        for init in _drop_unread_initializers(model.graph, self.ctx.model):
            if init.name not in given:
                constants.duplicated -= 1
            elif init.data_type != given[init.name]:
                constants.converted -= 1
        return (f"{len(self.fused)} decomposed LayerNorm(s) written as one LayerNormalization each, named "
                f"after their last Add ({self.statistics()}), so that onnxruntime's LayerNormFusion cannot "
                f"bind mixed types")


def _drop_dead_casts(graph: onnx.GraphProto, added: set[str]) -> int:
    """Remove the Casts of ``added`` nothing reads any more (a fusion took their readers); returns
    how many."""
    dropped = 0
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.name in added and n.output[0] not in read]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
        dropped += len(dead)
    produced = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    kept = [vi for vi in graph.value_info if vi.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return dropped


def _drop_unread_initializers(graph: onnx.GraphProto, original: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Remove the initializers of ``graph`` that no node (a subgraph's included) or output reads any
    more, but that ``original`` read or that the rewrite added (a fusion took their readers); returns
    them. One ``original`` left unread stays: the model as it was given."""
    def reads(g: onnx.GraphProto) -> set[str]:
        return ({i for ref in walk_nodes(g) for i in ref.node.input} | {o.name for o in g.output}
                | {v.name for v in g.input})

    read, before = reads(graph), reads(original.graph)
    given = {i.name for i in original.graph.initializer}
    dead = [i for i in graph.initializer if i.name not in read and (i.name in before or i.name not in given)]
    for init in dead:
        graph.initializer.remove(init)
    return dead
