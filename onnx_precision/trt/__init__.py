"""TensorRT knowledge: the layers onnx-tensorrt builds per ONNX op, their names, and trtexec/Polygraphy flags.

* :mod:`.ops`: the op table (one entry per op, citing the importer it follows) and
  :func:`.ops.decompose`, the ONNX nodes computing a node layer by layer, with FP16 rounding
  between layers when asked, for an emulation that follows TensorRT;
* :mod:`.reference`: a standalone reference model of one node's layers (for bit-identity tests);
* :mod:`.intermediates`: overflow, underflow and stall thresholds of those layers, for static rules;
* :mod:`.naming`: the layer names onnx-tensorrt gives; :mod:`.flags`: the command lines built on them;
  :mod:`.layer_precisions`: TensorRT 10's ``--layerPrecisions`` read back into FP32 pins (the inverse);
* :mod:`.versions`, :mod:`.layers`, :mod:`.spell`, :mod:`.cumsum`: what those are made of.
"""

from .flags import TrtFlags, trt_flags, trt_flags_text

__all__ = ["TrtFlags", "trt_flags", "trt_flags_text"]
