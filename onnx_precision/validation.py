"""Is a loaded model one that onnx accepts? One line naming what is wrong, checked at load.

:func:`validate_model` runs after the graph is sorted (:func:`onnx_precision.graph.sort_topologically`):
targeted checks first, for the mistakes whose onnx message would be obscure or wrong (a value that
nothing produces reads as "not topologically sorted"; a truncated file reads as "must specify
opset_import"), then ``onnx.checker`` (not the full check: its shape inference is what onnxruntime
reports better when it loads the model, see :mod:`onnx_precision.oracle.blame`).

The checker resolves external data against the working directory when given an in-memory model,
so it sees a copy whose external tensors are graph inputs of the same type: where they live is
:func:`onnx_precision.storage.check_model_external_data`'s job, checked with the model's directory.
"""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from .errors import ModelLoadError
from .graph import fresh_name, graphs, is_onnx_domain, model_names, onnx_opset, subgraphs, walk_nodes
from .storage import is_external, model_tensors, read_array
from .storage.external_data import is_packed, stored_bytes


def validate_model(model: onnx.ModelProto, path: str, base_dir: str) -> None:
    """Raise :class:`ModelLoadError` (one line naming ``path`` and the node or tensor at fault)
    unless ``model`` is a valid ONNX model for this onnx; its external data (already checked to
    lie under ``base_dir``) is not read, but for small tensor attributes."""
    _check_text(model, path)
    _check_tensor_sizes(model, path)
    _check_versions(model, path)
    _check_dense(model, path)
    _check_values(model.graph, path, frozenset())
    _check_ops(model, path)
    try:
        onnx.checker.check_model(checkable_copy(model, base_dir))
    except CHECK_ERRORS as e:
        raise ModelLoadError(f"{path}: onnx rejects the model: {checker_message(e)}") from e


# What the checker raises about a model (ValueError: a proto it cannot even serialise).
CHECK_ERRORS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)


def checker_message(e: Exception) -> str:
    """The first line of an onnx checker error, with the node it names (on a later line) kept."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    node = re.search(r"Bad node spec for node\. Name: (\S*) OpType: (\S+)", text)
    if node and node.group(1) not in first:
        return f"{first} (node '{node.group(1)}', {node.group(2)})"
    return first


def _check_text(message: Message, path: str) -> None:
    """Every string field holds text: protobuf hands a string that is not UTF-8 (a flipped bit in
    a name) back as bytes, which nothing downstream expects."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            values = value if _repeated(field) else [value]
            if any(isinstance(v, bytes) for v in values):
                raise ModelLoadError(f"{path}: not a valid ONNX model: a {field.full_name} is not UTF-8 "
                                     f"text (a corrupted file?)")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if _repeated(field) else [value]:
                _check_text(item, path)


def _check_tensor_sizes(model: onnx.ModelProto, path: str) -> None:
    """Every tensor in the file holds as many values as its shape says (the checker does not
    look at tensor attributes, and a reader would fail reshaping them)."""
    for t in model_tensors(model):
        if is_external(t) or t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            continue
        count = math.prod(t.dims)
        try:
            if t.HasField("raw_data"):
                held, needed, unit = len(t.raw_data), stored_bytes(t.data_type, count), "bytes"
            elif is_packed(t.data_type):
                continue  # typed storage of packed types is rare: left to onnx
            else:
                per_element = 2 if t.data_type in _COMPLEX else 1
                field = onnx.helper.tensor_dtype_to_field(t.data_type)
                held, needed, unit = len(getattr(t, field)), count * per_element, "values"
        except (KeyError, TypeError, ValueError):
            raise ModelLoadError(f"{path}: tensor '{t.name}' has element type {t.data_type}, which onnx does "
                                 f"not know (a corrupted file?)") from None
        if held != needed:
            raise ModelLoadError(f"{path}: tensor '{t.name}' holds {held} {unit} where its shape "
                                 f"{list(t.dims)} needs {needed} (a truncated or corrupted file?)")


_COMPLEX = (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128)


def _repeated(field: FieldDescriptor) -> bool:
    # protobuf 5 deprecates ``label`` for ``is_repeated``; older ones have only ``label``
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _check_versions(model: onnx.ModelProto, path: str) -> None:
    if model.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(f"{path}: IR version {model.ir_version} is newer than this onnx supports "
                             f"({onnx.IR_VERSION}); export with an older IR version or upgrade onnx")
    # Only an empty list is wrong: a model of other domains alone (training ops) imports none of
    # ai.onnx, and the rewriter adds it when it needs Casts.
    if not model.opset_import:
        raise ModelLoadError(f"{path}: the model imports no opset (its opset_import is empty: a truncated "
                             f"or hand-edited file?)")
    newest = onnx.defs.onnx_opset_version()
    opset = onnx_opset(model)
    if opset > newest:
        raise ModelLoadError(f"{path}: the model imports ai.onnx opset {opset}, newer than this onnx "
                             f"supports ({newest}); export with opset {newest} or lower, or upgrade onnx")


_SPARSE = (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)


