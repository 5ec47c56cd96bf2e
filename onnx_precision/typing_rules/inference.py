"""The type of every value of a model: shape inference, declared types, and schema-based completion."""

from __future__ import annotations

import logging

import onnx

from ..graph import graphs, is_onnx_domain, walk_nodes
from .schemas import find_schema, groups, opset_map
from .types import FLOAT, elem_type, shapeless

logger = logging.getLogger(__name__)


def _tensor_type(tensor: onnx.TensorProto) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))


def tensor_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value's type, main graph and subgraphs (ONNX names are unique across scopes).

    Types come from onnx shape inference; declared types win over inferred ones, and a model
    that inference rejects falls back to what it declares.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception as e:  # inference raising is a property of the input model, not our bug
        logger.debug("shape inference failed (%s); using declared types only", e)
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    for source in (inferred, model):  # declared (second) overrides inferred
        for graph in graphs(source.graph):
            for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
                if vi.name and vi.type.WhichOneof("value") is not None and elem_type(vi.type) is not None:
                    types[vi.name] = vi.type
            for init in graph.initializer:
                types[init.name] = _tensor_type(init)
            for node in graph.node:
                if node.op_type == "Constant" and is_onnx_domain(node.domain) and node.output:
                    t = _constant_type(node)
                    if t is not None:
                        types.setdefault(node.output[0], t)
    _complete_types(model, types)
    return types


def _constant_type(node: onnx.NodeProto) -> onnx.TypeProto | None:
    for attr in node.attribute:
        if attr.name in ("value", "sparse_value"):
            t = attr.t if attr.name == "value" else attr.sparse_value.values
            return onnx.helper.make_tensor_type_proto(t.data_type, None)
        if attr.name in ("value_float", "value_floats"):
            return onnx.helper.make_tensor_type_proto(FLOAT, None)
    return None


def _complete_types(model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> None:
    """Give values that inference left untyped (often inside subgraphs) the type of another value
    bound to the same homogeneous type variable of a node: the schema says they are equal."""
    opsets = opset_map(model)
    refs = list(walk_nodes(model.graph))
    for _ in range(2):  # a second sweep carries types backwards through the node order
        for ref in refs:
            node = ref.node
            domain = "" if node.domain == "ai.onnx" else node.domain
            schema = find_schema(node.op_type, domain, opsets[domain]) if domain in opsets else None
            if schema is None:
                continue
            for key, members in groups(node, schema).items():
                if len(key) != 1:
                    continue
                names = [(node.output if o else node.input)[i] for o, i in members]
                known = next((types[n] for n in names if elem_type(types.get(n)) is not None), None)
                if known is None:
                    continue
                for n in names:
                    if elem_type(types.get(n)) is None:
                        types[n] = shapeless(known)
