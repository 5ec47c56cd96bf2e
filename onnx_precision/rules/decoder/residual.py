"""The ``residual-chain`` rule: the residual stream's Adds, layer after layer (x + f(x)), whose headroom
shrinks with depth; measured by the search, not pinned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ...context import ModelContext
from ..facts import LOW, OVERFLOW, ModelFacts, confirm, finding, range_evidence
from ..ops import RuleOutput
from ..registry import rule, skip


@dataclass(frozen=True)
class ResidualChain:
    """The residual stream's Adds in order, each x + f(x) of the one before, from ``start`` (the
    embedding)."""

    start: str
    adds: tuple[str, ...]


def residual_chains(ctx: ModelContext) -> Mapping[str, ResidualChain]:
    """Residual Add -> its chain (main graph; chains of two Adds or more), found once per context."""
    return ctx.memo(_residual_chains)


def _residual_chains(ctx: ModelContext) -> Mapping[str, ResidualChain]:
    order = {ref.name: i for i, ref in enumerate(ctx.nodes)}
    stream: dict[str, str] = {}  # residual Add -> the stream it adds to
    for ref in ctx.nodes:
        node = ref.node
        if node.op_type == "Add" and not ref.graph_path and len(node.input) == 2:
            kept = next((x for x, f in (node.input, node.input[::-1]) if _branches(ctx, x, f, order)), None)
            if kept is not None:
                stream[node.name] = kept
    output = {ref.name: ref.node.output[0] for ref in ctx.nodes if ref.name in stream}
    added = set(output.values())  # what a residual Add makes
    adds_to = {x: add for add, x in stream.items()}  # a stream's tensor -> the residual Add that adds to it
    found: dict[str, ResidualChain] = {}
    for add, x in stream.items():
        if x in added:  # not the first Add of its chain
            continue
        adds = [add]
        while (nxt := adds_to.get(output[adds[-1]])) is not None:
            adds.append(nxt)
        if len(adds) >= 2:
            found.update(dict.fromkeys(adds, ResidualChain(x, tuple(adds))))
    return found


def _branches(ctx: ModelContext, x: str, f: str, order: Mapping[str, int]) -> bool:
    """Whether ``f`` is computed from ``x`` by a branch that reads ``x`` apart from the Add (x + f(x))."""
    if len(ctx.index.consumers.get(x, ())) < 2:
        return False
    start = ctx.index.producers.get(x)
    first = order[start.name] if start is not None else -1
    todo, seen = [f], {f}
    while todo:
        made = ctx.index.producers.get(todo.pop())
        if made is None or order[made.name] <= first:  # only nodes after x's producer can read x
            continue
        for name in made.node.input:
            if name == x:
                return True
            if name and name not in seen:
                seen.add(name)
                todo.append(name)
    return False


@rule("Add")
def residual_chain(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An Add of the residual stream, layer after layer: its headroom shrinks with depth (measured)."""
    chain = residual_chains(facts.ctx).get(node.name)
    if chain is None:
        yield skip("not an Add of a residual stream of two Adds or more")
        return
    depth = chain.adds.index(node.name) + 1
    evidence = {"depth": depth, "chain_length": len(chain.adds), "stream_from": chain.start,
                **range_evidence(facts, "output", node.output[0])}
    stats = facts.range_of(node.output[0])
    room = ""
    if stats is not None:
        over, _ = facts.low.margins(stats.max_abs, stats.min_nonzero_abs)
        evidence["binades_left"] = over
        room = f": {over:.1f} binade(s) left to {facts.low.max_text} here"
    yield finding(node, "residual-chain", OVERFLOW, LOW,
                  f"residual Add {depth} of {len(chain.adds)} on the stream from '{chain.start}'{room}; the "
                  f"stream grows with depth and with the steps, which the search measures",
                  confirm(facts, [node.output[0]], facts.overflows), **evidence)

