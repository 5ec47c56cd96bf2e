"""The runtimes, one registry: each target by its command-line name (``--target``), with its native
oracle (``--oracle``: the onnxruntime provider that runs the written model as the runtime does).

Adding a runtime is one module (its :class:`~.base.Target`: kernel facts per 16-bit type, how each op
kind accumulates, its load check) and one :class:`Runtime` row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..float_types import FP16, LowPrecision
from ..native_oracles import CUDA, TENSORRT, WEBGPU, NativeOracle
from ..trt.versions import NEWEST, TrtVersion
from .base import Target
from .fp16_accumulate import Fp16AccumulateTarget
from .generic import GenericTarget
from .openvino_gpu import OpenVinoGpuTarget
from .tensorrt import TensorRTTarget
from .webgpu import WebGpuTarget


@dataclass(frozen=True)
class Runtime:
    kind: str  # --target
    summary: str  # what it assumes, for --target's help
    make: Callable[[TrtVersion, LowPrecision, LowPrecision | None], Target]
    oracle: NativeOracle | None = None  # --oracle: its native provider, where onnxruntime has one


RUNTIMES: tuple[Runtime, ...] = (
    Runtime("generic", "every op computes in FP32 and stores FP16, as GPU kernels that accumulate in FP32 "
            "do (onnxruntime's CUDA provider)", lambda _, low, fallback: GenericTarget(low, fallback),
            CUDA),
    Runtime("tensorrt", "ops its ONNX parser builds from several layers, e.g. ReduceL2, LogSoftmax, "
            "CumSum, are emulated layer by layer, each layer storing FP16", TensorRTTarget,
            TENSORRT),
    Runtime("webgpu", "onnxruntime's WebGPU provider: MatMul, Gemm, Conv, reductions, average pools, "
            "Softmax and CumSum sum in FP16, their overflow emulated",
            lambda _, low, fallback: WebGpuTarget(low, fallback), WEBGPU),
    Runtime("openvino-gpu", "OpenVINO's GPU plugin (its OpenCL kernels): MatMul, Gemm, Conv, Softmax and "
            "CumSum sum in FP16, reductions, average pools and normalisations in FP32",
            lambda _, low, fallback: OpenVinoGpuTarget(low, fallback)),
    Runtime("fp16-accumulate", "a bound for closed runtimes (DirectML, CoreML): every reduction, "
            "contraction, Softmax denominator, normalisation statistic and CumSum sums in FP16",
            lambda _, low, fallback: Fp16AccumulateTarget(low, fallback)),
)
KINDS = tuple(runtime.kind for runtime in RUNTIMES)
# The oracles a user can ask for by name: the emulation, each runtime's native provider, onnx.reference
NATIVE_PROVIDERS: Mapping[str, str] = {r.oracle.name: r.oracle.provider for r in RUNTIMES if r.oracle}
ORACLE_NAMES: tuple[str, ...] = ("emulate", *NATIVE_PROVIDERS, "reference")


def target_named(kind: str, trt_version: TrtVersion = NEWEST, low: LowPrecision = FP16,
                 fallback: LowPrecision | None = None) -> Target:
    """The target ``kind`` (one of :data:`KINDS`); ``trt_version`` is TensorRT's release, ``low`` the
    16-bit type, ``fallback`` the type tried before FP32 where ``low`` fails."""
    for runtime in RUNTIMES:
        if runtime.kind == kind:
            return runtime.make(trt_version, low, fallback)
    raise ValueError(f"unknown target {kind!r}; expected one of {', '.join(KINDS)}")


def recorded_target(name: str, low: LowPrecision = FP16, fallback: LowPrecision | None = None,
                    ) -> Target | None:
    """The target a written model records by its name (:attr:`.Target.name`, ``"webgpu"``, ``"tensorrt
    10.8"``), in ``low`` with ``fallback``; None for a name that no runtime of the registry gives."""
    kind, _, version = name.partition(" ")
    if kind not in KINDS:
        return None
    try:
        release = TrtVersion.parse(version) if version else NEWEST
    except ValueError:
        return None
    target = target_named(kind, release, low, fallback)
    return target if target.name == name else None


def registry_like(target: Target) -> tuple[Target, ...]:
    """Every runtime of the registry as a run on ``target`` has it: ``target`` itself for its own kind
    (first where the registry has no such kind), the others in its 16-bit type and fallback, TensorRT at
    its release where it is TensorRT's, else the newest."""
    kind, _, version = target.name.partition(" ")
    own = recorded_target(target.name, target.low, target.fallback)
    release = TrtVersion.parse(version) if own is not None and version else NEWEST
    low, fallback = target.low, target.fallback
    others = tuple(target if own is not None and r.kind == kind else r.make(release, low, fallback)
                   for r in RUNTIMES)
    return others if own is not None else (target, *others)


def target_help() -> str:
    """``--target``'s help: each runtime and what it assumes."""
    return "where FP16 runs: " + "; ".join(
        f"{r.kind}{' (default)' if r.kind == 'generic' else ''}: {r.summary}" for r in RUNTIMES)
