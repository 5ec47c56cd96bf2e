"""The runtimes, one registry: each target by its command-line name (``--target``), with its native
oracle (``--oracle``: the onnxruntime provider that runs the written model as the runtime does).

Adding a runtime is one module (its :class:`~.base.Target`: kernel facts per 16-bit type, how each op
kind accumulates, its load check) and one :class:`Runtime` row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..float_types import FP16, LowPrecision
from ..trt.versions import NEWEST, TrtVersion
from .base import Target
from .fp16_accumulate import Fp16AccumulateTarget
from .generic import GenericTarget
from .openvino_gpu import OpenVinoGpuTarget
from .tensorrt import TensorRTTarget
from .webgpu import WEBGPU_PROVIDER, WebGpuTarget


@dataclass(frozen=True)
class Runtime:
    kind: str  # --target
    summary: str  # what it assumes, for --target's help
    make: Callable[[TrtVersion, LowPrecision, LowPrecision | None], Target]
    oracle: str | None = None  # --oracle: its native provider's name, where onnxruntime has one
    provider: str | None = None


RUNTIMES: tuple[Runtime, ...] = (
    Runtime("generic", "every op computes in FP32 and stores FP16, as GPU kernels that accumulate in FP32 "
            "do (onnxruntime's CUDA provider)", lambda _, low, fallback: GenericTarget(low, fallback),
            "cuda", "CUDAExecutionProvider"),
    Runtime("tensorrt", "ops its ONNX parser builds from several layers, e.g. ReduceL2, LogSoftmax, "
            "CumSum, are emulated layer by layer, each layer storing FP16", TensorRTTarget,
            "tensorrt", "TensorrtExecutionProvider"),
    Runtime("webgpu", "onnxruntime's WebGPU provider: MatMul, Gemm, Conv, reductions, average pools, "
            "Softmax and CumSum sum in FP16, their overflow emulated",
            lambda _, low, fallback: WebGpuTarget(low, fallback), "webgpu", WEBGPU_PROVIDER),
    Runtime("openvino-gpu", "OpenVINO's GPU plugin (its OpenCL kernels): MatMul, Gemm, Conv, Softmax and "
            "CumSum sum in FP16, reductions, average pools and normalisations in FP32",
            lambda _, low, fallback: OpenVinoGpuTarget(low, fallback)),
    Runtime("fp16-accumulate", "a bound for closed runtimes (DirectML, CoreML): every reduction, "
            "contraction, Softmax denominator, normalisation statistic and CumSum sums in FP16",
            lambda _, low, fallback: Fp16AccumulateTarget(low, fallback)),
)
KINDS = tuple(runtime.kind for runtime in RUNTIMES)
# The oracles a user can ask for by name: the emulation, each runtime's native provider, onnx.reference
NATIVE_PROVIDERS: Mapping[str, str] = {r.oracle: r.provider for r in RUNTIMES if r.oracle and r.provider}
ORACLE_NAMES: tuple[str, ...] = ("emulate", *NATIVE_PROVIDERS, "reference")


def target_named(kind: str, trt_version: TrtVersion = NEWEST, low: LowPrecision = FP16,
                 fallback: LowPrecision | None = None) -> Target:
    """The target ``kind`` (one of :data:`KINDS`); ``trt_version`` is TensorRT's release, ``low`` the
    16-bit type, ``fallback`` the type tried before FP32 where ``low`` fails."""
    for runtime in RUNTIMES:
        if runtime.kind == kind:
            return runtime.make(trt_version, low, fallback)
    raise ValueError(f"unknown target {kind!r}; expected one of {', '.join(KINDS)}")


def target_help() -> str:
    """``--target``'s help: each runtime and what it assumes."""
    return "where FP16 runs: " + "; ".join(
        f"{r.kind}{' (default)' if r.kind == 'generic' else ''}: {r.summary}" for r in RUNTIMES)
