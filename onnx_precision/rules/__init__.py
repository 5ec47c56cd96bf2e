"""Static FP16 risk rules: one small check per op family, collected in the explicit list :data:`RULES`.

A rule looks at one node (its op, attributes, constant inputs, inferred shapes) and returns
:class:`Finding` values: the node, the rule, the kind of failure it predicts (overflow, underflow,
precision), a severity and the evidence. When the FP32 reference has recorded value ranges (per
tensor ``TensorStats``: ``max_abs``, ``min_nonzero_abs``, ``flush_fraction``), each rule also
says whether the ranges *confirm* the risk or *dismiss* it (a Pow whose base never exceeds 10 is
not a risk); without ranges ``confirmed`` is None. Facts that do not depend on data (a constant of
-1e9) are confirmed either way. Where a rule looks and finds nothing, it says why (:class:`Skipped`).

Add a rule: write its check in :mod:`.ops` or :mod:`.constants` with ``@rule("OpA", "OpB")``
(``ANY_OP``: every node) and list it in :data:`RULES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import constants, decoder, ops, quant
from .facts import (
    HIGH,
    LOW,
    MEDIUM,
    OVERFLOW,
    PRECISION,
    SEVERITY_ORDER,
    UNDERFLOW,
    Finding,
    Kind,
    ModelFacts,
    Severity,
    Skipped,
    Stats,
    contraction_depth,
    finding,
    reduction_length,
)
from .registry import ANY_OP, Rule, RuleRun, rule, rules_for
from .registry import run_rules as _run_rules

RULES: tuple[Rule, ...] = (
    ops.cumsum,
    ops.reduction,
    ops.contraction,
    ops.exp,
    ops.power,
    ops.log,
    ops.sqrt,
    ops.reciprocal,
    ops.div,
    ops.softmax,
    ops.cancellation,
    constants.epsilon,
    constants.norm_epsilon,
    constants.constant_range,
    constants.mask_constant,
    constants.float_integer,
    constants.flush_to_zero,
    quant.qdq_scale,
    *decoder.RULES,
)


def run_rules(facts: ModelFacts, rules: Sequence[Rule] = RULES) -> RuleRun:
    """Every finding of ``rules`` (default :data:`RULES`) on ``facts``' model, and what was skipped."""
    return _run_rules(facts, rules)


def registered_ops() -> tuple[str, ...]:
    """The op types some rule of :data:`RULES` looks at specifically."""
    return tuple(sorted({op for r in RULES for op in r.ops if op != ANY_OP}))


def strongest(findings: Iterable[Finding]) -> Finding | None:
    """The active finding with the highest severity (first in node order among equals)."""
    active = [f for f in findings if f.active]
    return min(active, key=lambda f: SEVERITY_ORDER[f.severity]) if active else None


__all__ = [
    "HIGH",
    "LOW",
    "MEDIUM",
    "OVERFLOW",
    "PRECISION",
    "SEVERITY_ORDER",
    "UNDERFLOW",
    "Finding",
    "Kind",
    "ModelFacts",
    "Severity",
    "Skipped",
    "Stats",
    "contraction_depth",
    "finding",
    "reduction_length",
    "ANY_OP",
    "Rule",
    "RuleRun",
    "rule",
    "rules_for",
    "RULES",
    "run_rules",
    "registered_ops",
    "strongest",
]
