"""Sums kept in the 16-bit type, emulated in the graph: where a partial sum passes the type's largest value.

Some runtimes accumulate a reduction, a contraction, a Softmax denominator or a normalisation statistic
in FP16 inside the kernel (:mod:`.webgpu`, :mod:`.fp16_accumulate`); the emulation computes each op in
FP32 and would not see the overflow. A target says which op kinds accumulate in its 16-bit type
(:attr:`.Target.accumulation`); :class:`Accumulating` spells each such FP16 node as the node itself
plus a *bound* of the magnitude its accumulator reaches, and where the bound rounds to infinity in the
16-bit type the node's output becomes what the runtime gives there (``Where(bound finite, out, out·r)``:
r = inf for a sum, whose accumulator is then ±inf; r = 0 for a Softmax or a normalisation, whose
division by an infinite denominator or standard deviation gives 0).

The bound is the sum of the magnitudes of the terms (``ReduceSum(|x|)``, ``MatMul(|A|, |B|)``,
``Conv(|x|, |W|)``, Σx² of a variance). For non-negative terms a sequential sum's running value
reaches the full sum, so the bound is exact: the runtime overflows where it does. For terms of both
signs the sum of magnitudes bounds every partial sum from above whatever the order of the terms, so
the emulation is pessimistic there: it may say a sum overflows that cancels before it does. It is
also pessimistic where FP16 rounding stalls a long running sum below 65504 (2048 + 1 rounds to 2048).
The precision lost by rounding each partial sum is not emulated.

Where the target divides a mean's sum by its count of terms held in the 16-bit type
(:attr:`.Target.counts_in_low`: onnxruntime's WebGPU shaders), the output is multiplied by N/N₁₆, N the
count taken at run time (``Size(x)/Size(y)``, so symbolic H×W too) and N₁₆ it as the type holds it: 1
where N is an FP16 number, about 1 ± 2^-12 where it rounds, and 0 from 65520, where N₁₆ is inf and the
runtime's mean is sum/inf = 0 (inf·0 = NaN where the sum overflowed as well, as there).

A decomposed LayerNorm's form (:func:`onnx_precision.policy.written_forms`, marked by
:func:`.sum_rewrite.form_of`) the run pre-scales (:attr:`.Measured.prescaled`: its statistics would pass
65504 on the samples) is spelled as written: Mul(x, 2^-j) rounded, then the node with epsilon·2^-2j and
its check. The written model's LayerNormalization, pre-scaled already, has no mark: spelled as it is.

A mean the rewriter writes as a sum of pre-scaled terms (:mod:`.sum_rewrite`: a node marked so by
:func:`onnx_precision.policy.written_forms`) is spelled as written: the Mul rounded, the ReduceSum checked
on the scaled terms, the Mul after it rounded.

A Softmax over a static axis of fewer than 65504 elements gets no check: its terms exp(x - max) are at
most 1, so its denominator cannot overflow on any data. The check is one comparison of the bound with
the smallest value the 16-bit type rounds to inf (65520), not a Cast pair and a comparison with inf.

A node whose bound the samples prove in range (below 65504/headroom on the FP32 run: :func:`proven_sums`,
held by the run's basis, :attr:`.Measured.proven`) gets no check: the search's graphs and the written model's
verification spell it alike, so what is verified is what was measured. The proof holds on the samples;
the headroom covers other inputs. ``check`` measures the same basis on its samples, so a candidate is
judged as ``convert`` judges the model it writes (a proof names a node of the FP32 model: a candidate's
node of that name whose sum is twice as large would go unchecked).

The check adds a few nodes to each accumulating node's FP16 spelling, so it runs inside the switch,
baked and twin graphs as the node does: a search costs no more sessions.

A float64 node the plan makes 16-bit is emulated in float64 between its rounding pairs (the written model
computes it in FP16): its check, its constants and the rounding pairs of its rewrite are float64 too, the
type read off its input once (:func:`computes_in`), before a rewrite adds tensors of no known type.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..float_types import FP16, LowPrecision
from ..graph import is_onnx_domain, onnx_opset
from ..trt.spell import DecompositionError, Speller, round_graph
from ..typing_rules import WIDE, elem_type, tensor_types
from ..typing_rules.constant_values import small_constant_arrays
from .base import Target
from .commands import Commands, NamedCommands
from .emulation import UNMEASURED, Emulation, Fresh, Measured, OneOp, Spelling
from .quantize import Quantizing
from .sum_rewrite import marked_rewrite, prescaled_layer_norm, rewritten_nodes, written_for

log = logging.getLogger(__name__)

FLOAT = onnx.TensorProto.FLOAT
SMALL_CONSTANT = 64  # elements: the axes a bound reads
FIRST_OPSET = 9  # Where (opset 9) and broadcasting Less (opset 7) spell the check


def computes_in(types: Mapping[str, onnx.TypeProto], name: str) -> int:
    """The element type a check on a node reading ``name`` computes in: ``name``'s own where it is wide (a
    float64 node's emulation holds its FP16 values in float64 between rounding pairs), else FP32 (a
    16-bit tensor of a written model is emulated in FP32; an unknown one is taken as FP32)."""
    elem = elem_type(types.get(name))
    return elem if elem in WIDE else FLOAT


def _writing(node: onnx.NodeProto, out: str, name: str) -> onnx.NodeProto:
    """A copy of ``node`` writing ``name`` in place of ``out``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.output[:] = [name if o == out else o for o in node.output]
    return copy


