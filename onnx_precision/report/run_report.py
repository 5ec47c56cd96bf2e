"""The report of one conversion, as a value: :class:`RunReport` and how ``convert`` assembles it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..context import ModelContext
from ..costs import PhaseCost, PhaseTotals
from ..data import Samples
from ..flops import estimate_flops
from ..metrics import Comparison
from ..oracle.stats import NodeStats
from ..plan import PrecisionPlan
from ..tolerance import Tolerance
from ..tradeoff import PlanPoint, error_statistic, front_svg
from ..vocab import Mode, OracleName, Status

if TYPE_CHECKING:
    from ..auto import AutoResult


REPORT_FORMAT = "onnx-precision-report/1"


@dataclass(frozen=True)
class RunReport(PhaseTotals):
    model: str
    output: str | None
    mode: Mode
    oracle: OracleName  # the native oracle run on the written model, besides the emulation
    status: Status
    message: str
    plan: PrecisionPlan
    node_ops: Mapping[str, str]  # every node, in the model's order
    samples_source: str = ""
    samples_synthetic: bool = False
    sample_count: int = 0
    warnings: tuple[str, ...] = ()
    tolerance: Tolerance | None = None
    node_flops: Mapping[str, float] = field(default_factory=dict)
    node_stats: Mapping[str, NodeStats] = field(default_factory=dict)
    before: Comparison | None = None  # the plan the search starts from (before_plan), emulated
    after: Comparison | None = None  # the chosen plan, emulated
    verified: Comparison | None = None  # the written model, emulated
    native: Comparison | None = None  # the written model on a GPU provider (--oracle cuda/tensorrt)
    phases: tuple[PhaseCost, ...] = ()
    headroom: float | None = None
    helper_sessions: int = 0  # small sessions (FP16 kernel probes, fast casts) built during the run
    nothing_to_convert: str = ""  # why no node computes in float32 ("" when some do)
    target: str = "generic"  # what the emulation followed: "generic" or "tensorrt X.Y"
    before_plan: str = "all FP16"  # what "before" measured: all FP16, or the user's plan
    points: tuple[PlanPoint, ...] = ()  # every plan the search evaluated
    notes: tuple[str, ...] = ()
    tradeoff_svg: str | None = None  # the trade-off picture beside the Markdown report, if written

    @property
    def fp32_nodes(self) -> tuple[str, ...]:
        return self.plan.fp32_nodes

    def fp16_node_share(self) -> float:
        total = len(self.plan.decisions)
        return len(self.plan.fp16_nodes) / total if total else 0.0

    def fp16_flop_share(self) -> float:
        flops = {n: self.node_flops.get(n, 0.0) for n in self.plan.decisions}
        total = sum(flops.values())
        if total <= 0:
            return self.fp16_node_share()
        return sum(flops[n] for n in self.plan.fp16_nodes) / total


def for_conversion(
    ctx: ModelContext,
    output_path: str | None,
    plan: PrecisionPlan,
    samples: Samples | None,
    tolerance: Tolerance,
    mode: Mode,
    oracle: OracleName = "emulate",
    auto_result: AutoResult | None = None,
    verified: Comparison | None = None,
    native: Comparison | None = None,
    phases: Sequence[PhaseCost] = (),
    warnings: Sequence[str] = (),
    helper_sessions: int = 0,
    tradeoff_svg: str | None = None,
    default_load: str = "",
    before_plan: str = "all FP16",
) -> RunReport:
    """The report of one ``convert``: ``auto_result`` (an :class:`onnx_precision.auto.AutoResult`)
    brings the search's comparisons, statistics and costs; ``phases`` add the writing and the
    verification. Without a search, the status is the verification's. ``default_load`` is what
    went wrong loading the written model with onnxruntime's default options ("" when it loads);
    ``before_plan`` names the plan the "before" comparison measured."""
    status: Status
    if auto_result is not None:
        status, message = auto_result.status, auto_result.message
        if status == "passed" and verified is not None and not verified.passed:
            status, message = "failed", "the written model fails the emulated check (a bug: please report it)"
        elif status == "passed" and native is not None and not native.passed:
            status, message = "failed", f"the written model fails on {native.oracle} (passes emulated)"
        elif status == "passed" and default_load:
            status, message = "ort-load-failed", f"the written model passes, but {default_load}"
    elif verified is not None:
        status = "passed" if verified.passed else "failed"
        message = "" if verified.passed else "the written model is out of tolerance under the emulated check"
    else:
        status, message = "not-checked", ""
    feeds = samples.feeds if samples is not None else ()
    shapes = {k: np.shape(v) for k, v in feeds[0].items()} if feeds else {}
    flops = auto_result.node_flops if auto_result is not None and auto_result.node_flops else None
    return RunReport(
        model=ctx.path,
        output=output_path,
        mode=mode,
        oracle=oracle,
        status=status,
        message=message,
        plan=plan,
        node_ops=dict(ctx.node_ops),
        samples_source=samples.source if samples is not None else "",
        samples_synthetic=bool(samples.synthetic) if samples is not None else False,
        sample_count=len(feeds),
        warnings=tuple(warnings) + (tuple(samples.warnings) if samples else ()),
        tolerance=tolerance,
        node_flops=flops if flops is not None else estimate_flops(ctx.model, shapes),
        node_stats=auto_result.node_stats if auto_result is not None else {},
        before=auto_result.before if auto_result is not None else None,
        after=auto_result.after if auto_result is not None else None,
        verified=verified,
        native=native,
        phases=(tuple(auto_result.phases) if auto_result is not None else ()) + tuple(phases),
        headroom=auto_result.headroom if auto_result is not None else None,
        helper_sessions=helper_sessions,
        points=auto_result.points if auto_result is not None else (),
        notes=auto_result.notes if auto_result is not None else (),
        tradeoff_svg=tradeoff_svg if auto_result is not None and len(auto_result.points) > 1 else None,
        nothing_to_convert=ctx.nothing_to_convert,
        target=ctx.target.name,
        before_plan=before_plan,
    )


def default_paths(output_path: str, report_json: str | None, report_md: str | None) -> tuple[str, str]:
    """``--report``/``--report-md``, defaulting to siblings of the output: OUT.report.json/.md."""
    stem = output_path[:-5] if output_path.endswith(".onnx") else output_path
    return report_json or stem + ".report.json", report_md or stem + ".report.md"


def tradeoff_path(report_md: str) -> str:
    """Where the trade-off picture goes: beside the Markdown report, ``<report>.tradeoff.svg``."""
    stem = report_md[:-3] if report_md.endswith(".md") else report_md
    return stem + ".tradeoff.svg"


def tradeoff_svg(report: RunReport) -> str:
    """The trade-off picture of a report (its points and their Pareto front)."""
    return front_svg(report.points, statistic(report))


def statistic(report: RunReport) -> str:
    return error_statistic(report.tolerance if report.tolerance is not None else Tolerance())


def comparisons(report: RunReport) -> list[tuple[str, Comparison]]:
    labelled = [
        ("before", report.before),
        ("after", report.after),
        ("verified", report.verified),
        ("native", report.native),
    ]
    return [(key, c) for key, c in labelled if c is not None]


def samples_note(report: RunReport) -> str:
    if report.samples_synthetic:
        return (
            "synthetic feeds: what overflows depends on the value ranges; "
            "pass real data with --inputs for a plan you can trust"
        )
    return ""
