"""The generic target: every op computes internally in FP32 and stores FP16 outputs, as GPU kernels
that accumulate in FP32 do; the written model must load and run in onnxruntime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import onnx

from ..float_types import BF16, FP16, LowPrecision
from .base import Target
from .bf16_kernels import ort_cuda_has_bf16
from .emulation import UNMEASURED, Emulation, Fresh, Measured, OneOp, Spelling
from .quantize import Quantizing

# Whether onnxruntime's CUDA provider has a node's kernel (op type, domain, opset), for each 16-bit type
# its CPU provider has no kernels for (LowPrecision.cpu_kernels): a new such type adds its table here
_CUDA_KERNELS: Mapping[str, Callable[[str, str, int], bool]] = {BF16.precision: ort_cuda_has_bf16}


@dataclass(frozen=True)
class GenericTarget(Target):
    low: LowPrecision = FP16
    fallback: LowPrecision | None = None

    @property
    def name(self) -> str:
        return "generic"

    @property
    def title(self) -> str:
        return "generic"

    def onnxruntime_kernels(self, low: LowPrecision) -> bool:
        return low.cpu_kernels

    def kernel_blocker(self, node: onnx.NodeProto, low: LowPrecision, opset: int) -> str | None:
        # A BF16 model runs on onnxruntime's CUDA provider (the CPU one has no BF16 kernels to ask)
        if low.cpu_kernels or _CUDA_KERNELS[low.precision](node.op_type, node.domain, opset):
            return None
        return f"onnxruntime's CUDA provider has no {low.type_name} {node.op_type} kernel"

    @property
    def emulation(self) -> Emulation:
        return OneOpEmulation(self.quantizes_by_reciprocal)


@dataclass(frozen=True)
class OneOpEmulation(Emulation):
    """Each 16-bit node is one op computing in FP32 (:class:`.emulation.OneOp`), a QuantizeLinear as the
    runtime quantizes (``reciprocal``: :attr:`.Target.quantizes_by_reciprocal`)."""

    reciprocal: bool = False

    def spelling(self, model: onnx.ModelProto, base_dir: str, types: Mapping[str, onnx.TypeProto] | None,
                 fresh: Fresh, measured: Measured = UNMEASURED) -> Spelling:
        return Quantizing(OneOp(), self.reciprocal, fresh)


GENERIC: Target = GenericTarget()
