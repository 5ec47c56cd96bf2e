"""The precision plan: each node's precision and the reasons for it.

A plan is an immutable value keyed by node name (names are unique after
:func:`onnx_precision.graph.name_nodes`; nodes inside If/Loop/Scan bodies are keyed the same
way). Every search probe, the rewriter input and the report all speak in plans, so a plan can be
written to JSON by one run and read back by another (``--plan``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from . import user_files
from .errors import PlanError, UsageError
from .vocab import REASON_SOURCES, ReasonSource

PLAN_FORMAT = "onnx-precision-plan/1"


class _Decisions(dict):
    """A plan's own copy of its decisions: a plan built from one is not copied again."""


class Precision(str, Enum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"

    @property
    def is_low(self) -> bool:
        """A 16-bit type (the precisions the rewriter converts nodes to)."""
        return self is not Precision.FP32


@dataclass(frozen=True)
class Reason:
    """Why a node has its precision.

    ``source`` is one of a small vocabulary so reports can group pins:
    ``default`` (the mode's choice), ``user`` (--keep-fp32, --keep-fp32-op, --plan),
    ``type`` (the schema or onnxruntime allow no FP16 here), ``initializer`` (an FP16 copy of a
    constant would overflow or flush to zero), ``rule`` (a static risk rule), ``range`` (recorded
    activations), ``search`` (the search needed it), ``headroom`` (activations close to 65504).
    """

    source: ReasonSource
    detail: str
    evidence: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        out: dict = {"source": self.source, "detail": self.detail}
        if self.evidence:
            out["evidence"] = dict(self.evidence)
        return out

    @staticmethod
    def from_json(obj: Mapping) -> Reason:
        """A reason from its JSON (checked by :func:`_reason_problem` first)."""
        evidence = tuple((str(k), str(v)) for k, v in obj.get("evidence", {}).items())  # as written
        source = obj["source"]
        if source not in REASON_SOURCES:
            raise PlanError(f"reason source {source!r} is not one of {', '.join(REASON_SOURCES)}")
        return Reason(source, str(obj.get("detail", "")), evidence)


@dataclass(frozen=True)
class NodeDecision:
    precision: Precision
    reasons: tuple[Reason, ...] = ()


@dataclass(frozen=True)
class PrecisionPlan:
    """Node name -> decision, in the model's topological order, plus the graph I/O choice.

    ``resolved`` marks a plan that :func:`onnx_precision.policy.resolve` made
    writable (every node it asks FP16 of can be FP16); any change to the plan clears it."""

    decisions: Mapping[str, NodeDecision] = field(default_factory=dict)
    fp16_io: bool = False
    resolved: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        # A copy keeps the value immutable for callers that keep their own dict; the plan's methods
        # hand over a fresh _Decisions, which is taken as is.
        if type(self.decisions) is not _Decisions:
            object.__setattr__(self, "decisions", _Decisions(self.decisions))

    def __hash__(self) -> int:
        return hash((tuple(sorted((k, v.precision) for k, v in self.decisions.items())), self.fp16_io))

    def precision(self, node_name: str) -> Precision:
        return self.decisions[node_name].precision

    def is_fp16(self, node_name: str) -> bool:
        decision = self.decisions.get(node_name)
        return decision is not None and decision.precision is Precision.FP16

    def is_low(self, node_name: str) -> bool:
        """Whether the node computes in a 16-bit type (FP16 or BF16)."""
        decision = self.decisions.get(node_name)
        return decision is not None and decision.precision.is_low

    @property
    def fp32_nodes(self) -> tuple[str, ...]:
        return tuple(n for n, d in self.decisions.items() if d.precision is Precision.FP32)

    @property
    def fp16_nodes(self) -> tuple[str, ...]:
        return tuple(n for n, d in self.decisions.items() if d.precision is Precision.FP16)

    @property
    def low_nodes(self) -> tuple[str, ...]:
        """The nodes in a 16-bit type (FP16 or BF16)."""
        return tuple(n for n, d in self.decisions.items() if d.precision.is_low)

    def nodes_in(self, precision: Precision) -> tuple[str, ...]:
        return tuple(n for n, d in self.decisions.items() if d.precision is precision)

    def with_precision(self, names: Iterable[str], precision: Precision, reason: Reason | None = None,
                       ) -> PrecisionPlan:
        """A new plan with ``names`` set to ``precision``; ``reason`` is appended to their reasons."""
        reasons = () if reason is None else (reason,)
        return self.with_reasons(precision, {name: reasons for name in names})

    def with_reasons(self, precision: Precision, reasons: Mapping[str, Iterable[Reason]]) -> PrecisionPlan:
        """A new plan with each node of ``reasons`` set to ``precision`` and its reasons appended
        (each once): many pins in one copy of the decisions. A node that changes precision drops
        the reasons of its old one."""
        decisions = _Decisions(self.decisions)
        for name, new in reasons.items():
            old = decisions.get(name)
            if old is None:
                raise PlanError(f"plan: unknown node '{name}'")
            kept = old.reasons if old.precision is precision else ()
            for reason in new:
                if reason not in kept:
                    kept = kept + (reason,)
            decisions[name] = NodeDecision(precision, kept)
        return replace(self, decisions=decisions, resolved=False)

    def with_fp32(self, names: Iterable[str], reason: Reason | None = None) -> PrecisionPlan:
        return self.with_precision(names, Precision.FP32, reason)

    def with_fp32_reasons(self, reasons: Mapping[str, Iterable[Reason]]) -> PrecisionPlan:
        """Each node of ``reasons`` FP32, with those reasons (see :meth:`with_reasons`)."""
        return self.with_reasons(Precision.FP32, reasons)

    def with_fp16(self, names: Iterable[str], reason: Reason | None = None) -> PrecisionPlan:
        return self.with_precision(names, Precision.FP16, reason)

    # --- JSON -----------------------------------------------------------------------------------

    def to_json(self) -> dict:
        return {
            "format": PLAN_FORMAT,
            "fp16_io": self.fp16_io,
            "nodes": {
                name: {"precision": d.precision.value, "reasons": [r.to_json() for r in d.reasons]}
                for name, d in self.decisions.items()
            },
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    @staticmethod
    def from_json(obj: object, source: str = "plan") -> PrecisionPlan:
        """A plan from its JSON, checked strictly: a wrong type anywhere is a :class:`PlanError`
        naming ``source`` (a string "false" is not false)."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("nodes"), Mapping):
            raise PlanError(f"{source}: not a precision plan (expected an object with 'nodes')")
        if "format" in obj and obj["format"] != PLAN_FORMAT:
            raise PlanError(f"{source}: format {obj['format']!r} is not {PLAN_FORMAT!r}, the only plan "
                            f"format this version reads")
        fp16_io = obj.get("fp16_io", False)
        if not isinstance(fp16_io, bool):
            raise PlanError(f"{source}: 'fp16_io' is {fp16_io!r}; expected true or false (a JSON boolean)")
        decisions = {}
        for name, entry in obj["nodes"].items():
            value = entry.get("precision") if isinstance(entry, Mapping) else entry
            if not isinstance(value, str) or value.lower() not in (p.value for p in Precision):
                raise PlanError(f"{source}: node '{name}' has precision {value!r}; expected fp16, bf16 or "
                                f"fp32")
            reasons = entry.get("reasons", []) if isinstance(entry, Mapping) else []
            problem = "not a list" if not isinstance(reasons, list) else next(
                (p for p in map(_reason_problem, reasons) if p), "")
            if problem:
                raise PlanError(f"{source}: node '{name}' has malformed 'reasons': {problem} (expected a "
                                f"list of objects with a 'source', optional 'detail' text and an 'evidence' "
                                f"object of texts)")
            decisions[name] = NodeDecision(Precision(value.lower()),
                                           tuple(Reason.from_json(r) for r in reasons))
        return PrecisionPlan(decisions, fp16_io)

    @staticmethod
    def load(path: str) -> PrecisionPlan:
        """A plan file, or ``REPORT.json@K``: point ``K`` of a conversion report's trade-off."""
        base, _, point = path.rpartition("@")
        if base and not os.path.exists(path):
            if _POINT.fullmatch(point):
                return _point_plan(user_files.read_json(base, user_files.PLAN), int(point), path)
            if os.path.exists(base):
                raise PlanError(f"{path}: no such file, and what follows '@' is no trade-off point of {base} "
                                f"(REPORT.json@K: K as the report numbers its points, in digits 0-9)")
        return PrecisionPlan.from_json(user_files.read_json(path, user_files.PLAN), source=path)


# The K of REPORT.json@K: ASCII digits (str.isdigit() also takes '²', which int() refuses), as many as an
# int64 has, far below Python's int-string limit.
_POINT = re.compile(r"[0-9]{1,18}")


def _point_plan(report: object, point: int, source: str) -> PrecisionPlan:
    """The plan of trade-off point ``point`` of a report: its FP32 nodes and BF16 nodes (a point of
    --fallback bf16), the rest left to the run. Every field read is checked for its type: a report is
    a file the user hands in."""
    tradeoff = report.get("tradeoff") if isinstance(report, Mapping) else None
    points = tradeoff.get("points") if isinstance(tradeoff, Mapping) else None
    if not isinstance(report, Mapping) or not isinstance(points, list):
        raise PlanError(f"{source}: not a conversion report with a trade-off (no 'tradeoff' points)")
    numbered = [p for p in points if isinstance(p, Mapping) and _is_int(p.get("point"))]
    found = [p for p in numbered if p["point"] == point]
    if not found:
        known = ", ".join(str(p["point"]) for p in numbered)
        raise PlanError(f"{source}: the report has no trade-off point {point} (points: {known})")
    reason = Reason("user", f"--plan {source}")
    pinned, bf16 = _names(found[0], "pinned", point, source), _names(found[0], "bf16", point, source, [])
    decisions = {n: NodeDecision(Precision.FP32, (reason,)) for n in pinned}
    decisions.update({n: NodeDecision(Precision.BF16, (reason,)) for n in bf16})
    if report.get("low_precision") == Precision.BF16.value:  # a BF16 run: every other node is BF16
        plan = report.get("plan", {})
        nodes = plan.get("nodes", {}) if isinstance(plan, Mapping) else None
        if not isinstance(nodes, Mapping):
            raise PlanError(f"{source}: the report's 'plan' is no plan (expected an object with 'nodes', "
                            f"node name -> decision)")
        decisions = {**{str(n): NodeDecision(Precision.BF16, (reason,)) for n in nodes}, **decisions}
    return PrecisionPlan(decisions)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(point_obj: Mapping, key: str, point: int, source: str, default: list | None = None) -> list[str]:
    """The node names a trade-off point lists under ``key`` (``default`` where it has none: a required
    list otherwise). The message names the type found, never the value: it may be the whole file."""
    value = point_obj.get(key, default)
    if value is None:
        raise PlanError(f"{source}: trade-off point {point} has no '{key}' list of node names")
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        odd = value if not isinstance(value, list) else next(n for n in value if not isinstance(n, str))
        found = f"{'a list holding a value ' if odd is not value else ''}of type {type(odd).__name__}"
        raise PlanError(f"{source}: trade-off point {point}: '{key}' is {found}, not a list of node names")
    return value


def _reason_problem(obj: object) -> str:
    """What is wrong with one reason's JSON, or ""."""
    if not isinstance(obj, Mapping):
        return f"a reason is {obj!r}, not an object"
    if not isinstance(obj.get("source"), str):
        return f"a reason's 'source' is {obj.get('source')!r}, not text"
    if obj["source"] not in REASON_SOURCES:
        return f"reason source {obj['source']!r} is not one of {', '.join(REASON_SOURCES)}"
    if not isinstance(obj.get("detail", ""), str):
        return f"a reason's 'detail' is {obj['detail']!r}, not text"
    evidence = obj.get("evidence", {})
    scalar = (str, int, float)
    if not isinstance(evidence, Mapping) or not all(
            isinstance(v, scalar) and not isinstance(v, bool) for v in evidence.values()):
        return f"a reason's 'evidence' is {evidence!r}, not an object of texts or numbers"
    return ""


def uniform_plan(node_names: Iterable[str], precision: Precision, reason: Reason,
                 fp16_io: bool = False) -> PrecisionPlan:
    return PrecisionPlan({n: NodeDecision(precision, (reason,)) for n in node_names}, fp16_io)


def apply_user_choices(plan: PrecisionPlan, node_ops: Mapping[str, str], keep_fp32: Iterable[str] = (),
                       keep_fp32_ops: Iterable[str] = (), user_plan: PrecisionPlan | None = None,
                       user_plan_source: str = "plan") -> tuple[PrecisionPlan, list[str]]:
    """Apply --plan, --keep-fp32 REGEX and --keep-fp32-op OPTYPE to ``plan``.

    ``node_ops`` maps every node name to its op type. Returns the new plan and warnings. A pattern
    or op type that matches nothing is a :class:`UsageError` with the nearest names (a pin that
    silently pins nothing changes the result unseen: ``softmax`` for ``Softmax``). A user plan naming
    an unknown node is an error naming ``user_plan_source`` (the plan's file).
    """
    warnings: list[str] = []
    if user_plan is not None:
        unknown = [n for n in user_plan.decisions if n not in node_ops]
        if unknown:
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise PlanError(f"{user_plan_source}: plan names node '{unknown[0]}' which is not in the "
                            f"model{more}")
        # One copy of the decisions for the whole user plan: a plan can name every node.
        decisions = dict(plan.decisions)
        for name, decision in user_plan.decisions.items():
            reasons = decision.reasons or (Reason("user", "--plan"),)
            decisions[name] = NodeDecision(decision.precision, reasons)
        plan = replace(plan, decisions=decisions, fp16_io=plan.fp16_io or user_plan.fp16_io, resolved=False)
    for pattern in keep_fp32:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise PlanError(f"--keep-fp32 '{pattern}': invalid regular expression: {e}") from e
        matched = [n for n in node_ops if regex.search(n)]
        if not matched:
            raise _unmatched_name(pattern, node_ops)
        plan = plan.with_fp32(matched, Reason("user", f"--keep-fp32 {pattern}"))
    for op in keep_fp32_ops:
        matched = [n for n, t in node_ops.items() if t == op]
        if not matched:
            raise _unmatched_op(op, sorted(set(node_ops.values())))
        plan = plan.with_fp32(matched, Reason("user", f"--keep-fp32-op {op}"))
    return plan, warnings


_NEAREST = 3  # names suggested for a pin that matches nothing


def _unmatched_op(op: str, ops: list[str]) -> UsageError:
    """--keep-fp32-op OP matching no node: the op type it means in another case, or the nearest."""
    same = [t for t in ops if t.lower() == op.lower()]
    if same:
        return UsageError(f"--keep-fp32-op {op} matches no op type; did you mean {same[0]}?")
    folded = {t.lower(): t for t in ops}
    close = difflib.get_close_matches(op.lower(), sorted(folded), n=_NEAREST, cutoff=0.6)
    listed = ", ".join(ops[:8]) + (", ..." if len(ops) > 8 else "")
    hint = f"nearest: {', '.join(folded[t] for t in close)}" if close else f"its op types: {listed}"
    return UsageError(f"--keep-fp32-op {op} matches no op type of the model ({hint})")


def _unmatched_name(pattern: str, node_ops: Mapping[str, str]) -> UsageError:
    """--keep-fp32 REGEX matching no node name: the same pattern ignoring case, or the nearest names."""
    folded = [n for n in node_ops if re.search(pattern, n, re.IGNORECASE)]
    if folded:
        more = ", ..." if len(folded) > _NEAREST else ""
        return UsageError(f"--keep-fp32 '{pattern}' matches no node name; did you mean '(?i){pattern}' "
                          f"(it matches {', '.join(folded[:_NEAREST])}{more})?")
    literal = re.sub(r"[\\^$.*+?()\[\]{}|]", "", pattern)  # a pattern's syntax is no part of a name
    nearest = difflib.get_close_matches(literal, list(node_ops), n=_NEAREST, cutoff=0.6)
    hint = f" (nearest: {', '.join(nearest)})" if nearest else ""
    return UsageError(f"--keep-fp32 '{pattern}' matches no node name in the model{hint}")
