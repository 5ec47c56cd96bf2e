"""onnxconverter-common's graph-editing helpers, as its ``float16`` module exports them.

:mod:`onnx_precision.float16` re-exports these under onnxconverter-common's names, so code that
imported them from ``onnxconverter_common.float16`` changes only the import. Each edits a graph
in place as its namesake does; where onnxconverter-common's version leaves a broken graph (a
consumer reading a value no node writes any more, nodes before their producers), this one keeps
the graph valid, and its docstring says so. onnx-precision's own conversion uses none of them.
"""

from __future__ import annotations

import onnx

from .graph import sort_topologically


def add_cast_node(graph: onnx.GraphProto, inputs: list[str], outputs: list[str], node_name: str,
                  to_type: int) -> None:
    """Append a Cast to ``to_type`` named ``node_name`` to ``graph``'s nodes."""
    graph.node.append(onnx.helper.make_node("Cast", inputs, outputs, to=to_type, name=node_name))


def add_new_value_info(graph: onnx.GraphProto, exist_value_info: onnx.ValueInfoProto, name: str,
                       dtype: int) -> None:
    """Append to ``graph``'s value_info a copy of ``exist_value_info`` named ``name``, of element
    type ``dtype``."""
    added = graph.value_info.add()
    added.CopyFrom(exist_value_info)
    added.name = name
    added.type.tensor_type.elem_type = dtype


def find_upstream_node_by_output_name(graph: onnx.GraphProto, output_name: str) -> list[onnx.NodeProto]:
    """The node of ``graph`` that writes ``output_name``, as a list (empty for a graph input or an
    initializer)."""
    nodes = [node for node in graph.node if output_name in node.output]
    if len(nodes) > 1:  # onnxconverter-common asserts it; ONNX graphs are single-assignment
        raise ValueError(f"{len(nodes)} nodes write '{output_name}' (ONNX allows one)")
    return nodes


def find_donwstream_node_by_input_name(graph: onnx.GraphProto, input_name: str) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` that read ``input_name`` (onnxconverter-common's spelling)."""
    return [node for node in graph.node if input_name in node.input]


def sort_graph_node(graph_proto: onnx.GraphProto) -> None:
    """Order ``graph_proto``'s nodes topologically, in place: the earliest node in the file whose
    inputs are written comes next, the order onnxconverter-common's sort gives wherever it gives a
    valid one (it places a node with no outputs whose input is written last before its producer).
    A subgraph is sorted too; a valid model's subgraphs already are, and stay as they were."""
    sort_topologically(graph_proto)


def sort_topology(graph_proto: onnx.GraphProto) -> None:
    """Order ``graph_proto``'s nodes and those of its subgraphs topologically, in place (see
    :func:`sort_graph_node`)."""
    if not isinstance(graph_proto, onnx.GraphProto):
        raise ValueError(f"Expected an ONNX GraphProto but got {type(graph_proto)}")
    sort_topologically(graph_proto)


def remove_unnecessary_cast_node(graph_proto: onnx.GraphProto) -> None:
    """Remove each pair of a Cast to float16 whose only reader is a Cast to float32, in place, its
    readers reading the first Cast's input instead (the float32 value, no longer rounded through
    float16). As in onnxconverter-common, a pair after a Constant stays, and only the main graph's
    nodes are looked at. A pair that writes a graph output stays (the output would lose its name;
    onnxconverter-common raises ValueError there)."""
    graph = graph_proto
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    writer = {name: node for node in graph.node for name in node.output}
    removed: set[int] = set()  # ids of the Casts removed
    for first in list(graph.node):
        if not _is_cast(first, onnx.TensorProto.FLOAT16) or first.output[0] in outputs:
            continue
        upstream = writer.get(first.input[0])
        after = readers.get(first.output[0], [])
        if (upstream is not None and upstream.op_type == "Constant") or len(after) != 1:
            continue
        second = after[0]
        if not _is_cast(second, onnx.TensorProto.FLOAT) or second.output[0] in outputs:
            continue
        if id(first) in removed or id(second) in removed:
            continue
        for reader in readers.get(second.output[0], []):
            for i, name in enumerate(reader.input):
                if name == second.output[0]:
                    reader.input[i] = first.input[0]
        removed |= {id(first), id(second)}
    kept = [node for node in graph.node if id(node) not in removed]
    del graph.node[:]
    graph.node.extend(kept)


def _is_cast(node: onnx.NodeProto, to: int) -> bool:
    return node.op_type == "Cast" and any(a.name == "to" and a.i == to for a in node.attribute)


def remove_identity_node_from_graph(graph: onnx.GraphProto) -> None:
    """Remove each Identity of ``graph`` whose input a node of ``graph`` writes, in place: that node
    writes the Identity's output instead, and every other reader of its old output (in subgraphs
    too) reads the new name. onnxconverter-common renames the writer's first output whatever the
    Identity reads and leaves the other readers reading a value nothing writes; an Identity after a
    graph output is kept here (removing it would rename that output)."""
    outputs = {o.name for o in graph.output}
    for identity in [node for node in graph.node if node.op_type == "Identity"]:
        old, new = identity.input[0], identity.output[0]
        writers = [node for node in graph.node if old in node.output]
        if not writers or old in outputs:
            continue
        graph.node.remove(identity)
        writer = writers[0]
        writer.output[list(writer.output).index(old)] = new
        _rename_reads(graph, old, new)
        kept = [vi for vi in graph.value_info if vi.name != old]
        del graph.value_info[:]
        graph.value_info.extend(kept)


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its subgraphs becomes a read of ``new`` (a subgraph
    that defines its own ``old`` shadows it, and is left alone)."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                defined = {v.name for v in sub.input} | {t.name for t in sub.initializer} | {
                    o for n in sub.node for o in n.output}
                if old not in defined:
                    _rename_reads(sub, old, new)


def remove_identity_node_from_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """:func:`remove_identity_node_from_graph` on the main graph, then the model with onnx's shape
    inference run (a new ModelProto, as onnxconverter-common returns)."""
    remove_identity_node_from_graph(model.graph)
    return onnx.shape_inference.infer_shapes(model)
