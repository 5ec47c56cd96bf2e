"""The names onnx-tensorrt gives the layers of a model, simulated.

onnx-tensorrt parses each graph in the order of its ``toposort`` (a depth-first post-order over
node inputs, which keeps a sorted graph's order) and a subgraph while parsing the node that owns
it. A layer registered with a node is named by ``generateUniqueName`` (weightUtils.cpp, called from
``ImporterContext::registerLayer``): the node's name (``getNodeName``: its ONNX name, or
``node_of_<first output>`` when it has none) if no layer has it yet, else ``<name>_<k>`` where
``k`` is ONE counter shared by the whole network and incremented at every collision of any name:
layer names, parser-internal names (``ONNXTRT_*``), temporary weight names (``tmp_weight``). So
duplicate node names are numbered from that counter too (``dup``, then ``dup_3``).

The simulation follows every layer the op table (:mod:`.ops`) lists, helper and ``tmp_weight``
names included. It does not see the internal names that depend on shapes (broadcast reshapes,
shape-tensor arithmetic, constant layers of initializers), which also advance the counter, so a
predicted ``<name>_<k>`` has the right form (that is what flags rely on: ``<name>_*``) but ``k``
is exact only for networks without those. The bare ``<name>`` of a node's first layer is exact
unless an initializer of the same name became a constant layer first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import onnx

from ..graph import subgraphs
from .layers import Naming, TrtLayer
from .ops import node_layers, variant_for
from .versions import TrtVersion

# Basenames the parser registers for itself: a node pattern "<name>_*" must not reach them.
INTERNAL_PREFIXES = ("ONNXTRT_", "tmp_weight", "tmp_batch_norm_weight")


@dataclass(frozen=True)
class NodeNames:
    """The TensorRT layers of one ONNX node and the names they get (None: never registered, so
    TensorRT's own ``(Unnamed Layer* N) [Type]``; helper layers get their internal name)."""

    node: str          # the node's name in the model as given (the plan's key)
    base: str          # the name onnx-tensorrt uses for it: getNodeName of the original node
    op_type: str
    layers: tuple[tuple[TrtLayer, str | None], ...]

    @property
    def named(self) -> tuple[str, ...]:
        """Names of the layers registered with the node, in order (the first is the bare base
        when it was free)."""
        return tuple(name for layer, name in self.layers if layer.naming is Naming.NODE and name is not None)

    @property
    def unreachable(self) -> tuple[TrtLayer, ...]:
        """Computing layers no flag can name."""
        return tuple(layer for layer, _ in self.layers if layer.computes and layer.naming is not Naming.NODE)


def trt_node_name(node: onnx.NodeProto, original: str | None = None) -> str:
    """getNodeName (importerUtils.cpp): the node's name, or ``node_of_<first output>``. ``original``
    is the name in the file when the model was renamed after loading ('' for an unnamed node)."""
    name = node.name if original is None else original
    if not name and node.output:
        return f"node_of_{node.output[0]}"
    return name


def trt_order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """toposort.hpp: post-order over each node's inputs, nodes visited in graph order."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    state = [0] * len(graph.node)  # 0 unvisited, 1 active, 2 done
    order: list[int] = []
    for start in range(len(graph.node)):
        stack = [(start, 0)]
        while stack:
            i, k = stack.pop()
            if state[i] == 2 or (k == 0 and state[i] == 1):
                continue
            state[i] = 1
            inputs = graph.node[i].input
            while k < len(inputs) and (inputs[k] not in producer or state[producer[inputs[k]]] != 0):
                k += 1
            if k < len(inputs):
                stack.append((i, k + 1))
                stack.append((producer[inputs[k]], 0))
            else:
                state[i] = 2
                order.append(i)
    return [graph.node[i] for i in order]


class _Names:
    """generateUniqueName over the parser's name sets, with its one shared counter."""

    def __init__(self) -> None:
        self.counter = 0
        self.layers: set[str] = set()
        self.tensors: set[str] = set()

    def unique(self, taken: set[str], base: str) -> str:
        candidate = base
        while candidate in taken:
            candidate = f"{base}_{self.counter}"
            self.counter += 1
        taken.add(candidate)
        return candidate


def _walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in trt_order(graph):
        yield node
        for _, sub in subgraphs(node):
            yield from _walk(sub)


def model_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


LayersCache = dict[tuple[int, int], tuple[TrtLayer, ...]]


def trt_layer_names(model: onnx.ModelProto, version: TrtVersion, *,
                    original_names: Mapping[str, str] | None = None,
                    cache: LayersCache | None = None) -> list[NodeNames]:
    """The layers of every node of ``model`` (subgraphs included) in onnx-tensorrt's parse order,
    with the names TensorRT ``version`` gives them. ``original_names`` maps a node's name in
    ``model`` to its name in the file, for a model renamed after loading ('' for an unnamed node).
    ``cache`` keeps each node's layers across calls for several releases of the same model."""
    names = _Names()
    opset = model_opset(model)
    originals = original_names or {}
    cache = {} if cache is None else cache
    result = []
    for index, node in enumerate(_walk(model.graph)):
        base = trt_node_name(node, originals.get(node.name))
        placed: list[tuple[TrtLayer, str | None]] = []
        key = (index, id(variant_for(node.op_type, version)))
        if key not in cache:
            cache[key] = node_layers(node, version, opset=opset)
        for layer in cache[key]:
            name: str | None = None
            if layer.naming is Naming.NODE:
                name = names.unique(names.layers, base)
            elif layer.naming is Naming.HELPER and layer.helper == "tmp_weight":
                name = names.unique(names.tensors, layer.helper)
            elif layer.naming is Naming.HELPER:
                name = names.unique(names.layers, layer.helper)
            placed.append((layer, name))
        result.append(NodeNames(node.name, base, node.op_type, tuple(placed)))
    return result
