"""The report of one conversion, as a value: :class:`RunReport` and how ``convert`` assembles it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import quantized
from ..context import ModelContext
from ..costs import PhaseCost, PhaseTotals
from ..float_types import LowPrecision, low_of
from ..flops import FlopShares, counted_precisions, estimate_flops, integer_kernel_flops
from ..judge import Comparison, Tolerance, thin_pass_note
from ..oracle.inspection import NodeStats
from ..outcome import ConversionOutcome, Verification
from ..plan import Precision, PrecisionPlan
from ..policy import underflow_headroom
from ..runtimes import RuntimeTable
from ..tradeoff import PlanPoint, error_statistic, tolerance_line
from ..tradeoff_picture import Picture, front_svg
from ..typing_rules.node_typing import FLOAT64_KEPT, computes_in_float64
from ..vocab import Mode, OracleName, Status

if TYPE_CHECKING:
    from ..basis import Basis

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
    validation: Comparison | None = None  # the written model on held-out samples (--validation-inputs)
    phases: tuple[PhaseCost, ...] = ()
    headroom: float | None = None
    helper_sessions: int = 0  # small sessions (FP16 kernel probes, fast casts) built during the run
    nothing_to_convert: str = ""  # why no node computes in float32 ("" when some do)
    target: str = "generic"  # what the emulation followed: "generic" or "tensorrt X.Y"
    low_precision: str = "fp16"  # the run's 16-bit type (--low-precision)
    before_plan: str = "all FP16"  # what "before" measured: all FP16, or the user's plan
    points: tuple[PlanPoint, ...] = ()  # every plan measured (by the search, or without one)
    notes: tuple[str, ...] = ()
    tradeoff_svg: str | None = None  # the trade-off picture beside the Markdown report, if written
    chosen_point: int | None = None  # the point of the plan chosen (None: none passed)
    tradeoff_note: str = ""  # why no search ran ("" when one did)
    # FP16 node -> (binades to overflow, binades to underflow) of its outputs on the samples
    margins: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # node -> what it computes in ("INT8", "FP8") for quantized compute, counted apart from the shares
    quantized: Mapping[str, str] = field(default_factory=dict)
    # node -> the written node whose precision its FLOPs count in (:attr:`..flops.FlopShares.counted_as`)
    counted_as: Mapping[str, str] = field(default_factory=dict)
    # the Casts and Muls onnxruntime fuses into its MatMulInteger kernels (quantized.FusedDequantization):
    # FP32 as quantized compute, no pins
    fused_dequantization: tuple[str, ...] = ()
    # the integer ops whose schema admits no 16-bit type (DynamicQuantizeLinear, ...:
    # quantized.fp32_integer_ops): FP32 as quantized compute, no pins either
    fp32_integer_ops: tuple[str, ...] = ()
    # the Q/DQ groups whose fusion into a float32-scale QLinear* op fails to load with 16-bit scales
    # (quantized.Quantization.ort_fused: QLinearConcat): FP32 as quantized compute, no pins either
    ort_fused: tuple[str, ...] = ()
    # node -> FLOPs of the integer kernels (MatMulInteger, ...), which node_flops counts 0: what the
    # share of INT8 compute counts (flops.integer_kernel_flops)
    integer_flops: Mapping[str, float] = field(default_factory=dict)
    # how the basis' tolerances were derived, on the written model (a quantized model's gate:
    # quant_reference.QuantGate.to_json); {} for the tolerance as given
    quantization_gate: Mapping[str, object] = field(default_factory=dict)
    # a generation's (a decoder's, a streaming model's: :class:`~..generation.verdict.GenerationVerdict`):
    # its summary lines (its description, the steps judged and the bound, its tokens) and its JSON
    generation_lines: tuple[str, ...] = ()
    generation: Mapping[str, object] = field(default_factory=dict)
    # the written model emulated on every runtime of the registry (None: none was written and verified)
    runtimes: RuntimeTable | None = None

    @property
    def unpinned(self) -> frozenset[str]:
        """The quantized compute FP32 whatever a plan says, which no list of pins names (the notes count
        them): the fused dequantization's nodes, the integer ops with no 16-bit type and the Q/DQ groups
        whose fusion into a float32-scale op fails to load in 16 bits."""
        return frozenset((*self.fused_dequantization, *self.fp32_integer_ops, *self.ort_fused))

    @property
    def fp32_nodes(self) -> tuple[str, ...]:
        """The plan's FP32 pins: its FP32 nodes but :attr:`unpinned`."""
        return tuple(n for n in self.plan.fp32_nodes if n not in self.unpinned)

    @property
    def listed_points(self) -> tuple[PlanPoint, ...]:
        """The trade-off points as the table and the picture list them: each one's pins without
        :attr:`unpinned` (``points`` keep them, so that a point replays as measured)."""
        unpinned = self.unpinned
        return tuple(replace(p, pinned=tuple(n for n in p.pinned if n not in unpinned)) for p in self.points)

    def counted_nodes(self) -> tuple[str, ...]:
        """The nodes its node counts count: those that compute in a float type
        (:meth:`.FlopShares.counted`) but quantized compute, as the FLOP shares (of a quantized model,
        the non-quantized nodes)."""
        return tuple(n for n in self.shares.counted(self.plan) if n not in self.quantized)

    def counted_precisions(self) -> dict[str, Precision]:
        """Each of :meth:`counted_nodes` -> the precision it computes in, in the written file."""
        return {n: p for n, p in self.shares.precisions(self.plan).items() if n not in self.quantized}

    def low_nodes(self) -> tuple[str, ...]:
        """The counted nodes that compute in a 16-bit type in the written file."""
        return tuple(n for n, p in self.counted_precisions().items() if p.is_low)

    @property
    def nodes_of(self) -> str:
        """What its node counts are of, as the summary says it ("2/2 non-quantized nodes")."""
        return "non-quantized nodes" if self.quantized else "nodes"

    def low_node_share(self) -> float:
        """The 16-bit share of :meth:`counted_nodes`."""
        total = len(self.counted_nodes())
        return len(self.low_nodes()) / total if total else 0.0

    @property
    def shares(self) -> FlopShares:
        """What its shares of compute count: the estimated FLOPs, but quantized compute's."""
        return FlopShares(self.node_flops, self.quantized, self.counted_as)

    def low_flop_share(self) -> float:
        """The 16-bit (FP16 and BF16) share of estimated FLOPs (of the non-quantized ones in a quantized
        model)."""
        return self.shares.low(self.plan)

    def flop_shares(self) -> dict[str, float]:
        """Each precision's share of estimated FLOPs (:func:`..flops.precision_shares`), of the
        non-quantized FLOPs in a quantized model."""
        return self.shares.by_precision(self.plan)

    @property
    def low_label(self) -> str:
        """What its 16-bit nodes are called: "FP16", "BF16", or "16-bit" where the plan has both."""
        lows = {d.precision.value for d in self.plan.decisions.values() if d.precision.is_low}
        return "16-bit" if len(lows) > 1 else (lows.pop() if lows else self.low_precision).upper()