def _x(s: Speller, i: int = 0) -> str:
    return s.input(i)


def _abs(s: Speller, i: int = 0) -> str:
    return s.helper_node("Abs", [_x(s, i)])


def _sum_over(s: Speller, data: str, axes: list[int]) -> str:
    extra, attrs = s.axes_arg("ReduceSum", axes)
    return s.helper_node("ReduceSum", [data, *extra], keepdims=1, **attrs)


def _sum_like_node(s: Speller, terms: str) -> str:
    """``terms`` summed as the node reduces (its axes, keepdims, noop_with_empty_axes)."""
    axes = s.node_axes()
    if axes is None and s.int_attr("noop_with_empty_axes", 0):
        return terms  # no axis reduced: each term is its own sum
    extra, attrs = s.axes_arg("ReduceSum", axes)
    return s.helper_node("ReduceSum", [terms, *extra], keepdims=s.int_attr("keepdims", 1), **attrs)


def _trailing_axes(s: Speller, first: int) -> list[int]:
    rank = s.need_rank()
    return list(range(first + rank if first < 0 else first, rank))


def _reduce_abs(s: Speller) -> str:  # ReduceSum, ReduceMean, ReduceL1, ReduceLogSum: Σ|x|
    return _sum_like_node(s, _abs(s))


def _reduce_square(s: Speller) -> str:  # ReduceSumSquare, ReduceL2: Σx²
    return _sum_like_node(s, s.helper_node("Mul", [_x(s), _x(s)]))


def _reduce_exp(s: Speller) -> str:  # ReduceLogSumExp as a kernel that sums exp(x) unshifted
    return _sum_like_node(s, s.helper_node("Exp", [_x(s)]))


def _softmax_axes(s: Speller) -> list[int]:
    # From opset 13 Softmax normalises one axis; before, the input is coerced to 2D at ``axis``
    if s.opset >= 13:
        axis = s.int_attr("axis", -1)
        return [axis + s.need_rank() if axis < 0 else axis]
    return _trailing_axes(s, s.int_attr("axis", 1))


def _softmax_denominator(s: Speller) -> str:  # Σexp(x - max) over the normalised axes
    axes = _softmax_axes(s)
    extra, attrs = s.axes_arg("ReduceMax", axes)
    top = s.helper_node("ReduceMax", [_x(s), *extra], keepdims=1, **attrs)
    return _sum_over(s, s.helper_node("Exp", [s.helper_node("Sub", [_x(s), top])]), axes)


