"""What each side of a tensor needs in the written model: the element type a node reads on each input
and writes on each output, and a graph input's or output's, from the plan and the node's typing
(:mod:`onnx_precision.typing_rules`). Read-only: it asks the plan, never the model being written."""

from __future__ import annotations

import onnx
from onnx import TensorProto

from .. import typing_rules as tr
from ..context import ModelContext
from ..float_types import LOW_TYPES, LowPrecision, low_of
from ..plan import PrecisionPlan

FLOAT = TensorProto.FLOAT
DOUBLE = TensorProto.DOUBLE
FLOAT16 = TensorProto.FLOAT16  # the type whose accumulation the sum rewrites guard (target/sum_rewrite.py)
LOWS = tuple(LOW_TYPES)
FLOATS = (FLOAT, DOUBLE, *LOWS)
# how a tensor's copy in a type is named: "<tensor>_fp16"
SUFFIX: dict[int, str] = {FLOAT: "fp32", DOUBLE: "fp64", **{t: low.precision for t, low in LOW_TYPES.items()}}


class Sides:
    """The element types the plan ``plan`` asks of each node's inputs and outputs in ``ctx``'s model."""

    def __init__(self, ctx: ModelContext, plan: PrecisionPlan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.types = ctx.types
        self.low = ctx.target.low  # the graph I/O's type under fp16_io

    def orig(self, name: str) -> int | None:
        return tr.elem_type(self.types.get(name))

    def typing(self, name: str) -> tr.NodeTyping:
        """The node's typing in its plan's 16-bit type (the run's type for an FP32 node)."""
        precision = self.plan.decisions.get(name)
        low = low_of(precision.precision) if precision and precision.precision.is_low else self.low
        return self.ctx.typing_in(low)[name]

    def low_type(self, name: str) -> LowPrecision | None:
        """The 16-bit type the node computes in, or None where it stays FP32."""
        decision = self.plan.decisions.get(name)
        if decision is None or not decision.precision.is_low:
            return None
        low = low_of(decision.precision)
        typing = self.ctx.typing_in(low).get(name)
        return low if typing is not None and not typing.low_blocker else None

    def converts_to(self, node: onnx.NodeProto) -> int | None:
        low = self.low_type(node.name)
        return None if low is None else low.elem_type

    def required(self, node: onnx.NodeProto, i: int) -> int | None:
        """The element type ``node`` needs on input ``i``; None when any float type will do."""
        name = node.input[i]
        orig = self.orig(name)
        if orig not in FLOATS:
            return None
        t = self.typing(node.name)
        to = self.converts_to(node)
        if to is not None:
            if i in t.convertible_inputs:
                return to
            if i in t.flexible_inputs:
                return None
        return orig

    def produced(self, node: onnx.NodeProto, i: int) -> int | None:
        orig = self.orig(node.output[i])
        to = self.converts_to(node) if orig in tr.WIDE else None
        if to is not None and i in self.typing(node.name).convertible_outputs:
            return to
        return orig

    def io_type(self, name: str, owner: onnx.NodeProto | None) -> int | None:
        """Element type of a graph input/output: the main graph's follow fp16_io, a body's its owner."""
        orig = self.orig(name)
        if orig not in self.ctx.wide_types:
            return orig
        if owner is None:  # fp16_io converts float32 tensors; sequences/optionals keep their type
            fp16_io = self.plan.fp16_io and orig == FLOAT and tr.is_tensor(self.types.get(name))
            return self.low.elem_type if fp16_io else orig
        to = self.converts_to(owner)
        return orig if to is None else to