def for_conversion(ctx: ModelContext, outcome: ConversionOutcome) -> RunReport:
    """The report of one measured ``convert``: the search's comparisons, statistics and costs
    (``outcome.auto``), then the writing and the verification."""
    auto, verification = outcome.auto, outcome.verification
    basis = auto.basis
    feeds = basis.samples.feeds
    shapes = {k: np.shape(v) for k, v in feeds[0].items()} if feeds else {}
    return RunReport(
        model=ctx.path,
        output=outcome.output_path,
        mode=outcome.mode,
        oracle=outcome.oracle,
        status=outcome.status,
        message=outcome.message,
        plan=outcome.plan,
        node_ops=dict(ctx.node_ops),
        samples_source=basis.samples.source,
        samples_synthetic=bool(basis.samples.synthetic),
        sample_count=len(feeds),
        warnings=outcome.warnings + tuple(basis.samples.warnings),
        tolerance=basis.tolerance,
        node_flops=auto.node_flops or estimate_flops(ctx.model, shapes),
        node_stats=auto.node_stats,
        before=auto.before,
        after=auto.after,
        verified=None if verification is None else verification.verified,
        native=None if verification is None else verification.native,
        validation=None if verification is None else verification.validation,
        phases=tuple(auto.phases) + (() if verification is None else verification.phases),
        headroom=auto.headroom,
        helper_sessions=outcome.helper_sessions,
        points=auto.points,
        notes=(auto.notes + _float64_notes(ctx, outcome.plan, auto.node_flops, auto.counted_as)
               + _underflow_notes(ctx, outcome.plan, auto.node_stats, auto.headroom)
               + _thin_pass_notes(verification, basis.relative)
               + _quantized_notes(ctx)),
        tradeoff_svg=outcome.tradeoff_svg,
        chosen_point=auto.chosen_point,
        tradeoff_note=auto.unsearched,
        nothing_to_convert=ctx.nothing_to_convert,
        target=ctx.target.name,
        low_precision=ctx.target.low.precision,
        before_plan=outcome.before_plan,
        margins=_margins(outcome.plan, auto.node_stats, ctx.target.low),
        quantized=quantized.of(ctx).compute,
        counted_as=auto.counted_as,
        fused_dequantization=tuple(quantized.of(ctx).dequantization_nodes),
        fp32_integer_ops=quantized.fp32_integer_ops(ctx),
        ort_fused=tuple(quantized.of(ctx).ort_fused_nodes),
        integer_flops=integer_kernel_flops(ctx.model, shapes, quantized.of(ctx).integer_ops or ()),
        quantization_gate=basis.to_json(None if verification is None else verification.verified),
        runtimes=None if verification is None else verification.runtimes,
        **_generation(basis, verification),
    )


