"""Rules as values: each :class:`Rule` names the ops it applies to; :func:`run_rules` runs a list of them.

A rule's check yields :class:`~.facts.Finding` values, and a :class:`~.facts.Skipped` where it
looked at a node and decided there is nothing to say (with why), so ``analyze -v`` can show every
node a rule passed over. The default rule set is the explicit tuple
:data:`onnx_precision.rules.RULES`; tests and callers can run any subset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Callable

import onnx

from ..graph import is_onnx_domain
from .facts import Finding, ModelFacts, Skipped

ANY_OP = "*"

RuleCheck = Callable[[onnx.NodeProto, ModelFacts], Iterable["Finding | Skipped"]]


@dataclass(frozen=True)
class Rule:
    """One risk rule: its name, the op types it looks at (``ANY_OP``: every node), and its check."""

    name: str
    ops: tuple[str, ...]
    check: RuleCheck = field(compare=False)

    def applies_to(self, op_type: str) -> bool:
        return op_type in self.ops


def rule(*op_types: str) -> Callable[[RuleCheck], Rule]:
    """Make a :class:`Rule` of a check function for nodes of these op types."""
    def make(fn: RuleCheck) -> Rule:
        return Rule(fn.__name__, tuple(op_types), fn)
    return make


@dataclass(frozen=True)
class RuleRun:
    """Every finding of a rule set, and every (node, rule) that looked and found nothing, with why."""

    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]


def rules_for(op_type: str, rules: Sequence[Rule]) -> list[Rule]:
    """The rules of ``rules`` for ``op_type``: op-specific ones first, then the ``ANY_OP`` ones."""
    return [r for r in rules if r.applies_to(op_type)] + [r for r in rules if r.applies_to(ANY_OP)]


def run_rules(facts: ModelFacts, rules: Sequence[Rule]) -> RuleRun:
    """Run ``rules`` over every node of ``facts``' model, in node order (subgraph nodes after their owner)."""
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for ref in facts.ctx.nodes:
        node = ref.node
        if not is_onnx_domain(node.domain):
            skipped.append(
                Skipped(node.name, "*", f"op of domain '{node.domain}': the rules know only ONNX ops")
            )
            continue
        for r in rules_for(node.op_type, rules):
            found = False
            for item in _run(r, node, facts):
                if isinstance(item, Skipped):
                    skipped.append(item)
                else:
                    findings.append(item)
                found = True
            if not found:
                skipped.append(Skipped(node.name, r.name, "nothing to flag"))
    return RuleRun(tuple(findings), tuple(skipped))


def _run(r: Rule, node: onnx.NodeProto, facts: ModelFacts) -> Iterator[Finding | Skipped]:
    for item in r.check(node, facts):
        yield Skipped(node.name, r.name, item.reason) if isinstance(item, Skipped) and not item.node else item


def skip(reason: str) -> Skipped:
    """What a check yields when it looked and has nothing to say (the node and rule are filled in)."""
    return Skipped("", "", reason)
