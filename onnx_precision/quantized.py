"""What a model quantizes: the integer kernels its Q/DQ nodes mark, and its quantized ops.

A ``DequantizeLinear -> Conv/MatMul/Gemm <- DequantizeLinear`` group (and the ``QuantizeLinear``
its output feeds, if any) is an integer kernel on TensorRT's explicit quantization and a fused one
on onnxruntime: its compute is INT8 (or FP8, INT4), whatever float type the graph names around it.
So it is no 16-bit candidate: the plan keeps the group in one type (a Cast inside it stops the
fusion: the op then runs in float and the quantization's speed is lost), and the shares the tool
prints count its FLOPs apart from the float remainder. The other quantized ops are recognised by
op type: ``QLinear*``, ``MatMulInteger``/``ConvInteger`` and ``DynamicQuantizeLinear`` (integer
compute), and ``MatMulNBits`` (4-bit weights, computing in its activations' float type: a 16-bit
candidate like any float op).

``quantize_dynamic``'s dequantization, ``MatMulInteger -> Cast -> Mul <- Mul(scale, scale)``, is part
of the integer kernel too (:class:`FusedDequantization`): onnxruntime's CPU provider fuses it into one
MatMulIntegerToFloat (com.microsoft), and that with its DynamicQuantizeLinear into
DynamicQuantizeMatMul, kernels whose output is float32 (onnxruntime/core/optimizer/
matmul_integer_to_float.cc and dynamic_quantize_matmul_fusion.cc, microsoft/onnxruntime commit
13e6970fbe6788f411c9d5935f9d81ed525e605a). Its Cast holds the int32 sums (6.7e4 on the benchmark's
encoder-decoder), so it is no 16-bit candidate either: it stays FP32 and counts as quantized compute.
ConvInteger has no such fusion there: its Cast and Mul are float ops like any other.

Where onnxruntime's optimiser runs the written model (``Target.onnxruntime_kernels``), a Q/DQ group
its CPU provider would fuse into a ``QLinear*`` op of com.microsoft taking float32 scales only
(:data:`ORT_QLINEAR_FUSIONS`) is kept FP32 as a whole, as quantized compute (:attr:`Quantization.
ort_fused`), only where that fusion makes the 16-bit model fail to load at onnxruntime's default
options. Which op kinds do is measured, not listed (:func:`fusion_fails_to_load`: a DQ -> op -> Q
model with 16-bit scales, per kind, once per process). On onnxruntime 1.32 only Concat does: its CPU
kernel takes every tensor type (``TypeConstraint("T", DataTypeImpl::AllTensorTypes())``, onnxruntime/
core/providers/cpu/tensor/concat.cc at microsoft/onnxruntime 03fbb100), float16 included, so the
selector (which asks no scale type) takes the group and QLinearConcat rejects the float16 scale.
Add, Mul, Where, the pools, Sigmoid, LeakyRelu and Softmax have no float16 CPU kernel, so they are no
CPU node when the CPU-only selectors run: the group does not fuse, loads, and goes 16-bit like any
node. Its CPU speed is lost then, but a model written 16-bit is for a GPU
runtime, where these CPU fusions play no part.

Q/DQ are those of ai.onnx (INT8/UINT8, INT4/UINT4 from opset 21, FP8 E4M3FN/E5M2 from 19;
per-tensor, per-axis or blocked) and of com.microsoft.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import onnx

from . import helper_sessions
from .context import ModelContext
from .graph import GraphIndex, NodeRef, graphs, onnx_opset
from .typing_rules import find_schema

QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
KERNEL_OPS = frozenset({"Conv", "MatMul", "Gemm"})
WEIGHT_ONLY_OPS = frozenset({"MatMulNBits"})
# The groups onnxruntime's QDQSelectorActionTransformer fuses into "QLinear" + op type (com.microsoft), op
# -> the inputs its DQs feed (None: every input): the rules UnaryOpQDQRules (1 DQ), BinaryOpQDQRules and
# VariadicOpQDQRules (a DQ on each input) and WhereQDQRules (inputs 1 and 2; the condition is bool) of
# onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc at
# microsoft/onnxruntime 008eeb96a1e2e8d5c23519a81a837f52b54d384b; the actions name the fused op
# (qdq_actions.cc: UnaryReplaceWithQLinear, BinaryReplaceWithQLinear, VariadicReplaceWithQLinear,
# WhereReplaceWithQLinear). Which of them take float32 scales only, the fused op's schema says
# (:func:`_fp32_scales`); whether that makes a 16-bit model fail to load, a probe
# (:func:`fusion_fails_to_load`). Conv/MatMul/Gemm are the :class:`QuantGroup` kernels, apart.
ORT_QLINEAR_FUSIONS: dict[str, tuple[int, ...] | None] = {
    "AveragePool": (0,), "GlobalAveragePool": (0,), "LeakyRelu": (0,), "Sigmoid": (0,), "Softmax": (0,),
    "Add": None, "Mul": None, "Concat": None, "Where": (1, 2)}
ORT_FUSION_SOURCE = "onnxruntime/core/optimizer/qdq_transformer/selectors_actions"

_T = onnx.TensorProto
# what a quantized type computes as, for the shares ("71% of all FLOPs are INT8")
_LABELS: dict[int, str] = {
    _T.INT8: "INT8", _T.UINT8: "INT8", _T.INT4: "INT4", _T.UINT4: "INT4", _T.INT16: "INT16",
    _T.UINT16: "INT16", _T.FLOAT8E4M3FN: "FP8", _T.FLOAT8E4M3FNUZ: "FP8", _T.FLOAT8E5M2: "FP8",
    _T.FLOAT8E5M2FNUZ: "FP8"}


@dataclass(frozen=True)
class IntegerOp:
    """One op whose compute is integer, as the modules that weigh compute read it: the float op that
    computes as it does (``twin``, "" where none is counted: the FLOP estimate counts the op as its
    twin, :func:`..flops.integer_kernel_flops`, and the search orders it as its twin,
    :data:`..search.driver.CONTRACTIONS`), and the index of its weight input, the twin's second."""

    twin: str = ""
    weight_input: int = 1


