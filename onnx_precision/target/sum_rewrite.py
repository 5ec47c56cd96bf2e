"""Means rewritten to stay in FP16 where the runtime sums in FP16: ReduceSum over pre-scaled terms.

``ReduceMean(x)`` over N elements and ``GlobalAveragePool(x)`` (N = H×W) sum N terms and divide after;
where the kernel's accumulator is FP16 (:mod:`.webgpu`, :mod:`.fp16_accumulate`) the running sum passes
65504 once N·mean|x| does (:mod:`.accumulation`). Written as ``ReduceSum(x · 2^-k) · 2^k/N`` with
k = ⌈log2 N⌉, every partial sum, in any order, is at most Σ|x|·2^-k ≤ max|x|: the sum cannot overflow,
whatever the data. The node keeps its name on the ReduceSum (runtimes name layers after nodes); the Muls
before and after it get derived names and a ``doc_string`` that says why.

Why a power of two and not 1/N: 2^-k is exact in FP16 (k ≤ 24), and so is x·2^-k wherever it stays
above FP16's normal minimum 2^-14; 2^k/N lies in [1, 2) and rounds once, by at most 2^-12 relative, the
size of the output's own rounding. 1/N itself is subnormal in FP16 from N = 2^14 and would bias every
mean by up to 3% at N = 10^6.

Over symbolic axes (PP-OCR's H×W) N is known at run time only: the written model computes it from the
input's shape (``ReduceProd(Gather(Shape(x), axes))``), k as the count of the powers of two 2^0..2^23 below
N (exact integer arithmetic: no logarithm whose rounding could miss a power of two; k stops at 24, past
N = 2^24 the partial sums may pass max|x| by N/2^24), 2^-k by a Gather from a table of FP16 powers of two
(exact) and 2^k/N in FP32, then cast to FP16 (in [1, 2): one rounding, as above). These are a few nodes of
shape arithmetic on the host; the mean is never divided by N in FP16, whose count onnxruntime's WebGPU
shader holds as inf from 65520 (:mod:`.webgpu`).

What the rewrite does not guarantee:

* terms |x|·2^-k below 2^-14 (|x| < 2^(k-14), about N/16384) are subnormal in FP16 and keep fewer bits:
  ~0.2% of each term at |x| = 1 and N = 2^16, 12% at N = 2^22. The emulation rounds the scaled terms,
  so it measures this on the samples (and the search pins the node FP32 where it fails);
* the kernel rounds each partial sum to FP16, and a running sum stops growing once a term falls below
  half its ulp: after about 2^11 terms of similar size per accumulator, in the rewritten form as in the
  original (floating point has no preferred scale). The emulation sums in FP32 and does not show this
  (see :mod:`.accumulation`); neither form is exact there, the rewritten one only cannot overflow.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

REWRITABLE = ("ReduceMean", "GlobalAveragePool")
MARK = "onnx_precision.rewrite"  # metadata key of a node the emulation spells as its rewrite
FORM_OF = "onnx_precision.form_of"  # metadata key of a form the emulation computes: the node it replaces
LONGEST = 1 << 24  # 2^-24 is FP16's smallest subnormal: beyond, the scale is not an FP16 number
REDUCE_SUM_AXES_INPUT = 13  # ReduceSum takes its axes as an input from opset 13


@dataclass(frozen=True)
class SumRewrite:
    """How one mean is written: ReduceSum over ``axes`` of x·2^-``shift``, times 2^shift/``length``."""

    op_type: str
    axes: tuple[int, ...]
    keepdims: int
    length: int | None  # N, the elements each output sums; None where a summed axis is symbolic
    shift: int | None  # k = ⌈log2 N⌉ (None: computed at run time)
    dims: str = ""  # the summed axes as the model declares them ("H×W"), where N is symbolic

    @property
    def scale(self) -> float:
        assert self.shift is not None
        return 2.0 ** -self.shift

    @property
    def rescale(self) -> float:
        """2^k/N as FP16 holds it (1 where N is a power of two: no Mul after)."""
        assert self.shift is not None and self.length is not None
        return float(np.float16(2.0 ** self.shift / self.length))

    @property
    def form(self) -> str:
        if self.length is None:
            return f"ReduceSum(x·2^-k)·2^k/N, N = {self.dims} and k = ⌈log2 N⌉ at run time"
        after = "" if self.rescale == 1 else f"·{self.rescale:.6g}"
        return f"ReduceSum(x·2^-{self.shift}){after}"

    @property
    def why(self) -> str:
        n = self.dims if self.length is None else str(self.length)
        return (f"{self.op_type} over {n} elements written as {self.form}: its FP16 running sum "
                f"stays within max|x| (a sum of x would pass 65504 where {n}·mean|x| does)")


def sum_rewrite(node: onnx.NodeProto, input_type: onnx.TypeProto | None,
                constants: Mapping[str, np.ndarray]) -> SumRewrite | None:
    """``node``'s rewrite, where it is a mean over a static number of elements (2 to 2^24); else None."""
    shape = input_type.tensor_type.shape if input_type is not None and input_type.HasField("tensor_type") \
        and input_type.tensor_type.HasField("shape") else None
    if node.op_type not in REWRITABLE or shape is None:
        return None
    rank = len(shape.dim)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "GlobalAveragePool":
        axes, keepdims = list(range(2, rank)), 1
    else:
        keepdims = int(attrs.get("keepdims", 1))
        given = attrs.get("axes")
        if given is None and len(node.input) > 1 and node.input[1]:
            if node.input[1] not in constants:
                return None
            given = [int(a) for a in np.ravel(constants[node.input[1]])]
        if not given and attrs.get("noop_with_empty_axes", 0):
            return None  # no axis reduced: nothing summed
        axes = list(range(rank)) if not given else sorted(a + rank if a < 0 else a for a in given)
    dims = [shape.dim[a] for a in axes if 0 <= a < rank]
    if len(dims) != len(axes) or not dims:
        return None
    if not all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):  # N taken at run time
        named = "×".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
        return SumRewrite(node.op_type, tuple(axes), keepdims, None, None, named)
    length = math.prod(d.dim_value for d in dims)
    if not 2 <= length <= LONGEST:
        return None
    return SumRewrite(node.op_type, tuple(axes), keepdims, length, math.ceil(math.log2(length)))