def _generation(basis: Basis, verification: Verification | None) -> dict[str, Any]:
    """A generation's lines and JSON: the written model's verdict, or, where nothing was written, its
    description."""
    found = None if verification is None else verification.generation
    if found is not None:
        return {"generation_lines": tuple(found.lines()), "generation": found.to_json()}
    generation = basis.generation
    if generation is None:
        return {}
    return {"generation_lines": (f"generation: {generation.summary()} ({generation.source})",),
            "generation": {"description": generation.summary(), "kind": generation.kind,
                           "source": generation.source, "steps": generation.steps}}


def _quantized_notes(ctx: ModelContext) -> tuple[str, ...]:
    """What the reference of a quantized model is, what its shares and node counts count, and which
    of its FP32 nodes are no pins."""
    found = quantized.of(ctx)
    if not found.any:
        return ()
    qlinear = "the Q/DQ groups whose QLinear* fusion fails to load in 16 bits, " if found.ort_fused else ""
    kernels = (f"; {len(found.compute)} node(s) of quantized compute (DQ -> Conv/MatMul/Gemm <- DQ groups, "
               f"{qlinear}integer ops) are counted apart from the 16-bit share and the node counts"
               if found.compute else "")
    return ("quantized model: the reference is its Q/DQ run in FP32 as the ONNX specification defines them, "
            "float fake-quantisation (onnxruntime with its optimisations off), not onnxruntime's fused "
            f"integer kernels nor TensorRT's{kernels}",) + quantized.unpinned_notes(ctx)


