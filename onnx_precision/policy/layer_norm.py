"""Decomposed LayerNorms: found in the model, written as one ``LayerNormalization`` (opset 17 and later).

An exporter below opset 17 (or TorchScript) writes LayerNorm as ReduceMean, Sub, Pow, ReduceMean,
Add, Sqrt, Div, Mul, Add. onnxruntime's LayerNormFusion folds that pattern back into one node at its
default options, and drops the Casts around it as it does: the leading Cast of X, the Cast between
Div and Mul, the Cast before Pow (``onnxruntime/core/optimizer/layer_norm_fusion.cc``, the Apex O2
cases). Where those Casts changed the type, the fused node binds X and Scale to different types and
the written model does not load (``Type parameter (T) of Optype (LayerNormalization) bound to
different types``): a stack of FP16 LayerNorms fed by an FP32 graph input fails so. So from opset 17
the rewriter writes each pattern as one ``LayerNormalization`` itself, named after the pattern's last
Add (whose output it keeps), with ``stash_type`` 1: statistics in FP32, as onnxruntime's kernels and
TensorRT's weakly typed builds compute them, and as TensorRT recommends.

The fused node has one type for X, Scale and B: the type of the pattern's tail (Mul and the last
Add). :func:`layer_norm_pins` makes the plan say what is written: a tail not all in one 16-bit type
is written FP32, statistics and all, so the whole pattern is pinned FP32; and where the target
computes a normalisation's statistics in its input's precision (TensorRT strongly typed: its
importer casts nothing to ``stash_type``, see :mod:`onnx_precision.target.tensorrt`) and the plan
keeps a node before the tail (a statistic, the centring, the division) FP32 or in a 16-bit type
other than the tail's (a BF16 fallback), the whole pattern is pinned FP32, so the node is fed FP32.
The rewriter applies these pins to every plan it writes, and the emulation to every plan it runs.

A 16-bit fused node computes its statistics in FP32 and rounds only its output: not what the
pattern's nodes, each rounding its own output, compute. So the emulation of a plan computes each
such pattern's last node as the LayerNormalization written in its place (:func:`written_forms`) and
the nodes before it in FP32 (:func:`always_fp32`), and a search measures the model the rewriter
writes. Under TensorRT the form is computed as its Normalization layer: in 16 bits, the pattern's
steps each stored in the node's type; FP32, one FP32 node (onnxruntime's, as the written model's
emulation runs it), where the nine nodes would round differently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..context import ModelContext
from ..float_types import low_of
from ..graph import onnx_opset
from ..plan import Precision, PrecisionPlan, Reason
from ..storage import read_array
from .resolution import forced_fp32, held_in

MIN_OPSET = 17  # LayerNormalization's first opset


@dataclass(frozen=True)
class DecomposedLayerNorm:
    """One LayerNorm written as its nine nodes (names), with what one node needs to replace them."""

    mean: str
    sub: str
    pow: str
    var: str
    add_eps: str
    sqrt: str
    div: str
    mul: str
    add: str  # the last node: the fused node takes its name and its output
    x: str
    scale_index: int  # which input of the Mul is the scale
    bias_index: int  # which input of the last Add is the bias
    axis: int
    epsilon: float
    scale: str  # the constants' names, and the last Add's output
    bias: str
    y: str

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.mean, self.sub, self.pow, self.var, self.add_eps, self.sqrt, self.div, self.mul,
                self.add)

    @property
    def inside(self) -> tuple[str, ...]:
        """The nodes but the tail (Mul and last Add): the statistics and the normalisation, which the
        LayerNormalization written computes inside."""
        return (self.mean, self.sub, self.pow, self.var, self.add_eps, self.sqrt, self.div)

    def fused(self, x: str, scale: str, bias: str, y: str) -> onnx.NodeProto:
        """The LayerNormalization written in place of the nine nodes, named after the last Add, with
        its tensors as the written model names them."""
        return helper.make_node("LayerNormalization", [x, scale, bias], [y], name=self.add, axis=self.axis,
                                epsilon=self.epsilon, stash_type=1)


def decomposed_layer_norms(ctx: ModelContext) -> tuple[DecomposedLayerNorm, ...]:
    """The main graph's decomposed LayerNorms that one LayerNormalization can replace (opset 17 or
    later; none below), found once per context."""
    return ctx.memo(_find)


def _find(ctx: ModelContext) -> tuple[DecomposedLayerNorm, ...]:
    if onnx_opset(ctx.model) < MIN_OPSET:
        return ()
    found = []
    for node in ctx.model.graph.node:
        if node.op_type == "ReduceMean" and node.domain in ("", "ai.onnx"):
            pattern = _match(ctx, node)
            if pattern is not None:
                found.append(pattern)
    return tuple(found)


def _only_consumer(ctx: ModelContext, value: str, op_type: str):
    consumers = ctx.index.consumers.get(value, ())
    outputs = {o.name for o in ctx.model.graph.output}
    if len(consumers) != 1 or value in outputs or consumers[0].graph_path:
        return None
    node = consumers[0].node
    return node if node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _constant(ctx: ModelContext, name: str) -> np.ndarray | None:
    tensor = ctx.constants.get(name)
    if tensor is None or math.prod(tensor.dims) > 1 << 16:
        return None
    return np.asarray(read_array(tensor, ctx.base_dir))


def _axes(ctx: ModelContext, node) -> list[int] | None:
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1]:
        axes = _constant(ctx, node.input[1])
        return None if axes is None else [int(v) for v in axes.ravel()]
    return None


def _other(node, name: str) -> tuple[int, str] | None:
    """The index and name of ``node``'s input other than ``name`` (a binary node)."""
    if len(node.input) != 2 or name not in node.input:
        return None
    i = 1 - list(node.input).index(name)
    return i, node.input[i]


