"""Which tensors of a node become float16 when the node runs in FP16, read from operator schemas.

A node's inputs and outputs are grouped by the schema's type variables (a heterogeneous variadic
parameter, as in If/Loop/Scan, gives one group per element). A group *converts* when it is bound
to float32 in this model (by shape inference) and the variable allows the float16 counterpart of
that type: those inputs/outputs become float16 in an FP16 node. Parameters with a fixed type
(``tensor(float)``, e.g. Resize scales) and variables that allow no float16 (LayerNormalization's
Mean/InvStdDev) keep float32. Integer and bool tensors are never touched.

A group that is one input and no output (Cast's input, Shape's input, Pow's exponent, Resize's
roi) is *flexible*: an FP16 node takes that tensor in whichever precision it has in the written
model, so no Cast is needed for it and the oracle must not round it.

:func:`resolve_plan` turns a requested plan into one that can be written: nodes with no schema,
no float16 in their schema, no onnxruntime FP16 kernel, or an initializer that FP16 cannot hold
(|x| > 65504, or a nonzero that flushes to zero) become FP32 with the reason.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import Iterator, Mapping, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto

from . import helper_sessions, model_io
from .fp16 import FP16_MAX, FP16_MIN_NORMAL
from .plan import NodeDecision, Precision, PrecisionPlan, Reason

logger = logging.getLogger(__name__)

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16
ONNX_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class NodeTyping:
    """How a node's tensors are typed when it runs in FP16 (indices into node.input/output)."""

    convertible_inputs: tuple[int, ...]  # become float16 (a Cast is inserted if the tensor is float32)
    convertible_outputs: tuple[int, ...]  # become float16
    fp16_blocker: str | None  # why the node cannot be FP16 at all (None: it can)
    flexible_inputs: tuple[int, ...] = ()  # taken in whatever precision the tensor has (no Cast)

    @property
    def has_float(self) -> bool:
        return bool(self.convertible_inputs or self.convertible_outputs or self.flexible_inputs)


# --- types ------------------------------------------------------------------------------------


def _innermost_tensor(tp: onnx.TypeProto | None) -> onnx.TypeProto.Tensor | None:
    """The tensor type inside a tensor, sequence-of-tensor or optional type; None if there is none."""
    while tp is not None:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            return tp.tensor_type
        if kind == "sequence_type":
            tp = tp.sequence_type.elem_type
        elif kind == "optional_type":
            tp = tp.optional_type.elem_type
        else:
            return None
    return None


def elem_type(tp: onnx.TypeProto | None) -> int | None:
    """The element type of a tensor, sequence-of-tensor or optional type; None if unknown."""
    tensor = _innermost_tensor(tp)
    return (tensor.elem_type or None) if tensor is not None else None


def with_elem_type(tp: onnx.TypeProto, elem: int) -> onnx.TypeProto:
    """A copy of ``tp`` (shape kept) whose innermost tensor element type is ``elem``."""
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    tensor = _innermost_tensor(out)
    if tensor is not None:
        tensor.elem_type = elem
    return out


def is_tensor(tp: onnx.TypeProto | None) -> bool:
    return tp is not None and tp.WhichOneof("value") == "tensor_type"


