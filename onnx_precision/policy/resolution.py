"""Plan resolution: the nodes a plan asks FP16 of that cannot be written FP16 become FP32, with why.

What keeps a node from FP16 whatever its neighbours do (:func:`blockers`) is found once per model
context; resolving a plan (:func:`resolve`) is then cheap and never reads a weight again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import onnx

from .. import quantized
from ..context import ModelContext
from ..float_types import LOW_TYPES, LowPrecision, low_of
from ..graph import graphs_with_owner, walk_nodes
from ..plan import NodeDecision, Precision, PrecisionPlan, Reason
from ..quantized import QuantGroup
from ..rules.quant import scale_finding, scale_input
from ..typing_rules import WIDE, NodeTyping, constant_tensor, constant_verdict, elem_type, is_tensor


@dataclass(frozen=True)
class NodeBlockers:
    """What keeps nodes from FP16 whatever their neighbours' precision, found once per model.

    ``forced``: node -> why it cannot be FP16 (no schema or kernel for FP16, or a float constant
    that an FP16 copy would change materially). ``notes``: node -> what an FP16 copy of its
    constants flushes to zero harmlessly. ``edges``: (value, producing side, consuming side) of
    every float sequence/optional value, whose two sides must agree (Cast cannot convert them).
    """

    forced: Mapping[str, Reason]
    notes: Mapping[str, Reason]
    edges: tuple[tuple[str, str | None, str | None], ...]


def node_blockers(ctx: ModelContext, low: LowPrecision | None = None) -> NodeBlockers:
    """The :class:`NodeBlockers` of ``ctx``'s model in ``low`` (the target's type by default); each
    float constant's range is read once."""
    low = ctx.target.low if low is None else low
    typing = ctx.typing_in(low)
    forced: dict[str, Reason] = {}
    notes: dict[str, Reason] = {}
    verdicts: dict[str, tuple[str | None, str | None]] = {}
    fused = quantized.of(ctx).dequantization_nodes
    qlinear = quantized.of(ctx).ort_fused_nodes
    for ref in ctx.nodes:
        node = ref.node
        t = typing[node.name]
        if node.name in fused:  # quantized compute, not a 16-bit candidate: no range or rule pin names it
            kernel = fused[node.name].kernel
            forced[node.name] = Reason("type", f"dequantization of MatMulInteger '{kernel}', fused by "
                                               f"onnxruntime into one MatMulIntegerToFloat with a float32 "
                                               f"output ({quantized.FUSION_SOURCE}): quantized compute")
            continue
        if node.name in qlinear:  # the same: a group whose QLinear* fusion fails to load in 16 bits
            forced[node.name] = Reason("type", qlinear[node.name].fusion_reason(low.name))
            continue
        if t.low_blocker:
            forced[node.name] = Reason("type", t.low_blocker)
            continue
        if quantized.is_qdq(node) and node.op_type == quantized.DEQUANTIZE and 0 not in t.convertible_outputs:
            # computes in float32 whatever the plan says; planned 16-bit, the shares would count it so
            forced[node.name] = Reason("type", f"{node.op_type} outputs float32 only at this opset (a "
                                               f"{low.type_name} output from opset 19)")
            continue
        scale = scale_finding(node, ctx, low) if scale_input(node) in t.convertible_inputs else None
        if scale is not None:  # what the samples cannot show: a runtime's 1/scale, its flushing
            forced[node.name] = scale.reason()
            continue
        for i in t.convertible_inputs:
            name = node.input[i]
            value_range = ctx.constant_range(name)
            if value_range is None:
                continue
            if name not in verdicts:
                verdicts[name] = constant_verdict(ctx.constants[name], ctx.base_dir, value_range, low)
            problem, note = verdicts[name]
            if problem:
                forced[node.name] = Reason(
                    "initializer", f"initializer '{name}': {problem}", (("tensor", name),)
                )
                break
            if note and node.name not in notes:
                notes[node.name] = Reason("initializer", f"initializer '{name}': {note}", (("tensor", name),))
        if node.name not in forced and node.op_type == "ConstantOfShape" and t.convertible_outputs:
            value = constant_tensor(node)
            if value is not None and value.data_type in ctx.wide_types:
                problem, _ = constant_verdict(value, ctx.base_dir, low=low)
                if problem:
                    forced[node.name] = Reason("initializer", f"{node.op_type} value: {problem}")
    notes = {name: reason for name, reason in notes.items() if name not in forced}
    return NodeBlockers(forced, notes, tuple(_non_tensor_edges(ctx.model, typing, ctx.types)))


