"""What every risk rule shares: :class:`Finding`, :class:`Skipped`, :class:`ModelFacts` (the
model's constants, shapes, consumers and recorded ranges), and the helpers that confirm a risk
from the recorded ranges (see :mod:`onnx_precision.rules` for the rules themselves)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Protocol

import numpy as np
import onnx

from ..context import ModelContext
from ..format import json_safe
from ..graph import attr
from ..plan import Reason
from ..storage import read_array
from ..typing_rules import elem_type

if TYPE_CHECKING:
    from ..generation.description import Generation

SIGNIFICANT_FLUSH = 0.01  # a tensor with >= 1% of its nonzero values flushing has lost real signal
SMALL_CONSTANT = 64  # constants up to this many elements are read whole (eps, exponents, masks)

Kind = Literal["overflow", "underflow", "precision"]  # the verdict a finding argues for
Severity = Literal["high", "medium", "low"]
OVERFLOW: Kind = "overflow"
UNDERFLOW: Kind = "underflow"
PRECISION: Kind = "precision"
HIGH: Severity = "high"
MEDIUM: Severity = "medium"
LOW: Severity = "low"
SEVERITY_ORDER: Mapping[Severity, int] = {HIGH: 0, MEDIUM: 1, LOW: 2}

Evidence = Mapping[str, object]


class Stats(Protocol):
    """What a rule reads from the oracle's per-tensor statistics (worst case over samples)."""

    @property
    def max_abs(self) -> float: ...

    @property
    def min_nonzero_abs(self) -> float: ...

    @property
    def flush_fraction(self) -> float: ...


@dataclass(frozen=True)
class Finding:
    node: str
    op_type: str
    rule: str
    kind: Kind
    severity: Severity
    evidence: Evidence = field(default_factory=dict, hash=False)
    message: str = ""
    confirmed: bool | None = None  # None: no ranges recorded; False: ranges dismiss it

    @property
    def active(self) -> bool:
        """Whether the finding still stands (not dismissed by the recorded ranges)."""
        return self.confirmed is not False

    def reason(self) -> Reason:
        evidence = tuple(sorted((str(k), _text(v)) for k, v in self.evidence.items()))
        return Reason("rule", f"{self.rule}: {self.message}", evidence)

    def to_json(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "rule": self.rule, "kind": self.kind,
                "severity": self.severity, "confirmed": self.confirmed, "message": self.message,
                "evidence": json_safe(dict(self.evidence))}


@dataclass(frozen=True)
class Skipped:
    """Why a rule that applies to a node's op raised nothing there (``analyze -v`` lists them)."""

    node: str
    rule: str
    reason: str