def type_string(tp: onnx.TypeProto, elem: int | None = None) -> str | None:
    """The schema spelling of a type, e.g. ``seq(tensor(float16))``; ``elem`` overrides the element."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        e = elem if elem is not None else tp.tensor_type.elem_type
        return f"tensor({_ELEM_NAMES.get(e, '?')})"
    if kind in ("sequence_type", "optional_type"):
        inner = type_string(getattr(tp, kind).elem_type, elem)
        return None if inner is None else f"{'seq' if kind == 'sequence_type' else 'optional'}({inner})"
    return None


_ELEM_NAMES = {
    TensorProto.FLOAT: "float", TensorProto.FLOAT16: "float16", TensorProto.DOUBLE: "double",
    TensorProto.BFLOAT16: "bfloat16", TensorProto.INT8: "int8", TensorProto.INT16: "int16",
    TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool", TensorProto.STRING: "string", TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
}


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
        for graph in model_io.graphs(source.graph):
            for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
                if vi.name and vi.type.WhichOneof("value") is not None and elem_type(vi.type) is not None:
                    types[vi.name] = vi.type
            for init in graph.initializer:
                types[init.name] = _tensor_type(init)
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in ONNX_DOMAINS and node.output:
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


# --- schemas ----------------------------------------------------------------------------------


class _Param(NamedTuple):
    type_str: str
    variadic: bool
    homogeneous: bool


class _Schema(NamedTuple):
    name: str
    since_version: int
    inputs: tuple[_Param, ...]
    outputs: tuple[_Param, ...]
    constraints: Mapping[str, frozenset]  # type variable -> allowed type strings


def _is_variadic(option: object) -> bool:
    return str(option).endswith("Variadic")


@functools.lru_cache(maxsize=None)
def _onnx_schema(op_type: str, opset: int, domain: str) -> _Schema | None:
    try:
        s = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return _Schema(
        s.name, s.since_version,
        tuple(_Param(p.type_str, _is_variadic(p.option), p.is_homogeneous) for p in s.inputs),
        tuple(_Param(p.type_str, _is_variadic(p.option), p.is_homogeneous) for p in s.outputs),
        {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints})


@functools.lru_cache(maxsize=None)
def _ort_schemas() -> dict[tuple[str, str], list[_Schema]]:
    """Contrib-domain schemas as onnxruntime registers them (empty if it does not expose them)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
        raw = ort_state.get_all_operator_schema()
    except Exception as e:  # an onnxruntime build without the schema export: contrib ops stay FP32
        logger.debug("onnxruntime exposes no operator schemas: %s", e)
        return {}
    out: dict[tuple[str, str], list[_Schema]] = {}
    for s in raw:
        if s.domain in ONNX_DOMAINS:
            continue
        schema = _Schema(
            s.name, s.since_version,
            tuple(_Param(p.typeStr, _is_variadic(p.option), p.isHomogeneous) for p in s.inputs),
            tuple(_Param(p.typeStr, _is_variadic(p.option), p.isHomogeneous) for p in s.outputs),
            {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints})
        out.setdefault((s.domain, s.name), []).append(schema)
    for versions in out.values():
        versions.sort(key=lambda x: x.since_version)
    return out


def find_schema(op_type: str, domain: str, opset: int) -> _Schema | None:
    """The schema in force for ``domain::op_type`` at ``opset`` (onnx's, else onnxruntime's)."""
    schema = _onnx_schema(op_type, opset, domain)
    if schema is not None or domain in ONNX_DOMAINS:
        return schema
    versions = [s for s in _ort_schemas().get((domain, op_type), []) if s.since_version <= opset]
    return versions[-1] if versions else None


def opset_map(model: onnx.ModelProto) -> dict[str, int]:
    out = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    return out


# --- node typing ------------------------------------------------------------------------------


# Constant: a value, not a computation; the rewriter gives each consumer the value in the type
# it needs (as for initializers), so the node itself converts nothing. BitCast: reinterprets bits,
# so a float16 output would be a different value of a different size.
_VALUE_OPS = ("Constant", "BitCast")
_CASTS = ("Cast", "CastLike")


def _param_for(params: tuple[_Param, ...], index: int) -> _Param | None:
    if index < len(params):
        return params[index]
    if params and params[-1].variadic:
        return params[-1]
    return None


def _groups(node: onnx.NodeProto, schema: _Schema) -> dict[tuple, list[tuple[bool, int]]]:
    """Type variable -> the node's (is_output, index) bound to it; one group per element of a
    heterogeneous variadic. Parameters of a fixed type belong to no group."""
    groups: dict[tuple, list[tuple[bool, int]]] = {}
    for is_out, names, params in ((False, node.input, schema.inputs), (True, node.output, schema.outputs)):
        for i, name in enumerate(names):
            param = _param_for(params, i)
            if not name or param is None or param.type_str not in schema.constraints:
                continue
            key: tuple = (param.type_str,) if param.homogeneous else (param.type_str, is_out, i)
            groups.setdefault(key, []).append((is_out, i))
    return groups