# The ops whose compute is integer, one row each (and every QLinear* op: :func:`_is_integer_op`).
# QLinearConv and QLinearMatMul take their input's scale and zero point before their weight;
# onnxruntime's DynamicQuantizeLSTM quantizes its float input at run time and multiplies it by int8 weights
# (W, then R: the LSTM's own inputs), computing as an LSTM.
INTEGER_OPS: Mapping[str, IntegerOp] = {
    "MatMulInteger": IntegerOp("MatMul", 1), "ConvInteger": IntegerOp("Conv", 1),
    "QLinearMatMul": IntegerOp("MatMul", 3), "QLinearConv": IntegerOp("Conv", 3),
    "DynamicQuantizeLinear": IntegerOp(), "DynamicQuantizeMatMul": IntegerOp(),
    "MatMulIntegerToFloat": IntegerOp(), "QGemm": IntegerOp(), "QAttention": IntegerOp(),
    "QOrderedMatMul": IntegerOp(), "DynamicQuantizeLSTM": IntegerOp("LSTM", 1)}


@dataclass(frozen=True)
class QuantGroup:
    """One integer kernel: its Conv/MatMul/Gemm, the DQ nodes feeding it, the Q nodes its output feeds."""

    kernel: str
    dequantize: tuple[str, ...]
    quantize: tuple[str, ...]
    label: str  # what it computes in: "INT8", "FP8", "INT4"
    # onnxruntime's QLinear* op for it, which takes float32 scales only and, with 16-bit ones, makes
    # the model fail to load (ORT_QLINEAR_FUSIONS, fusion_fails_to_load)
    fused: str = ""

    @property
    def members(self) -> tuple[str, ...]:
        return (*self.dequantize, self.kernel, *self.quantize)

    def fusion_reason(self, low: str) -> str:
        """Why an onnxruntime-fused group stays FP32 (``low``: "FP16")."""
        return (f"quantized group of '{self.kernel}' ({self.label}): onnxruntime's CPU provider fuses it "
                f"into {self.fused} (com.microsoft), whose scales are float32 only ({ORT_FUSION_SOURCE}); "
                f"with {low} scales the model fails to load at onnxruntime's default options")


# where onnxruntime fuses MatMulInteger's dequantization (the reason its nodes stay FP32, the report's note)
FUSION_SOURCE = "onnxruntime/core/optimizer/matmul_integer_to_float.cc"


@dataclass(frozen=True)
class FusedDequantization:
    """What onnxruntime's MatMulIntegerToFloatFusion folds into its MatMulInteger ``kernel``: the
    ``cast`` of the int32 product to float, the ``scale`` Mul of the two scales and the ``output``
    Mul of the two. The optional bias Add it also takes is left out: a 16-bit Add after the Mul only
    leaves the bias outside the fused kernel."""

    kernel: str
    cast: str
    scale: str
    output: str

    @property
    def members(self) -> tuple[str, str, str]:
        return self.cast, self.scale, self.output


