"""The report as Markdown, for people, and the short summary for the terminal.

Every name in the Markdown is a code span (:func:`..render.for_markdown`) and every other text that is not
ours (a reason, a note, a warning, a path, an op type) goes through :func:`..render.markdown_text`, so that
what a model names can neither break a table nor become markup. The terminal summary is plain text: the
command line renders each of its lines for the terminal where it prints them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..float_types import low_of
from ..format import cosine_text, number, percent
from ..generation.runner import failing_step
from ..judge import Comparison, Tolerance
from ..oracle.inspection import NodeStats
from ..plan import Precision
from ..quantized import shares_text
from ..render import for_markdown, markdown_text
from ..storage import write_text
from ..tradeoff import ALL_LISTED, front_table, worst_output_text

if TYPE_CHECKING:
    pass

from .run_report import RunReport, comparisons, samples_note, statistic


def _share_text(report: RunReport) -> str:
    """The FP16 share, or why there is none: no model was written, or nothing in it could be FP16."""
    if report.output is None:
        return "none, no model written"
    if report.nothing_to_convert:
        return f"nothing to convert: {report.nothing_to_convert}"
    shares = report.flop_shares()
    lows = [f"{p.name} {percent(shares[p.value])}" for p in Precision if p.is_low and p.value in shares]
    both = f" ({', '.join(lows)})" if len(lows) > 1 else ""
    quantized = shares_text(report.quantized, report.node_flops, report.plan.decisions, report.integer_flops)
    unknown = report.shares.unknown_note(report.plan)  # how much of the compute the share could not weigh
    flops = f"{report.shares.of}{both}" + "".join(f"; {part}" for part in (quantized, unknown) if part)
    return (f"{len(report.low_nodes())}/{len(report.counted_nodes())} {report.nodes_of} "
            f"({percent(report.low_node_share())}), {percent(report.low_flop_share())} {flops}")


_COMPARISON_TITLES = {
    "after": "After: the chosen plan (emulated)",
    "verified": "Verified: the written model (emulated)",
    "native": "The written model under --oracle",
    "validation": "Validation: the written model on held-out samples (emulated)",
}


def _fallback_nodes(report: RunReport) -> list[str]:
    """The BF16 nodes of a plan that also has FP16 ones (--fallback bf16), with why: the nodes of each
    16-bit type of the plan but its first."""
    lines = []
    for precision in [p for p in Precision if p.is_low and report.plan.nodes_in(p)][1:]:
        nodes = report.plan.nodes_in(precision)
        lines += ["", f"## {precision.name} nodes ({len(nodes)})", "", "| node | op | why | FP32 max abs |",
                  "|---|---|---|---|"]
        for name in nodes:
            stats = report.node_stats.get(name, NodeStats())
            lines.append(f"| {_name_cells(report, name)} | {number(stats.max_abs)} |")
    return lines


def to_markdown(report: RunReport) -> str:
    lines = [
        f"# onnx-precision report: {markdown_text(report.model)}",
        "",
        f"- output: {for_markdown(report.output)}" if report.output else "- output: (none written)",
        f"- mode: {report.mode}; oracle: {report.oracle}; target: {report.target}",
        f"- status: **{report.status}**" + (f": {markdown_text(report.message)}" if report.message else ""),
        f"- samples: {report.sample_count} ({markdown_text(report.samples_source)})",
    ]
    if report.samples_synthetic:
        lines.append(f"- note: {markdown_text(samples_note(report))}")
    if report.tolerance is not None:
        lines.append(f"- tolerance: {markdown_text(report.tolerance.describe())}")
    if report.headroom:
        lines.append(
            f"- headroom: {report.headroom:g} (nodes whose FP32 activations exceed "
            f"{low_of(report.low_precision).max / report.headroom:.6g} are pinned; those that peak under "
            f"{low_of(report.low_precision).min_normal * report.headroom:.3g} are named in the notes)"
        )
    elif report.headroom is not None:
        lines.append("- headroom: off (only the search pins)")
    lines += [f"- warning: {markdown_text(w)}" for w in report.warnings]
    lines += [
        f"- {report.low_label} share: {markdown_text(_share_text(report))}",
        f"- cost: {report.sessions_built} onnxruntime session(s) of the model{_helpers(report)}, "
        f"{report.probes_run} probe(s), {report.seconds:.2f} s",
        "",
        f"## FP32 nodes ({len(report.fp32_nodes)}{_apart(report)})",
        "",
    ]
    if report.fp32_nodes:
        lines += [
            f"| node | op | why | FP32 max abs | FP32 min nonzero | {report.low_precision.upper()} error |",
            "|---|---|---|---|---|---|",
        ]
        for name in report.fp32_nodes:
            stats = report.node_stats.get(name, NodeStats())
            lines.append(
                f"| {_name_cells(report, name)} | {number(stats.max_abs)} | "
                f"{number(stats.min_nonzero_abs)} | {number(stats.layerwise_error)} |"
            )
    elif _apart(report):
        lines.append(f"None pinned: every non-quantized node runs in {report.low_label}; the notes say why "
                     f"the {_unpinned_fp32(report)} of quantized compute stay FP32.")
    else:
        everywhere = f"None: every node runs in {report.low_label}."
        lines.append("None." if report.nothing_to_convert else everywhere)
    lines += _fallback_nodes(report)
    for key, comparison in comparisons(report):
        lines += [
            "",
            f"## {_COMPARISON_TITLES.get(key) or f'Before: {markdown_text(report.before_plan)} (emulated)'}: "
            f"{'pass' if comparison.passed else 'FAIL'} ({comparison.oracle})",
            "",
            "| output | rel RMS err | worst slice | max abs err | max rel err | p99 | p99.9 | cosine | "
            "outside bound | new NaN/Inf | |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in comparison.outputs:
            verdict = _cell(m.verdict()) if m.passed else "FAIL: " + _cell("; ".join(m.failures))
            lines.append(
                f"| {for_markdown(m.name, cell=True)} | {number(m.rel_rms_err)} | "
                f"{number(m.worst_slice_rel_rms)} | {number(m.max_abs_err)} | {number(m.max_rel_err)} | "
                f"{number(m.p99_abs_err)} | "
                f"{number(m.p999_abs_err)} | {cosine_text(m.cosine)} | {m.outside_bound}/{m.elements} | "
                f"{m.new_nonfinite} | {verdict} |"
            )
        lines += [""] + [f"- by shape: {_cell(line)}" for line in _by_shape_lines(comparison)] \
            if comparison.by_shape else []
    lines += _runtime_lines(report)
    if report.generation_lines:
        lines += ["", "## Generation", ""] + [f"- {markdown_text(line)}" for line in report.generation_lines]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {markdown_text(n)}" for n in report.notes]
    lines += _tradeoff_lines(report)
    if report.phases:
        lines += ["", "## Cost", "", "| phase | seconds | sessions | probes |", "|---|---|---|---|"]
        lines += [f"| {_cell(p.name)} | {p.seconds:.3f} | {p.sessions} | {p.probes} |" for p in report.phases]
    return "\n".join(lines) + "\n"


def _runtime_lines(report: RunReport) -> list[str]:
    """The runtimes section: the written model emulated on each runtime of the registry, its verdict,
    its worst output and, where it fails, the first node where the error appears."""
    if report.runtimes is None:
        return []
    lines = ["", "## Runtimes: the written model emulated on each", "",
             "| runtime | verdict | worst output | first failing node |", "|---|---|---|---|"]
    for v in report.runtimes.verdicts:
        verdict = ("pass" if v.passed else "FAIL") + (" (as this run judged it)" if v.as_run else "")
        first = "" if v.first is None else _cell(v.first.describe())
        lines.append(f"| {_cell(v.runtime)} | {verdict} | {_cell(v.worst)} | {first} |")
    return lines


def _tradeoff_lines(report: RunReport) -> list[str]:
    """The trade-off section: how its plans came to be measured, the front with the chosen point
    marked, and the picture."""
    note = markdown_text(report.tradeoff_note[:1].upper() + report.tradeoff_note[1:])
    if not report.points:
        return ["", "## Trade-off", "", f"{note}."] if note else []
    rows = "all listed" if len(report.points) <= ALL_LISTED else "the Pareto front listed"
    lines = ["", f"## Trade-off: {report.low_label} share of compute against error", "",
             f"{note + '; ' if note else ''}{len(report.points)} plan(s) measured, {rows} (error: "
             f"{statistic(report)}, worst output and sample), the chosen one marked. Replay a point with "
             f"`--plan REPORT.json@POINT --mode all-fp16`.", ""]
    lines += front_table(report.listed_points, report.node_flops, report.chosen_point, low=report.low_label,
                         of=report.shares.of)
    if report.tradeoff_svg:
        lines += ["", f"![trade-off]({os.path.basename(report.tradeoff_svg)})"]
    return lines


def _apart(report: RunReport) -> str:
    """What the FP32 nodes' heading adds where quantized compute stays FP32 unpinned (:attr:`RunReport.
    unpinned`): " pinned, and 11 of quantized compute" ("" where none)."""
    apart = _unpinned_fp32(report)
    return f" pinned, and {apart} of quantized compute" if apart else ""


def _unpinned_fp32(report: RunReport) -> int:
    return sum(1 for n in report.plan.fp32_nodes if n in report.unpinned)


def write_markdown(report: RunReport, path: str, input_paths: tuple[str, ...] = ()) -> None:
    write_text(path, to_markdown(report), input_paths)


def _reason_text(reason) -> str:
    evidence = ", ".join(f"{k}={v}" for k, v in reason.evidence)
    return f"{reason.source}: {reason.detail}" + (f" ({evidence})" if evidence else "")


def _cell(text: str) -> str:
    return markdown_text(text, cell=True)


def _name_cells(report: RunReport, name: str) -> str:
    """A node's first cells in a table of nodes: its name, its op, why it has its precision."""
    why = "<br>".join(dict.fromkeys(_cell(_reason_text(r)) for r in report.plan.decisions[name].reasons))
    return f"{for_markdown(name, cell=True)} | {_cell(report.node_ops.get(name, ''))} | {why}"


# --- terminal summary -------------------------------------------------------------------------------


def summary_lines(report: RunReport, report_paths: Sequence[str] = ()) -> list[str]:
    """5-10 lines for the terminal: what was written, the share, the pins, before/after, cost."""
    target = f" -> {report.output}" if report.output else ""
    lines = [
        f"{report.model}{target}: {report.status}" + (f" ({report.message})" if report.message else ""),
        f"mode {report.mode}, oracle {report.oracle}, target {report.target}"
        f"{'' if report.low_precision == 'fp16' else ' in ' + report.low_precision.upper()}, "
        f"{report.sample_count} sample(s): {report.samples_source}",
        f"{report.low_label}: {_share_text(report)}",
        "FP32 pins " + _pins_line(report) if report.fp32_nodes else "FP32 pins: none",
    ]
    for key, comparison in comparisons(report):
        user_plan = key == "before" and not report.before_plan.startswith("all ")
        label = f"before ({report.before_plan})" if user_plan else key
        lines.append(f"{label}: {_comparison_line(comparison, bool(report.generation_lines))}")
    if report.runtimes is not None:
        lines.append(f"runtimes: {report.runtimes.line()}")
    lines += list(report.generation_lines)
    lines += [f"note: {n}" for n in report.notes]
    cost = (
        f"cost: {report.sessions_built} session(s){_helpers(report)}, {report.probes_run} probe(s), "
        f"{report.seconds:.2f} s"
    )
    if report_paths:
        cost += "; report: " + ", ".join(report_paths)
    lines.append(cost)
    return lines


def verdict_line(report: RunReport) -> str:
    """The one line ``convert -q`` prints: the summary's first (what was written, the status and
    why), what changes what it means as ``check -q`` says it (a target other than generic, data the run
    made up), the worst output of the last comparison (the written model's, when it was written) with
    its statistic, and the 16-bit share."""
    last = comparisons(report)[-1:]
    worst = [worst_output_text(last[0][1], report.tolerance or Tolerance())] if last else []
    under = f" under {report.target}" if report.target != "generic" else ""
    made_up = " on synthetic data (no --inputs)" if report.samples_synthetic else ""
    return "; ".join([summary_lines(report)[0] + under + made_up, *worst,
                      f"{report.low_label}: {_share_text(report)}"])


def _pins_line(report: RunReport, limit: int = 6) -> str:
    """The plan's FP32 pins with their reasons' sources; a pin the written file counts with a 16-bit node
    (a fused LayerNorm's statistics, inside its LayerNormalization) says so, as the counts above do, and
    so does a pin of quantized compute (a group's kernel kept FP32 with its DQ), which they leave out."""
    names = report.fp32_nodes
    written = report.shares.precisions(report.plan)
    parts = []
    for name in names[:limit]:
        sources = sorted({r.source for r in report.plan.decisions[name].reasons})
        inside = written.get(name, Precision.FP32)
        where = (f"; counted with '{report.counted_as[name]}', {inside.name} in the written file"
                 if inside.is_low and report.counted_as.get(name) else "")
        where += f"; {report.quantized[name]} compute, counted apart" if name in report.quantized else ""
        parts.append(f"{name} ({'/'.join(sources) or '?'}{where})")
    more = f", ... {len(names) - limit} more" if len(names) > limit else ""
    return f"({len(names)}): " + ", ".join(parts) + more


def _comparison_line(comparison: Comparison, generation: bool = False) -> str:
    step = failing_step(comparison) if generation else None
    if step is not None:  # a generation's: the step it fails at, and how (its later steps did not run)
        return f"FAIL at step {step} ({comparison.failure()})"
    verdict = "pass" if comparison.passed else "FAIL"
    worst = comparison.worst()
    if worst is None:
        return verdict
    detail = (f"worst {worst.name}: rel RMS err {number(worst.rel_rms_err)}, max abs err "
              f"{number(worst.max_abs_err)}, cosine {cosine_text(worst.cosine)}")
    if worst.new_nonfinite:
        detail += f", {worst.new_nonfinite} new NaN/Inf"
    if worst.finite_note:
        detail += f" ({worst.finite_note})"
    others = worst.other_failures()
    if others:
        detail += f"; {others[0]}"
    clauses = " / ".join(dict.fromkeys(m.passed_by for m in comparison.outputs if m.passed_by))
    if comparison.passed and clauses:
        detail = f"{clauses}; {detail}"
    return f"{verdict} ({detail})" + "".join(f"; {line}" for line in _by_shape_lines(comparison))


def _by_shape_lines(comparison: Comparison) -> list[str]:
    """One phrase per input shape of the samples: its samples' worst output and verdict."""
    lines = []
    for shapes, c in comparison.by_shape:
        worst = c.worst()
        if worst is not None:
            lines.append(f"{shapes} ({c.samples} sample(s)): {worst.name} rel RMS err "
                         f"{number(worst.rel_rms_err)}, max abs err {number(worst.max_abs_err)}, "
                         f"{'pass' if c.passed else 'FAIL'}")
    return lines


def _helpers(report: RunReport) -> str:
    return f" (+{report.helper_sessions} small helper session(s))" if report.helper_sessions else ""
