"""The pessimistic target for closed runtimes (DirectML, CoreML): every sum a kernel forms is kept in FP16.

Their kernels cannot be read, and users report FP16 overflow on both (coremltools issue 2603: "keep
sensitive layers in higher precision"). This target assumes the worst of them: every reduction,
contraction, average pool, CumSum, Softmax denominator and normalisation statistic accumulates in FP16
(each op kind :data:`.accumulation.OVERFLOWS` can bound), and a mean divides by its count of terms held
in FP16 (as onnxruntime's WebGPU provider does: from 65520 terms the mean is 0). A plan that holds here
holds wherever those sums are kept in FP32 or in FP16; it is a bound, not the runtimes' exact arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import onnx

from ..float_types import FP16, LowPrecision
from ..suggested import RunArgs, quoted
from .accumulation import COUNTED, OVERFLOWS, accumulating
from .base import Accumulation, Fresh, Spelling, Target
from .quantize import Quantizing

EVERY_SUM_FP16: Mapping[str, Accumulation] = {op: "fp16" for op in OVERFLOWS}


@dataclass(frozen=True)
class Fp16AccumulateTarget(Target):
    low: LowPrecision = FP16
    fallback: LowPrecision | None = None
    proven: frozenset[str] = frozenset()  # nodes whose FP16 sums the samples prove in range (no check)
    prescaled: tuple[tuple[str, int], ...] = ()  # LayerNormalizations written on x·2^-j: (name, j)

    @property
    def name(self) -> str:
        return "fp16-accumulate"

    @property
    def title(self) -> str:
        return "a runtime that accumulates in FP16"

    @property
    def accumulation(self) -> Mapping[str, Accumulation]:
        return EVERY_SUM_FP16

    @property
    def counts_in_low(self) -> frozenset[str]:
        return COUNTED

    def onnxruntime_kernels(self, low: LowPrecision) -> bool:
        # DirectML runs inside onnxruntime (its DML provider); CoreML models are converted from the ONNX
        # model by onnxruntime or coremltools: the written model must at least load there.
        return low.cpu_kernels

    def proving(self, nodes: frozenset[str]) -> Target:
        return replace(self, proven=nodes)

    def prescaling(self, shifts: tuple[tuple[str, int], ...]) -> Target:
        return replace(self, prescaled=shifts)

    def spelling(self, model: onnx.ModelProto, base_dir: str,
                 types: Mapping[str, onnx.TypeProto] | None, fresh: Fresh) -> Spelling:
        spelled = accumulating(self, model, base_dir, types, fresh, self.proven, dict(self.prescaled))
        return Quantizing(spelled, self.quantizes_by_reciprocal, fresh)

    def cli_args(self) -> list[str]:
        return ["--target", "fp16-accumulate", *super().cli_args()]

    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        return (f"{quoted(run.check_args(self.cli_args()))}  # judges it again as this run did, FP16 sums "
                f"emulated; no provider here runs DirectML or CoreML: check it there before you ship")
