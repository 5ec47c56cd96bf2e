"""What onnx accepts and onnxruntime (CPU) can load and run in float16, learned by probing each node
signature.

Probe results are cached for the life of the process in :data:`_PROBES`, keyed by the probe
model's bytes (the node alone, values renamed, shapes reduced to ranks) and by whether
onnxruntime was asked: a signature is the same question in every model, and the answers do not
change while the process runs. onnxruntime is asked only where the target runs the written model
on it (:attr:`onnx_precision.target.Target.onnxruntime_kernels`); onnx's full check always.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from .. import helper_sessions
from ..float_types import FP16, LowPrecision
from ..graph import attr, has_subgraphs, walk_nodes
from .attributes import retarget_attributes
from .inference import tensor_types
from .node_typing import NodeTyping, schema_typing
from .schemas import opset_map
from .types import WIDE, elem_type, rank_only, with_elem_type

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Probe:
    """A node's FP16 probe at ranks (model and cache key), made once per model_typing."""

    model: onnx.ModelProto
    key: bytes


def node_typing(node: onnx.NodeProto, opsets: Mapping[str, int],
                types: Mapping[str, onnx.TypeProto], model: onnx.ModelProto | None = None,
                typing: NodeTyping | None = None, probe: _Probe | None = None,
                onnxruntime: bool = True, low: LowPrecision = FP16) -> NodeTyping:
    """The FP16 typing of ``node`` given the model's opsets and value types (``typing``: its
    schema typing, ``probe``: its rank probe, when the caller has them already; ``onnxruntime``:
    whether onnxruntime's CPU kernels bind it)."""
    typing = schema_typing(node, opsets, types, low) if typing is None else typing
    if typing.low_blocker is not None:
        return typing
    blocker = ort_blocker(node, typing, types, model, probe, onnxruntime, low)
    if blocker is not None:
        return NodeTyping(
            typing.convertible_inputs, typing.convertible_outputs, blocker, typing.flexible_inputs
        )
    return typing


# --- onnxruntime FP16 kernels -----------------------------------------------------------------

# Blockers are found by measurement. Most are load-time (no kernel, or an onnx function body that
# is not valid in float16, e.g. EyeLike-22 and MeanVarianceNormalization): a one-node probe model
# in float16 is built, checked and loaded once per signature and cached (see _probe). A few only
# fail when run, so a probe cannot see them; they are listed here, each found by the conformance
# run (tests/test_conformance.py), with onnxruntime's own message.
_RUNTIME_NO_FP16 = {
    # "CPU execution provider: MLFloat16 data type is not supported with ScatterND opset 16 when
    # reduction is 'add'" (likewise mul/max/min, and ScatterElements)
    ("", "ScatterND"): lambda node: attr(node, "reduction", b"none") not in (b"none", "none"),
    ("", "ScatterElements"): lambda node: attr(node, "reduction", b"none") not in (b"none", "none"),
}


