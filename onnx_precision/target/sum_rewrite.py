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

import numpy as np
import onnx
from onnx import helper, numpy_helper

REWRITABLE = ("ReduceMean", "GlobalAveragePool")
MARK = "onnx_precision.rewrite"  # metadata key of a node the emulation spells as its rewrite
LONGEST = 1 << 24  # 2^-24 is FP16's smallest subnormal: beyond, the scale is not an FP16 number
REDUCE_SUM_AXES_INPUT = 13  # ReduceSum takes its axes as an input from opset 13


@dataclass(frozen=True)
class SumRewrite:
    """How one mean is written: ReduceSum over ``axes`` of x·2^-``shift``, times 2^shift/``length``."""

    op_type: str
    axes: tuple[int, ...]
    keepdims: int
    length: int  # N, the elements each output sums
    shift: int  # k = ⌈log2 N⌉

    @property
    def scale(self) -> float:
        return 2.0 ** -self.shift

    @property
    def rescale(self) -> float:
        """2^k/N as FP16 holds it (1 where N is a power of two: no Mul after)."""
        return float(np.float16(2.0 ** self.shift / self.length))

    @property
    def form(self) -> str:
        after = "" if self.rescale == 1 else f"·{self.rescale:.6g}"
        return f"ReduceSum(x·2^-{self.shift}){after}"

    @property
    def why(self) -> str:
        return (f"{self.op_type} over {self.length} elements written as {self.form}: its FP16 running sum "
                f"stays within max|x| (a sum of x would pass 65504 where {self.length}·mean|x| does)")


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
    static = all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)
    if len(dims) != len(axes) or not dims or not static:
        return None
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

    as_type = onnx.helper.tensor_dtype_to_np_dtype(constant_type)
    scale = constant(np.array(rewrite.scale, np.float16).astype(as_type), "scale")
    scaled = fresh(f"{out}__prescaled")
    nodes.append(helper.make_node("Mul", [node.input[0], scale], [scaled],
                                  name=fresh(f"{node.name}__prescale"), doc_string=why))
    total = out if rewrite.rescale == 1 else fresh(f"{out}__sum")
    axes: dict = {}
    inputs = [stored(scaled)]
    if opset >= REDUCE_SUM_AXES_INPUT:
        inputs.append(constant(np.array(rewrite.axes, np.int64), "axes"))
    else:
        axes["axes"] = list(rewrite.axes)
    reduce = helper.make_node("ReduceSum", inputs, [total], name=node.name, keepdims=rewrite.keepdims,
                              doc_string=why, **axes)
    nodes.extend([reduce] if sum_nodes is None else sum_nodes(reduce))
    if rewrite.rescale != 1:
        rescale = constant(np.array(rewrite.rescale, np.float16).astype(as_type), "rescale_by")
        nodes.append(helper.make_node("Mul", [stored(total), rescale], [out],
                                      name=fresh(f"{node.name}__rescale"), doc_string=why))
    return nodes
