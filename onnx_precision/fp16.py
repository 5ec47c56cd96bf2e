"""The limits of IEEE half precision that every module reasons with."""

from __future__ import annotations

FP16_MAX = 65504.0  # the largest finite float16
FP16_MIN_NORMAL = 2.0 ** -14  # 6.1e-5: below this, float16 loses relative precision (subnormals)
FP16_MIN_SUBNORMAL = 2.0 ** -24  # 5.96e-8: the smallest nonzero float16
FP16_FLUSH = 2.0 ** -25  # |x| <= this rounds to zero in float16 (the half-way point ties to even, 0)
FP16_EXACT_INT = 2048  # every integer up to 2048 is exact in float16, not every one beyond