def _shapeless(tp: onnx.TypeProto) -> onnx.TypeProto:
    out = with_elem_type(tp, elem_type(tp) or 0)
    inner = out
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = getattr(inner, inner.WhichOneof("value")).elem_type
    if inner.WhichOneof("value") == "tensor_type":
        inner.tensor_type.ClearField("shape")
    return out


def _rank_only(tp: onnx.TypeProto) -> onnx.TypeProto:
    """``tp`` with every dimension symbolic (rank kept): a probe does not depend on sizes."""
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    inner = out
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = getattr(inner, inner.WhichOneof("value")).elem_type
    if inner.WhichOneof("value") == "tensor_type" and inner.tensor_type.HasField("shape"):
        for k, dim in enumerate(inner.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"d{k}"
    return out


def _complete_types(model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> None:
    """Give values that inference left untyped (often inside subgraphs) the type of another value
    bound to the same homogeneous type variable of a node: the schema says they are equal."""
    opsets = opset_map(model)
    refs = list(model_io.walk_nodes(model.graph))
    for _ in range(2):  # a second sweep carries types backwards through the node order
        for ref in refs:
            node = ref.node
            domain = "" if node.domain == "ai.onnx" else node.domain
            schema = find_schema(node.op_type, domain, opsets[domain]) if domain in opsets else None
            if schema is None:
                continue
            for key, members in _groups(node, schema).items():
                if len(key) != 1:
                    continue
                names = [(node.output if o else node.input)[i] for o, i in members]
                known = next((types[n] for n in names if elem_type(types.get(n)) is not None), None)
                if known is None:
                    continue
                for n in names:
                    if elem_type(types.get(n)) is None:
                        types[n] = _shapeless(known)


def node_typing(node: onnx.NodeProto, opsets: Mapping[str, int],
                types: Mapping[str, onnx.TypeProto], model: onnx.ModelProto | None = None) -> NodeTyping:
    """The FP16 typing of ``node`` given the model's opsets and value types."""
    typing = _schema_typing(node, opsets, types)
    if typing.fp16_blocker is not None:
        return typing
    blocker = ort_blocker(node, typing, types, model)
    if blocker is not None:
        return NodeTyping(typing.convertible_inputs, typing.convertible_outputs, blocker, typing.flexible_inputs)
    return typing


def _schema_typing(node: onnx.NodeProto, opsets: Mapping[str, int],
                   types: Mapping[str, onnx.TypeProto]) -> NodeTyping:
    """What the schema says of ``node`` in FP16, before asking onnxruntime."""
    float_in = [i for i, n in enumerate(node.input) if n and elem_type(types.get(n)) == FLOAT]
    float_out = [i for i, n in enumerate(node.output) if n and elem_type(types.get(n)) == FLOAT]
    if not float_in and not float_out:
        return NodeTyping((), (), None)
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain == "" and node.op_type in _VALUE_OPS:
        return NodeTyping((), (), None)
    opset = opsets.get(domain)
    schema = find_schema(node.op_type, domain, opset) if opset is not None else None
    if schema is None:
        where = f"{domain}::{node.op_type}" if domain else node.op_type
        return NodeTyping((), (), f"no schema for {where} at opset {opset}")

    control_flow = any(True for _ in model_io.subgraphs(node))
    groups = _groups(node, schema)

    convert: list[tuple[bool, int]] = []
    flexible: list[int] = []
    lone_inputs: list[int] = []
    refused: list[str] = []
    for key, members in groups.items():
        member_types = [types.get((node.output if o else node.input)[i]) for o, i in members]
        float32 = [t for t in member_types if elem_type(t) == FLOAT]
        if not float32:
            continue
        wanted = type_string(float32[0], FLOAT16)
        if wanted not in schema.constraints[key[0]]:
            refused.append(f"{key[0]} allows no {wanted}")
            continue
        only_input = len(members) == 1 and not members[0][0]
        if only_input and not control_flow:
            lone_inputs.append(members[0][1])
        else:
            convert.extend(members)
    if node.op_type in _CASTS and domain == "":
        flexible = lone_inputs  # a Cast reads any type: no Cast in front of a Cast
    elif not convert:
        flexible = lone_inputs  # Shape, ArgMax, IsNaN...: no float output, read as written
    else:
        # Pow's exponent, Resize's roi, RMSNormalization's X: converted with the data so the
        # node sees one precision (onnx function bodies and kernels expect that)
        convert.extend((False, i) for i in lone_inputs)

    if _is_widening_cast(node, types):
        # Cast(float16 -> float) already in the model is the user's FP32 pin: it stays a widening
        # Cast, and the rewriter reuses its float16 input where float16 is needed downstream.
        convert = [m for m in convert if not m[0]]
    if refused and not convert:
        return NodeTyping((), (), f"{node.op_type}-{schema.since_version} schema: {'; '.join(refused)}")
    return NodeTyping(
        tuple(sorted(i for o, i in convert if not o)), tuple(sorted(i for o, i in convert if o)), None,
        tuple(sorted(flexible)))


def _is_widening_cast(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto]) -> bool:
    return (node.op_type == "Cast" and node.domain in ONNX_DOMAINS
            and elem_type(types.get(node.input[0])) == FLOAT16 and elem_type(types.get(node.output[0])) == FLOAT)


# --- onnxruntime FP16 kernels -----------------------------------------------------------------

# Blockers are found by measurement. Most are load-time (no kernel, or an onnx function body that
# is not valid in float16, e.g. EyeLike-22 and MeanVarianceNormalization): a one-node probe model
# in float16 is built, checked and loaded once per signature and cached (see _probe). A few only
# fail when run, so a probe cannot see them; they are listed here, each found by the conformance
# run (tests/test_conformance.py), with onnxruntime's own message.
_RUNTIME_NO_FP16 = {
    # "CPU execution provider: MLFloat16 data type is not supported with ScatterND opset 16 when
    # reduction is 'add'" (likewise mul/max/min, and ScatterElements)
    ("", "ScatterND"): lambda node: _attr(node, "reduction", b"none") not in (b"none", "none"),
    ("", "ScatterElements"): lambda node: _attr(node, "reduction", b"none") not in (b"none", "none"),
}


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def ort_blocker(node: onnx.NodeProto, typing: NodeTyping, types: Mapping[str, onnx.TypeProto],
                model: onnx.ModelProto | None = None) -> str | None:
    """Why onnxruntime (CPU) cannot load or run ``node`` with its float16 typing, or None."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    runtime = _RUNTIME_NO_FP16.get((domain, node.op_type))
    if runtime is not None and runtime(node):
        return f"onnxruntime has no float16 {node.op_type} kernel with reduction '{_text(_attr(node, 'reduction'))}'"
    if model is None or not (typing.convertible_inputs or typing.convertible_outputs or typing.flexible_inputs):
        return None
    return _probe(node, typing, types, model)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_PROBES: dict[bytes, str | None] = {}


def _probe_model(node: onnx.NodeProto, typing: NodeTyping, types: Mapping[str, onnx.TypeProto],
                 model: onnx.ModelProto, fp16: bool, exact_shapes: bool = False) -> onnx.ModelProto | None:
    """``node`` alone, its float tensors typed as an FP16 (or FP32) node sees them. Values are
    renamed ``i<k>``/``o<k>`` and the node unnamed, so equal signatures give equal bytes; shapes
    are reduced to ranks unless ``exact_shapes``."""
    half_in = set(typing.convertible_inputs) | set(typing.flexible_inputs) if fp16 else set()
    half_out = set(typing.convertible_outputs) if fp16 else set()
    probe = onnx.NodeProto()
    probe.CopyFrom(node)
    probe.name = ""
    renamed: dict[str, str] = {}
    graph_io: tuple[list, list] = ([], [])
    for is_out, (names, half) in enumerate(((probe.input, half_in), (probe.output, half_out))):
        for i, name in enumerate(names):
            if not name:
                continue
            if name not in renamed:
                tp = types.get(name)
                if elem_type(tp) is None:
                    return None
                tp = tp if exact_shapes else _rank_only(tp)
                if i in half and elem_type(tp) == FLOAT:
                    tp = with_elem_type(tp, FLOAT16)
                renamed[name] = f"{'io'[is_out]}{len(renamed)}"
                graph_io[is_out].append(onnx.helper.make_value_info(renamed[name], tp))
            names[i] = renamed[name]
    if fp16 and half_out:
        retarget_attributes(probe, model)
    graph = onnx.helper.make_graph([probe], "probe", graph_io[0], graph_io[1])
    m = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = min(model.ir_version, 10)
    return m


def retarget_attributes(node: onnx.NodeProto, model: onnx.ModelProto, base_dir: str = ".") -> None:
    """In place: attributes that choose a float output type (Cast ``to``, ``dtype``, Optional's
    ``type``, ConstantOfShape's value) choose float16, for a node whose float outputs convert."""
    for attr in node.attribute:
        if attr.name == "to" and node.op_type == "Cast" and attr.i == FLOAT:
            attr.i = FLOAT16
        elif attr.name in _DTYPE_ATTRS and attr.type == onnx.AttributeProto.INT and attr.i == FLOAT:
            attr.i = FLOAT16
        elif attr.type == onnx.AttributeProto.TYPE_PROTO and elem_type(attr.tp) == FLOAT:
            attr.tp.CopyFrom(with_elem_type(attr.tp, FLOAT16))
        elif node.op_type == "ConstantOfShape" and attr.name == "value" and attr.t.data_type == FLOAT:
            attr.t.CopyFrom(model_io.cast_initializer(attr.t, base_dir, FLOAT16, attr.t.name))
    present = {a.name for a in node.attribute}
    if node.op_type == "ConstantOfShape" and "value" not in present:
        node.attribute.append(onnx.helper.make_attribute(
            "value", onnx.numpy_helper.from_array(np.zeros(1, np.float16))))
    schema_attrs = _schema_attributes(node, model)
    if "dtype" in schema_attrs and "dtype" not in present:
        # the default (float, or the input's type) would no longer be float16
        node.attribute.append(onnx.helper.make_attribute("dtype", FLOAT16))
    for name in _DTYPE_ATTRS[1:]:
        default = schema_attrs.get(name)
        if name not in present and default is not None and default.default_value.type == onnx.AttributeProto.INT \
                and default.default_value.i == FLOAT:  # e.g. the window ops' output_datatype
            node.attribute.append(onnx.helper.make_attribute(name, FLOAT16))


# attributes that choose an output's element type
_DTYPE_ATTRS = ("dtype", "output_datatype", "output_dtype")


def _schema_attributes(node: onnx.NodeProto, model: onnx.ModelProto) -> Mapping:
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opset_map(model).get(domain)
    try:
        return {} if opset is None else onnx.defs.get_schema(node.op_type, opset, domain).attributes
    except onnx.defs.SchemaError:
        return {}


def _load_problems(m: onnx.ModelProto) -> tuple[str | None, str | None]:
    """(what the full checker says, what onnxruntime says when loading) about ``m``; None = fine."""
    checker = session = None
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:
        checker = f"onnx rejects it: {str(e).splitlines()[0][:160]}"
    try:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.log_severity_level = 4
        helper_sessions.build(m.SerializeToString(), options)
    except Exception as e:
        session = f"onnxruntime cannot load it: {str(e).splitlines()[0][:160]}"
    return checker, session


def _probe(node: onnx.NodeProto, typing: NodeTyping, types: Mapping[str, onnx.TypeProto],
           model: onnx.ModelProto) -> str | None:
    """The float16 probe of ``node``: a problem that the same node in float32 does not have."""
    if any(True for _ in model_io.subgraphs(node)):
        return None  # control flow: the body nodes are probed one by one
    problem = None
    for exact_shapes in (False, True):
        fp16 = _probe_model(node, typing, types, model, True, exact_shapes)
        if fp16 is None:
            return None
        key = fp16.SerializeToString(deterministic=True)
        if key not in _PROBES:
            half = _load_problems(fp16)
            full = (None, None)
            if half != full:
                full = _load_problems(_probe_model(node, typing, types, model, False, exact_shapes))
            # a check that fails in float32 too says nothing about float16: retry with the real
            # shapes (function bodies such as MeanVarianceNormalization's need them)
            specific = [h for h, f in zip(half, full) if h is not None and f is None]
            _PROBES[key] = specific[0] if specific else ("?" if any(half) else None)
        if _PROBES[key] != "?":
            problem = _PROBES[key]
            return None if problem is None else f"{node.op_type} in float16: {problem}"
    return None


def model_typing(model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto] | None = None,
                 ) -> dict[str, NodeTyping]:
    """:class:`NodeTyping` of every node, subgraphs included, keyed by node name."""
    types = tensor_types(model) if types is None else types
    opsets = opset_map(model)
    _probe_together(model, types, opsets)
    return {ref.name: node_typing(ref.node, opsets, types, model) for ref in model_io.walk_nodes(model.graph)}


def _probe_together(model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto], opsets: Mapping[str, int],
                    ) -> None:
    """Probe every not yet cached node signature in one model: in the usual case, where
    onnxruntime loads them all in float16, one session answers for all of them; otherwise the
    probes run one by one (in :func:`_probe`) to learn which node is at fault."""
    pending: dict[bytes, onnx.ModelProto] = {}
    for ref in model_io.walk_nodes(model.graph):
        node = ref.node
        if any(True for _ in model_io.subgraphs(node)):
            continue
        typing = _schema_typing(node, opsets, types)
        if typing.fp16_blocker or not (typing.convertible_inputs or typing.convertible_outputs
                                       or typing.flexible_inputs):
            continue
        probe = _probe_model(node, typing, types, model, True)
        # a value of unknown rank fails the checker in float32 too: such a probe is judged alone
        if probe is not None and all(vi.type.tensor_type.HasField("shape")
                                     for vi in list(probe.graph.input) + list(probe.graph.output)):
            key = probe.SerializeToString(deterministic=True)
            if key not in _PROBES:
                pending[key] = probe
    if len(pending) < 2:
        return
    if _load_problems(_combined(list(pending.values()), model)) == (None, None):
        _PROBES.update(dict.fromkeys(pending))


