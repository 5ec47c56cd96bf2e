"""Static FP16 risk rules: one small function per op family, registered by op type.

A rule looks at one node (its op, attributes, constant inputs, inferred shapes) and returns
:class:`Finding` values: the node, the rule, the kind of failure it predicts (overflow, underflow,
precision), a severity and the evidence. When the FP32 reference has recorded value ranges (per
tensor ``TensorStats``: ``max_abs``, ``min_nonzero_abs``, ``flush_fraction``), each rule also
says whether the ranges *confirm* the risk or *dismiss* it (a Pow whose base never exceeds 10 is
not a risk); without ranges ``confirmed`` is None. Facts that do not depend on data (a constant of
-1e9) are confirmed either way.

Register a rule with ``@rule("OpA", "OpB")``; ``@rule(ANY_OP)`` runs on every node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Iterator, Mapping, Optional, Protocol, Sequence

import numpy as np
import onnx

from . import model_io, typing_rules
from .fp16 import FP16_EXACT_INT, FP16_FLUSH, FP16_MAX, FP16_MIN_NORMAL, FP16_MIN_SUBNORMAL
from .plan import Reason

EXP_OVERFLOW_INPUT = math.log(FP16_MAX)  # 11.09: exp of anything larger is inf in FP16
LONG_REDUCTION = 4096  # reduction depth past which FP16 accumulation loses several bits
SIGNIFICANT_FLUSH = 0.01  # a tensor with >= 1% of its nonzero values flushing has lost real signal
MASK_MAGNITUDE = 1e4  # constants this large and negative are additive masks, not data
SMALL_CONSTANT = 64  # constants up to this many elements are read whole (eps, exponents, masks)

OVERFLOW, UNDERFLOW, PRECISION = "overflow", "underflow", "precision"
HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITY_ORDER = {HIGH: 0, MEDIUM: 1, LOW: 2}
ANY_OP = "*"

Evidence = Mapping[str, object]


class Stats(Protocol):
    """What a rule reads from the oracle's per-tensor statistics (worst case over samples)."""

    max_abs: float
    min_nonzero_abs: float
    flush_fraction: float


@dataclass(frozen=True)
class Finding:
    node: str
    op_type: str
    rule: str
    kind: str  # overflow / underflow / precision: the verdict this finding argues for
    severity: str  # high / medium / low
    evidence: Evidence = field(default_factory=dict, hash=False)
    message: str = ""
    confirmed: Optional[bool] = None  # None: no ranges recorded; False: ranges dismiss it

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
                "evidence": {k: _json_value(v) for k, v in self.evidence.items()}}


