"""The generic target: every op computes internally in FP32 and stores FP16 outputs, as GPU kernels
that accumulate in FP32 do; the written model must load and run in onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..float_types import FP16, LowPrecision
from .base import Fresh, OneOp, Spelling, Target


@dataclass(frozen=True)
class GenericTarget(Target):
    low: LowPrecision = FP16

    @property
    def name(self) -> str:
        return "generic"

    @property
    def title(self) -> str:
        return "generic"

    @property
    def onnxruntime_kernels(self) -> bool:
        return True

    def spelling(self, model: onnx.ModelProto, base_dir: str,
                 types: Mapping[str, onnx.TypeProto] | None, fresh: Fresh) -> Spelling:
        return OneOp()


GENERIC = GenericTarget()