def _contraction(s: Speller) -> str:  # MatMul, Gemm, Conv, ConvTranspose on |inputs|, without bias
    a, b = _abs(s, 0), _abs(s, 1)
    attrs = {at.name: helper.get_attribute_value(at) for at in s.node.attribute
             if at.name not in ("alpha", "beta")}
    return s.helper_node(s.node.op_type, [a, b], **attrs)


def _average_pool(s: Speller) -> str:  # the window's Σ|x| <= its mean of |x| times the window's size
    attrs = {a.name: helper.get_attribute_value(a) for a in s.node.attribute}
    mean = s.helper_node("AveragePool", [_abs(s)], **attrs)
    size = int(np.prod(s.ints_attr("kernel_shape") or [1]))
    return s.helper_node("Mul", [mean, s.scalar(float(size))])


def _global_average_pool(s: Speller) -> str:  # Σ|x| over the spatial axes
    return _sum_over(s, _abs(s), _trailing_axes(s, 2))


def _cumsum(s: Speller) -> str:  # each output's running Σ|x|
    attrs = {a.name: helper.get_attribute_value(a) for a in s.node.attribute}
    return s.helper_node("CumSum", [_abs(s), _x(s, 1)], **attrs)


def _statistics(s: Speller, axes: list[int]) -> str:
    """A normalisation's statistics: max(Σ|x|, Σx²) over ``axes`` (the mean's sum and the one-pass
    variance's sum of squares, which bounds the two-pass Σ(x - mean)² too)."""
    squares = s.helper_node("Mul", [_x(s), _x(s)])
    return s.helper_node("Max", [_sum_over(s, _abs(s), axes), _sum_over(s, squares, axes)])


def _layer_norm(s: Speller) -> str:  # LayerNormalization, RMSNormalization: axis to the last
    return _statistics(s, _trailing_axes(s, s.int_attr("axis", -1)))


def _instance_norm(s: Speller) -> str:
    return _statistics(s, _trailing_axes(s, 2))


def _mvn(s: Speller) -> str:
    return _statistics(s, s.ints_attr("axes") or [0, 2, 3])


COUNTED = frozenset({"ReduceMean", "GlobalAveragePool"})  # means whose count is Size(x)/Size(y)


def _count_ratio(s: Speller, out: str, low: LowPrecision) -> str:
    """N/N₁₆ for a mean writing ``out``: N = Size(x)/Size(out) terms per output, N₁₆ = N held in ``low``
    (the sizes divided in FP32: an empty output gives 0/0, over no element), in the type the mean
    computes in (``s.wide``)."""
    def size(name: str) -> str:
        return s.helper_node("Cast", [s.helper_node("Size", [name])], to=FLOAT)

    count = s.helper_node("Div", [size(_x(s)), size(out)])
    held = s.helper_node("Cast", [s.helper_node("Cast", [count], to=low.elem_type)], to=FLOAT)
    ratio = s.helper_node("Div", [count, held])
    return ratio if s.wide == FLOAT else s.helper_node("Cast", [ratio], to=s.wide)


@functools.cache
def overflow_threshold(low: LowPrecision) -> float:
    """The smallest FP32 value ``low`` rounds to infinity (65520 for FP16: halfway past 65504, ties to even):
    a bound is finite as the 16-bit accumulator holds it iff it is below this, one comparison where a
    Cast pair and a comparison with inf were three passes over the output."""
    finite, infinite = (int(b) for b in np.array([low.max, np.inf], np.float32).view(np.int32))
    while infinite - finite > 1:  # bisect the FP32 bit patterns between the two: they are ordered
        middle = (finite + infinite) // 2
        if np.isinf(low.round(np.array(middle, np.int32).view(np.float32))):
            infinite = middle
        else:
            finite = middle
    return float(np.array(infinite, np.int32).view(np.float32))


@dataclass(frozen=True)
class Overflow:
    """How an op kind's accumulator is bounded, and what its output becomes where the bound overflows."""

    bound: Callable[[Speller], str]  # the bound's tensor, broadcastable to output 0
    becomes: float  # the output is multiplied by it there: inf (a sum), 0 (divided by an infinite sum)
    terms: str  # what is summed, for the README and messages


