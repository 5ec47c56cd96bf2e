"""The report as JSON, for machines: written by every static/auto conversion, and read back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..costs import PhaseCost
from ..errors import PlanError
from ..format import json_safe
from ..judge import Comparison, Tolerance
from ..oracle.inspection import NodeStats
from ..plan import Precision, PrecisionPlan
from ..runtimes import RuntimeTable
from ..storage import write_text
from ..tradeoff import PlanPoint, pareto_front

if TYPE_CHECKING:
    pass

from .run_report import REPORT_FORMAT, RunReport, comparisons, samples_note, statistic


def to_json(report: RunReport) -> dict:
    return json_safe(
        {
            "format": REPORT_FORMAT,
            "model": report.model,
            "output": report.output,
            "mode": report.mode,
            "oracle": report.oracle,
            "target": report.target,
            "low_precision": report.low_precision,
            "status": report.status,
            "message": report.message,
            "samples": {
                "source": report.samples_source,
                "synthetic": report.samples_synthetic,
                "count": report.sample_count,
                "note": samples_note(report),
            },
            "warnings": list(report.warnings),
            "tolerance": None if report.tolerance is None else report.tolerance.to_json(),
            "headroom": report.headroom,
            # "fp16_share": the key saved reports hold, named before BF16; its shares are of every 16-bit
            # type (low_node_share, low_flop_share)
            "fp16_share": None if report.output is None or report.nothing_to_convert else {
                "nodes": report.low_node_share(),
                "flops": report.low_flop_share(),
                "flops_of": report.shares.of[len("of "):],  # "estimated FLOPs", or the non-quantized ones
                # every 16-bit node (FP16 and BF16); fp16_nodes: the FP16 ones (it counted BF16 too)
                "16bit_nodes": len(report.low_nodes()),
                "fp16_nodes": sum(1 for p in report.counted_precisions().values() if p is Precision.FP16),
                # those that compute in float (of a quantized model, the non-quantized ones: nodes_of)
                "total_nodes": len(report.counted_nodes()),
                **({"nodes_of": f"the {report.nodes_of} that compute in a float type",
                    "quantized_nodes": len(report.quantized)} if report.quantized else {}),
                "flops_by_precision": report.flop_shares(),
            },
            "nothing_to_convert": report.nothing_to_convert or None,
            "before_plan": report.before_plan,
            "pinned": [_pin_json(report, name) for name in report.fp32_nodes],
            "plan": report.plan.to_json(),
            "nodes": {
                name: {"op": op, "flops": report.node_flops.get(name)} for name, op in report.node_ops.items()
            },
            "node_stats": {name: _stats_json(s) for name, s in report.node_stats.items()},
            # node -> what it computes in ("INT8", "FP8"): quantized compute, counted apart from the shares
            "quantized": dict(report.quantized),
            # node -> the written node whose precision its FLOPs count in (a fused LayerNorm's, or a graph
            # input's for a node that reads it as written): what the shares above count
            "counted_as": dict(report.counted_as),
            # FP32 inside onnxruntime's fused integer kernels: quantized compute, not among "pinned"
            "fused_dequantization": list(report.fused_dequantization),
            # FP32 integer ops that take no 16-bit type (DynamicQuantizeLinear): quantized compute, not pinned
            **({"fp32_integer_ops": list(report.fp32_integer_ops)} if report.fp32_integer_ops else {}),
            # FP32 Q/DQ groups whose float32-scale QLinear* fusion fails to load in 16 bits: quantized compute
            **({"ort_fused": list(report.ort_fused)} if report.ort_fused else {}),
            # the integer kernels' estimated FLOPs, which "nodes" counts 0 (they compute in no float type)
            "integer_flops": dict(report.integer_flops),
            # the FP16 nodes nearest to the 16-bit type's limits first (within one binade: at risk on
            # inputs twice as large, or half as small, as the samples)
            "margins": [
                {"node": name, "overflow_binades": round(over, 3), "underflow_binades": round(under, 3)}
                for name, (over, under) in report.margins.items()],
            "notes": list(report.notes),
            # a quantized model's gate: reference, margin, quantization errors, each output's deciding sample
            **({"quantization_gate": dict(report.quantization_gate)} if report.quantization_gate else {}),
            # a generation's (a decoder's, a streaming model's): its description, the steps judged, the
            # bound, a decoder's tokens, and the summary's lines
            **({"generation": {**report.generation, "lines": list(report.generation_lines)}}
               if report.generation_lines else {}),
            "tradeoff": {
                "statistic": statistic(report),
                "points": [p.to_json() for p in report.points],
                "front": [p.index for p in pareto_front(report.points)],
                "chosen": report.chosen_point,
                "note": report.tradeoff_note or None,
                "picture": report.tradeoff_svg,
            },
            "outputs": {key: _comparison_json(c) for key, c in comparisons(report)},
            # the written model emulated on every runtime of the registry: where the plan holds, where it
            # fails and the first node there
            "runtimes": None if report.runtimes is None else report.runtimes.to_json(),
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


def from_json(obj: Mapping) -> RunReport:
    """A report read back from :func:`to_json` (what a run wrote can be inspected or compared later)."""
    if obj.get("format") != REPORT_FORMAT:
        raise PlanError(
            f"not an onnx-precision report (format {obj.get('format')!r}, expected {REPORT_FORMAT})"
        )
    samples, cost, outputs = obj["samples"], obj["cost"], obj["outputs"]
    comparisons = {key: Comparison.from_json(value) for key, value in outputs.items()}
    picture = obj["tradeoff"].get("picture")
    return RunReport(
        model=obj["model"],
        output=obj["output"],
        mode=obj["mode"],
        oracle=obj["oracle"],
        status=obj["status"],
        message=obj["message"],
        plan=PrecisionPlan.from_json(obj["plan"], source="report"),
        node_ops={name: node["op"] for name, node in obj["nodes"].items()},
        samples_source=samples["source"],
        samples_synthetic=samples["synthetic"],
        sample_count=samples["count"],
        warnings=tuple(obj["warnings"]),
        tolerance=None if obj["tolerance"] is None else Tolerance.from_json(obj["tolerance"]),
        node_flops={
            name: float(node["flops"]) for name, node in obj["nodes"].items() if node["flops"] is not None
        },
        node_stats={
            name: NodeStats(*(_float_or_none(s.get(k)) for k in _STATS_KEYS))
            for name, s in obj["node_stats"].items()
        },
        before=comparisons.get("before"),
        after=comparisons.get("after"),
        verified=comparisons.get("verified"),
        native=comparisons.get("native"),
        validation=comparisons.get("validation"),
        phases=tuple(
            PhaseCost(p["name"], float(p["seconds"]), int(p["sessions"]), int(p["probes"]))
            for p in cost["phases"]
        ),
        headroom=obj["headroom"],
        helper_sessions=int(cost["helper_sessions"]),
        points=tuple(PlanPoint.from_json(p) for p in obj["tradeoff"]["points"]),
        notes=tuple(obj["notes"]),
        tradeoff_svg=picture,
        chosen_point=obj["tradeoff"].get("chosen"),
        tradeoff_note=obj["tradeoff"].get("note") or "",
        nothing_to_convert=obj["nothing_to_convert"] or "",
        before_plan=obj["before_plan"],
        target=obj["target"],
        low_precision=obj.get("low_precision", "fp16"),
        margins={m["node"]: (float(m["overflow_binades"]), float(m["underflow_binades"]))
                 for m in obj.get("margins", ())},
        quantized={str(k): str(v) for k, v in obj.get("quantized", {}).items()},
        counted_as={str(k): str(v) for k, v in obj.get("counted_as", {}).items()},
        fused_dequantization=tuple(str(n) for n in obj.get("fused_dequantization", ())),
        fp32_integer_ops=tuple(str(n) for n in obj.get("fp32_integer_ops", ())),
        ort_fused=tuple(str(n) for n in obj.get("ort_fused", ())),
        integer_flops={str(k): float(v) for k, v in obj.get("integer_flops", {}).items()},
        quantization_gate=dict(obj.get("quantization_gate", {})),
        generation={k: v for k, v in obj.get("generation", {}).items() if k != "lines"},
        generation_lines=tuple(str(line) for line in obj.get("generation", {}).get("lines", ())),
        runtimes=None if obj.get("runtimes") is None else RuntimeTable.from_json(obj["runtimes"]),
    )


_STATS_KEYS = ("max_abs", "min_nonzero_abs", "layerwise_error")


def _stats_json(stats: NodeStats) -> dict:
    return {key: getattr(stats, key) for key in _STATS_KEYS}


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]  # "inf"/"nan" strings too


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
    out = {
        "oracle": comparison.oracle,
        "passed": comparison.passed,
        "outputs": [m.to_json() for m in comparison.outputs],
    }
    if comparison.by_shape:
        out["by_shape"] = [{"shapes": shapes, **c.to_json()} for shapes, c in comparison.by_shape]
    return out