def _combined(probes: list[onnx.ModelProto], model: onnx.ModelProto) -> onnx.ModelProto:
    """One model holding every probe's node side by side, values prefixed per probe."""
    nodes, inputs, outputs = [], [], []
    for k, probe in enumerate(probes):
        prefix = f"p{k}_"
        node = onnx.NodeProto()
        node.CopyFrom(probe.graph.node[0])
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name:
                    names[i] = prefix + name
        nodes.append(node)
        for source, target in ((probe.graph.input, inputs), (probe.graph.output, outputs)):
            for vi in source:
                renamed = onnx.ValueInfoProto()
                renamed.CopyFrom(vi)
                renamed.name = prefix + vi.name
                target.append(renamed)
    graph = onnx.helper.make_graph(nodes, "probes", inputs, outputs)
    combined = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    combined.ir_version = probes[0].ir_version
    return combined


# --- plan resolution --------------------------------------------------------------------------


def _flushes(min_nonzero_abs: float) -> bool:
    return bool(np.isfinite(min_nonzero_abs) and np.float16(min_nonzero_abs) == 0)


def fp16_value_problem(max_abs: float, min_nonzero_abs: float) -> str | None:
    """Why an FP16 copy of values with this range would change them materially, or None.

    Overflow always matters. A value flushed to zero matters only when the whole tensor lies below
    FP16's normal range: otherwise the flushed values (< 3e-8) are smaller than the rounding error
    FP16 already makes on the tensor's own largest values (max |x| * 2**-11), and pinning every
    trained weight matrix that holds one such value would keep most of a real model in FP32.
    """
    if max_abs > FP16_MAX:
        return f"|x| up to {max_abs:.6g} exceeds the FP16 maximum {FP16_MAX:g}"
    if _flushes(min_nonzero_abs) and max_abs < FP16_MIN_NORMAL:
        return (f"nonzero |x| down to {min_nonzero_abs:.3g} would flush to zero in FP16, and all its values "
                f"lie below FP16's normal range (max |x| {max_abs:.3g})")
    return None


