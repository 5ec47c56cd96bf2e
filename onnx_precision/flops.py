"""Estimated FLOPs per node, for the 16-bit share of compute (:class:`FlopShares`) and for weighing pins."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx

from . import policy, quantized
from .float_types import LOW_TYPES
from .graph import graphs, is_onnx_domain, walk_nodes
from .plan import Precision, PrecisionPlan
from .typing_rules import elem_type
from .typing_rules.inference import weightless

if TYPE_CHECKING:
    from .context import ModelContext

_FLOATS = frozenset((*LOW_TYPES, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE))
# A Constant is a value, not a computation; Shape and Size read a tensor's shape, not its values
_NO_FLOAT_COMPUTE = ("Constant", "Shape", "Size")


def estimate_flops(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Rough FLOPs per node: 2*M*N*K for MatMul/Gemm, 2*out*(C/group*kernel) for Conv, the larger
    of the first input's and the output's size for everything else (so a reduction counts what it
    reads); 1 where shapes are unknown (e.g. inside subgraphs). A node that computes in no float type
    has 0 and every other at least 1 (:meth:`FlopShares.counted` reads that): a Constant, Shape, Size,
    and a node that reads and writes no float tensor (integer arithmetic on shapes and indices: an
    int64 Mul computes, but in no precision a plan chooses, so it is no part of a 16-bit share).

    Shapes and types come from ONNX shape inference with the graph inputs fixed to ``input_shapes``
    (the first sample's), so symbolic dimensions resolve; a value whose type inference leaves unknown
    counts as float. Only for the shares of compute and for weighing pins.
    """
    shapes, types = _inferred(model, input_shapes)
    flops: dict[str, float] = {}
    for ref in walk_nodes(model.graph):
        node = ref.node
        if not _computes_in_float(node, types):
            flops[node.name] = 0.0
            continue
        out = shapes.get(node.output[0]) if node.output else None
        out_size = float(np.prod(out)) if out is not None else 1.0
        per_output = _flops_per_output(node, shapes)
        if per_output is None:  # elementwise or a reduction: one operation per element read or written
            first = shapes.get(node.input[0]) if node.input else None
            flops[node.name] = max(out_size, float(np.prod(first)) if first is not None else 1.0, 1.0)
        else:
            flops[node.name] = max(out_size * per_output, 1.0)
    return flops


def integer_kernel_flops(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
                         names: Collection[str]) -> dict[str, float]:
    """The FLOPs of the integer kernels ``names`` (the ops of :data:`..quantized.INTEGER_OPS` with a
    float twin: 2*M*N*K as that twin), which :func:`estimate_flops` counts 0 as they compute
    in no float type: what "71% of all FLOPs are INT8" counts (:func:`..quantized.shares_text`);
    nodes of other ops and those whose shapes are unknown are left out."""
    if not names:
        return {}
    shapes, _ = _inferred(model, input_shapes)
    flops: dict[str, float] = {}
    for ref in walk_nodes(model.graph):
        node = ref.node
        row = quantized.INTEGER_OPS.get(node.op_type)
        if node.name not in names or row is None or not row.twin or len(node.input) <= row.weight_input:
            continue
        as_float = onnx.helper.make_node(row.twin, [node.input[0], node.input[row.weight_input]],
                                         node.output[:1])
        per_output = _flops_per_output(as_float, shapes)
        if per_output is not None and node.output[0] in shapes:
            flops[node.name] = float(np.prod(shapes[node.output[0]])) * per_output
    return flops


def _flops_per_output(node: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]]) -> float | None:
    first = shapes.get(node.input[0]) if node.input else None
    if node.op_type == "MatMul" and first:
        return 2.0 * first[-1]
    if node.op_type == "Gemm" and first and len(first) == 2:
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        return 2.0 * first[0 if trans_a else 1]
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
        weight = shapes.get(node.input[1])
        if weight:
            return 2.0 * float(np.prod(weight[1:]))
    return None


def _computes_in_float(node: onnx.NodeProto, types: Mapping[str, int]) -> bool:
    """Whether ``node`` computes on float values: not a Constant, Shape or Size, and it reads or
    writes a float tensor (or one whose type is unknown)."""
    if is_onnx_domain(node.domain) and node.op_type in _NO_FLOAT_COMPUTE:
        return False
    values = [name for name in [*node.input, *node.output] if name]
    return any(name not in types or types[name] in _FLOATS for name in values)


