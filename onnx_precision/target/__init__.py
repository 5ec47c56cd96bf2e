"""Targets: where the written model runs (:class:`Target`), and the 16-bit types (:class:`LowPrecision`).

* :mod:`onnx_precision.float_types`: the table of 16-bit float types and their limits;
* :mod:`.base`: what a target answers, its facts (its type, whose kernels bind a plan, how each op kind
  accumulates, its names);
* :mod:`.emulation`: how a target's FP16 nodes are spelled for the emulation, and what a run measured of
  them (:class:`Measured`);
* :mod:`.commands`: the commands a target's user is told to run (its options, the next step);
* :mod:`.generic`: :data:`GENERIC`, every op computing in FP32 and storing FP16, on onnxruntime;
* :mod:`.tensorrt`: :class:`TensorRTTarget`, one TensorRT release's layers;
* :mod:`.webgpu`: :class:`WebGpuTarget`, onnxruntime's WebGPU provider, whose kernels sum in FP16;
* :mod:`.openvino_gpu`: :class:`OpenVinoGpuTarget`, OpenVINO's GPU plugin, whose contractions sum in FP16;
* :mod:`.fp16_accumulate`: :class:`Fp16AccumulateTarget`, every sum in FP16 (closed runtimes' bound);
* :mod:`.accumulation`: sums kept in FP16, emulated in the graph;
* :mod:`.named`: the registry of runtimes, by their command-line names, with their native oracles;
* :mod:`.targeting`: the target option group (:class:`Targeting`), shared by the commands.
"""

from ..float_types import FP16, LowPrecision
from .base import Target
from .emulation import UNMEASURED, Measured, Spelling
from .fp16_accumulate import Fp16AccumulateTarget
from .generic import GENERIC, GenericTarget
from .named import (
    KINDS,
    NATIVE_PROVIDERS,
    ORACLE_NAMES,
    RUNTIMES,
    Runtime,
    recorded_target,
    registry_like,
    target_help,
    target_named,
)
from .openvino_gpu import OpenVinoGpuTarget
from .targeting import Targeting
from .tensorrt import TensorRTTarget
from .webgpu import WebGpuTarget

__all__ = ["Spelling", "Target", "Measured", "UNMEASURED", "GENERIC", "GenericTarget", "FP16", "LowPrecision",
           "KINDS", "target_named", "TensorRTTarget", "WebGpuTarget", "OpenVinoGpuTarget",
           "Fp16AccumulateTarget", "RUNTIMES", "Runtime", "recorded_target", "registry_like",
           "NATIVE_PROVIDERS", "ORACLE_NAMES", "target_help", "Targeting"]