def fp16_flush_note(max_abs: float, min_nonzero_abs: float) -> str | None:
    """What converting values with this range flushes to zero although it is no problem, or None."""
    if max_abs <= FP16_MAX and max_abs >= FP16_MIN_NORMAL and _flushes(min_nonzero_abs):
        return (f"nonzero |x| down to {min_nonzero_abs:.3g} flush to zero in FP16, less than the rounding "
                f"error of its largest values (max |x| {max_abs:.3g})")
    return None


def _finite_range(values: np.ndarray) -> tuple[float, float]:
    """(max |x|, min nonzero |x|) over the finite values: inf and NaN are exact in FP16."""
    a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    a = a[np.isfinite(a)]
    nonzero = a[a > 0]
    return (float(a.max()) if a.size else 0.0), (float(nonzero.min()) if nonzero.size else float("inf"))


def constant_verdict(tensor: onnx.TensorProto, base_dir: str) -> tuple[str | None, str | None]:
    """(why an FP16 copy of this float constant would change it materially, what the copy flushes
    to zero harmlessly): either may be None."""
    max_abs, min_nonzero = model_io.initializer_range(tensor, base_dir)
    if max_abs == float("inf"):  # rare (e.g. a -inf mask): look again at the finite values only
        max_abs, min_nonzero = _finite_range(model_io.initializer_array(tensor, base_dir))
    return fp16_value_problem(max_abs, min_nonzero), fp16_flush_note(max_abs, min_nonzero)


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The float value a Constant/ConstantOfShape node carries as a tensor, if any."""
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr.t
    if node.op_type == "Constant":
        for attr in node.attribute:
            if attr.name == "value_float":
                return onnx.helper.make_tensor("value", FLOAT, [], [attr.f])
            if attr.name == "value_floats":
                return onnx.helper.make_tensor("value", FLOAT, [len(attr.floats)], list(attr.floats))
    return None


def constant_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Tensor name -> value for every initializer and dense Constant output, subgraphs included."""
    out: dict[str, onnx.TensorProto] = {}
    for graph in model_io.graphs(model.graph):
        for t in graph.initializer:
            out[t.name] = t
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ONNX_DOMAINS and node.output:
                value = constant_tensor(node)
                if value is not None:
                    out[node.output[0]] = value
    return out


