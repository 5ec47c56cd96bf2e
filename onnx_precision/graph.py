"""Walking and naming graphs: one copy of each helper that every stage uses.

Nodes are found depth first with their subgraphs (If/Loop/Scan bodies), owners before bodies.
Naming (:func:`name_nodes`) runs once at load so that plans, reports and TensorRT flags all point
at the same nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import onnx

ONNX_DOMAINS = ("", "ai.onnx")


def is_onnx_domain(domain: str) -> bool:
    """The default ONNX domain, spelled either way."""
    return domain in ONNX_DOMAINS


def onnx_opset(model: onnx.ModelProto, default: int = 1) -> int:
    """The ai.onnx opset the model imports (``default`` when it imports none)."""
    return next((o.version for o in model.opset_import if is_onnx_domain(o.domain)), default)


@dataclass(frozen=True)
class NodeRef:
    """A node and where it lives: ``graph_path`` is () for the main graph, else the chain of
    (owner node name, attribute name) leading to its subgraph."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    graph_path: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class GraphIndex:
    """Who makes and who reads each value, over the main graph and every subgraph: built once per
    model context (:attr:`onnx_precision.context.ModelContext.index`) and shared by every stage."""

    producers: Mapping[str, NodeRef]  # value -> the node that outputs it
    consumers: Mapping[str, tuple[NodeRef, ...]]  # value -> the nodes that name it as an input, in order

    @staticmethod
    def of(nodes: Iterable[NodeRef]) -> GraphIndex:
        producers: dict[str, NodeRef] = {}
        consumers: dict[str, list[NodeRef]] = {}
        for ref in nodes:
            for name in ref.node.input:
                if name:
                    consumers.setdefault(name, []).append(ref)
            for name in ref.node.output:
                if name:
                    producers[name] = ref
        return GraphIndex(producers, {name: tuple(refs) for name, refs in consumers.items()})

    def main_producer(self, value: str) -> onnx.NodeProto | None:
        """The main-graph node that outputs ``value``, or None (a graph input, a constant, a body's value)."""
        ref = self.producers.get(value)
        return ref.node if ref is not None and not ref.graph_path else None


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, body) for every graph attribute of ``node``; GRAPHS entries are ``name[i]``."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def has_subgraphs(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def walk_nodes(graph: onnx.GraphProto, graph_path: tuple[tuple[str, str], ...] = ()) -> Iterator[NodeRef]:
    """Every node of ``graph`` and of its subgraphs, depth first, each owner before its bodies."""
    for node in graph.node:
        yield NodeRef(node, graph, graph_path)
        for attr_name, sub in subgraphs(node):
            yield from walk_nodes(sub, graph_path + ((node.name, attr_name),))


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph in it, depth first."""
    for g, _ in graphs_with_owner(graph):
        yield g


def graphs_with_owner(graph: onnx.GraphProto, owner: onnx.NodeProto | None = None,
                      ) -> Iterator[tuple[onnx.GraphProto, onnx.NodeProto | None]]:
    """(graph, the node whose attribute holds it) for ``graph`` and every subgraph, depth first;
    the main graph's owner is None."""
    yield graph, owner
    for node in graph.node:
        for _, sub in subgraphs(node):
            yield from graphs_with_owner(sub, node)


def attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    """The value of attribute ``name`` of ``node`` (onnx.helper's decoding), or ``default``."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def model_names(model: onnx.ModelProto) -> set[str]:
    """Every name used in the model, subgraphs included: graph inputs, outputs, value_info,
    initializers, nodes and the tensors they read and write (a fresh name must avoid them all)."""
    names: set[str] = set()
    for graph in graphs(model.graph):
        names.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
        names.update(t.name for t in graph.initializer)
        for node in graph.node:
            names.add(node.name)
            names.update(node.input)
            names.update(node.output)
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or the first ``base_<k>`` not in ``taken`` when it is; the result is added to ``taken``."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def name_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """Give every node a unique, deterministic name, in place; return the (old, new) renames.

    An unnamed node is called ``node_of_<first output>``, the name TensorRT gives its layer, so
    flags written for the converted model also apply to the original one. A name already taken
    gets the first free ``_<k>`` suffix. Named, unique nodes are never touched.
    """
    refs = list(walk_nodes(model.graph))
    taken = {r.node.name for r in refs if r.node.name}
    kept: set[str] = set()
    renames: list[tuple[str, str]] = []
    for ref in refs:
        node = ref.node
        old = node.name
        if old and old not in kept:
            kept.add(old)
            continue
        base = old or f"node_of_{node.output[0] if node.output and node.output[0] else node.op_type}"
        node.name = fresh_name(base, taken)
        renames.append((old, node.name))
    return renames


def sort_topologically(graph: onnx.GraphProto, outer: frozenset[str] = frozenset()) -> int:
    """Put ``graph``'s nodes (and every subgraph's) in topological order, in place, keeping the
    file's order wherever it is already valid; returns how many nodes moved.

    ONNX requires the order, but onnxruntime sorts a graph itself and runs it, and some converters
    write unsorted graphs. Values from ``outer`` (enclosing scopes) are available from the start.
    Raises :class:`GraphCycle` naming a node on a cycle or reading a value nothing produces.
    """
    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    needs = [{producer[name] for name in reads(n) if name in producer} - {i} for i, n in enumerate(nodes)]
    users: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    waiting = [len(deps) for deps in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        # walk back through unplaced producers until one repeats: that one is on a cycle
        left = set(range(len(nodes))) - set(order)
        seen: list[int] = [min(left)]
        while True:
            step = min(needs[seen[-1]] & left)
            if step in seen:
                stuck = nodes[step]
                break
            seen.append(step)
        raise GraphCycle(f"node '{stuck.name or stuck.op_type}' is on a cycle: "
                         f"its inputs depend on its own output")
    moved = sum(1 for k, i in enumerate(order) if k != i)
    if moved:
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)
    scope = outer | {v.name for v in graph.input} | {t.name for t in graph.initializer} | set(producer)
    for node in graph.node:
        for _, sub in subgraphs(node):
            moved += sort_topologically(sub, frozenset(scope))
    return moved


class GraphCycle(ValueError):
    """A graph's nodes cannot be ordered: a node depends on its own output."""


def reads(node: onnx.NodeProto) -> set[str]:
    """Every value ``node`` reads, in its subgraphs included (outer-scope values of a body)."""
    names = {n for n in node.input if n}
    for _, sub in subgraphs(node):
        for inner in sub.node:
            names |= reads(inner)
    return names