_SUM, _DIVIDED = float("inf"), 0.0
OVERFLOWS: Mapping[str, Overflow] = {
    "ReduceSum": Overflow(_reduce_abs, _SUM, "Σ|x| over the reduced axes"),
    "ReduceMean": Overflow(_reduce_abs, _SUM, "Σ|x| over the reduced axes (divided by their count after)"),
    "ReduceL1": Overflow(_reduce_abs, _SUM, "Σ|x| over the reduced axes"),
    "ReduceLogSum": Overflow(_reduce_abs, _SUM, "Σ|x| over the reduced axes"),
    "ReduceSumSquare": Overflow(_reduce_square, _SUM, "Σx² over the reduced axes"),
    "ReduceL2": Overflow(_reduce_square, _SUM, "Σx² over the reduced axes"),
    "ReduceLogSumExp": Overflow(_reduce_exp, _SUM, "Σexp(x) over the reduced axes"),
    "MatMul": Overflow(_contraction, _SUM, "Σ|a·b| over the contracted axis"),
    "Gemm": Overflow(_contraction, _SUM, "Σ|a·b| over the contracted axis (before alpha, beta·C)"),
    "Conv": Overflow(_contraction, _SUM, "Σ|x·w| over each output's window and input channels"),
    "ConvTranspose": Overflow(_contraction, _SUM, "Σ|x·w| over each output's contributions"),
    "AveragePool": Overflow(_average_pool, _SUM, "Σ|x| over the window"),
    "GlobalAveragePool": Overflow(_global_average_pool, _SUM, "Σ|x| over H×W"),
    "CumSum": Overflow(_cumsum, _SUM, "the running Σ|x|"),
    "Softmax": Overflow(_softmax_denominator, _DIVIDED, "the denominator Σexp(x - max)"),
    "LogSoftmax": Overflow(_softmax_denominator, _SUM, "the denominator Σexp(x - max)"),
    "LayerNormalization": Overflow(_layer_norm, _DIVIDED, "the statistics Σ|x| and Σx²"),
    "RMSNormalization": Overflow(_layer_norm, _DIVIDED, "the statistic Σx²"),
    "InstanceNormalization": Overflow(_instance_norm, _DIVIDED, "the statistics Σ|x| and Σx² over H×W"),
    "MeanVarianceNormalization": Overflow(_mvn, _DIVIDED, "the statistics Σ|x| and Σx² over its axes"),
}