def _value_blockers(model: onnx.ModelProto, plan: PrecisionPlan, typing: Mapping[str, NodeTyping],
                    base_dir: str) -> tuple[dict[str, Reason], dict[str, Reason]]:
    """FP16 nodes whose float constants (initializer inputs, Constant values) FP16 cannot hold, and
    FP16 nodes whose constants lose only negligible values (flushed to zero), each with its reason."""
    inits = constant_values(model)
    ranges: dict[str, tuple[str | None, str | None]] = {}
    out: dict[str, Reason] = {}
    notes: dict[str, Reason] = {}
    for ref in model_io.walk_nodes(model.graph):
        node = ref.node
        if not plan.is_fp16(node.name) or typing[node.name].fp16_blocker:
            continue
        for i in typing[node.name].convertible_inputs:
            name = node.input[i]
            init = inits.get(name)
            if init is None or init.data_type != FLOAT:
                continue
            if name not in ranges:
                ranges[name] = constant_verdict(init, base_dir)
            problem, note = ranges[name]
            if problem:
                out[node.name] = Reason("initializer", f"initializer '{name}': {problem}", (("tensor", name),))
                break
            if note and node.name not in notes:
                notes[node.name] = Reason("initializer", f"initializer '{name}': {note}", (("tensor", name),))
        if node.name not in out and node.op_type == "ConstantOfShape" and \
                typing[node.name].convertible_outputs:
            value = constant_tensor(node)
            if value is not None and value.data_type == FLOAT:
                problem, _ = constant_verdict(value, base_dir)
                if problem:
                    out[node.name] = Reason("initializer", f"{node.op_type} value: {problem}")
    notes = {name: reason for name, reason in notes.items() if name not in out}
    return out, notes


