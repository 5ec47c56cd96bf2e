"""The type of every value of a model: shape inference, declared types, and schema-based completion."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import onnx

from ..graph import graphs, is_onnx_domain, walk_nodes
from ..storage import element_count
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
        inferred = onnx.shape_inference.infer_shapes(weightless(model), check_type=False, strict_mode=False)
    except Exception as e:  # inference raising is a property of the input model, not our bug
        logger.debug("shape inference failed (%s); using declared types only", e)
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    for source in (inferred, model):  # declared (second) overrides inferred
        for graph in graphs(source.graph):
            for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
                if vi.name and vi.type.WhichOneof("value") is not None and elem_type(vi.type) is not None:
                    types[vi.name] = _copy(vi.type) if source is inferred else vi.type
            for init in graph.initializer:
                types[init.name] = _tensor_type(init)
            for node in graph.node:
                if node.op_type == "Constant" and is_onnx_domain(node.domain) and node.output:
                    t = _constant_type(node)
                    if t is not None:
                        types.setdefault(node.output[0], t)
    _complete_types(model, types)
    return types


def tensor_types_at(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                    ) -> dict[str, onnx.TypeProto]:
    """:func:`tensor_types` with the graph inputs named in ``shapes`` at those sizes."""
    fixed = weightless(model)
    for vi in fixed.graph.input:
        if vi.name in shapes and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for size in shapes[vi.name]:
                dims.add().dim_value = int(size)
    return tensor_types(fixed)


# Initializers up to this many elements keep their values for inference (Reshape targets, axes).
SMALL_CONSTANT = 4096


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for shape inference without its large weights' values (only their dims): inference
    of a model holding its weights copies them (+1.2 GB on GPT-2), and reads none of their values.
    Small constants keep their values: shape computations need them (Reshape targets, axes)."""
    shell = onnx.ModelProto(ir_version=model.ir_version)
    shell.opset_import.extend(model.opset_import)
    shell.functions.extend(model.functions)
    graph = shell.graph
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    graph.value_info.extend(model.graph.value_info)
    graph.sparse_initializer.extend(model.graph.sparse_initializer)
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL and element_count(init) <= SMALL_CONSTANT:
            graph.initializer.append(init)
        else:
            dims_only = onnx.TensorProto(name=init.name, dims=init.dims, data_type=init.data_type)
            graph.initializer.append(dims_only)
    return shell


def _copy(tp: onnx.TypeProto) -> onnx.TypeProto:
    """A type that keeps nothing of the model it came from alive."""
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    return out


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
    bound to the same homogeneous type variable of a node: the schema says they are equal. Only
    nodes touching an untyped value are swept (in a model inference types fully: none)."""
    opsets = opset_map(model)
    refs = [ref for ref in walk_nodes(model.graph)
            if any(elem_type(types.get(n)) is None for n in (*ref.node.input, *ref.node.output))]
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