def _check_dense(model: onnx.ModelProto, path: str) -> None:
    """No sparse tensor anywhere: every stage reads, casts and writes dense tensors, so a sparse
    initializer is refused by name (the check of what each node reads met it as a value nothing
    defines), and a Constant's ``sparse_value`` likewise (it ended in an internal error)."""
    for graph in graphs(model.graph):
        for sparse in graph.sparse_initializer:
            raise ModelLoadError(f"{path}: tensor '{sparse.values.name}' is a sparse initializer, which "
                                 f"onnx-precision does not support; store it as a dense initializer")
    nodes = [ref.node for ref in walk_nodes(model.graph)] + [n for f in model.functions for n in f.node]
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type in _SPARSE:
                raise ModelLoadError(f"{path}: node '{node.name}' ({node.op_type}) holds a sparse tensor "
                                     f"('{attribute.name}'), which onnx-precision does not support; store it "
                                     f"dense")


def _check_values(graph: onnx.GraphProto, path: str, outer: frozenset[str]) -> None:
    """Every value read is defined (a graph input, an initializer, a node output, or an enclosing
    graph's value), and none is defined twice in one graph."""
    defined: dict[str, str] = {}
    for vi in graph.input:
        defined.setdefault(vi.name, "a graph input")
    for init in graph.initializer:
        defined.setdefault(init.name, "an initializer")
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                raise ModelLoadError(f"{path}: tensor '{name}' is defined twice: by node '{node.name}' and "
                                     f"{defined[name]}; each ONNX value has one producer")
            defined[name] = f"node '{node.name}'"
    scope = outer | frozenset(defined)
    for node in graph.node:
        for name in node.input:
            if name and name not in scope:
                raise ModelLoadError(f"{path}: node '{node.name}' ({node.op_type}) reads '{name}', which is "
                                     f"no graph input, initializer or node output")
        for _, body in subgraphs(node):
            _check_values(body, path, scope)
    for vi in graph.output:
        if vi.name not in scope:
            raise ModelLoadError(f"{path}: graph output '{vi.name}' is produced by no node and is no graph "
                                 f"input or initializer")


def _check_ops(model: onnx.ModelProto, path: str) -> None:
    """Every node of the default domain is an ONNX operator at the model's opset."""
    opset = onnx_opset(model)
    for ref in walk_nodes(model.graph):
        node = ref.node
        if not is_onnx_domain(node.domain):
            continue
        if not onnx.defs.has(node.op_type):
            raise ModelLoadError(f"{path}: node '{node.name}' has op type '{node.op_type}', which is not an "
                                 f"ONNX operator (a custom op needs its own domain)")
        try:
            onnx.defs.get_schema(node.op_type, opset)
        except onnx.defs.SchemaError:
            raise ModelLoadError(f"{path}: node '{node.name}' is a {node.op_type}, which ai.onnx opset "
                                 f"{opset} does not have yet") from None


def checkable_copy(model: onnx.ModelProto, base_dir: str) -> onnx.ModelProto:
    """``model`` as the checker can see it from any directory: each external initializer (and each
    Constant holding an external tensor) of the main graph becomes a main-graph input of its type and
    shape, and one of a subgraph an Identity of such an input (a subgraph's output must be a node's);
    other external tensor attributes (small by nature) are read into the copy."""
    if not any(is_external(t) for t in model_tensors(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # cheap: external weights are not in the proto
    inputs = {vi.name for vi in copy.graph.input}
    taken = model_names(copy)
    added: list[onnx.ValueInfoProto] = []
    pending = [copy.graph]
    while pending:
        graph = pending.pop()
        main = graph is copy.graph
        external = {t.name: t for t in graph.initializer if is_external(t)}
        kept_inits = [t for t in graph.initializer if not is_external(t)]
        del graph.initializer[:]
        graph.initializer.extend(kept_inits)
        kept_nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            value = _constant_value(node)
            if value is not None and is_external(value):
                external[node.output[0]] = value
                continue
            _read_external_attributes(node, base_dir)
            kept_nodes.append(node)
        if main:
            added += [_value_info(name, t) for name, t in external.items() if name not in inputs]
        else:
            outer = {name: fresh_name(name, taken) for name in external}
            added += [_value_info(outer[name], t) for name, t in external.items()]
            kept_nodes[:0] = [onnx.helper.make_node("Identity", [outer[name]], [name]) for name in external]
        del graph.node[:]
        graph.node.extend(kept_nodes)
        # the bodies of the nodes now in the graph: extend copied the kept nodes, so an edit of a body
        # taken before would be lost (the checker would look for its data in the working directory)
        pending.extend(body for node in graph.node for _, body in subgraphs(node))
    copy.graph.input.extend(added)
    return copy


def _value_info(name: str, tensor: onnx.TensorProto) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))


def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    if node.op_type != "Constant" or not is_onnx_domain(node.domain) or not node.output:
        return None
    return next((a.t for a in node.attribute if a.name == "value"), None)


def _read_external_attributes(node: onnx.NodeProto, base_dir: str) -> None:
    for attr in node.attribute:
        tensors = [attr.t] if attr.type == onnx.AttributeProto.TENSOR else list(attr.tensors)
        for t in tensors:
            if is_external(t):
                t.CopyFrom(onnx.numpy_helper.from_array(np.asarray(read_array(t, base_dir)), t.name))