def _non_tensor_edges(model: onnx.ModelProto, typing: Mapping[str, NodeTyping],
                      types: Mapping[str, onnx.TypeProto]) -> list[tuple[str, str | None, str | None]]:
    """(value, producing side, consuming side) for every use of a float sequence/optional value.

    A side is the node whose precision decides the value's type there, or None where the type is
    fixed FP32 (a graph input/output of the main graph, a non-converting node input/output).
    Flexible inputs take either type and make no edge.
    """
    def non_tensor_float(name: str) -> bool:
        return bool(name) and not is_tensor(types.get(name)) and elem_type(types.get(name)) == FLOAT

    producer: dict[str, str | None] = {}
    uses: list[tuple[str, str | None]] = []
    for graph, owner in _graphs_with_owner(model.graph, None):
        for v in graph.input:
            producer[v.name] = owner
        for v in graph.output:
            uses.append((v.name, owner))
    for ref in model_io.walk_nodes(model.graph):
        t = typing[ref.name]
        for i, name in enumerate(ref.node.output):
            producer[name] = ref.name if i in t.convertible_outputs else None
        for i, name in enumerate(ref.node.input):
            if i not in t.flexible_inputs:
                uses.append((name, ref.name if i in t.convertible_inputs else None))
    return [(name, producer.get(name), user) for name, user in uses if non_tensor_float(name)]


