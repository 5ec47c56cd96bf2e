"""Decoder fixes that rewrite the model before anything is pinned: each mask sentinel the 16-bit type makes
-inf (the ``mask-sentinel`` rule, :mod:`onnx_precision.rules.decoder.masks`) written finite, as a quarter of
the type's lowest finite value (-16376 in FP16, :func:`~onnx_precision.rules.decoder.masks.written_sentinel`).

FP16 makes float32's minimum and -1e9 -inf. The partly masked rows of a Softmax survive that; a fully
masked one (a left-padded batch's padding rows, whose query sees no key) is all -inf and its softmax NaN,
which the next layer's keys at those positions carry into every row of the batch. Where the sentinel is
multiplied by (1 - allowed), 0 · -inf is NaN too, which is why such a Mul was kept FP32
(:func:`onnx_precision.policy.always_fp32`: a constant FP16 cannot hold). Written finite, the Mul computes
in FP16 and a fully masked row stays finite. Not as -65504 itself: a score below -16 added to it is -inf in
FP16 again, and the headroom and range pins keep the sentinel's Mul, the masked Adds and the Softmaxes FP32
(scores reach -65510 in FP32 on models/decoders' Llama); a quarter of it leaves scores up to 16376 within the
default headroom.

In FP32 the rewrite changes nothing that matters: exp(-16376 + s - max) is 0 there as exp(-3.4e38 - max) is,
so every row with a key left computes the same softmax (on models/decoders' Llama, the outputs are bit for
bit those of the model as given). A fully masked row differs: it was uniform over its keys (the sentinel
swallowed the scores) and becomes nearly their softmax; it was NaN in FP16, and nothing reads it.

The model is rewritten before its context is built for the run, as the opset is raised for BF16
(:mod:`onnx_precision.opset_upgrade`): the FP32 reference, the search, the emulation and the rewriter all see
the fixed model. What was done is said in the context's notes (the run's summary), in the doc_string of each
node whose sentinel was rewritten (the written model keeps it) and in the rewritten constant's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import numpy_helper

from .. import rules
from ..context import ModelContext
from ..errors import InternalError
from ..rules.decoder.masks import mask_sentinel, sentinel_finding, sentinels, written_sentinel
from ..storage import read_array
from ..typing_rules import constant_tensor

PROVENANCE = "onnx-precision mask-sentinel"  # how a rewritten node's and constant's doc_string starts


@dataclass(frozen=True)
class SentinelRewrite:
    """One sentinel written finite: ``node`` read ``constant`` (a ConstantOfShape's own
    value where None), whose most negative value ``value`` the 16-bit type made -inf; ``copy``: the name
    of the rewritten copy ``node`` reads now, where ``constant`` has readers that are no sentinel sites
    (None: rewritten in place). ``why``: the rule's finding, as the notes and doc_strings say it."""

    node: str
    constant: str | None
    value: float
    written_as: float
    copy: str | None
    why: str


@dataclass(frozen=True)
class DecoderRewrite:
    """What :func:`rewrite_decoder_hazards` did: the context of the fixed model (``ctx`` itself where
    nothing was rewritten) and each rewrite."""

    ctx: ModelContext
    sentinels: tuple[SentinelRewrite, ...]


def rewrite_decoder_hazards(ctx: ModelContext) -> DecoderRewrite:
    """Each mask sentinel of the main graph that the ``mask-sentinel`` rule flags, written finite in the
    target's type (:func:`~onnx_precision.rules.decoder.masks.written_sentinel`), in a copy of the model
    (``ctx``'s is left as it is)."""
    facts = rules.ModelFacts(ctx)
    sites = [(ref.node, found) for ref in ctx.nodes if not ref.graph_path and mask_sentinel.applies_to(
        ref.node.op_type) for found in sentinels(facts, ref.node)]
    if not sites:
        return DecoderRewrite(ctx, ())
    model = onnx.ModelProto()
    model.CopyFrom(ctx.model)
    graph = model.graph
    nodes = {node.name: node for node in graph.node}
    finite = written_sentinel(ctx.target.low)
    site_nodes = {node.name for node, _ in sites}
    copies: dict[str, str] = {}  # constant -> the rewritten copy its sentinel sites read
    done: list[SentinelRewrite] = []
    for node, found in sites:
        why = sentinel_finding(facts, node, found).message
        written = nodes[node.name]
        copy = None
        if found.constant is None:  # a ConstantOfShape: its value
            tensor = constant_tensor(written)
            if tensor is None:
                raise InternalError(f"ConstantOfShape '{node.name}' has no value, yet a sentinel was read")
            tensor.CopyFrom(_written(tensor, ctx, finite, why))
        elif all(r.name in site_nodes for r in ctx.index.consumers.get(found.constant, ())):
            rewritten = _written(ctx.constants[found.constant], ctx, finite, why)
            _replace_constant(graph, found.constant, rewritten)
        else:  # read elsewhere as it is (a clamp's bound): the sentinel sites read a rewritten copy
            copy = copies.get(found.constant)
            if copy is None:
                copy = copies[found.constant] = _fresh(ctx, f"{found.constant}_finite")
                graph.initializer.append(_written(ctx.constants[found.constant], ctx, finite, why, copy))
            written.input[:] = [copy if name == found.constant else name for name in written.input]
        before = f"\n{written.doc_string}" if written.doc_string else ""
        written.doc_string = f"{PROVENANCE}: {why}{before}"
        done.append(SentinelRewrite(node.name, found.constant, found.value, finite, copy, why))
    notes = tuple(f"'{r.node}': {r.why}" + (f" (it reads the copy '{r.copy}')" if r.copy else "")
                  for r in done)
    return DecoderRewrite(replace(ctx, model=model, notes=ctx.notes + notes), tuple(done))


def _written(tensor: onnx.TensorProto, ctx: ModelContext, finite: float, why: str,
             name: str | None = None) -> onnx.TensorProto:
    """``tensor`` (named ``name`` where given) with the values the 16-bit type makes -inf written as
    ``finite``, in its own element type, inline."""
    values = np.asarray(read_array(tensor, ctx.base_dir))
    gone = np.isneginf(ctx.target.low.round(values.astype(np.float32)))
    out = numpy_helper.from_array(np.where(gone, finite, values).astype(values.dtype),
                                  tensor.name if name is None else name)
    out.doc_string = f"{PROVENANCE}: {why}"
    return out


def _replace_constant(graph: onnx.GraphProto, name: str, tensor: onnx.TensorProto) -> None:
    """The initializer or Constant node output ``name`` of ``graph`` given ``tensor``'s values."""
    for init in graph.initializer:
        if init.name == name:
            init.CopyFrom(tensor)
            return
    for node in graph.node:
        if node.op_type == "Constant" and list(node.output) == [name]:
            node.ClearField("attribute")
            node.attribute.append(onnx.helper.make_attribute("value", tensor))
            return
    raise InternalError(f"constant '{name}' is neither an initializer nor a Constant of the main graph")


def _fresh(ctx: ModelContext, base: str) -> str:
    taken = set(ctx.types) | set(ctx.constants) | {v.name for v in ctx.model.graph.input}
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name
