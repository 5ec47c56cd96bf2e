"""``onnx-precision convert`` as a library: load, choose a plan, rewrite, write, verify.

* :mod:`.run`: :func:`convert`, what the CLI calls; :func:`.run.conversion`, the one pipeline it
  and :func:`convert_model` run (from a path or a ModelProto, to a staged file or to memory), and
  its steps by job: :mod:`.options` (:class:`ConvertOptions`), :mod:`.planning` (:func:`base_plan`,
  :func:`plan_to_write`, :func:`planned`), :mod:`.verification` (:func:`verify`,
  :func:`conversion_status`), :mod:`.files` (what is written besides the model and its reports);
* :mod:`.in_memory`: :func:`convert_model`, the same conversion on a ModelProto (or a path) with
  feeds in memory, returning a :class:`ConvertedModel` and writing nothing until ``save``;
* :mod:`.choose`: :func:`.choose.choose_plan`, the measuring modes (``auto`` searches, ``static`` pins
  what the ranges and rules flag), returning an :class:`~onnx_precision.outcome.AutoResult`;
* :mod:`.written_check`: onnx's full check of the written model.
"""

from ..vocab import MODES
from .in_memory import ConvertedModel, convert_model
from .options import ConvertOptions
from .planning import base_plan, plan_to_write, planned
from .run import ConvertResult, convert
from .verification import conversion_status, verify

__all__ = ["MODES", "ConvertOptions", "ConvertResult", "ConvertedModel", "base_plan", "conversion_status",
           "convert", "convert_model", "plan_to_write", "planned", "verify"]