def _inferred(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
              ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Every value's static shape (main graph) and element type (subgraphs too), as inferred."""
    shell = weightless(model)
    graph = shell.graph
    # A negative dim is no shape (converters write -1 for "unknown"); left in, inference keeps it and
    # every size downstream of it is lost
    stale = [vi for vi in graph.value_info
             if any(d.HasField("dim_value") and d.dim_value < 0 for d in vi.type.tensor_type.shape.dim)]
    for vi in stale:
        graph.value_info.remove(vi)
    for value in graph.input:
        shape = input_shapes.get(value.name)
        if shape is None or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) == len(shape):
            for dim, size in zip(dims, shape):
                dim.Clear()
                dim.dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(shell, strict_mode=False)
    except Exception:  # shape inference is best effort here: FLOPs fall back to one per node
        inferred = shell
    shapes: dict[str, tuple[int, ...]] = {}
    values = list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output)
    for value in values:
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
            if all(d >= 0 for d in dims):
                shapes[value.name] = dims
    for init in model.graph.initializer:
        shapes.setdefault(init.name, tuple(init.dims))
    types: dict[str, int] = {}
    for graph in graphs(inferred.graph):
        for value in list(graph.input) + list(graph.value_info) + list(graph.output):
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types[value.name] = value.type.tensor_type.elem_type
    for graph in graphs(model.graph):
        types.update((init.name, init.data_type) for init in graph.initializer)
    return shapes, types


def counted_nodes(plan: PrecisionPlan, node_flops: Mapping[str, float]) -> tuple[str, ...]:
    """The nodes of ``plan`` that compute in a float type, the ones its counts and shares count: those
    with estimated FLOPs (:func:`estimate_flops` gives the others 0: a Shape or an int64 Mul is
    planned like any node, and its precision changes nothing it computes), every node where no FLOPs
    were estimated."""
    if not node_flops:
        return tuple(plan.decisions)
    return tuple(n for n in plan.decisions if node_flops.get(n, 0.0) > 0)


# counted_as's value for a node that reads a main-graph input as written
GRAPH_INPUT = ""


def flexible_readers(ctx: ModelContext) -> dict[str, str]:
    """Node -> the node whose precision it computes in, for the nodes that take their float input as
    written (no Cast in front: typing's flexible_inputs) and write no float (ArgMax, IsNaN, a Cast to
    an integer): planned 16-bit, such a node reading an FP32 tensor computes in FP32. The node that
    makes that input, or :data:`GRAPH_INPUT` for a graph input (FP32 unless the plan's fp16_io)."""
    inputs = {v.name for v in ctx.model.graph.input} - {i.name for i in ctx.model.graph.initializer}
    found: dict[str, str] = {}
    for ref in ctx.nodes:
        t = ctx.typing[ref.name]
        if not t.flexible_inputs or t.convertible_inputs or t.convertible_outputs:
            continue
        if any(elem_type(ctx.types.get(out)) in LOW_TYPES for out in ref.node.output):
            continue  # a Cast to float16 (a written model's): it computes in the type it writes (a Cast
            # to float64 under --keep-float64 computes in what it reads)
        value = ref.node.input[t.flexible_inputs[0]]
        made = ctx.index.producers.get(value)
        if made is not None:
            found[ref.name] = made.name
        elif value in inputs:
            found[ref.name] = GRAPH_INPUT
    return found


def _counted_in(plan: PrecisionPlan, name: str, counted_as: Mapping[str, str]) -> Precision:
    """The precision node ``name`` of ``plan`` counts in (:attr:`FlopShares.counted_as`)."""
    written = counted_as.get(name, name)
    if written == GRAPH_INPUT:
        return plan.decisions[name].precision if plan.fp16_io else Precision.FP32
    return plan.decisions.get(written, plan.decisions[name]).precision


def counted_precisions(plan: PrecisionPlan, node_flops: Mapping[str, float],
                       counted_as: Mapping[str, str] | None = None) -> dict[str, Precision]:
    """Each node of ``plan`` that its counts and shares count (:func:`counted_nodes`) -> the precision
    it computes in, in the written file (``counted_as``: :attr:`FlopShares.counted_as`). The node counts
    and the shares both read it, so they count each node alike."""
    return {n: _counted_in(plan, n, counted_as or {}) for n in counted_nodes(plan, node_flops)}


