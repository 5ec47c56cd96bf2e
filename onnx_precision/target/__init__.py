"""Targets: where the written model runs (:class:`Target`), and the 16-bit types (:class:`LowPrecision`).

* :mod:`onnx_precision.float_types`: the table of 16-bit float types and their limits;
* :mod:`.base`: what a target answers (its type, how it spells FP16 nodes, whose kernels bind a
  plan, its flags);
* :mod:`.generic`: :data:`GENERIC`, every op computing in FP32 and storing FP16, on onnxruntime;
* :mod:`.tensorrt`: :class:`TensorRTTarget`, one TensorRT release's layers;
* :mod:`.webgpu`: :class:`WebGpuTarget`, onnxruntime's WebGPU provider, whose kernels sum in FP16;
* :mod:`.openvino_gpu`: :class:`OpenVinoGpuTarget`, OpenVINO's GPU plugin, whose contractions sum in FP16;
* :mod:`.fp16_accumulate`: :class:`Fp16AccumulateTarget`, every sum in FP16 (closed runtimes' bound);
* :mod:`.accumulation`: sums kept in FP16, emulated in the graph;
* :mod:`.named`: the registry of runtimes, by their command-line names, with their native oracles.
"""

from ..float_types import FP16, LowPrecision
from .base import Spelling, Target
from .fp16_accumulate import Fp16AccumulateTarget
from .generic import GENERIC, GenericTarget
from .named import KINDS, NATIVE_PROVIDERS, ORACLE_NAMES, RUNTIMES, Runtime, target_help, target_named
from .openvino_gpu import OpenVinoGpuTarget
from .tensorrt import TensorRTTarget
from .webgpu import WebGpuTarget

__all__ = ["Spelling", "Target", "GENERIC", "GenericTarget", "FP16", "LowPrecision", "KINDS", "target_named",
           "TensorRTTarget", "WebGpuTarget", "OpenVinoGpuTarget", "Fp16AccumulateTarget", "RUNTIMES",
           "Runtime", "NATIVE_PROVIDERS", "ORACLE_NAMES", "target_help"]
