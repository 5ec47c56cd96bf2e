"""Option groups shared by the commands: one definition of each, as a frozen value that checks itself.

``convert``, ``check`` and ``analyze`` each compose the groups they need, on the command line and in the
Python API alike, so an option added to a group reaches every command that takes the group:

* :class:`Judging`: what a measuring run judges by, and the model it measures (see :mod:`.basis`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UsageError
from .judge import Tolerance
from .quant_reference import DEFAULT_MARGIN, margin_problem


@dataclass(frozen=True)
class Judging:
    """What a run judges by: the tolerance, and, for a quantized model, the reference its 16-bit remainder
    is judged against (its unquantized original, else the model with its activation quantizers bypassed)
    and what the remainder may add to the quantization error (:mod:`.quant_reference`)."""

    tolerance: Tolerance = field(default_factory=Tolerance)
    reference_model: str | None = None  # --reference-model
    quant_margin: float = DEFAULT_MARGIN  # --quant-margin

    def __post_init__(self) -> None:
        if not isinstance(self.tolerance, Tolerance):
            raise UsageError(f"tolerance {self.tolerance!r}: expected an onnx_precision.judge.Tolerance")
        margin = margin_problem(self.quant_margin)
        if margin:
            raise UsageError(f"--quant-margin {self.quant_margin}: expected {margin}")
        if self.reference_model is not None and not isinstance(self.reference_model, str):
            raise UsageError(f"reference_model {self.reference_model!r}: expected the path of an .onnx file")
