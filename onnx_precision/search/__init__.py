"""The search for a small set of nodes to keep in FP32.

* :mod:`.state`: :class:`PinSearch`, the pure search state (``select``/``step``), no models or files;
* :mod:`.prober`: :class:`Prober`, does a plan pass every sample on a runner;
* :mod:`.driver`: :func:`run_search`, which feeds the state the prober's answers, with budgets,
  progress and the trade-off points.
"""

from .driver import (
    DIFFUSE_PROBES,
    FlopShare,
    Progress,
    SearchBudget,
    SearchResult,
    SearchSpace,
    is_diffuse,
    run_search,
    widen_order,
)
from .prober import Prober, failure
from .state import CANDIDATES, SHRINK, START, WIDEN, PinSearch, Probe, SearchOutcome, Verdict

__all__ = ["DIFFUSE_PROBES", "FlopShare", "Progress", "SearchBudget", "SearchResult", "SearchSpace",
           "is_diffuse", "run_search", "widen_order", "Prober", "failure", "CANDIDATES", "SHRINK", "START",
           "WIDEN", "PinSearch", "Probe", "SearchOutcome", "Verdict"]
