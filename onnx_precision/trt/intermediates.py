"""Static facts about the intermediate tensors TensorRT stores in FP16, as pure functions.

Each function answers, from value ranges a rule already has (recorded samples or bounds), whether
a layer that onnx-tensorrt adds inside an op (see :mod:`.ops`) overflows, underflows or stalls in
FP16, where computing the whole op in FP32 and rounding its output would not. Which op needs which:

=========================  ==============================================================
ReduceSumSquare, ReduceL2  :func:`square_overflows` (x*x), :func:`sum_of_squares_overflows`
LpNormalization (p=2)      the same, along the normalized axis
RMSNormalization           :func:`square_overflows` (x*x before the mean)
MeanVarianceNormalization  :func:`square_overflows` of x - mean
ReduceLogSumExp            :func:`exp_overflows`, :func:`sum_of_exps_overflows` (no max subtracted)
ReduceLogSum, ReduceL1     :func:`sum_overflows` (the sum before LOG / of the absolute values)
Mean, Sum (3+ inputs)      :func:`sum_overflows` (the running sum of the inputs)
Gemm with bias or alpha    :func:`exceeds_fp16` of the product before alpha and bias
LogSoftmax                 :func:`log_softmax_underflows` (probabilities flush before LOG)
CumSum, TensorRT <= 10.7   :func:`cumsum_loop_stalls` (the running sum is stored in FP16)
=========================  ==============================================================
"""

from __future__ import annotations

import math

from ..float_types import FP16, LowPrecision

FP16_MAX = FP16.max
# The smallest FP16 subnormal: a probability below it cannot be stored (it rounds to 0 or to 2**-24).
FP16_TINY = FP16.min_subnormal
LOG_FP16_MAX = math.log(FP16_MAX)  # 11.09: exp(x) exceeds FP16 above it
LOG_FP16_TINY = -math.log(FP16_TINY)  # 16.64: exp(-gap) is below FP16's smallest value past it


def exceeds_fp16(value: float) -> bool:
    """|value| is past FP16's largest finite value (65504)."""
    return abs(value) > FP16_MAX


def square_overflows(max_abs: float) -> bool:
    """x*x of some |x| <= max_abs exceeds 65504 (|x| > 255.9)."""
    return exceeds_fp16(max_abs * max_abs)


def sum_of_squares_overflows(n: int, max_abs: float) -> bool:
    """The sum of n squares of values up to max_abs can exceed 65504: n * x**2 > 65504. This is the
    bound for a reduction over n values whose largest magnitude is max_abs; with measured sums, test
    the sum itself with :func:`exceeds_fp16`."""
    return exceeds_fp16(n * max_abs * max_abs)


def exp_overflows(max_x: float) -> bool:
    """exp(x) exceeds 65504 once x > ln(65504) = 11.09 (ReduceLogSumExp subtracts no max)."""
    return max_x > LOG_FP16_MAX


def sum_of_exps_overflows(n: int, max_x: float) -> bool:
    """The sum of n values exp(x), x <= max_x, can exceed 65504: n * exp(max_x) > 65504."""
    return max_x + math.log(n) > LOG_FP16_MAX if n > 0 else False


def sum_overflows(n: int, max_abs: float) -> bool:
    """A sum of n terms up to max_abs can exceed 65504 (n * max_abs > 65504)."""
    return exceeds_fp16(n * max_abs)


def log_softmax_underflows(logit_gap: float, low: LowPrecision = FP16) -> bool:
    """LogSoftmax as Softmax then LOG: some probability is below the type's smallest value (FP16:
    2**-24), and is stored as 0 or that before LOG (-inf, or a wrong log), when the largest logit
    exceeds the smallest by more than its log (FP16: 24 ln 2 = 16.64; BF16: 133 ln 2 = 92.2): that
    probability is at most exp(-gap)."""
    return logit_gap > -math.log(low.min_subnormal)


def fp16_spacing(value: float) -> float:
    """The distance between ``value`` (as FP16 stores it) and the next larger FP16 magnitude."""
    magnitude = abs(value)
    if magnitude < 2.0 ** -14:  # subnormals are evenly spaced
        return FP16_TINY
    return 2.0 ** (math.floor(math.log2(magnitude)) - 10)


def cumsum_loop_stalls(running_sum: float, increment: float) -> bool:
    """In the CumSum loop of TensorRT 8.6 to 10.7 (FP16 running sum), adding ``increment`` to
    ``running_sum`` changes nothing: |increment| is at most half the FP16 spacing at the sum (a tie
    rounds to even, so exactly half stalls on every other value; it is counted as a stall). 4096
    increments of 0.5 stop at 1024, where the spacing is 1."""
    return abs(increment) <= fp16_spacing(running_sum) / 2