@dataclass(frozen=True)
class Quantization:
    """What :func:`of` finds in a model: the integer kernels, the other quantized ops, the Q/DQ nodes."""

    groups: tuple[QuantGroup, ...] = ()
    integer_ops: Mapping[str, str] | None = None  # node -> label, for QLinear*, MatMulInteger, ...
    weight_only: tuple[str, ...] = ()  # MatMulNBits nodes: 4-bit weights, float compute
    qdq: tuple[str, ...] = ()  # every Q/DQ node
    dequantization: tuple[FusedDequantization, ...] = ()  # MatMulInteger's Cast/Mul, fused by onnxruntime
    ort_fused: tuple[QuantGroup, ...] = ()  # groups whose QLinear* fusion fails to load with 16-bit scales

    @property
    def compute(self) -> dict[str, str]:
        """Node -> label of every node whose compute is quantized (the shares count them apart): a
        fused dequantization's nodes are its kernel's, an onnxruntime-fused group's Q/DQ its op's."""
        integer = self.integer_ops or {}
        fused = {member: integer.get(d.kernel, "INT8") for d in self.dequantization for member in d.members}
        qlinear = {member: g.label for g in self.ort_fused for member in g.members}
        return {**{g.kernel: g.label for g in self.groups}, **integer, **fused, **qlinear}

    @property
    def ort_fused_nodes(self) -> dict[str, QuantGroup]:
        """Node -> the onnxruntime-fused group it belongs to (:attr:`ort_fused`)."""
        return {member: g for g in self.ort_fused for member in g.members}

    def ort_fused_note(self) -> str:
        """What the summaries say once of :attr:`ort_fused`'s nodes, which they list as no pins ('' where
        there are none): how many groups of each fused op."""
        if not self.ort_fused:
            return ""
        ops: dict[str, int] = {}
        for group in self.ort_fused:
            ops[group.fused] = ops.get(group.fused, 0) + 1
        listed = ", ".join(f"{n} {op}" for op, n in sorted(ops.items(), key=lambda item: (-item[1], item[0])))
        return (f"{len(self.ort_fused_nodes)} node(s) of {len(self.ort_fused)} Q/DQ group(s) that "
                f"onnxruntime's CPU provider fuses into ops taking float32 scales only ({listed}) stay FP32 "
                f"as quantized compute, not listed as pins: with 16-bit scales their fusion fails to load "
                f"at onnxruntime's default options (measured on onnxruntime {_ort_version()}; "
                f"{ORT_FUSION_SOURCE})")

    @property
    def dequantization_nodes(self) -> dict[str, FusedDequantization]:
        """Node -> the fused dequantization it belongs to."""
        return {member: d for d in self.dequantization for member in d.members}

    def dequantization_note(self) -> str:
        """What the summaries say once of the fused dequantization's nodes, which they list as no pins
        ('' where there are none)."""
        if not self.dequantization:
            return ""
        kernels = len(self.dequantization)
        return (f"{3 * kernels} dequantization node(s), the Cast, scale Mul and Mul after each of {kernels} "
                f"MatMulInteger, belong to onnxruntime's fused integer kernels (MatMulIntegerToFloat, "
                f"float32 output: {FUSION_SOURCE}): they stay FP32 and count as quantized compute")

    @property
    def any(self) -> bool:
        return bool(self.qdq or self.integer_ops or self.weight_only)


def is_qdq(node: onnx.NodeProto) -> bool:
    return node.op_type in (QUANTIZE, DEQUANTIZE) and node.domain in QDQ_DOMAINS


def _is_integer_op(node: onnx.NodeProto) -> bool:
    return node.op_type in INTEGER_OPS or node.op_type.startswith("QLinear")


def of(ctx: ModelContext) -> Quantization:
    """The model's :class:`Quantization`, found once per context."""
    return ctx.memo(_find)


def fp32_integer_ops(ctx: ModelContext) -> tuple[str, ...]:
    """The integer ops (:attr:`Quantization.integer_ops`) that take no 16-bit type where they
    read or write a float (their typing's ``low_blocker``: DynamicQuantizeLinear's float32 input), in
    the model's order: quantized compute that stays FP32 whatever a plan says (policy.node_blockers),
    so no pin; the summaries count them apart, as the fused dequantization's nodes."""
    integer, typing = of(ctx).integer_ops or {}, ctx.typing
    return tuple(ref.name for ref in ctx.nodes if ref.name in integer and typing[ref.name].low_blocker)