def _match(ctx: ModelContext, mean) -> DecomposedLayerNorm | None:
    x = mean.input[0]
    shape = ctx.types.get(x)
    if shape is None or not shape.tensor_type.HasField("shape"):
        return None
    rank = len(shape.tensor_type.shape.dim)
    axes = _axes(ctx, mean)
    if rank == 0 or axes is None or len(axes) != 1 or axes[0] % rank != rank - 1:
        return None
    sub = _only_consumer(ctx, mean.output[0], "Sub")
    if sub is None or list(sub.input) != [x, mean.output[0]]:
        return None
    consumers = {ref.node.op_type: ref.node for ref in ctx.index.consumers.get(sub.output[0], ())}
    if len(ctx.index.consumers.get(sub.output[0], ())) != 2 or set(consumers) != {"Pow", "Div"}:
        return None
    power, div = consumers["Pow"], consumers["Div"]
    exponent = _constant(ctx, power.input[1]) if list(power.input)[0] == sub.output[0] else None
    if exponent is None or exponent.size != 1 or float(exponent.ravel()[0]) != 2.0:
        return None
    var = _only_consumer(ctx, power.output[0], "ReduceMean")
    if var is None or _axes(ctx, var) != axes:
        return None
    add_eps = _only_consumer(ctx, var.output[0], "Add")
    if add_eps is None:
        return None
    eps_input = _other(add_eps, var.output[0])
    eps = None if eps_input is None else _constant(ctx, eps_input[1])
    if eps is None or eps.size != 1:
        return None
    sqrt = _only_consumer(ctx, add_eps.output[0], "Sqrt")
    if sqrt is None or _only_consumer(ctx, sqrt.output[0], "Div") is not div or list(div.input) != [
            sub.output[0], sqrt.output[0]]:
        return None
    mul = _only_consumer(ctx, div.output[0], "Mul")
    scale = None if mul is None else _other(mul, div.output[0])
    add = None if mul is None else _only_consumer(ctx, mul.output[0], "Add")
    bias = None if add is None else _other(add, mul.output[0])
    if mul is None or add is None or scale is None or bias is None:
        return None
    if not (_vector_like(ctx, scale[1], shape) and _vector_like(ctx, bias[1], shape)):
        return None
    return DecomposedLayerNorm(mean.name, sub.name, power.name, var.name, add_eps.name, sqrt.name, div.name,
                               mul.name, add.name, x, scale[0], bias[0], rank - 1, float(eps.ravel()[0]),
                               scale[1], bias[1], add.output[0])


def _vector_like(ctx: ModelContext, name: str, x_type) -> bool:
    """A constant vector as long as X's last axis (what LayerNormalization's Scale and B may be)."""
    tensor = ctx.constants.get(name)
    last = x_type.tensor_type.shape.dim[-1]
    return (tensor is not None and len(tensor.dims) == 1 and last.HasField("dim_value")
            and tensor.dims[0] == last.dim_value)