def _non_tensor_edges(
    model: onnx.ModelProto, typing: Mapping[str, NodeTyping], types: Mapping[str, onnx.TypeProto]
) -> list[tuple[str, str | None, str | None]]:
    """(value, producing side, consuming side) for every use of a float sequence/optional value.

    A side is the node whose precision decides the value's type there, or None where the type is
    fixed FP32 (a graph input/output of the main graph, a non-converting node input/output).
    Flexible inputs take either type and make no edge.
    """

    def non_tensor_float(name: str) -> bool:
        return bool(name) and not is_tensor(types.get(name)) and elem_type(types.get(name)) in WIDE

    producer: dict[str, str | None] = {}
    uses: list[tuple[str, str | None]] = []
    for graph, owner_node in graphs_with_owner(model.graph):
        owner = owner_node.name if owner_node is not None else None
        for v in graph.input:
            producer[v.name] = owner
        for v in graph.output:
            uses.append((v.name, owner))
    for ref in walk_nodes(model.graph):
        t = typing[ref.name]
        for i, name in enumerate(ref.node.output):
            producer[name] = ref.name if i in t.convertible_outputs else None
        for i, name in enumerate(ref.node.input):
            if i not in t.flexible_inputs:
                uses.append((name, ref.name if i in t.convertible_inputs else None))
    return [(name, producer.get(name), user) for name, user in uses if non_tensor_float(name)]


def _non_tensor_conflicts(
    plan: PrecisionPlan,
    typing: Mapping[str, NodeTyping],
    edges: tuple[tuple[str, str | None, str | None], ...],
) -> dict[str, Reason]:
    """16-bit nodes that would need a sequence/optional value converted: Cast cannot do that.

    Where the producing and the consuming side of such a value disagree (FP32 and a 16-bit type, or
    FP16 and BF16), a 16-bit side becomes FP32, until nothing changes (sides only ever go to FP32,
    so this ends). Graph inputs and outputs of these types stay FP32 even with fp16_io.
    """
    out: dict[str, Reason] = {}
    if not edges:
        return out
    low = {n: plan.precision(n) for n in plan.decisions
           if plan.is_low(n) and n in typing and not typing[n].low_blocker}
    changed = True
    while changed:
        changed = False
        for value, made, used in edges:
            made_in, used_in = low.get(made or ""), low.get(used or "")
            if made_in == used_in:
                continue
            side = used if used_in is not None else made
            if side is None:  # cannot happen: one side is 16-bit, so it is a node
                continue
            del low[side]
            where = "produced in another type" if side == used else "used in FP32"
            out[side] = Reason("type", f"sequence/optional value '{value}' is {where} and cannot be cast")
            changed = True
    return out


def blockers(ctx: ModelContext, low: LowPrecision | None = None) -> NodeBlockers:
    """``ctx``'s :class:`NodeBlockers` in ``low`` (the target's type by default), found once per
    context."""
    return ctx.memo(_BLOCKERS[(ctx.target.low if low is None else low).elem_type])


def _blockers_in(low: LowPrecision) -> Callable[[ModelContext], NodeBlockers]:
    def compute(ctx: ModelContext) -> NodeBlockers:
        return node_blockers(ctx, low)
    return compute


# one function per type, so that the context keeps each type's blockers (it memoizes by function)
_BLOCKERS = {elem: _blockers_in(low) for elem, low in LOW_TYPES.items()}


def forced_fp32(ctx: ModelContext) -> frozenset[str]:
    """Nodes every resolved plan keeps FP32 (type rules, constants FP16 cannot hold)."""
    return ctx.memo(_forced_fp32)


def _forced_fp32(ctx: ModelContext) -> frozenset[str]:
    return frozenset(resolve(ctx, ctx.all_low_plan()).fp32_nodes)


