"""Estimated FLOPs per node, for the 16-bit share of compute (:class:`FlopShares`) and for weighing pins."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from .graph import walk_nodes
from .plan import PrecisionPlan
from .typing_rules.inference import weightless


def estimate_flops(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Rough FLOPs per node: 2*M*N*K for MatMul/Gemm, 2*out*(C/group*kernel) for Conv, the larger
    of the first input's and the output's size for everything else (so a reduction counts what it
    reads); 1 where shapes are unknown (e.g. inside subgraphs); 0 for a Constant.

    Shapes come from ONNX shape inference with the graph inputs fixed to ``input_shapes`` (the
    first sample's), so symbolic dimensions resolve. Only for the report's FLOP share.
    """
    shapes = _inferred_shapes(model, input_shapes)
    flops: dict[str, float] = {}
    for ref in walk_nodes(model.graph):
        node = ref.node
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            flops[node.name] = 0.0  # a value, not a computation
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


def _inferred_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
                     ) -> dict[str, tuple[int, ...]]:
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
    return shapes


def precision_shares(plan: PrecisionPlan, node_flops: Mapping[str, float],
                     apart: Collection[str] = ()) -> dict[str, float]:
    """Each precision's share of the estimated FLOPs of ``plan``'s nodes (where no FLOPs are
    estimated, by node count), the precisions in the plan only; the nodes ``apart`` (quantized
    compute: :attr:`..quantized.Quantization.compute`) are left out, so the shares are the remainder's."""
    flops = {n: node_flops.get(n, 0.0) for n in plan.decisions if n not in apart}
    total = sum(flops.values())
    shares: dict[str, float] = {}
    for name in flops:
        decision = plan.decisions[name]
        weight = flops[name] / total if total > 0 else 1 / len(flops)
        shares[decision.precision.value] = shares.get(decision.precision.value, 0.0) + weight
    return shares


@dataclass(frozen=True)
class FlopShares:
    """What every share of compute a run states counts, defined once: the summary's, the trade-off
    points' and the picture's, the JSON's and ``--min-16bit-share``'s. The estimated FLOPs of a
    plan's nodes, but those of quantized compute (``quantized``: node -> "INT8", "FP8", ...,
    :attr:`..quantized.Quantization.compute`), which are counted apart: of a quantized model, the
    16-bit share is the non-quantized remainder's."""

    node_flops: Mapping[str, float] = field(default_factory=dict)
    quantized: Mapping[str, str] = field(default_factory=dict)

    @property
    def of(self) -> str:
        """What the shares are of, as the summary says it ("80.0% of estimated FLOPs")."""
        return "of the non-quantized estimated FLOPs" if self.quantized else "of estimated FLOPs"

    def by_precision(self, plan: PrecisionPlan) -> dict[str, float]:
        """Each precision's share (:func:`precision_shares`)."""
        return precision_shares(plan, self.node_flops, self.quantized)

    def low(self, plan: PrecisionPlan) -> float:
        """The 16-bit (FP16 and BF16) share."""
        shares = self.by_precision(plan)
        return 1.0 - shares.get("fp32", 0.0) if shares else 0.0