def layer_norm_pins(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with what a fused LayerNormalization needs pinned (see the module docstring); nodes
    every resolved plan keeps FP32 count as FP32, so an unresolved plan gets the pins of its
    resolution. The same plan back where nothing needs pinning."""
    patterns = decomposed_layer_norms(ctx)
    if not patterns:
        return plan
    forced = forced_fp32(ctx)

    def written(node: str) -> Precision:
        # a node forced FP32 for a constant FP16 cannot hold is computed in a type that holds it
        # (held_in: an epsilon in a BF16 fallback), and so pinned with the rest where they are pinned
        decision = plan.decisions.get(node)
        precision = Precision.FP32 if decision is None else decision.precision
        if not precision.is_low or (node in forced and node not in held_in(ctx, low_of(precision))):
            return Precision.FP32
        return precision

    pins: dict[str, list[Reason]] = {}
    for ln in patterns:
        tail = {written(n) for n in (ln.mul, ln.add)}
        inside = {written(n) for n in ln.inside}
        if len(tail) > 1 or Precision.FP32 in tail:
            why = Reason("type", f"written as one LayerNormalization ('{ln.add}'), statistics included, in "
                                 f"the one type of its scale and bias: FP32, as its Mul or last Add is FP32 "
                                 f"or the two differ")
        elif ctx.target.normalizes_in_input_precision and inside != tail:
            # statistics (or the mean, the centring, the division) in FP32, or in the other 16-bit
            # type (a BF16 fallback): the node written computes them in its tail's type, which is not
            # what the plan asks of them
            need = "FP32" if Precision.FP32 in inside else "/".join(sorted(p.name for p in inside))
            why = Reason("target", f"{ctx.target.title} computes a LayerNormalization's statistics in its "
                                   f"input's precision when strongly typed; they need {need} here, so the "
                                   f"node written for '{ln.add}' is fed FP32")
        else:
            continue
        pins.update({n: [why] for n in ln.nodes if written(n) is not Precision.FP32})
    return plan.with_fp32_reasons(pins) if pins else plan


def tied(ctx: ModelContext) -> Mapping[str, tuple[str, ...]]:
    """Node -> the nodes of its decomposed LayerNorm that the written LayerNormalization computes in
    one type with it (:func:`layer_norm_pins` pins them all FP32 otherwise): its tail (Mul and last
    Add), and where the target computes the statistics in the input's precision all nine; a node of
    none is not a key. Found once per context."""
    return ctx.memo(_tied)


def _tied(ctx: ModelContext) -> Mapping[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for ln in decomposed_layer_norms(ctx):
        group = ln.nodes if ctx.target.normalizes_in_input_precision else (ln.mul, ln.add)
        out.update(dict.fromkeys(group, group))
    return out


def written_forms(ctx: ModelContext) -> Mapping[str, onnx.NodeProto]:
    """Node -> the node the written model computes in its place, which the emulation of every plan
    computes there, in the type of the pattern's tail (one type once pinned, :func:`layer_norm_pins`):
    each decomposed LayerNorm's last Add -> its LayerNormalization (inputs by their names in the
    model), computed as the target computes it. Its statistics are FP32 whatever its type, but where
    the target computes them in the input's precision
    (:attr:`~onnx_precision.target.Target.normalizes_in_input_precision`: TensorRT's Normalization
    layer, which the emulation spells in 16 bits as the pattern's steps, each stored in the node's
    type, :func:`onnx_precision.trt.ops.normalization_in_input_precision`); pinned FP32, it is one FP32
    layer there too, not nine."""
    return {ln.add: ln.fused(ln.x, ln.scale, ln.bias, ln.y) for ln in decomposed_layer_norms(ctx)}


def always_fp32(ctx: ModelContext) -> frozenset[str]:
    """The nodes every model the rewriter writes computes in FP32, whatever the plan: those every
    resolved plan keeps FP32 (:func:`~onnx_precision.policy.forced_fp32`), and the statistics of each
    LayerNorm written as its form (:func:`written_forms`: all its nodes but the tail, inside the
    LayerNormalization), except where the target computes them in the input's precision: there they
    are in the node's type, and the plan's precision for them decides whether the node is fed FP32
    (:func:`layer_norm_pins`). Found once per context."""
    return ctx.memo(_always_fp32)


def _always_fp32(ctx: ModelContext) -> frozenset[str]:
    if ctx.target.normalizes_in_input_precision:
        return forced_fp32(ctx)
    return forced_fp32(ctx) | {n for ln in decomposed_layer_norms(ctx) for n in ln.inside}


def fused_names(patterns: tuple[DecomposedLayerNorm, ...]) -> Mapping[str, str]:
    """Node -> the name of the LayerNormalization that replaces it in the written model."""
    return {node: ln.add for ln in patterns for node in ln.nodes}