def held_in(ctx: ModelContext, low: LowPrecision) -> frozenset[str]:
    """The nodes the target's type keeps FP32 for a constant only (an epsilon of 1e-10 flushes to
    zero in FP16) that ``low`` holds: computed in ``low``, by the emulation and the written model
    alike (none when ``low`` is the target's type)."""
    target, own = blockers(ctx), blockers(ctx, low)
    return frozenset(n for n, r in target.forced.items() if r.source == "initializer" and n not in own.forced)


def resolve(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` made writable (:func:`resolve_plan`); a resolved plan comes back as is."""
    return plan if plan.resolved else resolve_plan(ctx, plan)


def resolve_plan(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with every FP16 node that cannot be written as FP16 forced to FP32, with the reason;
    the result is marked ``resolved``."""
    resolved = plan
    edges: tuple[tuple[str, str | None, str | None], ...] = ()
    target = blockers(ctx)
    for precision in sorted({d.precision for d in plan.decisions.values() if d.precision.is_low}):
        found = blockers(ctx, low_of(precision))
        mine = {n for n, d in plan.decisions.items() if d.precision is precision}
        # What the target's type has no kernel or schema for stays FP32 in the other type too: the
        # emulation keeps those nodes FP32 without a switch (one set of them per run), so that is
        # what is measured. A constant is judged in the node's own type (held_in).
        held = held_in(ctx, low_of(precision))
        forced = {**{n: r for n, r in target.forced.items() if n not in held}, **found.forced}
        resolved = _force_fp32(resolved, {n: r for n, r in forced.items() if n in mine})
        resolved = _with_notes(resolved, {n: r for n, r in found.notes.items() if n in mine})
        edges = found.edges
    resolved = _force_fp32(resolved, _non_tensor_conflicts(resolved, ctx.typing, edges))
    resolved = _force_fp32(resolved, _split_groups(resolved, ctx, quantized.of(ctx).groups))
    return replace(resolved, resolved=True)


# onnxruntime does the same at load time, one DQ per reader: EnsureUniqueDQForNodeUnit
DQ_COPY_SOURCE = ("onnxruntime/core/optimizer/qdq_transformer/ensure_unique_dq_for_node_unit.cc at "
                  "microsoft/onnxruntime 0ae9bc1e")


def dequantize_copies(ctx: ModelContext) -> frozenset[str]:
    """The DequantizeLinear nodes whose readers in the target's 16-bit type read a copy of it in that
    type wherever it is written wide (the rewriter's ``<dq>__fp16``), not a Cast of its output: a Cast
    between a DQ and its reader stops the reader's quantized fusion, and a DQ shared by a group kept
    FP32 (an onnxruntime-fused Concat) and a 16-bit one no longer pulls the latter to FP32
    (:func:`_split_groups`). Those of the main graph read by two main-graph nodes or more, one of which
    every plan keeps FP32 (a blocker: the Concat of a QLinearConcat group, an op with no 16-bit kernel;
    or a member of a group with a blocked member), so that the DQ itself always has a reader (a DQ
    pinned alone while all its readers are 16-bit keeps its Cast), and no graph output; that can
    compute in the target's type: an output 16-bit at the model's opset, no blocker but the onnxruntime
    fusion of a group it belongs to (a scale the 16-bit type cannot hold keeps it FP32, Cast and all).
    Plan-independent: the emulation computes each 16-bit read of them as that copy."""
    return ctx.memo(_dequantize_copies)


def _dequantize_copies(ctx: ModelContext) -> frozenset[str]:
    found = quantized.of(ctx)
    typing, forced, fused = ctx.typing, blockers(ctx).forced, found.ort_fused_nodes
    outputs = {o.name for o in ctx.model.graph.output}
    candidates: dict[str, tuple[str, ...]] = {}  # DQ -> its readers
    for node in ctx.model.graph.node:
        if not (quantized.is_qdq(node) and node.op_type == quantized.DEQUANTIZE):
            continue
        t = typing[node.name]
        held = node.name in forced and node.name not in fused  # a scale FP16 cannot hold, ...
        readers = ctx.index.consumers.get(node.output[0], ())
        if not (t.low_blocker or 0 not in t.convertible_outputs or held or node.output[0] in outputs
                or len(readers) < 2 or any(r.graph_path for r in readers)):
            candidates[node.name] = tuple(r.name for r in readers)
    # FP32 in every plan: the blocked nodes, and each group with such a member (not a candidate: a
    # candidate pulls no group)
    wide = set(forced)
    changed = True
    while changed:
        changed = False
        for group in found.groups:
            if not wide.issuperset(group.members) and any(m in wide and m not in candidates
                                                          for m in group.members):
                wide.update(group.members)
                changed = True
    return frozenset(dq for dq, readers in candidates.items() if wide.intersection(readers))


def group_pins(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` with each quantized group that has an FP32 member all FP32, as :func:`resolve_plan`
    writes it (:func:`_split_groups`): the emulation and the shares apply it to every plan, so that the
    plan a search measures is the plan written (a DQ pinned alone left its group's MatMul and Q 16-bit
    in the search, FP32 in the file: the ViT-like QDQ block passed the search at 0.0455 and its
    written model failed at 0.0555)."""
    groups = quantized.of(ctx).groups
    return _force_fp32(plan, _split_groups(plan, ctx, groups)) if groups else plan


def _split_groups(plan: PrecisionPlan, ctx: ModelContext, groups: tuple[QuantGroup, ...],
                  ) -> dict[str, Reason]:
    """The 16-bit members of each quantized group (DQ -> Conv/MatMul/Gemm <- DQ -> Q) that has an FP32
    member, with why: a group is written in one type, as a Cast between its DQ and its kernel stops the
    integer kernel's fusion (the kernel then runs in float). A DQ whose output the opset fixes to float
    (DequantizeLinear before 19) is FP32 whatever the plan says. A shared DQ the rewriter copies
    (:func:`dequantize_copies`) pulls no group in the target's type: that group reads its copy. Until
    nothing changes: groups share DQs."""
    typing, copies, target = ctx.typing, dequantize_copies(ctx), ctx.target.low.precision
    dequantize = {dq for group in groups for dq in group.dequantize}

    def fixed_fp32(member: str) -> bool:
        t = typing[member]
        return bool(t.low_blocker) or (member in dequantize and 0 not in t.convertible_outputs)

    out: dict[str, Reason] = {}
    changed = True
    while changed:
        changed = False
        for group in groups:
            members = [m for m in group.members if m in plan.decisions]
            precisions = {plan.precision(m) for m in members if m not in out and plan.is_low(m)}
            copied = copies if {p.value for p in precisions} <= {target} else frozenset()
            wide = next((m for m in members if m not in copied and (m in out or not plan.is_low(m)
                                                                    or fixed_fp32(m))), None)
            if wide is None and len(precisions) <= 1:
                continue
            why = f"'{wide}' is FP32" if wide is not None else "its members are in two 16-bit types"
            for member in members:
                if member not in out and plan.is_low(member):
                    out[member] = Reason("type", f"quantized group of '{group.kernel}' ({group.label}): "
                                                 f"{why}, and a Cast inside the group would stop its fusion")
                    changed = True
    return out


def _with_notes(plan: PrecisionPlan, notes: Mapping[str, Reason]) -> PrecisionPlan:
    """``plan`` with each note appended to its node's reasons, precision unchanged."""
    if not notes:
        return plan
    decisions = dict(plan.decisions)
    for name, note in notes.items():
        old = decisions[name]
        decisions[name] = NodeDecision(
            old.precision, old.reasons if note in old.reasons else old.reasons + (note,)
        )
    return replace(plan, decisions=decisions)


def _force_fp32(plan: PrecisionPlan, reasons: Mapping[str, Reason]) -> PrecisionPlan:
    """``plan`` with each named node FP32 and its reason appended: one copy of the decisions, not
    one per node (a large model can have thousands of forced nodes)."""
    if not reasons:
        return plan
    decisions = dict(plan.decisions)
    for name, reason in reasons.items():
        old = decisions[name]
        kept = old.reasons if old.precision is Precision.FP32 else ()
        decisions[name] = NodeDecision(Precision.FP32, kept if reason in kept else kept + (reason,))
    return replace(plan, decisions=decisions)
