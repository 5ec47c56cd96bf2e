"""onnx-precision: FP32 ONNX in, safe FP16 ONNX out, with proof.

The library mirrors the command line, one module per command (the functions are not re-exported
here, so the modules stay importable under their own names):

* ``onnx_precision.convert.convert(model, output, ConvertOptions(...)) -> ConvertResult``
* ``onnx_precision.analysis.analyze(model, SampleSpec(...), Tolerance(...)) -> AnalysisResult``
* ``onnx_precision.check.check(model, candidate, SampleSpec(...), Tolerance(...)) -> CheckResult``
"""

from .errors import PrecisionError
from .plan import NodeDecision, Precision, PrecisionPlan, Reason

__all__ = ["PrecisionError", "NodeDecision", "Precision", "PrecisionPlan", "Reason"]
__version__ = "0.1.0"
