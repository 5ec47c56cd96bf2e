"""TensorRT knowledge: the layers onnx-tensorrt builds per ONNX op, their names, and trtexec/Polygraphy flags."""

from .flags import TrtFlags, trt_flags, trt_flags_text

__all__ = ["TrtFlags", "trt_flags", "trt_flags_text"]
