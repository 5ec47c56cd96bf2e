"""The 16-bit float types a plan can use, as one table: each type's limits are one row.

Rules, range flags, the oracle's statistics and the rewriter read a type's facts from its row
(:class:`LowPrecision`), never from literals, so a new type (BF16) is one more row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    @property
    def exact_int(self) -> int:
        """Every integer up to this is exact in the type, not every one beyond."""
        return 2 ** (self.significand_bits + 1)


FP16 = LowPrecision("FP16", onnx.TensorProto.FLOAT16, max=65504.0, min_normal=2.0 ** -14,
                    min_subnormal=2.0 ** -24, significand_bits=10)
