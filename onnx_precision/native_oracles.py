"""The native oracles, one table: each ``--oracle`` name that runs the written model on an onnxruntime
provider, with that provider, how a sentence names it, and whether onnxruntime-gpu ships it.

Each runtime of the registry (:mod:`onnx_precision.target.named`) that has one names its row, and the
oracles a user can ask for (``ORACLE_NAMES``, ``NATIVE_PROVIDERS``, which
:data:`onnx_precision.oracle.verify.ORACLES` runs) come from there. The commands a run suggests read the
rows too: the check on the GPU (:meth:`onnx_precision.suggested.RunArgs.native_oracle`), the WebGPU
target's, and the TensorRT flags file's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NativeOracle:
    name: str  # --oracle
    provider: str  # onnxruntime's execution provider
    title: str  # the provider as a sentence names it ("onnxruntime's TensorRT provider")
    in_gpu_build: bool  # onnxruntime-gpu has it: a check on the GPU can run there


CUDA = NativeOracle("cuda", "CUDAExecutionProvider", "CUDA", True)
TENSORRT = NativeOracle("tensorrt", "TensorrtExecutionProvider", "TensorRT", True)
WEBGPU = NativeOracle("webgpu", "WebGpuExecutionProvider", "WebGPU", False)
NATIVE_ORACLES: tuple[NativeOracle, ...] = (CUDA, TENSORRT, WEBGPU)
