"""Where :class:`Tolerance` was imported from before judging became the :mod:`onnx_precision.judge`
package: ``from onnx_precision.tolerance import Tolerance`` was public API (the README's Python
examples: a tolerance handed to convert, convert_model and check), so callers' code keeps working."""

from __future__ import annotations

from .judge.settings import Tolerance, ToleranceError

__all__ = ["Tolerance", "ToleranceError"]