def _text(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _json_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# --- what rules can ask about the model ---------------------------------------------------------


class ModelFacts:
    """Read-only facts about one model that rules share: constants, shapes, consumers, ranges."""

    def __init__(self, model: onnx.ModelProto, base_dir: str = ".",
                 stats: Mapping[str, Stats] | None = None,
                 types: Mapping[str, onnx.TypeProto] | None = None) -> None:
        self.model = model
        self.base_dir = base_dir
        self.stats = stats
        self.types = typing_rules.tensor_types(model) if types is None else types
        self.constants = typing_rules.constant_values(model)
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        self.producers: dict[str, onnx.NodeProto] = {}
        for ref in model_io.walk_nodes(model.graph):
            for name in ref.node.input:
                if name:
                    self.consumers.setdefault(name, []).append(ref.node)
            for name in ref.node.output:
                if name:
                    self.producers[name] = ref.node
        self._values: dict[str, np.ndarray | None] = {}
        self._ranges: dict[str, tuple[float, float]] = {}

    @property
    def has_data(self) -> bool:
        return self.stats is not None

    def is_float(self, name: str) -> bool:
        return typing_rules.elem_type(self.types.get(name)) == onnx.TensorProto.FLOAT

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
            self._values[name] = model_io.initializer_array(tensor, self.base_dir) if small else None
        return self._values[name]

    def constant_range(self, name: str) -> tuple[float, float] | None:
        """(max |x|, smallest nonzero |x|) of any float constant, read in chunks; None otherwise."""
        tensor = self.constants.get(name)
        if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
            return None
        if name not in self._ranges:
            self._ranges[name] = model_io.initializer_range(tensor, self.base_dir)
        return self._ranges[name]

    def range_of(self, name: str) -> Stats | None:
        """Recorded statistics of a tensor (None without data or when it was not recorded)."""
        return None if self.stats is None else self.stats.get(name)

    def downstream_ops(self, name: str, hops: int, stop_at: Collection[str] = ()) -> list[onnx.NodeProto]:
        """Nodes consuming ``name`` directly or through up to ``hops - 1`` further nodes; the
        outputs of ops in ``stop_at`` are not followed."""
        seen: list[onnx.NodeProto] = []
        frontier = [name]
        for _ in range(hops):
            nxt = []
            for tensor in frontier:
                for consumer in self.consumers.get(tensor, []):
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


def _flushes(s: Stats) -> bool:
    """Any value flushing to zero: what matters before a Log or a division."""
    return s.flush_fraction > 0


def _flushes_much(s: Stats) -> bool:
    """Enough values flush to matter in bulk (a few tiny Gelu tails flushing matter to nobody)."""
    return s.flush_fraction >= SIGNIFICANT_FLUSH


def _overflows(s: Stats) -> bool:
    return s.max_abs > FP16_MAX


def _range_evidence(facts: ModelFacts, role: str, name: str) -> dict[str, object]:
    s = facts.range_of(name)
    if s is None:
        return {}
    out: dict[str, object] = {f"{role}_max_abs": float(s.max_abs)}
    if math.isfinite(s.min_nonzero_abs):
        out[f"{role}_min_nonzero_abs"] = float(s.min_nonzero_abs)
    if s.flush_fraction > 0:
        out[f"{role}_flush_fraction"] = float(s.flush_fraction)
    return out


# --- the registry -------------------------------------------------------------------------------

RuleFn = Callable[[onnx.NodeProto, ModelFacts], Iterable[Finding]]
_REGISTRY: dict[str, list[RuleFn]] = {}


def rule(*op_types: str) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` for nodes of these op types (``ANY_OP``: every node)."""
    def register(fn: RuleFn) -> RuleFn:
        for op in op_types:
            _REGISTRY.setdefault(op, []).append(fn)
        return fn
    return register


def rules_for(op_type: str) -> list[RuleFn]:
    return _REGISTRY.get(op_type, []) + _REGISTRY.get(ANY_OP, [])


def registered_ops() -> tuple[str, ...]:
    return tuple(sorted(op for op in _REGISTRY if op != ANY_OP))


def run_rules(model: onnx.ModelProto, base_dir: str = ".", stats: Mapping[str, Stats] | None = None,
              facts: ModelFacts | None = None) -> list[Finding]:
    """Every finding of every rule, in node order (subgraph nodes after their owner)."""
    facts = facts or ModelFacts(model, base_dir, stats)
    findings: list[Finding] = []
    for ref in model_io.walk_nodes(model.graph):
        if ref.node.domain not in typing_rules.ONNX_DOMAINS:
            continue
        for fn in rules_for(ref.node.op_type):
            findings.extend(fn(ref.node, facts))
    return findings


def finding(node: onnx.NodeProto, rule_name: str, kind: str, severity: str, message: str,
            confirmed: bool | None, **evidence: object) -> Finding:
    """A Finding; a dismissed one is reported at low severity whatever the static severity."""
    return Finding(node.name, node.op_type, rule_name, kind, severity if confirmed is not False else LOW,
                   dict(evidence), message, confirmed)


# --- helpers for shapes -------------------------------------------------------------------------


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _dim(shape: tuple[int | None, ...] | None, axis: int) -> int | None:
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]


def _reduce_axes(node: onnx.NodeProto, facts: ModelFacts) -> list[int] | None:
    """The reduced axes (attribute before opset 18, else the second input); [] means all."""
    if len(node.input) > 1 and node.input[1]:
        values = facts.constant(node.input[1])
        return None if values is None else [int(v) for v in np.ravel(values)]
    axes = _attr(node, "axes")
    return [int(a) for a in axes] if axes is not None else []


def reduction_length(node: onnx.NodeProto, facts: ModelFacts) -> int | None:
    """How many elements each output of a reduction sums over; None if shapes are unknown."""
    shape = facts.shape(node.input[0])
    axes = _reduce_axes(node, facts)
    if shape is None or axes is None:
        return None
    if not axes:
        if _attr(node, "noop_with_empty_axes", 0):
            return 1
        axes = list(range(len(shape)))
    dims = [_dim(shape, a) for a in axes]
    return None if any(d is None for d in dims) else math.prod(dims)  # type: ignore[arg-type]


def contraction_depth(node: onnx.NodeProto, facts: ModelFacts) -> int | None:
    """The inner-product length of a MatMul/Gemm/Conv; None if shapes are unknown."""
    a = facts.shape(node.input[0])
    if node.op_type == "MatMul":
        return _dim(a, -1)
    if node.op_type == "Gemm":
        return _dim(a, 0 if _attr(node, "transA", 0) else -1)
    w = facts.shape(node.input[1]) if len(node.input) > 1 else None
    if w is None or len(w) < 2 or any(d is None for d in w[1:]):
        return None
    return math.prod(w[1:])  # type: ignore[arg-type]  # C/group x kernel volume


def _sum_of_squares_input(node: onnx.NodeProto, facts: ModelFacts) -> bool:
    """Whether a reduction's input is x*x or x**2 (an L2 norm written by hand)."""
    producer = facts.producers.get(node.input[0])
    if producer is None:
        return False
    if producer.op_type == "Mul" and len(producer.input) == 2 and producer.input[0] == producer.input[1]:
        return True
    if producer.op_type == "Pow":
        exponent = facts.constant(producer.input[1])
        return exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0
    return False


# --- the rules ------------------------------------------------------------------------------------


@rule("CumSum")
def cumsum(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """A running sum grows with its length: it overflows, and late increments fall below FP16's
    spacing (1/2048 of the running value) long before that."""
    axis_values = facts.constant(node.input[1])
    axis = int(np.ravel(axis_values)[0]) if axis_values is not None else None
    length = _dim(facts.shape(node.input[0]), axis) if axis is not None else None
    evidence = {"length": length, "axis": axis, **_range_evidence(facts, "output", node.output[0])}
    overflow = confirm(facts, [node.output[0]], _overflows)
    if overflow:
        yield finding(node, "cumsum", OVERFLOW, HIGH,
                      f"running sum over {length} elements reaches beyond 65504", True, **evidence)
        return
    lossy = confirm(facts, [node.input[0], node.output[0]],
                    lambda i, o: o.max_abs > FP16_EXACT_INT * max(i.max_abs, FP16_MIN_SUBNORMAL))
    yield finding(node, "cumsum", PRECISION, MEDIUM,
                  f"running sum over {length} elements: increments fall below FP16 spacing", lossy,
                  **evidence)


_REDUCE_OUTPUT_IS_SUM = {"ReduceSum", "ReduceSumSquare", "ReduceL1"}


@rule("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp")
def reduction(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """Sums overflow when their total does; sums of squares are the usual culprit (L2 norms).
    Means and L2 norms keep their output in range but their internal sum can exceed 65504 on
    kernels that accumulate in FP16."""
    length = reduction_length(node, facts)
    squares = node.op_type in ("ReduceSumSquare", "ReduceL2") or _sum_of_squares_input(node, facts)
    evidence = {"length": length, **_range_evidence(facts, "output", node.output[0])}
    if node.op_type in _REDUCE_OUTPUT_IS_SUM:
        confirmed = confirm(facts, [node.output[0]], _overflows)
        severity = HIGH if squares else MEDIUM if (length or 0) >= LONG_REDUCTION else LOW
        what = "sum of squares" if squares else "sum"
        verb = "exceeds" if confirmed else "can exceed"
        yield finding(node, "reduction-overflow", OVERFLOW, severity,
                      f"{what} over {length} elements {verb} 65504", confirmed, **evidence)
        return
    # The output is a mean, a norm or a log: estimate the internal sum from it.
    def internal(s: Stats) -> float:
        if node.op_type == "ReduceMean":
            return s.max_abs * (length or 1)
        if node.op_type == "ReduceL2":
            return s.max_abs ** 2
        return math.exp(min(s.max_abs, 700.0))  # ReduceLogSumExp
    confirmed = confirm(facts, [node.output[0]], lambda s: internal(s) > FP16_MAX)
    stats = facts.range_of(node.output[0])
    if stats is not None:
        evidence["internal_sum_estimate"] = float(internal(stats))
    yield finding(node, "reduction-accumulator", OVERFLOW, LOW,
                  f"internal sum over {length} elements can exceed 65504 where kernels accumulate in FP16",
                  confirmed, **evidence)


@rule("MatMul", "Gemm", "Conv", "ConvTranspose")
def contraction(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """Long inner products lose precision and can overflow; short ones (the usual case) are fine."""
    depth = contraction_depth(node, facts)
    overflow = confirm(facts, [node.output[0]], _overflows)
    evidence = {"depth": depth, **_range_evidence(facts, "output", node.output[0])}
    if overflow:
        yield finding(node, "long-contraction", OVERFLOW, HIGH,
                      f"inner products of depth {depth} exceed 65504", True, **evidence)
    elif depth is not None and depth >= LONG_REDUCTION:
        yield finding(node, "long-contraction", PRECISION, LOW,
                      f"inner products of depth {depth} accumulate rounding error", overflow, **evidence)


@rule("Exp")
def exp(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """exp(x) is inf in FP16 for x > 11.09."""
    confirmed = confirm(facts, [node.output[0]], _overflows)
    verb = "overflows" if confirmed else "can overflow"
    yield finding(node, "exp-overflow", OVERFLOW, HIGH,
                  f"exp {verb} FP16 (inputs above {EXP_OVERFLOW_INPUT:.2f})", confirmed,
                  **_range_evidence(facts, "input", node.input[0]),
                  **_range_evidence(facts, "output", node.output[0]))


@rule("Pow")
def power(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """x**p overflows for |x| > 65504**(1/p) (its underflow is the generic flush rule's)."""
    values = facts.constant(node.input[1])
    p = float(np.ravel(values)[0]) if values is not None and values.size == 1 else None
    if p is not None and p in (0.0, 1.0):
        return
    evidence = {"exponent": p, **_range_evidence(facts, "input", node.input[0]),
                **_range_evidence(facts, "output", node.output[0])}
    overflow = confirm(facts, [node.output[0]], _overflows)
    limit = FP16_MAX ** (1.0 / p) if p is not None and p > 1 else None
    if overflow:
        message = "power exceeds 65504"
    elif limit:
        message = f"x**{p:g} overflows FP16 for |x| > {limit:.4g}"
    else:
        message = "power can leave FP16's range"
    yield finding(node, "pow-overflow", OVERFLOW, HIGH if overflow else MEDIUM, message, overflow, **evidence)


def _tiny_input(node: onnx.NodeProto, facts: ModelFacts, index: int, rule_name: str, severity: str,
                message: str, flushes: Callable[[Stats], bool] = _flushes) -> Iterator[Finding]:
    """Shared body of Log/Sqrt/Reciprocal/Div: input ``index`` flushing to zero is the risk;
    an output past 65504 (division by a tiny value) is the other."""
    name = node.input[index]
    evidence = {**_range_evidence(facts, "input", name), **_range_evidence(facts, "output", node.output[0])}
    if confirm(facts, [node.output[0]], _overflows):
        yield finding(node, rule_name, OVERFLOW, HIGH, "result exceeds 65504 (divided by a tiny value)",
                      True, **evidence)
        return
    yield finding(node, rule_name, UNDERFLOW, severity, message, confirm(facts, [name], flushes), **evidence)


@rule("Log")
def log(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """log of a value that flushed to zero is -inf."""
    yield from _tiny_input(node, facts, 0, "log-tiny-input", HIGH,
                           "inputs below 6e-8 flush to zero in FP16 and log(0) = -inf")


@rule("Sqrt")
def sqrt(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """sqrt of a flushed value is 0, which a later division turns into inf."""
    yield from _tiny_input(node, facts, 0, "sqrt-tiny-input", MEDIUM,
                           "inputs below 6e-8 flush to zero in FP16; sqrt(0) then divides to inf",
                           _flushes_much)


@rule("Reciprocal")
def reciprocal(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    yield from _tiny_input(node, facts, 0, "tiny-denominator", HIGH,
                           "denominators below 6e-8 flush to zero in FP16: 1/0 = inf")


@rule("Div")
def div(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """A denominator that flushes to zero makes inf (or NaN with a zero numerator)."""
    denominator = facts.constant(node.input[1])
    if denominator is not None:
        magnitudes = np.abs(denominator.astype(np.float64))
        if np.all(magnitudes >= FP16_MIN_NORMAL):
            return  # a constant divisor in FP16's normal range: nothing to flush
    yield from _tiny_input(node, facts, 1, "tiny-denominator", MEDIUM,
                           "denominators below 6e-8 flush to zero in FP16: x/0 = inf")


@rule("Softmax", "LogSoftmax")
def softmax(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """Softmax is computed stably, but probabilities below 6e-8 flush to zero in FP16, which
    matters when they are later divided by or logged."""
    if node.op_type == "LogSoftmax":
        confirmed = confirm(facts, [node.output[0]], _overflows)
        yield finding(node, "softmax", OVERFLOW, LOW, "log-probabilities below -65504 overflow",
                      confirmed, **_range_evidence(facts, "output", node.output[0]))
        return
    downstream = {c.op_type for c in facts.downstream_ops(node.output[0], 2)}
    fragile = sorted(downstream & {"Log", "Div", "Reciprocal"})
    severity = MEDIUM if fragile else LOW
    message = "probabilities below 6e-8 flush to zero in FP16"
    if fragile:
        message += f" before {'/'.join(fragile)}"
    yield finding(node, "softmax", UNDERFLOW, severity, message,
                  confirm(facts, [node.output[0]], _flushes_much),
                  **_range_evidence(facts, "output", node.output[0]))


_EPS_CONSUMERS = {"Sqrt", "Div", "Reciprocal", "Pow", "Log"}


@rule("Add", "Max", "Sum", "Clip")
def epsilon(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """An epsilon added (or used as a floor, as F.normalize's Clip(min=1e-12)) before a
    Sqrt/Div/Reciprocal, too small for FP16: below 5.96e-8 it is exactly 0 (LayerNorm's 1e-12),
    below 6.1e-5 it is subnormal."""
    for index, name in enumerate(node.input):
        if node.op_type == "Clip" and index != 1:
            continue  # only Clip's lower bound guards anything
        values = facts.constant(name)
        if values is None or values.size == 0 or values.dtype.kind != "f":
            continue
        magnitudes = np.abs(values.astype(np.float64))
        eps = float(magnitudes.max())
        if not (0 < eps < FP16_MIN_NORMAL) or not np.all(magnitudes > 0):
            continue
        guarded = sorted({c.op_type for c in facts.downstream_ops(node.output[0], 2)} & _EPS_CONSUMERS)
        if not guarded:
            continue
        others = [n for i, n in enumerate(node.input) if i != index and n]
        zero = eps <= FP16_FLUSH
        severity = HIGH if zero else MEDIUM
        what = "is 0 in FP16" if zero else "is subnormal in FP16"
        confirmed = confirm(facts, others, lambda *s: any(
            x.flush_fraction > 0 or not x.min_nonzero_abs >= FP16_MIN_NORMAL for x in s))
        evidence: dict[str, object] = {"epsilon": eps, "guards": "/".join(guarded)}
        for other in others:
            evidence.update(_range_evidence(facts, "guarded", other))
        yield finding(node, "epsilon-underflow", UNDERFLOW, severity,
                      f"epsilon {eps:.3g} {what}; it no longer guards the {'/'.join(guarded)}", confirmed,
                      **evidence)


@rule("LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization")
def norm_epsilon(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """A fused normalization's epsilon attribute below FP16's normal range; fused kernels mostly
    add it in FP32, so this is a warning, and ranges cannot decide it."""
    eps = _attr(node, "epsilon", 1e-5)
    if isinstance(eps, float) and eps < FP16_MIN_NORMAL:
        zero = eps <= FP16_FLUSH
        yield finding(node, "epsilon-underflow", UNDERFLOW, LOW,
                      f"epsilon attribute {eps:.3g} {'is 0' if zero else 'is subnormal'} in FP16 kernels "
                      "that add it in FP16", None, epsilon=eps)


def _constant_inputs(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[tuple[str, tuple[float, float]]]:
    for name in node.input:
        if name and facts.is_float(name):
            value_range = facts.constant_range(name)
            if value_range is not None:
                yield name, value_range


def _is_mask(name: str, facts: ModelFacts) -> bool:
    values = facts.constant(name)
    if values is None:
        return False
    return bool(np.any(values <= -MASK_MAGNITUDE)) and not bool(np.any(values >= MASK_MAGNITUDE))


@rule(ANY_OP)
def constant_range(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """A float constant FP16 cannot hold: |x| > 65504 is inf, tiny nonzeros become 0."""
    for name, (max_abs, min_nonzero) in _constant_inputs(node, facts):
        if max_abs > FP16_MAX and not _is_mask(name, facts):
            yield finding(node, "constant-overflow", OVERFLOW, HIGH,
                          f"constant '{name}' has |x| up to {max_abs:.4g}, inf in FP16", True,
                          constant=name, max_abs=max_abs)
        elif math.isfinite(min_nonzero) and min_nonzero <= FP16_FLUSH:
            # As typing_rules.fp16_value_problem: flushing matters only when the whole constant lies
            # below FP16's normal range; otherwise it is below the rounding of its largest values.
            material = typing_rules.fp16_value_problem(max_abs, min_nonzero) is not None
            yield finding(node, "constant-underflow", UNDERFLOW, MEDIUM if material else LOW,
                          f"constant '{name}' has nonzero |x| down to {min_nonzero:.3g}, 0 in FP16"
                          + ("" if material else f" (negligible next to its max |x| {max_abs:.3g})"), True,
                          constant=name, min_nonzero_abs=min_nonzero, max_abs=max_abs)


_MASK_MEETS = {
    "Mul": "0 * -inf = NaN wherever the other factor is 0",
    "Sub": "-inf - -inf = NaN",
    "Softmax": "a fully masked row gives NaN",
    "Add": "-inf + inf = NaN; a fully masked row of a later Softmax gives NaN",
    "Where": "masked entries become -inf; a fully masked row of a later Softmax gives NaN",
}


@rule("Add", "Sub", "Mul", "Where", "Max", "Min")
def mask_constant(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """A huge negative mask constant (-1e9, float32 min) is -inf in FP16; it survives an Add but
    meets a 0 in (1 - mask) * -1e9, or a fully masked row in Softmax, and becomes NaN."""
    for name in node.input:
        if not name or not _is_mask(name, facts):
            continue
        values = facts.constant(name)
        value = float(np.min(values))  # type: ignore[arg-type]
        meets = [node.op_type] + [c.op_type for c in facts.downstream_ops(node.output[0], 3)]
        hazards = [_MASK_MEETS[op] for op in dict.fromkeys(meets) if op in _MASK_MEETS]
        severity = HIGH if value < -FP16_MAX else LOW
        fp16 = "-inf" if value < -FP16_MAX else f"{float(np.float16(value)):g}"
        yield finding(node, "mask-constant", OVERFLOW, severity,
                      f"mask constant {value:.3g} is {fp16} in FP16" + (f": {hazards[0]}" if hazards else ""),
                      True, constant=name, value=value, meets=", ".join(dict.fromkeys(meets)))


_INTEGER_VALUED = ("Floor", "Ceil", "Round", "Range")


@rule("Cast", *_INTEGER_VALUED)
def float_integer(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """Integers carried in floats (positions, shapes, indices) are exact in FP16 only up to 2048."""
    if not node.output or not facts.is_float(node.output[0]):
        return
    if node.op_type == "Cast":
        source = typing_rules.elem_type(facts.types.get(node.input[0]))
        if source is None or onnx.helper.tensor_dtype_to_np_dtype(source).kind not in "iub":
            return
    confirmed = confirm(facts, [node.output[0]], lambda s: s.max_abs > FP16_EXACT_INT)
    yield finding(node, "float-integer", PRECISION, MEDIUM,
                  "integer values carried in floats are exact in FP16 only up to 2048", confirmed,
                  **_range_evidence(facts, "output", node.output[0]))


_FRAGILE = {"Sqrt", "Div", "Reciprocal", "Log", "Pow"}
# A sum or product over many values absorbs a few flushed terms; whether its result flushes is
# recorded (and judged) on its own output.
_ABSORBING = {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
              "ReduceMax", "ReduceMin", "MatMul", "Gemm", "Conv", "ConvTranspose", "CumSum"}


@rule(ANY_OP)
def flush_to_zero(node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding]:
    """Recorded outputs of which a significant share flushes to zero in FP16. It matters when the
    zeros reach a Sqrt, a division or a Log (LayerNorm variance of near-constant rows) without a
    reduction in between; tiny tails that only feed sums and products are noise (low)."""
    if not facts.has_data or node.op_type in ("Softmax", "Constant"):
        return  # Softmax has its own rule; without data there is nothing to say
    for name in node.output:
        stats = facts.range_of(name) if name else None
        if stats is None or not _flushes_much(stats):
            continue
        reached = facts.downstream_ops(name, 3, stop_at=_ABSORBING)
        fragile = sorted({c.op_type for c in reached} & _FRAGILE)
        message = f"{stats.flush_fraction:.0%} of the nonzero values flush to zero in FP16"
        if fragile:
            message += f" before {'/'.join(fragile)}"
        yield finding(node, "flush-to-zero", UNDERFLOW, MEDIUM if fragile else LOW, message, True,
                      tensor=name, **_range_evidence(facts, "output", name))


def strongest(findings: Iterable[Finding]) -> Finding | None:
    """The active finding with the highest severity (first in node order among equals)."""
    active = [f for f in findings if f.active]
    return min(active, key=lambda f: SEVERITY_ORDER[f.severity]) if active else None
