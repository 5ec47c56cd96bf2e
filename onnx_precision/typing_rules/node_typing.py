"""Which tensors of a node become float16 when the node runs in FP16, read from its schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..float_types import FP16, LowPrecision
from ..graph import has_subgraphs, is_onnx_domain
from .schemas import find_schema, groups
from .types import DOUBLE, WIDE, elem_type, type_string


@dataclass(frozen=True)
class NodeTyping:
    """How a node's tensors are typed when it runs in FP16 (indices into node.input/output)."""

    convertible_inputs: tuple[int, ...]  # become float16 (a Cast is inserted if the tensor is wide)
    convertible_outputs: tuple[int, ...]  # become float16
    low_blocker: str | None  # why the node cannot be 16-bit at all (None: it can)
    flexible_inputs: tuple[int, ...] = ()  # taken in whatever precision the tensor has (no Cast)

    @property
    def has_float(self) -> bool:
        return bool(self.convertible_inputs or self.convertible_outputs or self.flexible_inputs)


# Constant: a value, not a computation; the rewriter gives each consumer the value in the type
# it needs (as for initializers), so the node itself converts nothing. BitCast: reinterprets bits,
# so a float16 output would be a different value of a different size.
_VALUE_OPS = ("Constant", "BitCast")
_CASTS = ("Cast", "CastLike")


def schema_typing(node: onnx.NodeProto, opsets: Mapping[str, int],
                   types: Mapping[str, onnx.TypeProto], low: LowPrecision = FP16,
                   wide: tuple[int, ...] = WIDE) -> NodeTyping:
    """What the schema says of ``node`` in the ``low`` precision, before asking onnxruntime; the
    tensors of the element types ``wide`` convert (float64 left out: it stays as it is)."""
    float_in = [i for i, n in enumerate(node.input) if n and elem_type(types.get(n)) in wide]
    float_out = [i for i, n in enumerate(node.output) if n and elem_type(types.get(n)) in wide]
    domain = "" if node.domain == "ai.onnx" else node.domain
    if not float_in and not float_out:
        return NodeTyping((), (), _float64_compute(node, types))
    if domain == "" and node.op_type in _VALUE_OPS:
        return NodeTyping((), (), None)
    opset = opsets.get(domain)
    schema = find_schema(node.op_type, domain, opset) if opset is not None else None
    if schema is None:
        where = f"{domain}::{node.op_type}" if domain else node.op_type
        return NodeTyping((), (), f"no schema for {where} at opset {opset}")

    control_flow = has_subgraphs(node)
    node_groups = groups(node, schema)

    convert: list[tuple[bool, int]] = []
    flexible: list[int] = []
    lone_inputs: list[int] = []
    refused: list[str] = []
    for key, members in node_groups.items():
        member_types = [types.get((node.output if o else node.input)[i]) for o, i in members]
        floats = [t for t in member_types if elem_type(t) in wide]
        if not floats:
            continue
        wanted = type_string(floats[0], low.elem_type)
        if wanted not in schema.constraints[key[0]]:
            refused.append(f"{key[0]} allows no {wanted}")
            continue
        only_input = len(members) == 1 and not members[0][0]
        if only_input and not control_flow:
            lone_inputs.append(members[0][1])
        else:
            convert.extend(members)
    if node.op_type in _CASTS and domain == "":
        flexible = lone_inputs  # a Cast reads any type: no Cast in front of a Cast
    elif not convert:
        flexible = lone_inputs  # Shape, ArgMax, IsNaN...: no float output, read as written
    else:
        # Pow's exponent, Resize's roi, RMSNormalization's X: converted with the data so the
        # node sees one precision (onnx function bodies and kernels expect that)
        convert.extend((False, i) for i in lone_inputs)

    if _is_widening_cast(node, types, low, wide):
        # Cast(float16 -> float) already in the model is the user's FP32 pin: it stays a widening
        # Cast, and the rewriter reuses its float16 input where float16 is needed downstream.
        convert = [m for m in convert if not m[0]]
    if refused and not convert:
        return NodeTyping((), (), f"{node.op_type}-{schema.since_version} schema: {'; '.join(refused)}")
    return NodeTyping(
        tuple(sorted(i for o, i in convert if not o)), tuple(sorted(i for o, i in convert if o)), None,
        tuple(sorted(flexible)))


FLOAT64_KEPT = "computes in float64, which stays float64 (--keep-float64)"


def _float64_compute(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto]) -> str | None:
    """Why a node that computes in float64 and not float32 is no 16-bit node when float64 is kept
    (``--keep-float64``), or None: it is written as it is, so it counts with the wide nodes, not with
    the 16-bit ones."""
    return FLOAT64_KEPT if computes_in_float64(node, types) else None


def computes_in_float64(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto]) -> bool:
    """Whether ``node`` computes in float64 (writes a float64 tensor): a Cast to float64 converts and
    a Constant holds a value, so they compute nothing."""
    if is_onnx_domain(node.domain) and node.op_type in _VALUE_OPS + _CASTS:
        return False
    return any(n and elem_type(types.get(n)) == DOUBLE for n in node.output)


def _is_widening_cast(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], low: LowPrecision,
                      wide: tuple[int, ...]) -> bool:
    return (
        node.op_type == "Cast"
        and is_onnx_domain(node.domain)
        and elem_type(types.get(node.input[0])) == low.elem_type
        and elem_type(types.get(node.output[0])) in wide
    )