def marked(node: onnx.NodeProto, rewrite: SumRewrite) -> onnx.NodeProto:
    """A copy of ``node`` the emulation spells as its rewrite where it computes in FP16 (onnxruntime runs
    it as the node itself where it is FP32, as the model written keeps it): the rewrite rides along in
    its metadata, so the copies the emulation makes of the node carry it."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.metadata_props.add(key=MARK, value=json.dumps(dataclasses.asdict(rewrite)))
    return copy


def marked_rewrite(node: onnx.NodeProto) -> SumRewrite | None:
    """The rewrite :func:`marked` gave ``node``, or None."""
    for prop in node.metadata_props:
        if prop.key == MARK:
            fields = json.loads(prop.value)
            return SumRewrite(**{**fields, "axes": tuple(fields["axes"])})
    return None


Stored = Callable[[str], tuple[str, list[onnx.NodeProto]]]  # a tensor -> (its name as held, nodes)


def rewritten_nodes(rewrite: SumRewrite, node: onnx.NodeProto, opset: int, fresh: Callable[[str], str],
                    constant_type: int, between: Stored | None = None,
                    sum_nodes: Callable[[onnx.NodeProto], list[onnx.NodeProto]] | None = None,
                    ) -> list[onnx.NodeProto]:
    """``node`` (reading its x, writing its output) as Mul(x, 2^-k), ReduceSum named as ``node`` and,
    unless N is a power of two, Mul(·, 2^k/N). Constants are of ``constant_type`` (FP16 values either
    way); ``between`` gives each FP16 tensor the written model stores between them as the emulation
    holds it (rounded: the name and the nodes), and ``sum_nodes`` spells the ReduceSum (the emulation
    adds its overflow check)."""
    out = node.output[0]
    why = f"onnx-precision: {rewrite.why}"
    nodes: list[onnx.NodeProto] = []

    def stored(name: str) -> str:
        if between is None:
            return name
        held, extra = between(name)
        nodes.extend(extra)
        return held

    def constant(value: np.ndarray, base: str) -> str:
        name = fresh(f"{node.name}__{base}")
        nodes.append(helper.make_node("Constant", [], [name], name=fresh(f"{name}__node"), doc_string=why,
                                      value=numpy_helper.from_array(value, name)))
        return name

    def computed(op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
        name = fresh(f"{node.name}__{base}")
        nodes.append(helper.make_node(op_type, inputs, [name], name=fresh(f"{name}__node"), doc_string=why,
                                      **attrs))
        return name

    as_type = onnx.helper.tensor_dtype_to_np_dtype(constant_type)
    rescale: str | None
    if rewrite.length is None:
        scale, rescale = _scales_at_run_time(rewrite, node.input[0], constant, computed, constant_type)
    else:
        scale = constant(np.array(rewrite.scale, np.float16).astype(as_type), "scale")
        rescale = None if rewrite.rescale == 1 else constant(
            np.array(rewrite.rescale, np.float16).astype(as_type), "rescale_by")
    scaled = fresh(f"{out}__prescaled")
    nodes.append(helper.make_node("Mul", [node.input[0], scale], [scaled],
                                  name=fresh(f"{node.name}__prescale"), doc_string=why))
    total = out if rescale is None else fresh(f"{out}__sum")
    axes: dict = {}
    inputs = [stored(scaled)]
    if opset >= REDUCE_SUM_AXES_INPUT:
        inputs.append(constant(np.array(rewrite.axes, np.int64), "axes"))
    else:
        axes["axes"] = list(rewrite.axes)
    reduce = helper.make_node("ReduceSum", inputs, [total], name=node.name, keepdims=rewrite.keepdims,
                              doc_string=why, **axes)
    nodes.extend([reduce] if sum_nodes is None else sum_nodes(reduce))
    if rescale is not None:
        nodes.append(helper.make_node("Mul", [stored(total), rescale], [out],
                                      name=fresh(f"{node.name}__rescale"), doc_string=why))
    return nodes


def form_of(form: onnx.NodeProto, node: str) -> onnx.NodeProto:
    """A copy of ``form`` saying it is written in place of ``node``: the emulation renames its copies of
    a form, and the target knows the LayerNormalizations it pre-scales by the pattern's name (the model
    written has no such mark: its LayerNormalization is already pre-scaled)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(form)
    copy.metadata_props.add(key=FORM_OF, value=node)
    return copy


