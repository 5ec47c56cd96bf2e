"""onnx-precision: FP32 ONNX in, safe FP16 ONNX out, with proof."""

from .errors import PrecisionError
from .plan import NodeDecision, Precision, PrecisionPlan, Reason

__all__ = ["PrecisionError", "NodeDecision", "Precision", "PrecisionPlan", "Reason"]
__version__ = "0.1.0"
