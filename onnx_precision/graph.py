"""Walking and naming graphs: one copy of each helper that every stage uses.

Nodes are found depth first with their subgraphs (If/Loop/Scan bodies), owners before bodies.
Naming (:func:`name_nodes`) runs once at load so that plans, reports and TensorRT flags all point
at the same nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
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