def ort_blocker(
    node: onnx.NodeProto,
    typing: NodeTyping,
    types: Mapping[str, onnx.TypeProto],
    model: onnx.ModelProto | None = None,
    probe: _Probe | None = None,
    onnxruntime: bool = True,
    low: LowPrecision = FP16,
) -> str | None:
    """Why onnx rejects ``node`` with its float16 typing, or (``onnxruntime``) why onnxruntime's CPU
    provider cannot load or run it; None when nothing does."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    runtime = _RUNTIME_NO_FP16.get((domain, node.op_type)) if onnxruntime and low is FP16 else None
    if runtime is not None and runtime(node):
        reduction = _text(attr(node, "reduction"))
        return f"onnxruntime has no float16 {node.op_type} kernel with reduction '{reduction}'"
    if model is None or not (
        typing.convertible_inputs or typing.convertible_outputs or typing.flexible_inputs
    ):
        return None
    return _probe(node, typing, types, model, probe, onnxruntime, low)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_PROBES: dict[tuple[bytes, bool], str | None] = {}  # (probe, onnxruntime asked) -> problem


def _probe_model(
    node: onnx.NodeProto,
    typing: NodeTyping,
    types: Mapping[str, onnx.TypeProto],
    model: onnx.ModelProto,
    fp16: bool,
    exact_shapes: bool = False,
    low: LowPrecision = FP16,
) -> onnx.ModelProto | None:
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
                if tp is None or elem_type(tp) is None:
                    return None
                tp = tp if exact_shapes else rank_only(tp)
                if i in half and elem_type(tp) in WIDE:
                    tp = with_elem_type(tp, low.elem_type)
                renamed[name] = f"{'io'[is_out]}{len(renamed)}"
                graph_io[is_out].append(onnx.helper.make_value_info(renamed[name], tp))
            names[i] = renamed[name]
    if fp16 and half_out:
        retarget_attributes(probe, model, low=low)
    graph = onnx.helper.make_graph([probe], "probe", graph_io[0], graph_io[1])
    m = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = min(model.ir_version, 10)
    return m


def _load_problems(m: onnx.ModelProto, onnxruntime: bool) -> tuple[str | None, str | None]:
    """(what the full checker says, what onnxruntime says when loading, if asked) about ``m``;
    None = fine."""
    checker = session = None
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:
        checker = f"onnx rejects it: {str(e).splitlines()[0][:160]}"
    if not onnxruntime:
        return checker, None
    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        helper_sessions.build(m.SerializeToString(), options)
    except Exception as e:
        session = f"onnxruntime cannot load it: {str(e).splitlines()[0][:160]}"
    return checker, session


def _rank_probe(node: onnx.NodeProto, typing: NodeTyping, types: Mapping[str, onnx.TypeProto],
                model: onnx.ModelProto, low: LowPrecision) -> _Probe | None:
    fp16 = _probe_model(node, typing, types, model, True, low=low)
    return None if fp16 is None else _Probe(fp16, fp16.SerializeToString(deterministic=True))


def _probe(
    node: onnx.NodeProto, typing: NodeTyping, types: Mapping[str, onnx.TypeProto], model: onnx.ModelProto,
    rank_probe: _Probe | None = None, onnxruntime: bool = True, low: LowPrecision = FP16,
) -> str | None:
    """The float16 probe of ``node``: a problem that the same node in float32 does not have."""
    if has_subgraphs(node):
        return None  # control flow: the body nodes are probed one by one
    problem = None
    for exact_shapes in (False, True):
        if not exact_shapes and rank_probe is not None:
            fp16, key = rank_probe.model, rank_probe.key
        else:
            made = _probe_model(node, typing, types, model, True, exact_shapes, low)
            if made is None:
                return None
            fp16, key = made, made.SerializeToString(deterministic=True)
        cached = (key, onnxruntime)
        if cached not in _PROBES:
            half = _load_problems(fp16, onnxruntime)
            full: tuple[str | None, str | None] = (None, None)
            fp32 = _probe_model(node, typing, types, model, False, exact_shapes) if half != full else None
            if fp32 is not None:
                full = _load_problems(fp32, onnxruntime)
            # a check that fails in float32 too says nothing about float16: retry with the real
            # shapes (function bodies such as MeanVarianceNormalization's need them)
            specific = [h for h, f in zip(half, full) if h is not None and f is None]
            _PROBES[cached] = specific[0] if specific else ("?" if any(half) else None)
        if _PROBES[cached] != "?":
            problem = _PROBES[cached]
            return None if problem is None else f"{node.op_type} in {low.type_name}: {problem}"
    return None


def model_typing(
    model: onnx.ModelProto,
    types: Mapping[str, onnx.TypeProto] | None = None,
    onnxruntime: bool = True,
    low: LowPrecision = FP16,
    wide: tuple[int, ...] = WIDE,
) -> dict[str, NodeTyping]:
    """:class:`NodeTyping` of every node, subgraphs included, keyed by node name (``onnxruntime``:
    whether onnxruntime's CPU kernels bind the plan, see the module docstring; ``wide``: the element
    types that convert, :func:`.schema_typing`)."""
    types = tensor_types(model) if types is None else types
    opsets = opset_map(model)
    refs = list(walk_nodes(model.graph))
    # Nodes of one signature (a stack of identical blocks: most of a large model) are typed once.
    signatures = [_signature(ref.node, types) for ref in refs]
    by_signature: dict[tuple, NodeTyping] = {}
    typings: dict[str, NodeTyping] = {}
    for ref, signature in zip(refs, signatures):
        if signature is None:
            typings[ref.name] = schema_typing(ref.node, opsets, types, low, wide)
        else:
            if signature not in by_signature:
                by_signature[signature] = schema_typing(ref.node, opsets, types, low, wide)
            typings[ref.name] = by_signature[signature]
    probes = _probe_together(model, types, refs, typings, onnxruntime, signatures, low)
    done: dict[tuple, NodeTyping] = {}
    out: dict[str, NodeTyping] = {}
    for ref, signature in zip(refs, signatures):
        if signature is not None and signature in done:
            out[ref.name] = done[signature]
            continue
        probe = probes.get(ref.name)
        out[ref.name] = node_typing(ref.node, opsets, types, model, typings[ref.name], probe, onnxruntime,
                                     low)
        # a probe the ranks leave open ("?") was answered at this node's exact shapes: not shared
        if signature is not None and (probe is None or _PROBES.get((probe.key, onnxruntime)) != "?"):
            done[signature] = out[ref.name]
    return out


def _signature(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto]) -> tuple | None:
    """What a node's typing and its rank probe depend on: op, attributes, and each input's and
    output's element type and rank (names only as which positions share a value); None for a
    node with subgraphs or a value of unknown type (typed on its own)."""
    if has_subgraphs(node):
        return None
    first: dict[str, int] = {}
    values: list[tuple | None] = []
    for name in list(node.input) + list(node.output):
        if not name:
            values.append(None)
            continue
        tp = types.get(name)
        if tp is None:
            return None
        first.setdefault(name, len(first))
        values.append((first[name], _type_key(tp)))
    attributes = tuple(a.SerializeToString(deterministic=True) for a in node.attribute)
    return node.domain, node.op_type, len(node.input), attributes, tuple(values)


def _type_key(tp: onnx.TypeProto) -> tuple | bytes:
    if tp.WhichOneof("value") == "tensor_type":
        t = tp.tensor_type
        return t.elem_type, len(t.shape.dim) if t.HasField("shape") else None
    return rank_only(tp).SerializeToString(deterministic=True)


def _probe_together(
    model: onnx.ModelProto,
    types: Mapping[str, onnx.TypeProto],
    refs: list,
    typings: Mapping[str, NodeTyping],
    onnxruntime: bool,
    signatures: list[tuple | None],
    low: LowPrecision = FP16,
) -> dict[str, _Probe]:
    """Probe every not yet cached node signature in one model: in the usual case, where
    onnxruntime loads them all in float16, one session answers for all of them; otherwise the
    probes run one by one (in :func:`_probe`) to learn which node is at fault. Returns each
    node's rank probe, made once here."""
    pending: dict[bytes, onnx.ModelProto] = {}
    probes: dict[str, _Probe] = {}
    made: dict[tuple, _Probe | None] = {}  # signature -> its rank probe
    for ref, signature in zip(refs, signatures):
        node, typing = ref.node, typings[ref.name]
        if has_subgraphs(node):
            continue
        if typing.low_blocker or not (
            typing.convertible_inputs or typing.convertible_outputs or typing.flexible_inputs
        ):
            continue
        if signature is not None and signature in made:
            probe = made[signature]
        else:
            probe = _rank_probe(node, typing, types, model, low)
            if signature is not None:
                made[signature] = probe
        if probe is None:
            continue
        probes[ref.name] = probe
        # a value of unknown rank fails the checker in float32 too: such a probe is judged alone
        graph = probe.model.graph
        if all(vi.type.tensor_type.HasField("shape") for vi in list(graph.input) + list(graph.output)):
            if (probe.key, onnxruntime) not in _PROBES:
                pending[probe.key] = probe.model
    if len(pending) < 2:
        return probes
    if _load_problems(_combined(list(pending.values()), model), onnxruntime) == (None, None):
        _PROBES.update(dict.fromkeys((key, onnxruntime) for key in pending))
    return probes


def _combined(probes: list[onnx.ModelProto], model: onnx.ModelProto) -> onnx.ModelProto:
    """One model holding every probe's node side by side, values prefixed per probe."""
    nodes: list[onnx.NodeProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
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
