"""The op table: which TensorRT layers onnx-tensorrt builds for an ONNX op, per TensorRT version.

One :class:`OpEntry` per op; each :class:`OpVariant` cites the importer it follows and the
onnx-tensorrt sources read (release/8.6-GA ``builtin_op_importers.cpp``, 10.1-GA ``96e7811``
``onnxOpImporters.cpp`` and ``importerUtils.cpp``, and the 10.15 ``onnxOpImporters.cpp``; the
version bounds between those come from the parser's Changelog). A variant either lists its layers
(one computing layer: nothing to split) or spells them with a function of a :class:`.spell.Speller`,
which both records the layers and writes the ONNX nodes; adding an op is one entry.

Ops not in the table are taken as one layer registered with the node, which is what most
importers do.

:func:`decompose` is what an emulation calls: the ONNX nodes that compute a node layer by layer
(rounding to FP16 between layers when asked), or None when the node is one computing layer.
:func:`node_layers` is what naming and flags use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import InternalError
from ..float_types import FP16, LowPrecision
from .layers import Naming, TrtLayer, mover, named, unnamed
from .spell import Decomposition, Speller, default_fresh, round_graph
from .versions import NEWEST, TrtVersion, VersionRange, between, since

FLOAT = TensorProto.FLOAT

SpellFn = Callable[[Speller], None]

_86 = "release/8.6-GA builtin_op_importers.cpp"
_101 = "10.1-GA onnxOpImporters.cpp/importerUtils.cpp"
_115 = "10.15 onnxOpImporters.cpp"
_ALL = f"read in {_86}, {_101} and {_115}"

TMP_WEIGHT = TrtLayer("Constant (addConstantScalar/createNamedTempWeights)", Naming.HELPER, computes=False,
                      helper="tmp_weight")


@dataclass(frozen=True)
class OpVariant:
    """How one range of TensorRT versions imports the op: ``spell`` writes the layers, or ``layers``
    lists them for an op that is one computing layer."""

    versions: VersionRange
    source: str
    spell: SpellFn | None = None
    layers: tuple[TrtLayer, ...] = ()


@dataclass(frozen=True)
class OpEntry:
    op_type: str
    variants: tuple[OpVariant, ...]

    def variant(self, version: TrtVersion) -> OpVariant | None:
        return next((v for v in self.variants if version in v.versions), None)


# --- spelling functions, one per split importer ---

def _is_reduce_noop(s: Speller) -> bool:
    # IsReduceNoOp (importerUtils.cpp): the importer returns an identity, no reduction at all.
    return s.int_attr("noop_with_empty_axes", 0) == 1 and s.attr("axes") is None and len(s.node.input) == 1


def _noop(s: Speller) -> None:
    s.move(mover("Identity", Naming.HELPER, helper="ONNXTRT_identity"))
    s.nodes.append(helper.make_node("Identity", [s.input(0)], [s.node.output[0]],
                                    name=s.fresh(f"{s.base}__identity")))


def _reduce_sum_square(s: Speller, final: bool = True) -> str:
    x = s.input(0)
    sq = s.layer(unnamed("ElementWise PROD"), "Mul", [x, x])
    return s.reduce_like_node(named("Reduce SUM"), "ReduceSum", sq, final=final)


def spell_reduce_sum_square(s: Speller) -> None:
    if _is_reduce_noop(s):
        return _noop(s)
    _reduce_sum_square(s)


def spell_reduce_l2(s: Speller) -> None:
    if _is_reduce_noop(s):
        return _noop(s)
    s.layer(named("Unary SQRT"), "Sqrt", [_reduce_sum_square(s, final=False)], final=True)


def spell_reduce_log_sum_exp(s: Speller) -> None:
    if _is_reduce_noop(s):
        return _noop(s)
    e = s.layer(named("Unary EXP"), "Exp", [s.input(0)])
    total = s.reduce_like_node(named("Reduce SUM"), "ReduceSum", e)
    s.layer(named("Unary LOG"), "Log", [total], final=True)


def spell_reduce_log_sum(s: Speller) -> None:
    if _is_reduce_noop(s):
        return _noop(s)
    total = s.reduce_like_node(named("Reduce SUM"), "ReduceSum", s.input(0))
    s.layer(named("Unary LOG"), "Log", [total], final=True)


def spell_reduce_l1(s: Speller) -> None:
    if _is_reduce_noop(s):
        return _noop(s)
    a = s.layer(named("Unary ABS"), "Abs", [s.input(0)])
    s.reduce_like_node(named("Reduce SUM"), "ReduceSum", a, final=True)


def spell_log_softmax(s: Speller) -> None:
    axis = s.int_attr("axis", 1 if s.opset < 13 else -1)
    if s.opset < 13:
        s.move(mover("Shuffle (flatten to 2D)", Naming.HELPER, helper="ONNXTRT_flattenTensor"))
    # Softmax has LogSoftmax's axis default and 2D coercion (before opset 13) at every opset.
    p = s.layer(named("SoftMax"), "Softmax", [s.input(0)], axis=axis)
    s.layer(unnamed("Unary LOG"), "Log", [p], final=True)
    s.move(mover("Shuffle (back to the input shape)"))


def spell_cumsum_loop(s: Speller) -> None:
    """The loop importer: a running sum that is a recurrence of the network, so in an FP16 network
    every partial sum is stored in FP16 (a Scan whose body rounds)."""
    x = s.input(0)
    axis = int(s.constant(s.input(1), [0]).ravel()[0])
    exclusive = s.int_attr("exclusive", 0)
    reverse = s.int_attr("reverse", 0)
    if exclusive:  # concat(0, x[:-1]) (or reversed): moves values only
        s.move(mover("Concatenation"))
        s.move(mover("Slice", Naming.HELPER, helper="ONNXTRT_ShapeSlice"))
    s.move(mover("Slice", Naming.HELPER, helper="ONNXTRT_ShapeSlice"))
    s.move(mover("Shuffle", Naming.HELPER, helper="ONNXTRT_squeezeTensor"))
    s.move(mover("Constant+Slice", Naming.HELPER, helper="ONNXTRT_createZeroTensor"))
    first = s.helper_node("Slice", [x, s.int64s([0]), s.int64s([1]), s.int64s([axis])])
    extra, attrs = s.axes_arg("Squeeze", [axis])
    row = s.helper_node("Squeeze", [first] + extra, **attrs)
    zeros = s.helper_node("ConstantOfShape", [s.helper_node("Shape", [row])],
                          value=numpy_helper.from_array(np.zeros(1, dtype=np.float32)))
    s.move(mover("Iterator"))
    s.move(mover("Recurrence"))
    state, x_t = s.fresh(f"{s.base}__running_sum"), s.fresh(f"{s.base}__x_t")
    total = s.fresh(f"{s.base}__running_sum_next")
    body_nodes = [helper.make_node("Add", [state, x_t], [total], name=s.fresh(f"{s.base}__trt_add"))]
    next_state = total
    if s.fp16:
        next_state = s.fresh(f"{total}__rounded")
        body_nodes += round_graph(total, next_state, s.fresh, s.low)
        s.rounded.append(total)
    state_out, scan_out = s.fresh(f"{s.base}__state_out"), s.fresh(f"{s.base}__scan_out")
    body_nodes += [helper.make_node("Identity", [next_state], [state_out], name=s.fresh(f"{s.base}__state")),
                   helper.make_node("Identity", [state if exclusive else next_state], [scan_out],
                                    name=s.fresh(f"{s.base}__scan"))]
    body = helper.make_graph(body_nodes, f"{s.base}__cumsum_loop",
                             [helper.make_tensor_value_info(state, FLOAT, None),
                              helper.make_tensor_value_info(x_t, FLOAT, None)],
                             [helper.make_tensor_value_info(state_out, FLOAT, None),
                              helper.make_tensor_value_info(scan_out, FLOAT, None)])
    s.layers.append((TrtLayer("ElementWise SUM (loop body: the running sum)", Naming.UNNAMED,
                              recurrent=True), total))
    s.nodes.append(helper.make_node(
        "Scan", [zeros, x], [s.fresh(f"{s.base}__final_sum"), s.node.output[0]],
        name=s.fresh(f"{s.base}__trt_loop"),
        body=body, num_scan_inputs=1, scan_input_axes=[axis], scan_input_directions=[reverse],
        scan_output_axes=[axis], scan_output_directions=[reverse]))
    s.move(mover("LoopOutput"))


def spell_mean_variance_normalization(s: Speller) -> None:
    x = s.input(0)
    axes = s.ints_attr("axes") or [0, 2, 3]
    mean = s.reduce(named("Reduce AVG"), "ReduceMean", x, axes, keepdims=1)
    d = s.layer(named("ElementWise SUB"), "Sub", [x, mean])
    sq = s.layer(named("ElementWise PROD"), "Mul", [d, d])
    var = s.reduce(named("Reduce AVG"), "ReduceMean", sq, axes, keepdims=1)
    std = s.layer(named("Unary SQRT"), "Sqrt", [var])
    s.move(TMP_WEIGHT)
    std = s.layer(named("ElementWise SUM"), "Add", [std, s.scalar(1e-9)])
    s.layer(named("ElementWise DIV"), "Div", [d, std], final=True)


def spell_lp_normalization(s: Speller) -> None:
    x = s.input(0)
    axis = s.int_attr("axis", -1)
    p = s.int_attr("p", 2)
    s.move(TMP_WEIGHT)  # the zeros the norm is compared with
    if p == 1:
        norm = s.layer(named("Unary ABS"), "Abs", [x])
    else:
        norm = s.layer(named("ElementWise PROD"), "Mul", [x, x])
    norm = s.reduce(named("Reduce SUM"), "ReduceSum", norm, [axis], keepdims=1)
    if p != 1:
        norm = s.layer(named("Unary SQRT"), "Sqrt", [norm])
    # A zero norm becomes 1 (ONNX would divide 0 by 0): mask = (norm == 0), cast to float, added.
    mask = s.layer(named("ElementWise EQUAL", float_output=False), "Equal", [norm, s.scalar(0.0)])
    s.move(mover("Cast", Naming.HELPER, helper="ONNXTRT_castHelper"))
    norm = s.layer(named("ElementWise SUM"), "Add", [norm, s.helper_node("Cast", [mask], to=FLOAT)])
    s.layer(named("ElementWise DIV"), "Div", [x, norm], final=True)


def spell_rms_normalization(s: Speller) -> None:
    x, scale = s.input(0), s.input(1)
    rank = s.need_rank()
    axis = s.int_attr("axis", -1)
    axis = axis + rank if axis < 0 else axis
    sq = s.layer(named("ElementWise PROD"), "Mul", [x, x])
    mean = s.reduce(named("Reduce AVG"), "ReduceMean", sq, list(range(axis, rank)), keepdims=1)
    s.move(TMP_WEIGHT)
    s.move(mover("Cast", Naming.HELPER, helper="ONNXTRT_castHelper"))  # epsilon to stash_type
    eps = s.float_attr("epsilon", 1e-5)
    mean_eps = s.layer(named("ElementWise SUM"), "Add", [mean, s.scalar(eps)])
    rms = s.layer(named("Unary SQRT"), "Sqrt", [mean_eps])
    normalized = s.layer(named("ElementWise DIV"), "Div", [x, rms])
    s.layer(named("ElementWise PROD"), "Mul", [normalized, scale], final=True)


def normalization_in_input_precision(node: onnx.NodeProto, *, opset: int, fresh: Callable[[str], str],
                                     rank: int | None, low: LowPrecision) -> list[onnx.NodeProto] | None:
    """A LayerNormalization as TensorRT's Normalization layer computes it fed ``low`` in a strongly
    typed network: the importer neither casts X to ``stash_type`` nor may set the compute precision
    (see :attr:`onnx_precision.target.TensorRTTarget.normalizes_in_input_precision`), so the
    statistics are computed, and each step stored, in ``low``: the steps of the decomposed LayerNorm
    the emulation searched, node for node. Its naming is one layer (the op table's). None where it
    is not one output, or its axis counts from the front of a rank not known (then it is emulated as
    one op)."""
    s = Speller(node, opset, fp16=True, fresh=fresh, constants={}, rank=rank, low=low)
    axis = s.int_attr("axis", -1)
    if len([o for o in node.output if o]) != 1 or (rank is None and axis >= 0):
        return None
    x, scale = s.input(0), s.input(1)
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    # the normalised axes are axis to the last: counted from the back, they need no rank
    axes = list(range(axis, 0)) if axis < 0 else list(range(axis, s.need_rank()))
    step = named("Normalization")
    mean = s.reduce(step, "ReduceMean", x, axes, keepdims=1)
    centred = s.layer(step, "Sub", [x, mean])
    variance = s.reduce(step, "ReduceMean", s.layer(step, "Mul", [centred, centred]), axes, keepdims=1)
    std = s.layer(step, "Sqrt", [s.layer(step, "Add", [variance, s.scalar(s.float_attr("epsilon", 1e-5))])])
    normalized = s.layer(step, "Div", [centred, std])
    if bias is None:
        s.layer(step, "Mul", [normalized, scale], final=True)
    else:
        s.layer(step, "Add", [s.layer(step, "Mul", [normalized, scale]), bias], final=True)
    return s.nodes


def spell_mish(s: Speller) -> None:
    x = s.input(0)
    sp = s.layer(named("Activation SOFTPLUS"), "Softplus", [x])
    t = s.layer(named("Activation TANH"), "Tanh", [sp])
    s.layer(named("ElementWise PROD"), "Mul", [x, t], final=True)


def spell_hard_swish(s: Speller) -> None:
    x = s.input(0)
    hs = s.layer(named("Activation HARD_SIGMOID"), "HardSigmoid", [x], alpha=1.0 / 6, beta=0.5)
    s.layer(named("ElementWise PROD"), "Mul", [x, hs], final=True)


def spell_gemm(s: Speller) -> None:
    a, b, c = s.input(0), s.input(1), s.input(2)
    alpha = s.float_attr("alpha", 1.0)
    beta = s.float_attr("beta", 1.0)
    # transA/transB are options of the MatrixMultiply layer, not layers: the Transposes only move values.
    if s.int_attr("transA", 0):
        a = s.helper_node("Transpose", [a], perm=[1, 0])
    if s.int_attr("transB", 0):
        b = s.helper_node("Transpose", [b], perm=[1, 0])
    product = s.layer(named("MatrixMultiply"), "MatMul", [a, b], final=not c and alpha == 1.0)
    if alpha != 1.0:
        s.move(TMP_WEIGHT)
        product = s.layer(unnamed("ElementWise PROD (alpha)"), "Mul", [s.scalar(alpha), product], final=not c)
    if c:
        if beta != 1.0:
            s.move(TMP_WEIGHT)
            c = s.layer(unnamed("ElementWise PROD (beta)"), "Mul", [s.scalar(beta), c])
        s.layer(unnamed("ElementWise SUM (bias)"), "Add", [product, c], final=True)


def _sum_chain(s: Speller, *, final: bool) -> str:
    # elementwiseHelper: one ElementWise layer per extra input, each registered with the node.
    inputs = list(s.node.input)
    total = inputs[0]
    for i, x in enumerate(inputs[1:], start=2):
        total = s.layer(named("ElementWise SUM"), "Add", [total, x], final=final and i == len(inputs))
    return total


def spell_sum(s: Speller) -> None:
    if len(s.node.input) == 1:
        return _noop(s)
    _sum_chain(s, final=True)


def spell_mean(s: Speller) -> None:
    total = _sum_chain(s, final=False)
    s.move(TMP_WEIGHT)
    s.layer(unnamed("ElementWise PROD (1/n)"), "Mul", [total, s.scalar(1.0 / len(s.node.input))], final=True)


# --- the table ---

def _entry(op_type: str, *variants: OpVariant) -> OpEntry:
    return OpEntry(op_type, variants)


_REDUCE = ("DEFINE_BUILTIN_OP_IMPORTER({op}) with importerUtils.cpp reduceTensor/unaryHelper "
           "(both registerLayer)")

TABLE: dict[str, OpEntry] = {e.op_type: e for e in (
    _entry("ReduceSumSquare", OpVariant(
        since("8.6"), f"{_REDUCE.format(op='ReduceSumSquare')}; its x*x addElementWise is never registered; "
                      f"{_ALL}",
        spell_reduce_sum_square)),
    _entry("ReduceL2", OpVariant(
        since("8.6"), f"{_REDUCE.format(op='ReduceL2')}: importReduceSumSquare then unaryHelper(kSQRT); "
                      f"{_ALL}",
        spell_reduce_l2)),
    _entry("ReduceLogSumExp", OpVariant(
        since("8.6"), f"{_REDUCE.format(op='ReduceLogSumExp')}: unaryHelper(kEXP) then importReduceLogSum, "
                      f"no max "
        f"subtracted; {_ALL} (up to 10.1 the opset-18 axes input is not passed on: all axes are reduced)",
        spell_reduce_log_sum_exp)),
    _entry("ReduceLogSum", OpVariant(
        since("8.6"), f"{_REDUCE.format(op='ReduceLogSum')}: importReduceSum then unaryHelper(kLOG); {_ALL}",
        spell_reduce_log_sum)),
    _entry("ReduceL1", OpVariant(
        since("8.6"), f"{_REDUCE.format(op='ReduceL1')}: unaryHelper(kABS) then reduceTensor(kSUM); {_ALL}",
        spell_reduce_l1)),
    _entry("LogSoftmax", OpVariant(
        since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(LogSoftmax): addSoftmax (registerLayer) then "
        f"addUnary(kLOG) and addShuffle, neither registered; {_ALL}", spell_log_softmax)),
    _entry("Softmax", OpVariant(
        since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(Softmax): addSoftmax (registerLayer) then an unregistered "
        f"addShuffle; {_ALL}", layers=(named("SoftMax"), mover("Shuffle (back to the input shape)")))),
    _entry("CumSum",
           OpVariant(between("8.6", "10.7"), "DEFINE_BUILTIN_OP_IMPORTER(CumSum), the loop importer: "
                                             "addLoop, "
                     "addIterator, addRecurrence and addElementWise(kSUM) in the body, addLoopOutput; no "
                     "layer is "
                     f"registered with the node; read in {_86} and {_101}; replaced in 10.8 (Changelog: "
                     f"'Added support "
                     "for dynamic axes and improved performance of CumSum')", spell_cumsum_loop),
           OpVariant(since("10.8"), f"DEFINE_BUILTIN_OP_IMPORTER(CumSum): one addCumulative layer, "
                     f"registered; read in {_115}", layers=(named("Cumulative SUM"),))),
    _entry("MeanVarianceNormalization", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(MeanVarianceNormalization): mean, x-mean, square, mean, "
        f"sqrt, +1e-9 (addConstantScalar), divide, every layer registered; {_ALL}",
        spell_mean_variance_normalization)),
    _entry("LpNormalization", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(LpNormalization): abs or x*x, reduce sum, sqrt, (norm == "
        f"0) added back so a zero norm divides by 1, divide, every computing layer registered; {_ALL}",
        spell_lp_normalization)),
    _entry("RMSNormalization", OpVariant(
        since("10.15"), "DEFINE_BUILTIN_OP_IMPORTER(RMSNormalization): x*x, reduce mean, +epsilon, sqrt, "
                        "divide, "
        f"times scale, every layer registered; read in {_115} (new in 10.15)", spell_rms_normalization)),
    _entry("Mish", OpVariant(
        since("10.0"), "DEFINE_BUILTIN_OP_IMPORTER(Mish): activationHelper(kSOFTPLUS), "
                       "activationHelper(kTANH), "
        f"elementwiseHelper(kPROD), all registered; absent in 9.3, read in 10.0-GA and {_101}", spell_mish)),
    _entry("HardSwish", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(HardSwish): activationHelper(kHARD_SIGMOID, 1/6, 0.5) then "
        f"elementwiseHelper(kPROD), both registered; read in {_86} and {_101}", spell_hard_swish)),
    _entry("Gemm", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(Gemm): addMatrixMultiply (registered), then unregistered "
        f"addElementWise layers for alpha, beta*C and the bias sum; {_ALL}", spell_gemm)),
    _entry("Mean", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(Mean): elementwiseHelper(kSUM) (registered, one layer per "
        f"extra input) then an unregistered kPROD by 1/n; read in {_86} and {_101}", spell_mean)),
    _entry("Sum", OpVariant(
        since("8.6"), "DEFINE_BUILTIN_OP_IMPORTER(Sum): elementwiseHelper(kSUM), one registered layer per "
        f"extra input; read in {_86} and {_101}", spell_sum)),
    _entry("LayerNormalization",
           OpVariant(between("8.6", "10.0"), "DEFINE_BUILTIN_OP_IMPORTER(LayerNormalization): "
                                             "addNormalization "
                     "with setComputePrecision(stash_type), returned by RETURN_FIRST_OUTPUT without "
                     f"registerLayer; read in {_86}, 9.3 and 10.0-GA", layers=(unnamed("Normalization"),)),
           OpVariant(since("10.1"), "DEFINE_BUILTIN_OP_IMPORTER(LayerNormalization): addNormalization(V2), "
                     f"registered; read in {_101} and {_115}", layers=(named("Normalization"),))),
    _entry("GroupNormalization", OpVariant(
        since("8.6"), f"normalizationHelper: two unsqueezeTensor helpers and one registered "
                      f"addNormalization; {_ALL}",
        layers=(mover("Shuffle", Naming.HELPER, helper="ONNXTRT_unsqueezeTensor"),
                mover("Shuffle", Naming.HELPER, helper="ONNXTRT_unsqueezeTensor"), named("Normalization")))),
    _entry("InstanceNormalization",
           OpVariant(between("8.6", "9.3"), "DEFINE_BUILTIN_OP_IMPORTER(InstanceNormalization): the "
                     f"InstanceNormalization plugin unless kNATIVE_INSTANCENORM is set; read in {_86}",
                     layers=(named("PluginV2 InstanceNormalization"),)),
           OpVariant(since("10.0"), "DEFINE_BUILTIN_OP_IMPORTER(InstanceNormalization): normalizationHelper "
                     f"(kNATIVE_INSTANCENORM is on by default since 10.0); read in {_101} and {_115}",
                     layers=(mover("Shuffle", Naming.HELPER, helper="ONNXTRT_unsqueezeTensor"),
                             mover("Shuffle", Naming.HELPER, helper="ONNXTRT_unsqueezeTensor"),
                             named("Normalization")))),
    _entry("Gelu", OpVariant(
        since("10.0"), f"DEFINE_BUILTIN_OP_IMPORTER(Gelu): one activationHelper(kGELU_ERF/kGELU_TANH); "
        f"absent in 9.3, read in {_101} and {_115}", layers=(named("Activation GELU"),))),
    _entry("Softplus", OpVariant(
        since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(Softplus): one activationHelper(kSOFTPLUS); {_ALL}",
        layers=(named("Activation SOFTPLUS"),))),
    # Control flow: the conditional/loop takes the node's name through setName, not registerLayer, and
    # the body's nodes are layers of their own.
    _entry("If", OpVariant(since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(If); {_ALL}", layers=())),
    _entry("Loop", OpVariant(since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(Loop); {_ALL}", layers=())),
    _entry("Scan", OpVariant(since("8.6"), f"DEFINE_BUILTIN_OP_IMPORTER(Scan): the first recurrence is "
                             f"registered; {_ALL}", layers=(mover("Recurrence", Naming.NODE),))),
)}


def variant_for(op_type: str, version: TrtVersion) -> OpVariant | None:
    """The table's variant for ``op_type`` at ``version`` (None: not in the table for that version)."""
    entry = TABLE.get(op_type)
    return entry.variant(version) if entry is not None else None


def _spell(node: onnx.NodeProto, variant: OpVariant, *, opset: int, fp16: bool,
           fresh: Callable[[str], str] | None, constants: Mapping[str, np.ndarray], rank: int | None,
           dry: bool, low: LowPrecision = FP16) -> Decomposition:
    if variant.spell is None:
        raise InternalError(f"{node.op_type}: a single-layer variant has nothing to spell")
    speller = Speller(node, opset, fp16=fp16, fresh=fresh or default_fresh(node), constants=constants,
                      rank=rank, dry=dry, low=low)
    variant.spell(speller)
    return speller.result(variant.source)


def node_layers(node: onnx.NodeProto, version: TrtVersion, *, opset: int,
                constants: Mapping[str, np.ndarray] | None = None) -> tuple[TrtLayer, ...]:
    """The TensorRT layers ``node`` becomes at ``version``, in the order the importer adds them."""
    variant = variant_for(node.op_type, version)
    if variant is None:
        return (named(node.op_type),)
    if variant.spell is None:
        return variant.layers
    spelled = _spell(node, variant, opset=opset, fp16=False, fresh=None, constants=constants or {}, rank=None,
                     dry=True)
    return tuple(layer for layer, _ in spelled.layers)


def decompose(node: onnx.NodeProto, *, opset: int, fp16: bool, version: TrtVersion = NEWEST,
              fresh: Callable[[str], str] | None = None, constants: Mapping[str, np.ndarray] | None = None,
              rank: int | None = None, low: LowPrecision = FP16) -> Decomposition | None:
    """The ONNX nodes computing ``node`` the way TensorRT ``version`` does, one node per layer.

    ``fp16`` rounds every layer's output to the 16-bit type ``low`` (FP16 by default) before the
    next layer reads it (the node's own outputs are left for the caller to round, as for any FP16
    node); with ``fp16=False`` the nodes compute the op in FP32 and match it within float tolerance.
    ``opset`` is the model's default-domain opset; ``fresh(base)`` must return names unused in the
    model (default: names that avoid only the node's own tensors); ``constants`` holds the values
    of constant inputs (initializers, Constant outputs) that an importer needs at build time
    (CumSum's axis); ``rank`` is the rank of input 0 (RMSNormalization needs it). Returns None when
    the node is one computing layer at that version: the generic emulation (compute in FP32, round
    the outputs) is then already what TensorRT does.
    Raises :class:`.spell.DecompositionError` when a needed constant or rank is not given.
    """
    variant = variant_for(node.op_type, version)
    if variant is None or variant.spell is None or node.domain not in ("", "ai.onnx"):
        return None
    spelled = _spell(node, variant, opset=opset, fp16=fp16, fresh=fresh, constants=constants or {}, rank=rank,
                     dry=False, low=low)
    split = len(spelled.computing_layers) > 1 or any(layer.recurrent for layer in spelled.computing_layers)
    return spelled if split else None


def split_op_types(version: TrtVersion) -> frozenset[str]:
    """Op types that may become several computing layers at ``version`` (whether a node does can depend
    on its attributes: a Gemm without bias and alpha 1 is one layer)."""
    return frozenset(op for op, e in TABLE.items()
                     if (v := e.variant(version)) is not None and v.spell is not None)
