"""Every value's static shape at given input shapes, subgraphs included: what the FLOP estimate reads.

ONNX shape inference, with the graph inputs fixed to the samples' shapes, leaves a shape unknown where it
depends on a value it does not compute: Silero VAD pads its audio by amounts a Concat, Reshape, Slice and
Transpose chain computes from constants (the exporter's ``F.pad``), so every shape after the Pad, and with
it the cost of each Conv and LSTM of its network, was unknown. :func:`infer` folds such small computations
into constants (evaluated with ``onnx.reference``, a node at a time, only ops that compute shapes and
indices and only on small inputs) and infers again, until every shape is known or nothing more folds. A
body (If branch, Loop or Scan body) is inferred as ONNX infers it, from the types and shapes of the outer
values it reads, and folded with the outer constants in view. Where an If's condition folds (an
exporter's "if the state is empty" on a state of known shape), its outputs take the shapes of the branch
it takes (ONNX merges both branches', which may differ); where ONNX infers nothing of a contrib op
(onnxruntime's com.microsoft ops), its outputs take the shapes that follow from its input, where they do
(a DynamicQuantizeLSTM's are an LSTM's).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from .graph import attr, graphs, is_onnx_domain, onnx_opset, subgraphs
from .quantized import INTEGER_OPS
from .typing_rules.inference import SMALL_CONSTANT, weightless

logger = logging.getLogger(__name__)

# The ops folded into constants: those exporters chain to compute shapes, pads, axes and indices. Each reads
# and writes at most SMALL_CONSTANT elements; ConstantOfShape and Range are checked for their size first.
_FOLDED = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Concat", "ConstantOfShape", "Div", "Equal", "Flatten", "Floor",
    "Gather", "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min", "Mod", "Mul",
    "Neg", "Not", "Or", "Range", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum", "Reshape", "Shape",
    "Size", "Slice", "Split", "Squeeze", "Sub", "Transpose", "Unsqueeze", "Where"})
# rounds of folding and inferring again, at most: a chain folds whole in one, a Shape read after it or an
# If's output taken from the branch its folded condition picks in the next (Silero VAD takes 7)
_ROUNDS = 16


@dataclass(frozen=True)
class Inferred:
    """What :func:`infer` found: each value's static shape (main graph and bodies), its element type, and
    the small constant values it knows (initializers, Constants, folded computations)."""

    shapes: Mapping[str, tuple[int, ...]]
    types: Mapping[str, int]
    values: Mapping[str, np.ndarray]


def infer(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
          input_values: Mapping[str, np.ndarray] | None = None) -> Inferred:
    """Every value's static shape and type in ``model`` with its inputs at ``input_shapes`` (see the module
    docstring), and ``input_values``' small integer and boolean inputs (a sample rate, a flag) known: an If
    on them takes its branch. Best effort: where inference fails, what it knew before."""
    shell = weightless(model)
    graph = shell.graph
    # A negative dim is no shape (converters write -1 for "unknown"); left in, inference keeps it and
    # every size downstream of it is lost
    stale = [vi for vi in graph.value_info
             if any(d.HasField("dim_value") and d.dim_value < 0 for d in vi.type.tensor_type.shape.dim)]
    for vi in stale:
        graph.value_info.remove(vi)
    for value in graph.input:
        shape = input_shapes.get(value.name)
        if shape is None or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) == len(shape):
            for dim, size in zip(dims, shape):
                dim.Clear()
                dim.dim_value = int(size)
    opset = onnx_opset(model)
    inferred = _inferred(shell)
    shapes, types = _shapes(model, inferred), _types(model, inferred)
    values = _initializer_values(model)
    for name, value in (input_values or {}).items():
        array = np.asarray(value)
        if array.dtype.kind in "biu" and array.size <= SMALL_CONSTANT:
            values[name] = array
    for _ in range(_ROUNDS):
        if _complete(inferred, shapes):
            break
        found = _fold(shell.graph, shapes, values, opset) + _contrib_outputs(shell, shapes, types) + \
            _taken_branches(shell, shapes, types, values)
        if not found:
            break
        inferred = _inferred(shell)
        shapes, types = _shapes(model, inferred), _types(model, inferred)
    for g in graphs(inferred.graph):
        values.update((n.output[0], v) for n in g.node if n.output and n.output[0] not in values
                      and (v := _constant(n)) is not None)
    return Inferred(shapes, types, values)


def _inferred(shell: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(shell, strict_mode=False, data_prop=True)
    except Exception as error:  # shape inference is best effort here: FLOPs fall back to one per node
        logger.debug("shape inference failed (%s)", error)
        return shell


def _shapes(model: onnx.ModelProto, inferred: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for graph in graphs(inferred.graph):
        for value in (*graph.input, *graph.value_info, *graph.output):
            tensor_type = value.type.tensor_type
            if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
                if all(d >= 0 for d in dims):
                    shapes[value.name] = dims
    for graph in graphs(model.graph):
        for init in graph.initializer:
            shapes.setdefault(init.name, tuple(init.dims))
    return shapes


def _types(model: onnx.ModelProto, inferred: onnx.ModelProto) -> dict[str, int]:
    types: dict[str, int] = {}
    for graph in graphs(inferred.graph):
        for value in (*graph.input, *graph.value_info, *graph.output):
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types[value.name] = value.type.tensor_type.elem_type
    for graph in graphs(model.graph):
        types.update((init.name, init.data_type) for init in graph.initializer)
    return types


def _initializer_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The small initializers' values, subgraphs' included (external data is not read)."""
    found = {}
    for graph in graphs(model.graph):
        for init in graph.initializer:
            small = int(np.prod(init.dims)) <= SMALL_CONSTANT if init.dims else True
            if small and init.data_location != onnx.TensorProto.EXTERNAL:
                try:
                    found[init.name] = numpy_helper.to_array(init)
                except Exception:  # a type numpy cannot hold (strings are fine; this is best effort)
                    continue
    return found