def fp32_integer_ops_note(ctx: ModelContext) -> str:
    """What the summaries say once of :func:`fp32_integer_ops`, which they list as no pins: how many of
    each op, each with why its first one has no 16-bit type ('' where there are none)."""
    by_op: dict[str, list[str]] = {}
    for name in fp32_integer_ops(ctx):
        by_op.setdefault(ctx.node_ops[name], []).append(name)
    if not by_op:
        return ""
    listed = ", ".join(f"{len(nodes)} {op} ({ctx.typing[nodes[0]].low_blocker})"
                       for op, nodes in sorted(by_op.items(), key=lambda item: (-len(item[1]), item[0])))
    return (f"{sum(map(len, by_op.values()))} integer op(s) of quantized compute take no 16-bit type and "
            f"stay FP32, counted apart and not listed as pins: {listed}")


def unpinned(ctx: ModelContext) -> tuple[str, ...]:
    """The quantized compute that stays FP32 whatever a plan says, which no list of pins names: the
    fused dequantization's nodes, :func:`fp32_integer_ops` and the Q/DQ groups whose fusion into a
    float32-scale op fails to load in 16 bits."""
    found = of(ctx)
    return (*found.dequantization_nodes, *fp32_integer_ops(ctx), *found.ort_fused_nodes)


def unpinned_notes(ctx: ModelContext) -> tuple[str, ...]:
    """What the summaries say once of each kind of :func:`unpinned` there is."""
    found = of(ctx)
    notes = (found.dequantization_note(), fp32_integer_ops_note(ctx), found.ort_fused_note())
    return tuple(n for n in notes if n)


def _find(ctx: ModelContext) -> Quantization:
    index, constants = ctx.index, ctx.constants

    def quantized_type(value: str) -> int | None:
        """The element type of a DQ's quantized input: a constant's, a Q's output's, an inferred one."""
        if value in constants:
            return constants[value].data_type
        made = index.producers.get(value)
        if made is not None and is_qdq(made.node) and made.node.op_type == QUANTIZE:
            zero_point = made.node.input[2] if len(made.node.input) > 2 else ""
            if zero_point in constants:
                return constants[zero_point].data_type
            if not zero_point:
                return _T.UINT8  # QuantizeLinear without a zero point outputs uint8
        tp = ctx.types.get(value)
        return tp.tensor_type.elem_type if tp is not None and tp.HasField("tensor_type") else None

    groups, integer, weight_only, qdq = [], {}, [], []
    for ref in ctx.nodes:
        node = ref.node
        if is_qdq(node):
            qdq.append(ref.name)
        elif _is_integer_op(node):
            first = quantized_type(node.input[0]) if node.input else None
            integer[ref.name] = _LABELS.get(first or 0, "INT8")
        elif node.op_type in WEIGHT_ONLY_OPS:
            weight_only.append(ref.name)
        elif node.op_type in KERNEL_OPS and is_onnx(node):
            dqs = [_dequantize(index, name) for name in node.input[:2]]
            if len(dqs) == 2 and all(dq is not None for dq in dqs):
                types = [quantized_type(dq.input[0]) for dq in dqs if dq is not None]
                label = _LABELS.get(types[1] or 0) or _LABELS.get(types[0] or 0) or "INT8"
                quantize = tuple(c.name for out in node.output[:1] for c in index.consumers.get(out, ())
                                 if is_qdq(c.node) and c.node.op_type == QUANTIZE)
                # a Conv/Gemm bias's DQ (int32, quantize_static's) is the group's too: onnxruntime's
                # ConvSelector and GemmSelector take a DQ on every input (qdq_selectors.cc), so a Cast
                # after it stops QLinearConv/QGemm as one after the others does
                bias = _dequantize(index, node.input[2]) if len(node.input) > 2 and node.input[2] else None
                groups.append(QuantGroup(ref.name, tuple(dq.name for dq in (*dqs, bias) if dq is not None),
                                         quantize, label))
    # only where onnxruntime's optimiser runs the written model: TensorRT places Q/DQ by its own rules
    fusing = bool(qdq) and ctx.target.onnxruntime_kernels(ctx.target.low)
    outputs = {o.name for g in graphs(ctx.model.graph) for o in g.output}  # read by no fusion
    ort_fused = _ort_fused(ctx, quantized_type, outputs) if fusing else ()
    return Quantization(tuple(groups), integer or None, tuple(weight_only), tuple(qdq),
                        _fused_dequantization(ctx, outputs), ort_fused)