def _text(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# --- what rules can ask about the model ---------------------------------------------------------


class ModelFacts:
    """Read-only facts about one model that rules share: constants, shapes, consumers, ranges, and the
    generation it runs where the caller knows it (``generation``; None: the decoder rules tell it from the
    model's names, :func:`.decoder.common.generation_of`)."""

    def __init__(self, ctx: ModelContext, stats: Mapping[str, Stats] | None = None,
                 generation: Generation | None = None) -> None:
        self.ctx = ctx
        self.generation = generation
        self.low = ctx.target.low  # the 16-bit type whose limits the rules judge against
        self.stats = stats
        self.types = ctx.types
        self.constants = ctx.constants
        self.index = ctx.index
        self._values: dict[str, np.ndarray | None] = {}

    def overflows(self, s: Stats) -> bool:
        """A recorded range past the 16-bit type's maximum."""
        return s.max_abs > self.low.max

    @property
    def has_data(self) -> bool:
        return self.stats is not None

    def is_float(self, name: str) -> bool:
        """A tensor a 16-bit node converts: float32, or float64 unless kept (``ctx.wide_types``)."""
        return elem_type(self.types.get(name)) in self.ctx.wide_types

    def shape(self, name: str) -> tuple[int | None, ...] | None:
        """Static shape from the model or shape inference; None if unknown, None dims if symbolic."""
        tp = self.types.get(name)
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            return None
        return tuple(d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim)

    def constant(self, name: str) -> np.ndarray | None:
        """The values of a small constant input (initializer or Constant node), else None."""
        if name not in self._values:
            tensor = self.constants.get(name)
            small = tensor is not None and math.prod(tensor.dims) <= SMALL_CONSTANT
            small_tensor = tensor if tensor is not None and small else None
            self._values[name] = None if small_tensor is None else read_array(small_tensor, self.ctx.base_dir)
        return self._values[name]

    def constant_range(self, name: str) -> tuple[float, float] | None:
        """(max |x|, smallest nonzero |x|) of any float constant (read once per run); None otherwise."""
        return self.ctx.constant_range(name)

    def range_of(self, name: str) -> Stats | None:
        """Recorded statistics of a tensor (None without data or when it was not recorded)."""
        return None if self.stats is None else self.stats.get(name)

    def downstream_ops(self, name: str, hops: int, stop_at: Collection[str] = ()) -> list[onnx.NodeProto]:
        """Nodes consuming ``name`` directly or through up to ``hops - 1`` further nodes; the
        outputs of ops in ``stop_at`` are not followed."""
        seen: list[onnx.NodeProto] = []
        frontier = [name]
        for _ in range(hops):
            nxt: list[str] = []
            for tensor in frontier:
                for consumer in (ref.node for ref in self.index.consumers.get(tensor, ())):
                    if all(consumer is not s for s in seen):
                        seen.append(consumer)
                        if consumer.op_type not in stop_at:
                            nxt.extend(o for o in consumer.output if o)
            frontier = nxt
        return seen


def confirm(facts: ModelFacts, tensors: Sequence[str], test: Callable[..., bool]) -> bool | None:
    """``test(*stats)`` on the recorded stats of ``tensors``; None when any is not recorded."""
    stats = [facts.range_of(t) for t in tensors]
    if any(s is None for s in stats):
        return None
    return bool(test(*stats))


def flushes(s: Stats) -> bool:
    """Any value flushing to zero: what matters before a Log or a division."""
    return s.flush_fraction > 0


def flushes_much(s: Stats) -> bool:
    """Enough values flush to matter in bulk (a few tiny Gelu tails flushing matter to nobody)."""
    return s.flush_fraction >= SIGNIFICANT_FLUSH


def range_evidence(facts: ModelFacts, role: str, name: str) -> dict[str, object]:
    s = facts.range_of(name)
    if s is None:
        return {}
    out: dict[str, object] = {f"{role}_max_abs": float(s.max_abs)}
    if math.isfinite(s.min_nonzero_abs):
        out[f"{role}_min_nonzero_abs"] = float(s.min_nonzero_abs)
    if s.flush_fraction > 0:
        out[f"{role}_flush_fraction"] = float(s.flush_fraction)
    return out


def finding(
    node: onnx.NodeProto,
    rule_name: str,
    kind: Kind,
    severity: Severity,
    message: str,
    confirmed: bool | None,
    **evidence: object,
) -> Finding:
    """A Finding; a dismissed one is reported at low severity whatever the static severity."""
    return Finding(
        node.name,
        node.op_type,
        rule_name,
        kind,
        severity if confirmed is not False else LOW,
        dict(evidence),
        message,
        confirmed,
    )


# --- helpers for shapes -------------------------------------------------------------------------


def dim_of(shape: tuple[int | None, ...] | None, axis: int) -> int | None:
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]


def _reduce_axes(node: onnx.NodeProto, facts: ModelFacts) -> list[int] | None:
    """The reduced axes (attribute before opset 18, else the second input); [] means all."""
    if len(node.input) > 1 and node.input[1]:
        values = facts.constant(node.input[1])
        return None if values is None else [int(v) for v in np.ravel(values)]
    axes = attr(node, "axes")
    return [int(a) for a in axes] if isinstance(axes, (list, tuple)) else []


def reduction_length(node: onnx.NodeProto, facts: ModelFacts) -> int | None:
    """How many elements each output of a reduction sums over; None if shapes are unknown."""
    shape = facts.shape(node.input[0])
    axes = _reduce_axes(node, facts)
    if shape is None or axes is None:
        return None
    if not axes:
        if attr(node, "noop_with_empty_axes", 0):
            return 1
        axes = list(range(len(shape)))
    dims = [dim_of(shape, a) for a in axes]
    return None if any(d is None for d in dims) else math.prod(dims)  # type: ignore[arg-type]


def contraction_depth(node: onnx.NodeProto, facts: ModelFacts) -> int | None:
    """The inner-product length of a MatMul/Gemm/Conv; None if shapes are unknown."""
    a = facts.shape(node.input[0])
    if node.op_type == "MatMul":
        return dim_of(a, -1)
    if node.op_type == "Gemm":
        return dim_of(a, 0 if attr(node, "transA", 0) else -1)
    w = facts.shape(node.input[1]) if len(node.input) > 1 else None
    if w is None or len(w) < 2 or any(d is None for d in w[1:]):
        return None
    return math.prod(w[1:])  # type: ignore[arg-type]  # C/group x kernel volume


def sum_of_squares_input(node: onnx.NodeProto, facts: ModelFacts) -> bool:
    """Whether a reduction's input is x*x or x**2 (an L2 norm written by hand)."""
    made = facts.index.producers.get(node.input[0])
    producer = None if made is None else made.node
    if producer is None:
        return False
    if producer.op_type == "Mul" and len(producer.input) == 2 and producer.input[0] == producer.input[1]:
        return True
    if producer.op_type == "Pow":
        exponent = facts.constant(producer.input[1])
        return exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0
    return False
