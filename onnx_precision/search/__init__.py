"""The search for a small set of nodes to keep in FP32.

* :mod:`.state`: :class:`PinSearch`, the pure search state (``select``/``step``), no models or files;
* :mod:`.prober`: :class:`Prober`, does a plan pass every sample on a runner;
* :mod:`.driver`: :func:`run_search`, which feeds the state the prober's answers, with budgets,
  progress and the trade-off points.
"""

from .driver import SearchBudget, SearchSpace, run_search
from .prober import Prober
from .state import CANDIDATES, SHRINK, START, WIDEN, PinSearch, SearchOutcome

__all__ = ["SearchBudget", "SearchSpace", "run_search", "Prober", "CANDIDATES", "SHRINK", "START", "WIDEN",
           "PinSearch", "SearchOutcome"]