def _underflow_notes(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping[str, NodeStats], headroom: float,
                     ) -> tuple[str, ...]:
    """The 16-bit nodes that peak within the headroom of the type's normal minimum
    (:func:`~onnx_precision.policy.underflow_headroom`), the nearest first, each with its margin."""
    found = sorted(underflow_headroom(ctx, plan, stats, headroom).items(), key=lambda item: item[1])
    if not found:
        return ()
    low = ctx.target.low
    names = ", ".join(f"{node} (peaks at {stats[node].max_abs:.2g}, {abs(b):.1f} binade(s) "
                      f"{'above' if b >= 0 else 'below'})" for node, b in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (f"{len(found)} 16-bit node(s) peak within the headroom ({headroom:g}x) of the {low.name} normal "
            f"minimum {low.min_normal:.2g}, where an input {headroom:g}x quieter loses their precision: "
            f"{names}{more}; kept 16-bit, as they pass here; --keep-fp32 NODE keeps one FP32",)


def _thin_pass_notes(verification: Verification | None,
                     relative: Mapping[str, float] | None) -> tuple[str, ...]:
    """A note when the written model's pass rests on little: near a bound (for a quantized model,
    relative to its quantization error), or on one sample."""
    judged = () if verification is None else tuple(
        c for c in (verification.verified, verification.validation) if c is not None)
    if not judged or not all(c.passed for c in judged):
        return ()
    note = thin_pass_note(judged, "more samples: --inputs DIR with several .npz, or --validation-inputs DATA",
                          relative)
    return (note,) if note else ()


def _float64_notes(ctx: ModelContext, plan: PrecisionPlan, flops: Mapping[str, float],
                   counted_as: Mapping[str, str]) -> tuple[str, ...]:
    """What float64 compute remains, named with why (--keep-float64, or the plan's reason): its
    nodes count with the wide ones, not in the 16-bit share. A pin written inside a 16-bit node (a
    decomposed LayerNorm's, ``counted_as``) computes in that node's type, not in float64."""
    computing = {ref.name for ref in ctx.nodes if computes_in_float64(ref.node, ctx.types)}
    written = counted_precisions(plan, flops, counted_as)
    kept = [n for n in plan.fp32_nodes if n in computing and written.get(n, Precision.FP32) is Precision.FP32]
    if not kept:
        return ()

    def why(node: str) -> str:
        reasons = plan.decisions[node].reasons
        if any(r.detail == FLOAT64_KEPT for r in reasons):
            return "--keep-float64"
        return reasons[-1].source if reasons else "fp32"

    total = sum(flops.get(n, 0.0) for n in plan.decisions)
    kept_flops = sum(flops.get(n, 0.0) for n in kept)
    share = f" ({100 * kept_flops / total:.2g}% of estimated FLOPs)" if total else ""
    names = ", ".join(f"{n} ({why(n)})" for n in kept[:5]) + (
        f" and {len(kept) - 5} more" if len(kept) > 5 else "")
    return (f"{len(kept)} node(s) compute in float64{share} and stay float64, counted with the FP32 "
            f"nodes: {names}",)


def _margins(plan: PrecisionPlan, stats: Mapping[str, NodeStats], low: LowPrecision,
             ) -> dict[str, tuple[float, float]]:
    """Each 16-bit node's margins on the samples in its own type (:meth:`LowPrecision.margins`; ``low``
    is the target's row, which its nodes are judged by), the nearest first."""
    def row(node: str) -> LowPrecision:
        precision = plan.precision(node)
        return low if precision == low.precision else low_of(precision)

    margins = {n: row(n).margins(s.max_abs, s.min_nonzero_abs) for n, s in stats.items()
               if plan.is_low(n) and s.max_abs is not None and s.min_nonzero_abs is not None}
    return dict(sorted(margins.items(), key=lambda item: min(item[1])))


def default_paths(output_path: str, report_json: str | None, report_md: str | None) -> tuple[str, str]:
    """``--report``/``--report-md``, defaulting to siblings of the output: OUT.report.json/.md."""
    stem = output_path[:-5] if output_path.endswith(".onnx") else output_path
    return report_json or stem + ".report.json", report_md or stem + ".report.md"


def tradeoff_path(report_md: str) -> str:
    """Where the trade-off picture goes: beside the Markdown report, ``<report>.tradeoff.svg``."""
    stem = report_md[:-3] if report_md.endswith(".md") else report_md
    return stem + ".tradeoff.svg"


def tradeoff_svg(report: RunReport) -> str:
    """The trade-off picture of a report: its points, their Pareto front, the chosen plan and the
    tolerance."""
    tolerance = tolerance_line(report.tolerance) if report.tolerance is not None else None
    title = f"{os.path.basename(report.model)}: {report.low_label} share of compute against error"
    return front_svg(Picture(report.listed_points, statistic(report), title, report.chosen_point, tolerance,
                             report.tradeoff_note, report.low_label, report.shares.of))


def statistic(report: RunReport) -> str:
    return error_statistic(report.tolerance if report.tolerance is not None else Tolerance())


def comparisons(report: RunReport) -> list[tuple[str, Comparison]]:
    labelled = [
        ("before", report.before),
        ("after", report.after),
        ("verified", report.verified),
        ("native", report.native),
        ("validation", report.validation),
    ]
    return [(key, c) for key, c in labelled if c is not None]


def samples_note(report: RunReport) -> str:
    if report.samples_synthetic:
        return (
            "synthetic feeds: what overflows depends on the value ranges; "
            "pass real data with --inputs for a plan you can trust"
        )
    return ""
