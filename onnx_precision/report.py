"""The conversion report: JSON for machines, Markdown for people, a short summary for the terminal.

Everything here renders a :class:`RunReport`, a plain value assembled by ``convert`` from the
plan, the oracle's statistics and the search; nothing here runs a model. Each FP32 node is listed
with every reason it got (``Reason.source``: user, type, initializer, rule, range, headroom,
search), its FP32 range and its emulated layerwise error, so a user can always ask "why is this
node FP32". FP16 shares are given by node count and by estimated FLOPs
(:func:`onnx_precision.flops.estimate_flops`).
Reports read back (:func:`from_json`) into the same value, as plans do.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .compare import Comparison, Tolerance
from .context import ModelContext
from .costs import PhaseCost, PhaseTotals
from .data import Samples
from .flops import estimate_flops
from .format import cosine_text, json_safe, number
from .oracle.stats import NodeStats
from .plan import PrecisionPlan
from .storage import write_text
from .tradeoff import ERROR_STATISTIC, PlanPoint, front_svg, front_table, pareto_front
from .vocab import Mode, OracleName, Status

if TYPE_CHECKING:
    from .auto import AutoResult

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
        before_plan=before_plan,
    )


def _helpers(report: RunReport) -> str:
    return f" (+{report.helper_sessions} small helper session(s))" if report.helper_sessions else ""


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
    return front_svg(report.points)


# --- JSON -------------------------------------------------------------------------------------------


def to_json(report: RunReport) -> dict:
    return json_safe(
        {
            "format": REPORT_FORMAT,
            "model": report.model,
            "output": report.output,
            "mode": report.mode,
            "oracle": report.oracle,
            "status": report.status,
            "message": report.message,
            "samples": {
                "source": report.samples_source,
                "synthetic": report.samples_synthetic,
                "count": report.sample_count,
                "note": _samples_note(report),
            },
            "warnings": list(report.warnings),
            "tolerance": None if report.tolerance is None else report.tolerance.to_json(),
            "headroom": report.headroom,
            "fp16_share": None if report.output is None or report.nothing_to_convert else {
                "nodes": report.fp16_node_share(),
                "flops": report.fp16_flop_share(),
                "fp16_nodes": len(report.plan.fp16_nodes),
                "total_nodes": len(report.plan.decisions),
            },
            "nothing_to_convert": report.nothing_to_convert or None,
            "before_plan": report.before_plan,
            "pinned": [_pin_json(report, name) for name in report.fp32_nodes],
            "notes": list(report.notes),
            "tradeoff": {
                "statistic": ERROR_STATISTIC,
                "points": [p.to_json() for p in report.points],
                "front": [p.index for p in pareto_front(report.points)],
                "picture": report.tradeoff_svg,
            },
            "outputs": {key: _comparison_json(c) for key, c in _comparisons(report)},
            "cost": {
                "sessions_built": report.sessions_built,
                "helper_sessions": report.helper_sessions,
                "probes_run": report.probes_run,
                "seconds": report.seconds,
                "phases": [
                    {"name": p.name, "seconds": p.seconds, "sessions": p.sessions, "probes": p.probes}
                    for p in report.phases
                ],
            },
        }
    )


def dumps(report: RunReport) -> str:
    return json.dumps(to_json(report), indent=2) + "\n"


def write_json(report: RunReport, path: str, input_paths: tuple[str, ...] = ()) -> None:
    write_text(path, dumps(report), input_paths)


def _pin_json(report: RunReport, name: str) -> dict:
    stats = report.node_stats.get(name, NodeStats())
    return {
        "node": name,
        "op": report.node_ops.get(name, ""),
        "reasons": [r.to_json() for r in report.plan.decisions[name].reasons],
        "range": {"max_abs": stats.max_abs, "min_nonzero_abs": stats.min_nonzero_abs},
        "layerwise_error": stats.layerwise_error,
        "flops": report.node_flops.get(name),
    }


def _comparison_json(comparison: Comparison) -> dict:
    return {
        "oracle": comparison.oracle,
        "passed": comparison.passed,
        "outputs": [m.to_json() for m in comparison.outputs],
    }


def _comparisons(report: RunReport) -> list[tuple[str, Comparison]]:
    labelled = [
        ("before", report.before),
        ("after", report.after),
        ("verified", report.verified),
        ("native", report.native),
    ]
    return [(key, c) for key, c in labelled if c is not None]


def _samples_note(report: RunReport) -> str:
    if report.samples_synthetic:
        return (
            "synthetic feeds: what overflows depends on the value ranges; "
            "pass real data with --inputs for a plan you can trust"
        )
    return ""


# --- Markdown ---------------------------------------------------------------------------------------


def _share_text(report: RunReport) -> str:
    """The FP16 share, or why there is none: no model was written, or nothing in it could be FP16."""
    if report.output is None:
        return "none, no model written"
    if report.nothing_to_convert:
        return f"nothing to convert: {report.nothing_to_convert}"
    return (f"{len(report.plan.fp16_nodes)}/{len(report.plan.decisions)} nodes "
            f"({_pct(report.fp16_node_share())}), {_pct(report.fp16_flop_share())} of estimated FLOPs")


_COMPARISON_TITLES = {
    "after": "After: the chosen plan (emulated)",
    "verified": "Verified: the written model (emulated)",
    "native": "The written model under --oracle",
}


def to_markdown(report: RunReport) -> str:
    lines = [
        f"# onnx-precision report: {report.model}",
        "",
        f"- output: `{report.output}`" if report.output else "- output: (none written)",
        f"- mode: {report.mode}; oracle: {report.oracle}",
        f"- status: **{report.status}**" + (f": {report.message}" if report.message else ""),
        f"- samples: {report.sample_count} ({report.samples_source})",
    ]
    if report.samples_synthetic:
        lines.append(f"- note: {_samples_note(report)}")
    if report.tolerance is not None:
        lines.append(f"- tolerance: {report.tolerance.describe()}")
    if report.headroom:
        lines.append(
            f"- headroom: {report.headroom:g} (nodes whose FP32 activations exceed "
            f"{65504 / report.headroom:.6g} are pinned)"
        )
    elif report.headroom is not None:
        lines.append("- headroom: off (only the search pins)")
    lines += [f"- warning: {w}" for w in report.warnings]
    lines += [
        f"- FP16 share: {_share_text(report)}",
        f"- cost: {report.sessions_built} onnxruntime session(s) of the model{_helpers(report)}, "
        f"{report.probes_run} probe(s), {report.seconds:.2f} s",
        "",
        f"## FP32 nodes ({len(report.fp32_nodes)})",
        "",
    ]
    if report.fp32_nodes:
        lines += [
            "| node | op | why | FP32 max abs | FP32 min nonzero | FP16 error |",
            "|---|---|---|---|---|---|",
        ]
        for name in report.fp32_nodes:
            stats = report.node_stats.get(name, NodeStats())
            why = "<br>".join(_reason_text(r) for r in report.plan.decisions[name].reasons)
            lines.append(
                f"| `{name}` | {report.node_ops.get(name, '')} | {_md_cell(why)} | "
                f"{number(stats.max_abs)} | {number(stats.min_nonzero_abs)} | "
                f"{number(stats.layerwise_error)} |"
            )
    else:
        lines.append("None." if report.nothing_to_convert else "None: every node runs in FP16.")
    for key, comparison in _comparisons(report):
        lines += [
            "",
            f"## {_COMPARISON_TITLES.get(key) or f'Before: {report.before_plan} (emulated)'}: "
            f"{'pass' if comparison.passed else 'FAIL'} ({comparison.oracle})",
            "",
            "| output | max abs err | max rel err | cosine | new NaN/Inf | |",
            "|---|---|---|---|---|---|",
        ]
        for m in comparison.outputs:
            lines.append(
                f"| `{m.name}` | {number(m.max_abs_err)} | {number(m.max_rel_err)} | "
                f"{cosine_text(m.cosine)} | "
                f"{m.new_nonfinite} | {'pass' if m.passed else 'FAIL'} |"
            )
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    if len(report.points) > 1:
        lines += ["", "## Trade-off: FP16 share of compute against error", "",
                  f"{len(report.points)} plans evaluated; the Pareto front (error: {ERROR_STATISTIC}, worst "
                  f"output and sample). Replay a point with `--plan REPORT.json@POINT --mode all-fp16`.",
                  ""]
        lines += front_table(report.points)
        if report.tradeoff_svg:
            lines += ["", f"![trade-off]({os.path.basename(report.tradeoff_svg)})"]
    if report.phases:
        lines += ["", "## Cost", "", "| phase | seconds | sessions | probes |", "|---|---|---|---|"]
        lines += [f"| {p.name} | {p.seconds:.3f} | {p.sessions} | {p.probes} |" for p in report.phases]
    return "\n".join(lines) + "\n"


def write_markdown(report: RunReport, path: str, input_paths: tuple[str, ...] = ()) -> None:
    write_text(path, to_markdown(report), input_paths)


def _reason_text(reason) -> str:
    evidence = ", ".join(f"{k}={v}" for k, v in reason.evidence)
    return f"{reason.source}: {reason.detail}" + (f" ({evidence})" if evidence else "")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


# --- terminal summary -------------------------------------------------------------------------------


def summary_lines(report: RunReport, report_paths: Sequence[str] = ()) -> list[str]:
    """5-10 lines for the terminal: what was written, the share, the pins, before/after, cost."""
    target = f" -> {report.output}" if report.output else ""
    lines = [
        f"{report.model}{target}: {report.status}" + (f" ({report.message})" if report.message else ""),
        f"mode {report.mode}, oracle {report.oracle}, {report.sample_count} sample(s): "
        f"{report.samples_source}",
        f"FP16: {_share_text(report)}",
        "FP32 pins " + _pins_line(report) if report.fp32_nodes else "FP32 pins: none",
    ]
    for key, comparison in _comparisons(report):
        user_plan = key == "before" and report.before_plan != "all FP16"
        label = f"before ({report.before_plan})" if user_plan else key
        lines.append(f"{label}: {_comparison_line(comparison)}")
    lines += [f"note: {n}" for n in report.notes]
    cost = (
        f"cost: {report.sessions_built} session(s){_helpers(report)}, {report.probes_run} probe(s), "
        f"{report.seconds:.2f} s"
    )
    if report_paths:
        cost += "; report: " + ", ".join(report_paths)
    lines.append(cost)
    return lines


def _pins_line(report: RunReport, limit: int = 6) -> str:
    names = report.fp32_nodes
    parts = []
    for name in names[:limit]:
        sources = sorted({r.source for r in report.plan.decisions[name].reasons})
        parts.append(f"{name} ({'/'.join(sources) or '?'})")
    more = f", ... {len(names) - limit} more" if len(names) > limit else ""
    return f"({len(names)}): " + ", ".join(parts) + more


def _comparison_line(comparison: Comparison) -> str:
    verdict = "pass" if comparison.passed else "FAIL"
    worst = _worst_output(comparison.outputs)
    if worst is None:
        return verdict
    detail = (
        f"worst {worst.name}: max abs err {number(worst.max_abs_err)}, cosine {cosine_text(worst.cosine)}"
    )
    if worst.new_nonfinite:
        detail += f", {worst.new_nonfinite} new NaN/Inf"
    return f"{verdict} ({detail})"


def _worst_output(outputs: Iterable):
    outputs = list(outputs)
    if not outputs:
        return None
    failing = [m for m in outputs if not m.passed]
    pool = failing or outputs
    return max(pool, key=lambda m: (m.new_nonfinite, _sortable(m.max_abs_err)))


def _sortable(x: float | None) -> float:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return math.inf
    return float(x)


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"
