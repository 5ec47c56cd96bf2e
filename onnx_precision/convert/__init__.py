"""``onnx-precision convert`` as a library: load, choose a plan, rewrite, write, verify.

* :mod:`.run`: :func:`convert`, what the CLI calls, and its steps (:func:`base_plan`,
  :func:`plan_to_write`, :func:`verify`, :func:`conversion_status`);
* :mod:`.choose`: :func:`choose_plan`, the measuring modes (``auto`` searches, ``static`` pins
  what the ranges and rules flag), returning an :class:`AutoResult`;
* :mod:`.outcome`: :class:`ConversionOutcome`, the value the report reads;
* :mod:`.written_check`: onnx's full check of the written model.
"""

from ..vocab import MODES
from .run import ConvertOptions, ConvertResult, base_plan, conversion_status, convert, plan_to_write, verify

__all__ = ["MODES", "ConvertOptions", "ConvertResult", "base_plan", "conversion_status", "convert",
           "plan_to_write", "verify"]