def written_for(node: onnx.NodeProto) -> str | None:
    """The node ``node`` is the emulated form of (:func:`form_of`), or None."""
    return next((prop.value for prop in node.metadata_props if prop.key == FORM_OF), None)


def prescaled_layer_norm(node: onnx.NodeProto, shift: int, fresh: Callable[[str], str], constant_type: int,
                         between: Stored | None = None) -> list[onnx.NodeProto]:
    """The LayerNormalization ``node`` as ``LayerNormalization(x·2^-shift, epsilon·2^-2·shift)``: exact up
    to rounding (a LayerNorm is scale-invariant but for epsilon, scaled with the variance), its output
    not scaled back. Its FP16 statistics sum terms 2^shift smaller and squares 4^shift smaller. The Mul
    is ``<node>__prescale``, its constant of ``constant_type`` (an FP16 power of two either way);
    ``between`` gives the scaled x as the emulation holds it (rounded to FP16)."""
    why = (f"onnx-precision: x scaled by 2^-{shift} and epsilon by 2^-{2 * shift} so that this "
           f"LayerNormalization's statistics (Σ|x|, Σx²) stay within 65504 where a runtime sums them in FP16")
    as_type = onnx.helper.tensor_dtype_to_np_dtype(constant_type)
    scale = fresh(f"{node.name}__prescale_by")
    scaled = fresh(f"{node.input[0]}__prescaled")
    value = numpy_helper.from_array(np.array(2.0 ** -shift, np.float16).astype(as_type), scale)
    nodes = [helper.make_node("Constant", [], [scale], name=fresh(f"{scale}__node"), doc_string=why,
                              value=value),
             helper.make_node("Mul", [node.input[0], scale], [scaled], name=fresh(f"{node.name}__prescale"),
                              doc_string=why)]
    if between is not None:
        scaled, extra = between(scaled)
        nodes.extend(extra)
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.metadata_props[:]  # spelled as it is now: pre-scaled once
    copy.input[0] = scaled
    copy.doc_string = why
    epsilon = next((a for a in copy.attribute if a.name == "epsilon"), None)
    if epsilon is None:  # LayerNormalization's default
        epsilon = copy.attribute.add()
        epsilon.CopyFrom(helper.make_attribute("epsilon", 1e-5))
    epsilon.f *= 2.0 ** (-2 * shift)
    return [*nodes, copy]


POWERS = 24  # 2^0..2^23: k = how many lie below N, at most 24 (2^-24 is FP16's smallest subnormal)


def _scales_at_run_time(rewrite: SumRewrite, x: str, constant: Callable[[np.ndarray, str], str],
                        computed: Callable[..., str], constant_type: int) -> tuple[str, str]:
    """2^-k and 2^k/N (FP16 values, of ``constant_type``) computed from ``x``'s shape: N the product of
    the summed dims, k the count of the powers of two below N (⌈log2 N⌉, exactly, for N <= 2^24)."""
    as_type = onnx.helper.tensor_dtype_to_np_dtype(constant_type)
    dims = computed("Gather", [computed("Shape", [x], "shape"), constant(np.array(rewrite.axes, np.int64),
                                                                         "summed_axes")], "summed_dims")
    count = computed("ReduceProd", [dims], "count", keepdims=0)
    below = computed("Less", [constant(2 ** np.arange(POWERS, dtype=np.int64), "powers"), count], "below")
    shift = computed("ReduceSum", [computed("Cast", [below], "below_count", to=onnx.TensorProto.INT64)],
                     "shift", keepdims=0)
    scales = 2.0 ** -np.arange(POWERS + 1)
    table = constant(scales.astype(np.float16).astype(as_type), "scales")
    scale = computed("Gather", [table, shift], "scale")
    powers = constant(2.0 ** np.arange(POWERS + 1, dtype=np.float32), "powers_of_two")
    n = computed("Cast", [count], "count_float", to=onnx.TensorProto.FLOAT)
    exact = computed("Div", [computed("Gather", [powers, shift], "power"), n], "exact_rescale")
    rescale = computed("Cast", [exact], "rescale_fp16", to=onnx.TensorProto.FLOAT16)
    if constant_type != onnx.TensorProto.FLOAT16:  # the emulation: FP16 values held in FP32
        rescale = computed("Cast", [rescale], "rescale_by", to=constant_type)
    return scale, rescale
