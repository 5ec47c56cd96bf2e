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
from dataclasses import dataclass

import onnx

from ..suggested import RunArgs, quoted
from .accumulation import COUNTED, OVERFLOWS, SumsInFp16
from .base import Accumulation
from .commands import Commands, NamedCommands

EVERY_SUM_FP16: Mapping[str, Accumulation] = {op: "fp16" for op in OVERFLOWS}


@dataclass(frozen=True)
class Fp16AccumulateTarget(SumsInFp16):
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

    @property
    def commands(self) -> Commands:
        return Fp16AccumulateCommands(self.low, self.name)


@dataclass(frozen=True)
class Fp16AccumulateCommands(NamedCommands):
    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        return (f"{quoted(run.check_args(self.cli_args()))}  # judges it again as this run did, FP16 sums "
                f"emulated; no provider here runs DirectML or CoreML: check it there before you ship")