def _graphs_with_owner(graph: onnx.GraphProto, owner: str | None) -> Iterator[tuple[onnx.GraphProto, str | None]]:
    yield graph, owner
    for node in graph.node:
        for _, sub in model_io.subgraphs(node):
            yield from _graphs_with_owner(sub, node.name)


def _non_tensor_conflicts(model: onnx.ModelProto, plan: PrecisionPlan, typing: Mapping[str, NodeTyping],
                          types: Mapping[str, onnx.TypeProto]) -> dict[str, Reason]:
    """FP16 nodes that would need a sequence/optional value converted: Cast cannot do that.

    Where the producing and the consuming side of such a value disagree, the FP16 side becomes
    FP32, until nothing changes (sides only ever go FP16 -> FP32, so this ends). Graph inputs and
    outputs of these types stay FP32 even with fp16_io.
    """
    fp16 = {n for n in plan.decisions if plan.is_fp16(n) and n in typing and not typing[n].fp16_blocker}
    edges = _non_tensor_edges(model, typing, types)
    out: dict[str, Reason] = {}
    changed = True
    while changed:
        changed = False
        for value, made, used in edges:
            made16, used16 = made in fp16, used in fp16
            if made16 == used16:
                continue
            side = made if made16 else used
            fp16.discard(side)
            where = "produced in FP32" if used16 else "used in FP32"
            out[side] = Reason("type", f"sequence/optional value '{value}' is {where} and cannot be cast")
            changed = True
    return out


def resolve_plan(model: onnx.ModelProto, plan: PrecisionPlan, base_dir: str = ".",
                 typing: Mapping[str, NodeTyping] | None = None,
                 types: Mapping[str, onnx.TypeProto] | None = None) -> PrecisionPlan:
    """``plan`` with every FP16 node that cannot be written as FP16 forced to FP32, with the reason."""
    types = tensor_types(model) if types is None else types
    typing = model_typing(model, types) if typing is None else typing
    resolved = _force_fp32(plan, {name: Reason("type", t.fp16_blocker) for name, t in typing.items()
                                  if t.fp16_blocker and plan.is_fp16(name)})
    blockers, notes = _value_blockers(model, resolved, typing, base_dir)
    resolved = _force_fp32(resolved, blockers)
    resolved = _with_notes(resolved, notes)
    return _force_fp32(resolved, _non_tensor_conflicts(model, resolved, typing, types))


def _with_notes(plan: PrecisionPlan, notes: Mapping[str, Reason]) -> PrecisionPlan:
    """``plan`` with each note appended to its node's reasons, precision unchanged."""
    if not notes:
        return plan
    decisions = dict(plan.decisions)
    for name, note in notes.items():
        old = decisions[name]
        decisions[name] = NodeDecision(old.precision, old.reasons if note in old.reasons else old.reasons + (note,))
    return replace(plan, decisions=decisions)


def _force_fp32(plan: PrecisionPlan, reasons: Mapping[str, Reason]) -> PrecisionPlan:
    """``plan`` with each named node FP32 and its reason appended: one copy of the decisions, not
    one per node (a large model can have thousands of forced nodes)."""
    if not reasons:
        return plan
    decisions = dict(plan.decisions)
    for name, reason in reasons.items():
        old = decisions[name]
        kept = old.reasons if old.precision is Precision.FP32 else ()
        decisions[name] = NodeDecision(Precision.FP32, kept if reason in kept else kept + (reason,))
    return replace(plan, decisions=decisions)