class Accumulating(Spelling):
    """Spells FP16 nodes as ``inner`` does, with the overflow check of each node whose op kind the target
    accumulates in the 16-bit type (``fp16``: those op kinds; each has an :data:`OVERFLOWS` entry)."""

    def __init__(self, inner: Spelling, fp16: frozenset[str], opset: int, types: Mapping[str, onnx.TypeProto],
                 constants: Mapping[str, np.ndarray], fresh: Fresh,
                 counted: frozenset[str] = frozenset(), proven: frozenset[str] = frozenset(),
                 prescaled: Mapping[str, int] | None = None) -> None:
        self.inner = inner
        self.proven = proven  # nodes spelled without the check: their bound is proven in range
        self.prescaled = prescaled or {}  # LayerNormalizations written on x·2^-j (name -> j)
        self.fp16 = fp16
        self.counted = counted & COUNTED  # means dividing by their count held in the 16-bit type
        self.opset = opset
        self.types = types
        self.constants = constants
        self.fresh = fresh

    def _rank(self, name: str) -> int | None:
        t = self.types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return len(t.tensor_type.shape.dim)

    def spell(self, node: onnx.NodeProto, low: LowPrecision = FP16) -> list[onnx.NodeProto]:
        # the type the node computes in, looked up once on its own input: the tensors the rewrites
        # below add between rounding pairs have no type here
        wide = computes_in(self.types, node.input[0]) if node.input else FLOAT
        rewrite = marked_rewrite(node)
        if rewrite is not None and low.elem_type == onnx.TensorProto.FLOAT16:  # written as its rewrite
            return rewritten_nodes(rewrite, node, self.opset, self.fresh, wide, self._rounded(low, wide),
                                   lambda reduce: self._checked(reduce, low, wide))
        form = written_for(node) if node.op_type == "LayerNormalization" else None
        shift = None if form is None else self.prescaled.get(form)
        if shift is not None and low.elem_type == onnx.TensorProto.FLOAT16:  # written on x·2^-j
            *scaling, scaled = prescaled_layer_norm(node, shift, self.fresh, wide, self._rounded(low, wide))
            return scaling + self._checked(scaled, low, wide, node.input[0])
        return self._checked(node, low, wide)

    def _rounded(self, low: LowPrecision, wide: int) -> Callable[[str], tuple[str, list[onnx.NodeProto]]]:
        """A tensor the written model stores in ``low`` between two nodes, as the emulation holds it (in
        ``wide``, the type the node computes in)."""
        def rounded(name: str) -> tuple[str, list[onnx.NodeProto]]:
            held = self.fresh(f"{name}__rounded")
            return held, round_graph(name, held, self.fresh, low, wide)
        return rounded

    def _checked(self, node: onnx.NodeProto, low: LowPrecision, wide: int,
                 shaped: str = "") -> list[onnx.NodeProto]:
        """``node`` as ``inner`` spells it, with its overflow check where its op kind sums in FP16, in
        ``wide`` (its input's rank that of ``shaped`` where given: a tensor the emulation adds has no type
        here)."""
        spelled = self.inner.spell(node, low)
        if node.op_type not in self.fp16 or not is_onnx_domain(node.domain) or self.opset < FIRST_OPSET \
                or self._bounded_by_length(node, low):
            return spelled
        counted = node.op_type in self.counted
        s = self._speller(node, shaped or node.input[0], wide)
        bound = None if node.name in self.proven else self._bound(s)
        if bound is None and not counted:
            return spelled
        out = node.output[0]
        exact = self.fresh(f"{out}__accumulated")
        renamed = [_writing(n, out, exact) for n in spelled]
        result = exact
        if bound is not None:
            result = out if not counted else self.fresh(f"{out}__summed")
            self._overflowed(s, bound, exact, result, low)
        if counted:
            s.nodes.append(helper.make_node("Mul", [result, _count_ratio(s, exact, low)], [out],
                                            name=self.fresh(f"{node.name}__fp16_count")))
        return renamed + s.nodes

    def _speller(self, node: onnx.NodeProto, shaped: str, wide: int) -> Speller:
        return Speller(node, self.opset, fp16=False, fresh=self.fresh, constants=self.constants,
                       rank=self._rank(shaped), wide=wide)

    def _bound(self, s: Speller) -> str | None:
        """The node's accumulator bound (:data:`OVERFLOWS`), or None where an axis or rank is not known
        here: then no check (said at debug level)."""
        try:
            return OVERFLOWS[s.node.op_type].bound(s)
        except DecompositionError as e:
            log.debug("%s: FP16 accumulation not emulated (%s)", s.node.name, e)
            s.nodes = []
            return None

    def _overflowed(self, s: Speller, bound: str, exact: str, result: str, low: LowPrecision) -> None:
        """``result`` = ``exact`` where ``bound`` as the 16-bit accumulator holds it is finite, else what the
        runtime gives (``exact`` times :attr:`Overflow.becomes`)."""
        finite = s.helper_node("Less", [bound, self._constant(s, overflow_threshold(low))])
        overflowed = s.helper_node("Mul", [exact, self._constant(s, OVERFLOWS[s.node.op_type].becomes)])
        s.nodes.append(helper.make_node("Where", [finite, exact, overflowed], [result],
                                        name=self.fresh(f"{s.node.name}__fp16_sum")))

    def _bounded_by_length(self, node: onnx.NodeProto, low: LowPrecision) -> bool:
        """Whether a Softmax's denominator cannot overflow: Σexp(x - max) sums terms of at most 1, so over a
        static axis of fewer than ``low.max`` elements it stays finite whatever the data (no check)."""
        if node.op_type not in ("Softmax", "LogSoftmax"):
            return False
        t = self.types.get(node.input[0])
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return False
        dims = t.tensor_type.shape.dim
        try:
            axes = _softmax_axes(Speller(node, self.opset, fp16=False, fresh=self.fresh, constants={},
                                         rank=len(dims)))
        except DecompositionError:
            return False
        sizes = [dims[a].dim_value if 0 <= a < len(dims) and dims[a].HasField("dim_value") else 0
                 for a in axes]
        return all(sizes) and math.prod(sizes) < low.max

    def _constant(self, s: Speller, value: float) -> str:
        out = self.fresh(f"{s.node.output[0]}__const")
        tensor = numpy_helper.from_array(np.array(value, helper.tensor_dtype_to_np_dtype(s.wide)), out)
        s.nodes.append(helper.make_node("Constant", [], [out], name=self.fresh(f"{out}__node"), value=tensor))
        return out

    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        return self.inner.layer_kinds(node)