def _fp32_scales(op_type: str) -> bool:
    """Whether onnxruntime's ``QLinear<op_type>`` (com.microsoft) takes no float16 input, so float32
    scales only (False where onnxruntime exposes no schema of it: nothing is claimed then)."""
    schema = find_schema(f"QLinear{op_type}", "com.microsoft", 1)
    return schema is not None and all(
        "tensor(float16)" not in schema.constraints.get(p.type_str, {p.type_str}) for p in schema.inputs)


# the first ai.onnx opset whose DequantizeLinear/QuantizeLinear take a 16-bit scale
_SCALE_OPSET = 19
# the probes' answers, per (onnxruntime version, op kind, integer type, scale type, opset)
_LOAD_FAILS: dict[tuple[str, str, int, int, int], bool] = {}


def _ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def fusion_fails_to_load(op_type: str, quantized_type: int, scale_type: int, opset: int) -> bool:
    """Whether a ``DQ -> op_type -> Q`` group (``quantized_type`` integers, ``scale_type`` scales) fails
    to load at onnxruntime's default options and loads with its optimisations off: what its QDQ fusion
    does to it (on onnxruntime 1.32, with float16 scales, Concat only). Measured once per process on a
    model of that group alone; in process, as the typing probes (:mod:`.typing_rules.kernels`): a load
    that fails on a three-node model raises, it does not crash."""
    key = (_ort_version(), op_type, quantized_type, scale_type, opset)
    if key not in _LOAD_FAILS:
        import onnxruntime as ort

        model = _fusion_probe(op_type, quantized_type, scale_type, opset).SerializeToString()
        loads = []
        for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
            options = ort.SessionOptions()
            options.log_severity_level = 4
            options.graph_optimization_level = level  # ORT_ENABLE_ALL: onnxruntime's default
            try:
                helper_sessions.build(model, options)
                loads.append(True)
            except Exception:  # onnxruntime's load errors have no common type
                loads.append(False)
        _LOAD_FAILS[key] = loads == [False, True]
    return _LOAD_FAILS[key]


def _fusion_probe(op_type: str, quantized_type: int, scale_type: int, opset: int) -> onnx.ModelProto:
    """x_i -> DQ -> ``op_type`` -> Q -> y, the DQs on the inputs :data:`ORT_QLINEAR_FUSIONS` names
    (Where's condition a bool input), per-tensor scales of ``scale_type``, [1, 2, 4, 4] tensors."""
    h = onnx.helper
    wanted = ORT_QLINEAR_FUSIONS[op_type]
    arity = {"Add": 2, "Mul": 2, "Concat": 2, "Where": 3}.get(op_type, 1)
    required = {"Concat": [h.make_attribute("axis", 1)],
                "AveragePool": [h.make_attribute("kernel_shape", [2, 2])]}
    shape = [1, 2, 4, 4]
    inputs, nodes, operands = [], [], []
    for i in range(arity):
        quantized = wanted is None or i in wanted
        inputs.append(h.make_tensor_value_info(f"x{i}", quantized_type if quantized else _T.BOOL, shape))
        if quantized:
            nodes.append(h.make_node(DEQUANTIZE, [f"x{i}", "scale", "zero"], [f"d{i}"]))
        operands.append(f"d{i}" if quantized else f"x{i}")
    op = h.make_node(op_type, operands, ["op"])
    op.attribute.extend(required.get(op_type, []))
    nodes += [op, h.make_node(QUANTIZE, ["op", "scale", "zero"], ["y"])]
    constants = [h.make_tensor("scale", scale_type, [], [0.05]),
                 h.make_tensor("zero", quantized_type, [], [0])]
    graph = h.make_graph(nodes, "fusion_probe", inputs, [h.make_tensor_value_info("y", quantized_type, None)],
                         constants)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _ort_fused(ctx: ModelContext, quantized_type: Callable[[str], int | None], outputs: Collection[str],
               ) -> tuple[QuantGroup, ...]:
    """The groups onnxruntime's selectors (qdq_selectors.cc: CheckQDQNodes and the Unary, Binary,
    Variadic and Where selectors) fuse into a float32-scale QLinear* op that, with the target's 16-bit
    scales, fails to load (:func:`fusion_fails_to_load`): a DQ on each input the rule names and on no
    other, one output read by one Q alone and no graph output, the DQs' and the Q's integer types one
    8-bit type (16- and 4-bit are not allowed by default); ``outputs``: every graph's outputs."""
    index = ctx.index
    opset = max(onnx_opset(ctx.model), _SCALE_OPSET)
    found = []
    for ref in ctx.nodes:
        node = ref.node
        if node.op_type not in ORT_QLINEAR_FUSIONS or not is_onnx(node) or len(node.output) != 1:
            continue
        wanted = ORT_QLINEAR_FUSIONS[node.op_type]
        positions = [i for i, name in enumerate(node.input) if name]
        dqs = {i: _dequantize(index, node.input[i]) for i in positions}
        if {i for i, dq in dqs.items() if dq is not None} != set(positions if wanted is None else wanted):
            continue
        readers = index.consumers.get(node.output[0], ())
        if len(readers) != 1 or node.output[0] in outputs or not is_qdq(readers[0].node) \
                or readers[0].node.op_type != QUANTIZE:
            continue
        types = {quantized_type(dq.input[0]) for dq in dqs.values() if dq is not None}
        types.add(quantized_type(readers[0].node.output[0]))
        if len(types) != 1 or not types <= {_T.INT8, _T.UINT8} or not _fp32_scales(node.op_type) \
                or not fusion_fails_to_load(node.op_type, types.pop() or 0, ctx.target.low.elem_type, opset):
            continue
        found.append(QuantGroup(ref.name, tuple(dq.name for dq in dqs.values() if dq is not None),
                                (readers[0].name,), "INT8", f"QLinear{node.op_type}"))
    return tuple(found)


