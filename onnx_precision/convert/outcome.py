"""One measured conversion's outcome, as a value: what the search chose, what the written model did,
and the verdict. :mod:`onnx_precision.convert` decides it; the report only reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..costs import PhaseCost
from ..metrics import Comparison
from ..plan import PrecisionPlan
from ..tolerance import Tolerance
from ..vocab import MeasuringMode, OracleName, Status

if TYPE_CHECKING:  # the search's result: only read here (importing it would load the oracle stack)
    from .choose import AutoResult


@dataclass(frozen=True)
class Verification:
    """The written model, read back from disk and checked."""

    verified: Comparison  # emulated
    native: Comparison | None = None  # on --oracle's provider (or onnx.reference)
    default_load: str = ""  # why onnxruntime at its default options cannot load it ("" when it can)
    phases: tuple[PhaseCost, ...] = ()  # writing, verifying, loading
    validation: Comparison | None = None  # emulated, on held-out samples (--validation-inputs)
    validation_failure: str = ""  # which held-out sample fails, and how ("" when none does)


@dataclass(frozen=True)
class ConversionOutcome:
    """Everything a measured conversion reports."""

    auto: AutoResult  # the plan chosen, its comparisons, statistics and costs
    plan: PrecisionPlan  # the plan written (or that would have been)
    status: Status
    message: str
    mode: MeasuringMode
    oracle: OracleName
    tolerance: Tolerance
    output_path: str | None = None  # None: nothing was written
    verification: Verification | None = None
    warnings: tuple[str, ...] = ()
    helper_sessions: int = 0  # small sessions (FP16 kernel probes, fast casts) built during the run
    tradeoff_svg: str | None = None  # where the trade-off picture goes, when there is one
    before_plan: str = "all FP16"  # what the "before" comparison measured