def precision_shares(plan: PrecisionPlan, node_flops: Mapping[str, float],
                     apart: Collection[str] = (),
                     counted_as: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each precision's share of the estimated FLOPs of ``plan``'s nodes that compute in a float type
    (:func:`counted_nodes`; where no FLOPs are estimated, by node count), the precisions in the plan
    only, each node in the one it computes in (:func:`counted_precisions`); the nodes ``apart``
    (quantized compute: :attr:`..quantized.Quantization.compute`) are left out, so the shares are the
    remainder's."""
    precisions = {n: p for n, p in counted_precisions(plan, node_flops, counted_as).items() if n not in apart}
    flops = {n: node_flops.get(n, 0.0) for n in precisions}
    total = sum(flops.values())
    shares: dict[str, float] = {}
    for name, precision in precisions.items():
        weight = flops[name] / total if total > 0 else 1 / len(flops)
        shares[precision.value] = shares.get(precision.value, 0.0) + weight
    return shares


@dataclass(frozen=True)
class FlopShares:
    """What every share of compute a run states counts, defined once: the summary's, the trade-off
    points' and the picture's, the JSON's and ``--min-16bit-share``'s. The estimated FLOPs of a
    plan's nodes, but those of quantized compute (``quantized``: node -> "INT8", "FP8", ...,
    :attr:`..quantized.Quantization.compute`), which are counted apart: of a quantized model, the
    16-bit share is the non-quantized remainder's. A node counts where the written file computes it, as
    ``check`` counts that file (``counted_as``: node -> the node whose precision it counts in): the
    nodes of a decomposed LayerNorm written as one LayerNormalization in its precision, the type it
    reads and writes (:func:`..policy.fused_names`; its statistics, FP32 by its stash_type 1 on the
    generic target where the plan keeps them FP32, are computed inside that one node), and a node that
    reads its input as written in that input's (:func:`flexible_readers`)."""

    node_flops: Mapping[str, float] = field(default_factory=dict)
    quantized: Mapping[str, str] = field(default_factory=dict)
    counted_as: Mapping[str, str] = field(default_factory=dict)

    @property
    def of(self) -> str:
        """What the shares are of, as the summary says it ("80.0% of estimated FLOPs")."""
        return "of the non-quantized estimated FLOPs" if self.quantized else "of estimated FLOPs"

    def counted(self, plan: PrecisionPlan) -> tuple[str, ...]:
        """The nodes of ``plan`` its node counts count: those that compute in a float type
        (:func:`counted_nodes`), quantized compute included."""
        return counted_nodes(plan, self.node_flops)

    def precisions(self, plan: PrecisionPlan) -> dict[str, Precision]:
        """Each counted node -> the precision it computes in, in the written file
        (:func:`counted_precisions`)."""
        return counted_precisions(plan, self.node_flops, self.counted_as)

    def low_nodes(self, plan: PrecisionPlan) -> tuple[str, ...]:
        """The counted nodes that compute in a 16-bit type in the written file."""
        return tuple(n for n, p in self.precisions(plan).items() if p.is_low)

    def by_precision(self, plan: PrecisionPlan) -> dict[str, float]:
        """Each precision's share (:func:`precision_shares`)."""
        return precision_shares(plan, self.node_flops, self.quantized, self.counted_as)

    def low(self, plan: PrecisionPlan) -> float:
        """The 16-bit (FP16 and BF16) share."""
        shares = self.by_precision(plan)
        return max(0.0, 1.0 - shares.get("fp32", 0.0)) if shares else 0.0  # an all-FP32 plan's weights
        # may sum past 1 by an ulp: it read '-0.0% of estimated FLOPs'


def flop_shares(ctx: ModelContext, input_shapes: Mapping[str, Sequence[int]]) -> FlopShares:
    """What the shares of ``ctx``'s model count (:class:`FlopShares`), defined once for ``convert``'s
    plans, ``--mode all-fp16``'s and ``check``'s written model (:func:`..check.written_plan`): the
    FLOPs estimated at ``input_shapes``, its quantized compute apart, each node counted where the written
    file computes it (a node that reads its input as written, a decomposed LayerNorm written as one)."""
    counted_as = {**flexible_readers(ctx), **policy.fused_names(policy.decomposed_layer_norms(ctx))}
    return FlopShares(estimate_flops(ctx.model, input_shapes), quantized.of(ctx).compute, counted_as)