def _fused_dequantization(ctx: ModelContext, outputs: Collection[str]) -> tuple[FusedDequantization, ...]:
    """Each ``MatMulInteger -> Cast -> Mul <- Mul`` that onnxruntime's MatMulIntegerToFloatFusion fuses:
    from the Mul (ai.onnx, opset 7 or later: its versions 7, 13 and 14), its first parent that is a
    Cast whose parent is a MatMulInteger, and its first parent that is a Mul; the MatMulInteger, the
    Cast and the scale Mul each read by that one node and none a graph output. The Cast's type is not
    checked there (quantize_dynamic writes float). ``outputs``: every graph's outputs."""
    if onnx_opset(ctx.model, 0) < 7:
        return ()
    index = ctx.index

    def parent(value: str, op_type: str) -> NodeRef | None:
        made = index.producers.get(value)
        return made if made is not None and made.node.op_type == op_type and is_onnx(made.node) else None

    def read_once(ref: NodeRef) -> bool:
        out = ref.node.output
        return len(out) == 1 and out[0] not in outputs and len(index.consumers.get(out[0], ())) == 1

    found = []
    for ref in ctx.nodes:
        if ref.node.op_type != "Mul" or not is_onnx(ref.node):
            continue
        cast = next((c for c in (parent(v, "Cast") for v in ref.node.input) if c is not None), None)
        kernel = parent(cast.node.input[0], "MatMulInteger") if cast is not None else None
        scale = next((s for s in (parent(v, "Mul") for v in ref.node.input) if s is not None), None)
        if cast is None or kernel is None or scale is None or not all(map(read_once, (kernel, cast, scale))):
            continue
        found.append(FusedDequantization(kernel.name, cast.name, scale.name, ref.name))
    return tuple(found)


def is_onnx(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def _dequantize(index: GraphIndex, value: str) -> onnx.NodeProto | None:
    made = index.producers.get(value)
    return made.node if made is not None and is_qdq(made.node) and made.node.op_type == DEQUANTIZE else None


def shares_text(compute: Mapping[str, str], node_flops: Mapping[str, float], nodes: Mapping,
                integer_flops: Mapping[str, float]) -> str:
    """'71% of all FLOPs are INT8' (each label's share of the FLOPs of ``nodes``, ``integer_flops``
    those of the integer kernels, which ``node_flops`` counts 0: :func:`..flops.integer_kernel_flops`),
    '' when none."""
    flops = {**node_flops, **integer_flops}
    total = sum(flops.get(n, 0.0) for n in nodes)
    if not compute or total <= 0:
        return ""
    by_label: dict[str, float] = {}
    for name, label in compute.items():
        by_label[label] = by_label.get(label, 0.0) + flops.get(name, 0.0)
    parts = [f"{100 * flops / total:.3g}%" + (f" {label}" if i else f" of all FLOPs are {label}")
             for i, (label, flops) in enumerate(sorted(by_label.items(), key=lambda item: -item[1]))]
    return ", ".join(parts)