def _complete(inferred: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether every node output in ``inferred`` has a static shape (nothing left to fold for)."""
    return all(out in shapes for g in graphs(inferred.graph) for n in g.node for out in n.output if out)


def _declare(graph: onnx.GraphProto, name: str, elem: int, shape: Sequence[int]) -> None:
    """Give value ``name`` of ``graph`` its shape, in place of any entry without it (inference reads the
    first)."""
    for stale in [vi for vi in graph.value_info if vi.name == name]:
        graph.value_info.remove(stale)
    graph.value_info.append(onnx.helper.make_tensor_value_info(name, elem, list(shape)))


def _taken_branches(shell: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], types: Mapping[str, int],
                    values: Mapping[str, np.ndarray]) -> int:
    """Declare the output shapes of each If whose condition is a known constant (an exporter's "if the
    state is empty" on a state it made) as those of the branch it takes: ONNX merges both branches', and
    where they differ (a Squeeze in one, an Identity in the other) leaves them unknown; how many it
    declared."""
    declared = 0
    for graph in graphs(shell.graph):
        for node in graph.node:
            condition = values.get(node.input[0]) if node.op_type == "If" and node.input else None
            if condition is None or condition.size != 1:
                continue
            branch = next(a.g for a in node.attribute
                          if a.name == ("then_branch" if bool(condition.reshape(())) else "else_branch"))
            for name, out in zip(node.output, branch.output):
                if name and name not in shapes and out.name in shapes:
                    _declare(graph, name, types.get(out.name, onnx.TensorProto.FLOAT), shapes[out.name])
                    declared += 1
    return declared


# onnxruntime's contrib ops (com.microsoft), of which ONNX infers nothing, whose first output keeps their
# first input's shape: an activation, a bias, a (skip) normalisation, a rotary embedding
_KEEPS_SHAPE = frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", "BiasDropout",
                          "RotaryEmbedding", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                          "SimplifiedLayerNormalization"})


def _contrib_outputs(shell: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                     types: Mapping[str, int]) -> int:
    """Declare the output shapes of the contrib ops ONNX does not infer, where they follow from the input's
    (:func:`_contrib_shapes`), so that inference carries on past them; how many it declared."""
    declared = 0
    for graph in graphs(shell.graph):
        for node in graph.node:
            x = shapes.get(node.input[0]) if node.input and not is_onnx_domain(node.domain) else None
            if x is None:
                continue
            for name, shape in zip(node.output, _contrib_shapes(node, x)):
                if name and name not in shapes:
                    _declare(graph, name, types.get(node.input[0], onnx.TensorProto.FLOAT), shape)
                    declared += 1
    return declared


def _contrib_shapes(node: onnx.NodeProto, x: tuple[int, ...]) -> list[list[int]]:
    """The output shapes of contrib op ``node`` reading ``x`` first, as far as they follow from it: a
    quantized recurrent op (:data:`..quantized.INTEGER_OPS` computing as an LSTM, GRU or RNN) has its twin's,
    Y [steps, directions, batch, hidden] and Y_h, Y_c [directions, batch, hidden] (layout 1: batch first);
    MatMulNBits [..., N]; the ops of :data:`_KEEPS_SHAPE` x's; [] for any other."""
    row = INTEGER_OPS.get(node.op_type)
    hidden, columns = attr(node, "hidden_size"), attr(node, "N")
    if row is not None and row.twin in ("LSTM", "GRU", "RNN") and len(x) == 3 and isinstance(hidden, int):
        directions = 2 if attr(node, "direction", b"forward") == b"bidirectional" else 1
        if attr(node, "layout", 0) == 1:
            return [[x[0], x[1], directions, hidden], [x[0], directions, hidden], [x[0], directions, hidden]]
        return [[x[0], directions, x[1], hidden], [directions, x[1], hidden], [directions, x[1], hidden]]
    if node.op_type == "MatMulNBits" and isinstance(columns, int):
        return [[*x[:-1], columns]]
    return [list(x)] if node.op_type in _KEEPS_SHAPE else []


def _constant(node: onnx.NodeProto) -> np.ndarray | None:
    """A Constant node's value, where it is a small dense tensor or number."""
    if not (is_onnx_domain(node.domain) and node.op_type == "Constant") or len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    if a.name == "value" and int(np.prod(a.t.dims)) <= SMALL_CONSTANT and \
            a.t.data_location != onnx.TensorProto.EXTERNAL:
        return numpy_helper.to_array(a.t)
    if a.name in ("value_int", "value_ints", "value_float", "value_floats"):
        value = onnx.helper.get_attribute_value(a)
        return np.asarray(value, np.int64 if "int" in a.name else np.float32)
    return None


def _fold(graph: onnx.GraphProto, shapes: Mapping[str, tuple[int, ...]], values: dict[str, np.ndarray],
          opset: int, body: bool = False) -> int:
    """Replace each node of ``graph`` (and of its bodies) that computes small values from known ones
    (``values``: the constants in view, added to as it goes) by Constants of them; how many it replaced.
    In a ``body``, a node reading a constant of the outer scope reads a copy of it in the body instead:
    ONNX's inference of a body sees an outer value's type, not its value (the axes of a ReduceSum in an If
    branch, read from a main-graph initializer)."""
    folded = 0
    kept: list[onnx.NodeProto] = []
    local = {v.name for v in (*graph.input, *graph.initializer)} | {o for n in graph.node for o in n.output}
    copies: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        if is_onnx_domain(node.domain) and node.op_type == "Constant":
            value = values.get(node.output[0])
            if value is None:
                value = _constant(node)
            if value is not None:
                values[node.output[0]] = value
            kept.append(node)
            continue
        known = bool(node.output) and node.output[0] in values
        outputs = None if known else _evaluated(node, shapes, values, opset)
        if outputs is None:
            kept.append(node)
            for i, name in enumerate(node.input):
                if body and name and name not in local and name in values:
                    node.input[i] = _copy(name, values[name], local, copies)
            for _, inner in subgraphs(node):
                folded += _fold(inner, shapes, values, opset, body=True)
            continue
        folded += 1
        for name, out in zip(node.output, outputs):
            values[name] = out
            kept.append(onnx.helper.make_node("Constant", [], [name], name=node.name,
                                              value=numpy_helper.from_array(out, name)))
    if folded or copies:
        del graph.node[:]
        graph.node.extend([*copies.values(), *kept])
    return folded + len(copies)


def _copy(name: str, value: np.ndarray, local: set[str], copies: dict[str, onnx.NodeProto]) -> str:
    """The name of a body's Constant copy of outer value ``name`` (made once per body, named apart)."""
    if name not in copies:
        fresh = f"{name}__in_body"
        while fresh in local:
            fresh += "_"
        local.add(fresh)
        copies[name] = onnx.helper.make_node("Constant", [], [fresh], name=fresh,
                                             value=numpy_helper.from_array(value, fresh))
    return copies[name].output[0]


def _evaluated(node: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, np.ndarray],
               opset: int) -> list[np.ndarray] | None:
    """``node``'s outputs, where it is a folded op (:data:`_FOLDED`) whose inputs are all known and small;
    None otherwise, or where evaluating it fails."""
    if not is_onnx_domain(node.domain) or node.op_type not in _FOLDED or not node.output:
        return None
    if node.op_type in ("Shape", "Size"):
        shape = np.shape(values[node.input[0]]) if node.input[0] in values else shapes.get(node.input[0])
        if shape is None:
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), np.int64)]
        start, end = _int_attr(node, "start", 0), _int_attr(node, "end", len(shape))
        return [np.array(tuple(shape)[start:end], np.int64)]
    read = [name for name in node.input if name]
    if not all(name in values and values[name].size <= SMALL_CONSTANT for name in read):
        return None
    feeds = {name: values[name] for name in read}
    if node.op_type == "ConstantOfShape" and int(np.prod(feeds[node.input[0]])) > SMALL_CONSTANT:
        return None
    if node.op_type == "Range" and not _small_range(*(feeds[n] for n in node.input)):
        return None
    from onnx.reference import ReferenceEvaluator  # loaded only where a shape needs folding

    try:
        outputs = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
    except Exception as error:  # best effort: the shape stays unknown
        logger.debug("folding %s (%s) failed: %s", node.name, node.op_type, error)
        return None
    arrays = [np.asarray(out) for out in outputs]
    return arrays if all(a.size <= SMALL_CONSTANT for a in arrays) else None


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _small_range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> bool:
    step = float(delta)
    return step != 0 and max(0.0, np.ceil((float(limit) - float(start)) / step)) <= SMALL_CONSTANT
