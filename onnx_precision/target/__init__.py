"""Targets: where the written model runs (:class:`Target`), and the 16-bit types (:class:`LowPrecision`).

* :mod:`onnx_precision.float_types`: the table of 16-bit float types and their limits;
* :mod:`.base`: what a target answers (its type, how it spells FP16 nodes, whose kernels bind a
  plan, its flags);
* :mod:`.generic`: :data:`GENERIC`, every op computing in FP32 and storing FP16, on onnxruntime;
* :mod:`.tensorrt`: :class:`TensorRTTarget`, one TensorRT release's layers;
* :mod:`.named`: targets by their command-line names.
"""

from ..float_types import FP16, LowPrecision
from .base import Spelling, Target
from .generic import GENERIC, GenericTarget
from .named import KINDS, target_named
from .tensorrt import TensorRTTarget

__all__ = ["Spelling", "Target", "GENERIC", "GenericTarget", "FP16", "LowPrecision", "KINDS", "target_named",
           "TensorRTTarget"]