@dataclass(frozen=True)
class SumsInFp16(Target):
    """A target whose kernels keep some sums in FP16 (:attr:`Target.accumulation`), selected by ``--target``
    and its name: each FP16 node is emulated as one op with the overflow check of the op kinds it sums in
    FP16 (:class:`AccumulatingEmulation`)."""

    low: LowPrecision = FP16
    fallback: LowPrecision | None = None

    def onnxruntime_kernels(self, low: LowPrecision) -> bool:
        # the written model is loaded by onnxruntime (a WebGPU build, its DML provider) or converted from
        # the ONNX model (CoreML): what its CPU provider cannot load in a 16-bit type, those cannot either
        return low.cpu_kernels

    @property
    def emulation(self) -> Emulation:
        fp16 = frozenset(op for op, how in self.accumulation.items() if how == "fp16")
        return AccumulatingEmulation(fp16, self.counts_in_low & fp16, self.quantizes_by_reciprocal)

    @property
    def commands(self) -> Commands:
        return NamedCommands(self.low, self.name)  # its --target name is its name


@dataclass(frozen=True)
class AccumulatingEmulation(Emulation):
    """Each FP16 node as one op with the overflow check of the op kinds ``fp16`` summed in FP16
    (:class:`Accumulating`), but on the nodes the run proved in range (:attr:`.Measured.proven`), and the
    LayerNormalizations it pre-scaled as written on x·2^-j (:attr:`.Measured.prescaled`); ``counted``: the
    means dividing by their count held in FP16; ``reciprocal``: :attr:`.Target.quantizes_by_reciprocal`."""

    fp16: frozenset[str]
    counted: frozenset[str] = frozenset()
    reciprocal: bool = False

    def spelling(self, model: onnx.ModelProto, base_dir: str, types: Mapping[str, onnx.TypeProto] | None,
                 fresh: Fresh, measured: Measured = UNMEASURED) -> Spelling:
        spelled = Accumulating(OneOp(), self.fp16, onnx_opset(model, 13),
                               tensor_types(model) if types is None else types,
                               small_constant_arrays(model, base_dir, SMALL_CONSTANT), fresh,
                               self.counted, measured.proven, dict(measured.prescaled))
        return Quantizing(spelled, self.reciprocal, fresh)


def proven_sums(bounds: Mapping[str, float], low: LowPrecision, headroom: float) -> frozenset[str]:
    """The nodes whose accumulator bound, measured on the samples' FP32 run (node -> its largest bound,
    :class:`onnx_precision.oracle.accumulated.AccumulationBounds`), stays below ``low``'s largest value
    divided by ``headroom``: their overflow check is dropped, as the headroom pins assume a tensor within
    65504/headroom on the samples stays finite (none with ``headroom`` 0, headroom pins off).

    The proof is exact on the samples only; the headroom is what covers other inputs, and the 16-bit
    rounding of the plan's inputs and weights (a relative 2^-11 each). A mean's count held in FP16 is a
    fact of its length, not of the data: it stays emulated."""
    if headroom < 1:
        return frozenset()
    return frozenset(node for node, bound in bounds.items() if bound * headroom < low.max)
