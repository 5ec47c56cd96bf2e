"""One measured conversion's outcome, as values: what the search chose (:class:`AutoResult`), what the
written model did (:class:`Verification`), and the verdict (:class:`ConversionOutcome`).
:mod:`onnx_precision.convert` decides them; :mod:`onnx_precision.report` only reads them, so they sit
below both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .costs import PhaseCost, PhaseTotals
from .errors import SearchError
from .flops import FlopShares
from .judge import Comparison
from .plan import PrecisionPlan
from .vocab import MeasuringMode, OracleName, Status

if TYPE_CHECKING:  # only read here (importing them would load the sample readers and the search)
    from .basis import Basis
    from .generation.verdict import GenerationVerdict
    from .oracle.inspection import NodeStats
    from .runtimes import RuntimeTable
    from .search.state import SearchOutcome
    from .tradeoff import PlanPoint

PASSED: Status = "passed"
FAILED: Status = "failed"
FP32_NONFINITE: Status = "fp32-nonfinite"


@dataclass(frozen=True)
class AutoResult(PhaseTotals):
    """The chosen plan and everything the report and the verification need."""

    plan: PrecisionPlan
    status: Status  # passed | failed | fp32-nonfinite (static mode: passed/failed of its one plan)
    message: str
    mode: MeasuringMode
    before: Comparison | None  # the base plan (all FP16 but forced pins), emulated
    after: Comparison | None  # the chosen plan, emulated
    node_stats: Mapping[str, NodeStats]
    phases: tuple[PhaseCost, ...]
    search: SearchOutcome | None
    reference_outputs: tuple[dict[str, np.ndarray], ...]  # the model's FP32 graph outputs per sample
    headroom: float
    # what every plan was judged by: the samples every probe ran on, the reference and tolerances, the sums
    # proven in range (the written model is verified, validated and reported by it)
    basis: Basis
    node_flops: Mapping[str, float] = field(default_factory=dict)  # estimated, at the first sample's shapes
    points: tuple[PlanPoint, ...] = ()  # every plan measured, searched or not (the trade-off)
    notes: tuple[str, ...] = ()
    chosen_point: int | None = None  # the point of the plan chosen (None: none passed)
    unsearched: str = ""  # why no search ran ("" when one did)
    # node -> "INT8", "FP8", ...: quantized compute, which the shares count apart
    quantized: Mapping[str, str] = field(default_factory=dict)
    counted_as: Mapping[str, str] = field(default_factory=dict)  # FlopShares.counted_as

    @property
    def shares(self) -> FlopShares:
        """What the run's shares of compute count (the points', the summary's, the gate's)."""
        return FlopShares(self.node_flops, self.quantized, self.counted_as)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def writable(self) -> bool:
        """Whether the plan is worth writing: not when the FP32 model itself is non-finite or
        when no plan passes; a static plan that fails is written (and reported as failing)."""
        return self.status == PASSED or (self.status == FAILED and self.mode == "static")

    def raise_if_failed(self) -> None:
        if self.status in (FAILED, FP32_NONFINITE):
            raise SearchError(self.message)


@dataclass(frozen=True)
class Verification:
    """The written model, read back from disk and checked."""

    verified: Comparison  # emulated
    native: Comparison | None = None  # on --oracle's provider (or onnx.reference)
    default_load: str = ""  # why onnxruntime at its default options cannot load it ("" when it can)
    phases: tuple[PhaseCost, ...] = ()  # writing, verifying, loading
    validation: Comparison | None = None  # emulated, on held-out samples (--validation-inputs)
    validation_failure: str = ""  # which held-out sample fails, and how ("" when none does)
    runtimes: RuntimeTable | None = None  # emulated on every runtime of the registry
    generation: GenerationVerdict | None = None  # a generation's: its bound, its tokens (emulated)


@dataclass(frozen=True)
class ConversionOutcome:
    """Everything a measured conversion reports."""

    auto: AutoResult  # the plan chosen, its comparisons, statistics and costs
    plan: PrecisionPlan  # the plan written (or that would have been)
    status: Status
    message: str
    mode: MeasuringMode
    oracle: OracleName
    output_path: str | None = None  # None: nothing was written
    verification: Verification | None = None
    warnings: tuple[str, ...] = ()
    helper_sessions: int = 0  # small sessions (FP16 kernel probes, fast casts) built during the run
    tradeoff_svg: str | None = None  # where the trade-off picture goes, when there is one
    before_plan: str = "all FP16"  # what the "before" comparison measured
