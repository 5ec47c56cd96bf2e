"""The 16-bit float types a plan can use, as one table: each type's limits are one row.

Rules, range flags, the oracle's statistics and the rewriter read a type's facts from its row
(:class:`LowPrecision`), never from literals, so a new type (BF16) is one more row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx


@dataclass(frozen=True)
class LowPrecision:
    """One 16-bit float type's facts."""

    name: str  # as reports spell it: "FP16"
    elem_type: int  # onnx.TensorProto element type
    max: float  # the largest finite value
    min_normal: float  # below it the type loses relative precision (subnormals)
    min_subnormal: float  # the smallest nonzero value
    significand_bits: int  # stored fraction bits (10 for IEEE half)
    type_name: str  # as schemas spell it: "float16"
    cast_opset: int  # the first ai.onnx opset whose Cast takes the type
    # whether onnxruntime's CPU provider has kernels for the type: a model in it then loads and runs
    # there (FP16); BF16 has almost none (Cast, a few data movers), so a BF16 model is for a GPU
    cpu_kernels: bool
    # whether ai.onnx's schemas took the type over many opsets (BF16: most at 13, Conv and the pools at
    # 22), so that a run in it raises an older model's opset for every node that gains it
    # (opset_upgrade); FP16's schemas have it from their first versions: only Q/DQ's scales come late (19)
    late_schemas: bool

    @property
    def precision(self) -> str:
        """Its element type's name in plans and on the command line: "fp16" or "bf16"."""
        return _PRECISION[self.elem_type]

    def round(self, values: np.ndarray) -> np.ndarray:
        """float32 ``values`` as the type stores them, back in float32: round to nearest even,
        overflow to Inf, flush to zero, NaN kept (as ``Cast(to=type) -> Cast(to=FLOAT)``)."""
        return _ROUND[self.elem_type](np.asarray(values, dtype=np.float32))

    @property
    def flush(self) -> float:
        """|x| at or below this rounds to zero (half the smallest subnormal: the tie goes to even, 0)."""
        return self.min_subnormal / 2

    def margins(self, max_abs: float, min_nonzero_abs: float) -> tuple[float, float]:
        """(binades to overflow, binades to underflow) of values with this range: how many doublings
        the largest |x| takes to pass the maximum, and how many halvings the smallest nonzero |x|
        takes to flush to zero; negative where they are past it already, inf where there is no value."""
        if 0 < max_abs < math.inf:
            over = math.log2(self.max / max_abs)
        else:
            over = math.inf if max_abs == 0 else -math.inf
        under = math.log2(min_nonzero_abs / self.flush) if 0 < min_nonzero_abs < math.inf else math.inf
        return over, under

    def scale_binades(self, max_abs: float) -> float:
        """Binades the largest |x| of values lies above the normal minimum (negative: below it). Errors
        are judged against a tensor's scale, its largest values; below the normal minimum the type's
        spacing is fixed (``min_subnormal``), so at a scale of ``min_normal`` a rounding is already as
        coarse relative to it as a normal value's relative precision, and it grows twice as coarse
        each binade lower: a tensor that peaks there keeps only the bits above the subnormal floor."""
        return math.log2(max_abs / self.min_normal) if 0 < max_abs < math.inf else math.inf

    @property
    def range_text(self) -> str:
        """Its range as reasons say it: "FP32's range" for a type with float32's exponent (BF16), else
        "range up to 65504"."""
        return "FP32's range" if self.min_normal == _FLOAT32.tiny else f"range up to {self.max_text}"

    @property
    def max_text(self) -> str:
        """The largest finite value as messages write it: "65504", "3.39e+38"."""
        return f"{self.max:.6g}" if self.max < 1e6 else f"{self.max:.3g}"

    @property
    def tiny_text(self) -> str:
        """The smallest subnormal as messages write it: "6e-8", "9e-41"."""
        mantissa, exponent = f"{self.min_subnormal:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"

    @property
    def exact_int(self) -> int:
        """Every integer up to this is exact in the type, not every one beyond."""
        return 2 ** (self.significand_bits + 1)


def _round_fp16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return values.astype(np.float16).astype(np.float32)


def _round_bf16(values: np.ndarray) -> np.ndarray:
    """BFLOAT16 keeps float32's upper 16 bits: add half an ulp of them plus the kept part's lowest
    bit (ties to even) and cut. A carry out of the significand bumps the exponent, so the largest
    values round to Inf as they should; NaNs are kept (the carry could make one Inf)."""
    bits = np.ascontiguousarray(values).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(np.isnan(values), values, rounded.view(np.float32).reshape(np.shape(values)))


_FLOAT32 = np.finfo(np.float32)
_PRECISION: dict[int, str] = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}
_ROUND: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    onnx.TensorProto.FLOAT16: _round_fp16, onnx.TensorProto.BFLOAT16: _round_bf16}

FP16 = LowPrecision("FP16", onnx.TensorProto.FLOAT16, max=65504.0, min_normal=2.0 ** -14,
                    min_subnormal=2.0 ** -24, significand_bits=10, type_name="float16", cast_opset=1,
                    cpu_kernels=True, late_schemas=False)
# float32's exponent with 7 fraction bits: the largest finite value is (2 - 2**-7) * 2**127.
BF16 = LowPrecision("BF16", onnx.TensorProto.BFLOAT16, max=float((2 - 2.0 ** -7) * 2.0 ** 127),
                    min_normal=2.0 ** -126, min_subnormal=2.0 ** -133, significand_bits=7,
                    type_name="bfloat16", cast_opset=13, cpu_kernels=False, late_schemas=True)
LOW_PRECISIONS = {low.precision: low for low in (FP16, BF16)}
LOW_TYPES: dict[int, LowPrecision] = {low.elem_type: low for low in (FP16, BF16)}  # by element type


def low_of(precision: str) -> LowPrecision:
    """The type for "fp16" or "bf16" (as plans and the command line spell them; a plan's
    ``Precision`` is such a string)."""
    return LOW_PRECISIONS[precision.lower()]
