"""The ``state-path`` rule: the nodes between a recurrent state input and the output fed back into it
at the next step, where what each step adds accumulates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx

from ...context import ModelContext
from ..facts import MEDIUM, OVERFLOW, ModelFacts, confirm, finding, range_evidence
from ..ops import RuleOutput
from ..registry import ANY_OP, rule, skip
from .common import MOVES, generation_of

if TYPE_CHECKING:
    from ...generation.description import Generation

# ops whose output is bounded whatever their input: a state made by one cannot grow
BOUNDED = frozenset({"Tanh", "Sigmoid", "HardSigmoid", "Softsign", "Softmax", "Sin", "Cos", "Clip"})


@dataclass(frozen=True)
class StatePath:
    """The nodes between a state input and the output fed back into it at the next step (model order);
    ``bounded_by``: the bounded ops (Tanh, Sigmoid) that make the output, moved or concatenated, if they
    do (the state cannot grow)."""

    input: str
    output: str
    nodes: tuple[str, ...]
    bounded_by: tuple[str, ...] = ()


def state_paths(ctx: ModelContext, generation: Generation) -> Mapping[str, StatePath]:
    """Node -> the path of a state of ``generation`` it lies on, found once per context and generation."""
    known = ctx.memo(_state_memo)
    # by identity: the rule asks once per node, and hashing a description of many inputs is not free
    kept = known.get(id(generation))
    if kept is None or kept[0] is not generation:
        kept = known[id(generation)] = (generation, _state_paths(ctx, generation))
    return kept[1]


def _state_memo(ctx: ModelContext) -> dict[int, tuple[Generation, Mapping[str, StatePath]]]:
    return {}


def _state_paths(ctx: ModelContext, generation: Generation) -> Mapping[str, StatePath]:
    found: dict[str, StatePath] = {}
    for fed in generation.feedback:
        if fed.kind != "state":
            continue
        after = _reached(fed.input, lambda t: [r.node for r in ctx.index.consumers.get(t, ())], "output")
        before = _reached(fed.output, lambda t: [r.node for r in (ctx.index.producers.get(t),) if r], "input")
        nodes = tuple(ref.name for ref in ctx.nodes if ref.name in after and ref.name in before)
        path = StatePath(fed.input, fed.output, nodes, _bounded_by(ctx, fed.output))
        for name in nodes:
            found.setdefault(name, path)
    return found


def _bounded_by(ctx: ModelContext, tensor: str) -> tuple[str, ...]:
    """The bounded ops whose outputs, moved or concatenated, make ``tensor``; () unless all of it is."""
    made = ctx.index.producers.get(tensor)
    if made is None:
        return ()
    if made.node.op_type in BOUNDED:
        return (made.name,)
    if made.node.op_type not in MOVES:
        return ()
    data = made.node.input[:] if made.node.op_type == "Concat" else made.node.input[:1]
    found = [_bounded_by(ctx, name) for name in data if name]
    return tuple(n for f in found for n in f) if found and all(found) else ()


def _reached(tensor: str, step: Callable[[str], list[onnx.NodeProto]], side: str) -> set[str]:
    """The nodes reached from ``tensor`` by ``step`` (consumers or producers), following each node's
    ``side`` ("output" or "input")."""
    todo, nodes = [tensor], set()
    while todo:
        for node in step(todo.pop()):
            if node.name not in nodes:
                nodes.add(node.name)
                todo.extend(n for n in (node.output if side == "output" else node.input) if n)
    return nodes


@rule(ANY_OP)
def state_path(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A node between a recurrent state input and the output fed back into it at the next step."""
    generation = generation_of(facts)
    path = state_paths(facts.ctx, generation).get(node.name) if generation is not None else None
    if generation is None or path is None:
        yield skip("on no path of a state fed back at the next step")
        return
    if path.bounded_by:
        yield skip(f"state '{path.input}' is made by {'/'.join(path.bounded_by)}: bounded, it cannot grow")
        return
    out = [o for o in node.output if o and facts.is_float(o)]
    yield finding(node, "state-path", OVERFLOW, MEDIUM,
                  f"on the path of state '{path.input}' -> '{path.output}', fed back at each of the "
                  f"{generation.steps} step(s) ({len(path.nodes)} node(s) from the input to the output): "
                  f"what a step adds accumulates, so one pass's range does not bound it; the steps "
                  f"measure it",
                  confirm(facts, out, lambda *s: any(facts.overflows(x) for x in s)) if out else None,
                  state=path.input, fed_from=path.output, path_nodes=len(path.nodes), steps=generation.steps,
                  **(range_evidence(facts, "output", out[0]) if out else {}))
