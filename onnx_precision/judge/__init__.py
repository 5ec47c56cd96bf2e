"""Judging one output against the FP32 reference: everything that decides whether a candidate passes.

* :mod:`.settings`: the settings, one frozen value (:class:`Tolerance`);
* :mod:`.statistics`: the error statistics a tolerance can name, one row each (add one there);
* :mod:`.compare`: every statistic of an output in one pass, and the comparison of samples;
* :mod:`.acceptance`: whether an output's metrics pass under the tolerance, and how near they came;
* :mod:`.task_checks`: top-k agreement and thresholded-map IoU, for users who know an output's meaning;
* :mod:`.metrics`: the values a comparison produces (round-trip through the JSON report).
"""

from __future__ import annotations

from .acceptance import thin_pass_note
from .compare import (
    Tolerances,
    compare_array,
    compare_by_shape,
    compare_outputs,
    compare_samples,
    each_sample,
    merge_comparisons,
    not_run,
)
from .metrics import Comparison, OutputMetrics
from .settings import SLICE_MIN_ELEMENTS, Tolerance, ToleranceError, bound_problem
from .statistics import ERROR_STATS, STATISTICS, ErrorStatistic, statistic
from .statistics import help_text as statistics_help

__all__ = [
    "ERROR_STATS", "SLICE_MIN_ELEMENTS", "STATISTICS", "Comparison", "ErrorStatistic", "OutputMetrics",
    "Tolerance", "ToleranceError", "Tolerances", "bound_problem", "compare_array", "compare_by_shape",
    "compare_outputs", "compare_samples", "each_sample", "merge_comparisons", "not_run", "statistic",
    "statistics_help", "thin_pass_note",
]
