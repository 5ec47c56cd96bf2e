"""``analyze``: which nodes break in FP16, why, and how badly, on sample data.

Two baked emulation sessions of the model (:class:`~onnx_precision.oracle.Emulator`) give the
FP32 ranges of every tensor and, for the all-FP16 plan (as resolved: nodes that cannot be FP16
stay FP32), each node's emulated FP16 error and the first-divergence nodes. The static rules
(:mod:`onnx_precision.rules`) run with those ranges, which confirm or dismiss each finding. Per
node the evidence becomes one verdict:

* ``fp32-nonfinite``: the FP32 model itself turns non-finite here; FP16 is not blamed.
* ``overflow``: an FP32 value exceeds 65504, or a confirmed rule (or a new Inf) says it overflows.
* ``underflow``: values flush to zero in FP16 (a confirmed rule) and the emulated error diverges
  here or within a few nodes downstream, or a Log/division turns NaN/Inf on a flushed input.
  Tiny values that flush without effect are noted by the rules but leave the node safe.
* ``precision``: the emulated error appears here and exceeds the tolerance, with no range cause; or a
  decision here (a rounding, a comparison) flips in 16 bits and the 16-bit run stops on the shapes that
  follow, where no error is measured (the all-FP16 outputs then fail with the decision named).
* ``safe``: none of the above.

Rows come in graph order with the problems first, so the first row is where the trouble starts.
Which values overflow depends on the data: the result says when the data was synthetic.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import onnx

from . import oracle, policy, rules
from .basis import forward_samples, generation_of, generations, judged, measured_model, run_samples, sums
from .context import ModelContext, load_model
from .data import SampleSpec, command_spec
from .data.synthetic import SymbolicDimensions
from .float_types import FP16, LowPrecision
from .format import json_float, number
from .judge import Comparison, OutputMetrics, Tolerance, compare_samples, not_run
from .options import Composed, GenerationOptions, Judging
from .options import model_path as model_path_of
from .oracle import NodeError, TensorStats
from .plan import Precision, PrecisionPlan, Reason
from .policy.shape_headroom import accumulation_reach
from .run_inputs import protected_paths
from .storage import write_text
from .target import Targeting

log = logging.getLogger(__name__)

FORMAT = "onnx-precision-analysis/1"
FP32_NONFINITE = "fp32-nonfinite"
OVERFLOW, UNDERFLOW, PRECISION, SAFE = rules.OVERFLOW, rules.UNDERFLOW, rules.PRECISION, "safe"
VERDICT_ORDER = {FP32_NONFINITE: 0, OVERFLOW: 1, UNDERFLOW: 2, PRECISION: 3, SAFE: 4}
_VERDICT_DRIVING = (rules.HIGH, rules.MEDIUM)  # low-severity findings inform, they do not decide
EFFECT_HOPS = 4  # how far downstream a flush may surface as divergence (Pow -> mean -> +eps -> sqrt -> div)
_DIVIDES = {"Div", "Reciprocal", "Log", "Pow"}  # a new Inf/NaN here comes from an input that flushed


@dataclass(frozen=True)
class NodeRow:
    """Everything the analysis knows about one node."""

    node: str
    op_type: str
    verdict: str
    findings: tuple[rules.Finding, ...]  # every finding, dismissed ones included
    fp32_range: TensorStats | None       # worst over the node's float outputs; None if not recorded
    error: NodeError | None              # emulated all-FP16 error; None if not measured
    first_divergence: bool
    forced_fp32: Reason | None = None    # why the node cannot be FP16 at all (type, constant)
    graph_path: tuple[tuple[str, str], ...] = ()
    note: str = ""
    margins: tuple[float, float] | None = None  # binades to overflow and to underflow in the 16-bit type
    # where the target sums in FP16: the largest bound of the node's accumulator on the samples (Σ|x|,
    # |A|·|B|, ...) and how far it holds (policy.shape_headroom.accumulation_reach; "" where not estimated)
    accumulated: float | None = None
    holds_to: str = ""

    @property
    def active_findings(self) -> tuple[rules.Finding, ...]:
        return tuple(f for f in self.findings if f.active)

    def to_json(self) -> dict:
        out: dict = {
            "node": self.node, "op_type": self.op_type, "verdict": self.verdict,
            "first_divergence": self.first_divergence,
            "fp32_range": self.fp32_range.to_json() if self.fp32_range else None,
            "fp16_error": self.error.to_json() if self.error else None,
            "findings": [f.to_json() for f in self.findings],
        }
        if self.forced_fp32 is not None:
            out["forced_fp32"] = self.forced_fp32.to_json()
        if self.graph_path:
            out["subgraph_of"] = [list(step) for step in self.graph_path]
        if self.note:
            out["note"] = self.note
        if self.margins is not None:
            # inf where the tensor holds no nonzero value (JSON has no inf: "inf")
            out["margins"] = {"overflow_binades": json_float(round(self.margins[0], 3)),
                              "underflow_binades": json_float(round(self.margins[1], 3))}
        if self.accumulated is not None:
            out["fp16_accumulation"] = {"bound": self.accumulated, "holds_to": self.holds_to or None}
        return out


@dataclass(frozen=True)
class AnalysisResult:
    model: str
    samples_source: str
    synthetic: bool
    sample_count: int
    tolerance: Tolerance
    rows: tuple[NodeRow, ...]
    all_fp16: Comparison | None          # the all-FP16 plan's outputs against FP32 (None: unmeasured)
    fp32_nonfinite: str | None           # first FP32 node turning non-finite, if any
    warnings: tuple[str, ...] = ()
    oracle: str = oracle.EMULATE
    sessions_built: int = 0
    probes_run: int = 0
    seconds: Mapping[str, float] = field(default_factory=dict, compare=False)
    skipped: tuple[rules.Skipped, ...] = ()  # (node, rule) pairs where a rule looked and found nothing
    target: str = "generic"  # what the emulation followed ("generic" or "tensorrt X.Y")
    unmeasured: str = ""  # why nothing was run (the static rules alone judged); "" when measured
    low: LowPrecision = FP16  # the 16-bit type judged (--low-precision)

    def row(self, node: str) -> NodeRow:
        for r in self.rows:
            if r.node == node:
                return r
        raise KeyError(node)

    @property
    def problems(self) -> tuple[NodeRow, ...]:
        return tuple(r for r in self.rows if r.verdict != SAFE)

    def headline(self) -> list[str]:
        plural = "s" if self.sample_count != 1 else ""
        target = self.target + ("" if self.low is FP16 else f", {self.low.name}")
        lines = [f"model: {self.model}", f"samples: {self.samples_source}; {self.sample_count} feed{plural}",
                 f"target: {target}"]
        if self.synthetic:
            lines.append("note: the data is synthetic; the value ranges decide what overflows, so pass "
                         "representative data with --inputs before trusting a 'safe'")
        if self.fp32_nonfinite is not None:
            r = self.row(self.fp32_nonfinite)
            lines.append(f"the FP32 model itself produces NaN/Inf, first at node '{r.node}' ({r.op_type}): "
                         f"fix the model or the data; {self.low.name} is not the cause")
        if self.all_fp16 is None:
            lines.append(f"measured nothing, static rules only: {self.unmeasured}")
            counts = {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICT_ORDER}
            lines.append("verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
            return lines
        failing = [m for m in self.all_fp16.outputs if not m.passed]
        verdict = "fails" if failing else "passes"
        if self.fp32_nonfinite is not None:
            verdict += " where FP32 is finite"
        tol = self.tolerance
        lines.append(f"all-{self.low.name} ({self.oracle} oracle, {tol.describe()}): {verdict}"
                     + (": " + ", ".join(_output_summary(m) for m in failing) if failing else ""))
        counts = {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICT_ORDER}
        lines.append("verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
        near = self.nearest_limits()
        # a node already past a limit on the samples is no node within one binade of it
        past = [r for r in near if min(r.margins or (0.0, 0.0)) < 0]
        for heading, rows in (("past", past), ("within one binade of", [r for r in near if r not in past])):
            if rows:
                shown = ", ".join(f"{r.node} ({_margin_text(r.margins)})" for r in rows[:MARGINS_SHOWN]
                                  if r.margins)
                more = f", and {len(rows) - MARGINS_SHOWN} more" if len(rows) > MARGINS_SHOWN else ""
                lines.append(f"{heading} the 16-bit limits on the samples: {shown}{more}")
        return lines

    def nearest_limits(self) -> list[NodeRow]:
        """Nodes that can run in 16 bits whose outputs come within one binade of overflowing or
        flushing on the samples (inputs twice as large, or half as small, would cross), or past it,
        nearest first (the furthest past first)."""
        near = [r for r in self.rows
                if r.margins is not None and r.forced_fp32 is None and min(r.margins) < 1]
        return sorted(near, key=lambda r: min(r.margins or (0.0, 0.0)))

    def table(self, all_rows: bool = False) -> str:
        """A readable table: problems first (where the trouble starts at the top), then the rest."""
        return "\n".join(self.table_lines(all_rows))

    def table_lines(self, all_rows: bool = False) -> list[str]:
        """:meth:`table`'s lines, one each (a name holding a newline is still one line's)."""
        shown = self.rows if all_rows else self.problems
        header: tuple[str, ...] = ("node", "op", "verdict", "FP32 max|x|", "min|x|>0",
                                   f"{self.low.name} rel err", "rules")
        body = [_row_cells(r) for r in shown]
        if any(r.accumulated is not None for r in self.rows):  # the target sums in FP16
            limit = f"{self.low.max:g}"
            header = header[:-1] + (f"{self.low.name} Σ", f"Σ holds to {limit}") + header[-1:]
            body = [cells[:-1] + _accumulation_cells(r) + cells[-1:] for cells, r in zip(body, shown)]
        widths = [max(len(c[i]) for c in [header] + body) for i in range(len(header) - 1)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
        lines = self.headline() + [""]
        lines.append(fmt.format(*header).rstrip())
        lines.extend(fmt.format(*cells).rstrip() for cells in body)
        hidden = len(self.rows) - len(shown)
        if hidden:
            lines.append(f"... {hidden} more node{'s' if hidden != 1 else ''}: safe")
        if not shown:
            lines.append("(no node at risk)")
        if any(r.first_divergence for r in shown):
            lines.append(f"* first divergence: the emulated {self.low.name} error appears at this node")
        explained = [(r, _reasons(r, self.low)) for r in self.problems]
        if explained:
            lines.append("")
            lines.extend(f"{r.node}: " + "; ".join(reasons) for r, reasons in explained if reasons)
        return lines

    def skipped_lines(self) -> list[str]:
        """Why each rule passed over each node it looked at (``analyze -v``)."""
        if not self.skipped:
            return []
        return ["", "rules that looked and found nothing:"] + [
            f"  {s.node}: {s.rule}: {s.reason}" for s in self.skipped]

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "model": self.model,
            "oracle": self.oracle,
            "target": self.target,
            "low_precision": self.low.precision,
            "samples": {"source": self.samples_source, "synthetic": self.synthetic,
                        "count": self.sample_count, "warnings": list(self.warnings)},
            "tolerance": self.tolerance.to_json(),
            "fp32_nonfinite": self.fp32_nonfinite,
            "all_fp16": None if self.all_fp16 is None else self.all_fp16.to_json(),
            "unmeasured": self.unmeasured or None,
            "verdicts": {v: [r.node for r in self.rows if r.verdict == v]
                         for v in VERDICT_ORDER if v != SAFE},
            "sessions_built": self.sessions_built,
            "probes_run": self.probes_run,
            "rows": [r.to_json() for r in self.rows],
            "skipped": [{"node": s.node, "rule": s.rule, "reason": s.reason} for s in self.skipped],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"

    def write_json(self, path: str, input_paths: tuple[str, ...] = ()) -> None:
        """Write :meth:`dumps` to ``path`` atomically; never over the model, its data files or
        ``input_paths``."""
        write_text(path, self.dumps(), input_paths=protected_paths(models=(self.model,)) + tuple(input_paths))


# --- presentation ---------------------------------------------------------------------------------

MARGINS_SHOWN = 5


def _margin_text(margins: tuple[float, float]) -> str:
    over, under = margins
    if over <= under:
        return f"{over:.2f} binade(s) to overflow" if over >= 0 else f"{-over:.2f} binade(s) past the maximum"
    return f"{under:.2f} binade(s) to underflow" if under >= 0 else f"{-under:.2f} binade(s) into the flush"


def _output_summary(m: OutputMetrics) -> str:
    return f"{m.name}: {'; '.join(m.failures)}"


def _row_cells(r: NodeRow) -> tuple[str, ...]:
    rng = r.fp32_range
    max_abs = "-" if rng is None else number(rng.max_abs, 3)
    if rng is not None and (rng.nan_count or rng.inf_count):
        max_abs += f" ({rng.nan_count + rng.inf_count} nan/inf)"
    min_nz = "-" if rng is None or not math.isfinite(rng.min_nonzero_abs) else number(rng.min_nonzero_abs, 3)
    if r.error is None:
        err = "fp32" if r.forced_fp32 is not None else "-"
    elif r.error.new_nonfinite:
        err = f"{r.error.new_nonfinite} nan/inf"
    else:
        err = number(r.error.max_rel_err, 3)
    if r.first_divergence:
        err += " *"
    names = ", ".join(dict.fromkeys(f.rule for f in r.active_findings)) or "-"
    verdict = r.verdict + (" (fp32)" if r.forced_fp32 is not None and r.verdict != SAFE else "")
    return (r.node, r.op_type, verdict, max_abs, min_nz, err, names)


def _accumulation_cells(r: NodeRow) -> tuple[str, str]:
    if r.accumulated is None:
        return ("-", "-")
    return (number(r.accumulated, 3), r.holds_to or "-")


def _reasons(r: NodeRow, low: LowPrecision) -> list[str]:
    out = []
    if r.fp32_range is not None and r.fp32_range.overflows(low):
        out.append(f"FP32 values reach {number(r.fp32_range.max_abs, 3)}, past {low.name}'s {low.max_text}")
    out += [f.message + ("" if f.confirmed else " (static)") for f in r.active_findings
            if f.severity in _VERDICT_DRIVING or r.verdict != SAFE]
    if r.first_divergence and r.error is not None:
        what = (f"{r.error.new_nonfinite} new NaN/Inf" if r.error.new_nonfinite
                else f"relative error {number(r.error.max_rel_err, 3)}")
        out.append(f"emulated {low.name} error appears here ({what}) while its inputs are still close")
    if r.forced_fp32 is not None and r.forced_fp32 in [f.reason() for f in r.active_findings]:
        out.append("kept FP32 in any plan (the rule's finding)")  # its message is above
    elif r.forced_fp32 is not None:
        out.append(f"kept FP32 in any plan ({r.forced_fp32.source}: {r.forced_fp32.detail})")
    if r.note:
        out.append(r.note)
    return out


# --- the analysis ---------------------------------------------------------------------------------

def _worst(stats: Sequence[TensorStats]) -> TensorStats | None:
    if not stats:
        return None
    out = stats[0]
    for s in stats[1:]:
        out = out.worst(s)
    return out


def _kind_of(findings: Sequence[rules.Finding], confirmed_only: bool, effect: bool = True) -> str | None:
    """The strongest kind among findings that may decide a verdict. Overflow is a fact of the
    ranges; underflow and precision findings decide only where the emulation shows an ``effect``."""
    driving = [f for f in findings if f.active and f.severity in _VERDICT_DRIVING
               and (f.confirmed is True or not confirmed_only) and (effect or f.kind == rules.OVERFLOW)]
    for kind in (rules.OVERFLOW, rules.UNDERFLOW, rules.PRECISION):
        if any(f.kind == kind for f in driving):
            return kind
    return None


def node_diagnosis(node: onnx.NodeProto, findings: Sequence[rules.Finding], fp32_range: TensorStats | None,
                   error: NodeError | None, fp32_nonfinite: str | None,
                   body_findings: Sequence[rules.Finding] = (), effect: bool = True, low: LowPrecision = FP16,
                   ) -> str:
    """The node's diagnosis from its evidence (see the module docstring; reports call it the node's
    verdict: safe, or what breaks it). ``effect``: the emulated
    error diverges at this node or shortly after it (tiny values flushing matter only then)."""
    if node.name == fp32_nonfinite:
        return FP32_NONFINITE
    if fp32_range is not None and fp32_range.overflows(low):
        return OVERFLOW
    kind = _kind_of(findings, confirmed_only=True, effect=effect)
    if kind is not None:
        return kind
    if error is None or not error.diverges:
        return SAFE
    # The error appears here: name its cause from the static findings of the node (or of its
    # bodies, for If/Loop/Scan whose insides are not recorded), else from what went wrong.
    kind = _kind_of(list(findings) + list(body_findings), confirmed_only=False)
    if kind is not None:
        return kind
    if error.new_nonfinite:
        return UNDERFLOW if node.op_type in _DIVIDES else OVERFLOW
    return PRECISION


def _sort_key(index: int, row: NodeRow) -> tuple[int, int]:
    return (0 if row.verdict == FP32_NONFINITE else 1 if row.verdict != SAFE else 2, index)


@dataclass(frozen=True, init=False)
class AnalyzeOptions(Composed):
    """``analyze``'s options: the groups it shares with ``convert`` and ``check`` (:mod:`.options`), so it
    analyses the model they measure, judged as they judge it. A group's field may be given by its own name:
    ``AnalyzeOptions(tolerance=..., target=...)``."""

    samples: SampleSpec = field(default_factory=SampleSpec)
    judging: Judging = field(default_factory=Judging)
    targeting: Targeting = field(default_factory=Targeting)
    generation: GenerationOptions = field(default_factory=GenerationOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", command_spec(self.samples, self.judging.memory_budget))


def analyze(model_path: str, spec: SampleSpec | None = None, tol: Tolerance | None = None,
            **options: Any) -> AnalysisResult:
    """Analyse ``model_path`` on the samples ``spec`` describes (synthetic when it names none), by ``tol``;
    ``options``: the rest of :class:`AnalyzeOptions`, a group whole (``judging=``, ``targeting=``) or its
    fields by name (``target=``, ``custom_op_libraries=``, ``reference_model=``, ``keep_opset=``, ...), as
    ``convert`` takes them. The model is the one ``convert`` measures (:func:`.basis.measured_model`: a
    BF16 target's at the opset that gives its ops a bfloat16 type, as convert writes it), its outputs judged
    by the basis ``convert`` judges by (:mod:`.basis`: a quantized model's against its unquantized
    reference, relative to the quantization error)."""
    model_path = model_path_of(model_path)
    given = AnalyzeOptions(samples=SampleSpec() if spec is None else spec,
                           **({} if tol is None else {"tolerance": tol}), **options)
    spec, judging, targeting = given.samples, given.judging, given.targeting
    tol = judging.tolerance
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    ctx = measured_model(partial(load_model, model_path, targeting.custom_op_libraries), targeting, judging,
                         spec)
    tol.require_outputs([o.name for o in ctx.model.graph.output], model_path)
    generation = generation_of(ctx, given.generation)
    try:
        samples = run_samples(ctx, spec, generation)
    except SymbolicDimensions as e:  # nothing to run the model on: the static rules still say much
        return _static_only(ctx, tol, str(e), seconds)
    if generation is not None:  # one forward pass at its first and last steps, as convert measures them
        with oracle.blame(ctx, samples):
            stepped = forward_samples(samples, generations(ctx, samples.feeds, generation).forward)
        samples = replace(stepped, source=f"{samples.source}; the first and last steps of its generation "
                                          f"({generation.summary()})")
    seconds["load"] = time.perf_counter() - start

    start = time.perf_counter()
    plan = policy.resolve(ctx, ctx.all_low_plan())
    warnings = list(ctx.notes + samples.warnings)
    if ctx.nothing_to_convert:
        warnings.append(f"{ctx.nothing_to_convert}: there is nothing to analyse")
    seconds["plan"] = time.perf_counter() - start

    start = time.perf_counter()
    with oracle.blame(ctx, samples):
        # Two plans only (FP32 and all FP16), compared in one twin-graph run per sample.
        session = oracle.Emulator(ctx)
        reference, layerwise = oracle.inspect_plan(session, plan, samples, tol)
    seconds["session"] = session.build_seconds
    seconds["runs"] = time.perf_counter() - start - session.build_seconds

    start = time.perf_counter()
    facts = rules.ModelFacts(ctx, reference.stats, generation)
    rule_run = rules.run_rules(facts)
    rows = build_rows(facts, rule_run.findings, plan, reference, layerwise)
    seconds["rules"] = time.perf_counter() - start

    start = time.perf_counter()  # where the target sums in FP16: each accumulator's bound (one session)
    with oracle.blame(ctx, samples):
        found = sums(ctx, samples)
        # judged as convert judges (the inspection's FP32 outputs are the model's)
        basis = judged(ctx, samples, judging, found, reference.outputs)
    # The FP32 model's own NaN/Inf is reported apart (fp32-nonfinite): FP16 is judged where FP32 is finite.
    finite = [replace(t, allow_fp32_nonfinite=True) for t in basis.tolerances]
    stopped = next((c for c in layerwise.shape_changes if c.stopped), None)
    if stopped is None:
        outputs = compare_samples(basis.references, layerwise.outputs, finite, oracle.EMULATE)
    else:  # a flipped decision stopped the plan's run on that sample: it has no outputs to compare
        outputs = not_run(basis.references[stopped.sample], stopped.describe(), oracle.EMULATE)
    bounds = found.bounds
    if bounds:
        shapes = policy.largest({k: [f[k].shape for f in samples.feeds] for k in samples.feeds[0]})
        reach = accumulation_reach(ctx, plan, bounds, shapes)
        rows = tuple(replace(r, accumulated=bounds[r.node], holds_to=reach.get(r.node, ""))
                     if r.node in bounds else r for r in rows)
        seconds["accumulation"] = time.perf_counter() - start
    log.debug("analyze %s: %s", model_path, ", ".join(f"{k} {v:.2f}s" for k, v in seconds.items()))
    return AnalysisResult(model_path, samples.source, samples.synthetic, len(samples.feeds), basis.tolerance,
                          rows, outputs, reference.first_nonfinite, tuple(warnings), oracle.EMULATE,
                          session.sessions_built + found.sessions, session.probes_run, seconds,
                          rule_run.skipped,
                          ctx.target.name, low=ctx.target.low)


def _static_only(ctx: ModelContext, tol: Tolerance, why: str, seconds: dict[str, float]) -> AnalysisResult:
    """The analysis of a model that cannot be run: every static rule, no range, no error."""
    plan = policy.resolve(ctx, ctx.all_low_plan())
    facts = rules.ModelFacts(ctx)
    rule_run = rules.run_rules(facts)
    nothing = oracle.ReferenceResult({}, {}, None, ())
    rows = build_rows(facts, rule_run.findings, plan, nothing, oracle.LayerwiseResult({}, ()))
    return AnalysisResult(ctx.path, "none", False, 0, tol, rows, None, None, (), oracle.EMULATE, 0, 0,
                          seconds, rule_run.skipped, ctx.target.name, why, ctx.target.low)


def build_rows(facts: rules.ModelFacts, findings: Sequence[rules.Finding], plan: PrecisionPlan,
               reference: oracle.ReferenceResult, layerwise: oracle.LayerwiseResult) -> tuple[NodeRow, ...]:
    """Rows for every node (subgraph nodes after their owner), problems first."""
    by_node: dict[str, list[rules.Finding]] = {}
    for f in findings:
        by_node.setdefault(f.node, []).append(f)
    refs = facts.ctx.nodes
    body: dict[str, list[rules.Finding]] = {}
    for ref in refs:
        for owner, _ in ref.graph_path:
            strong = [f for f in by_node.get(ref.name, []) if f.severity == rules.HIGH]
            body.setdefault(owner, []).extend(strong)
    diverging = set(layerwise.first_divergence)
    # the decisions whose flip stopped the plan's run: no error of theirs is measured, the flip is the verdict
    stops = {name: change for change in layerwise.shape_changes if change.stopped
             for name, _ in change.decisions}
    written = policy.written_forms(facts.ctx)
    fused = policy.fused_names(policy.decomposed_layer_norms(facts.ctx)) if written else {}
    inside = {n: ln for n, ln in fused.items() if n in policy.always_fp32(facts.ctx)}

    def effect(node: onnx.NodeProto) -> bool:
        return node.name in diverging or any(c.name in diverging for o in node.output if o
                                             for c in facts.downstream_ops(o, EFFECT_HOPS))

    rows = []
    for ref in refs:
        node = ref.node
        findings = tuple(by_node.get(node.name, ()))
        fp32_range = _worst([s for s in reference.node_stats(node)])
        error = layerwise.nodes.get(node.name)
        verdict = node_diagnosis(node, findings, fp32_range, error, reference.first_nonfinite,
                               body.get(node.name, ()), effect(node), facts.low)
        note = ""
        suspect = _kind_of([f for f in findings if f.severity == rules.HIGH], confirmed_only=False)
        if ref.graph_path and verdict == SAFE and suspect and any(o in diverging for o, _ in ref.graph_path):
            # Subgraph tensors are not recorded: a strong static risk inside a diverging body is the suspect.
            verdict = suspect
            note = f"inside '{ref.graph_path[0][0]}', whose output diverges; subgraph values are not recorded"
        if node.name in stops and verdict == SAFE:
            verdict = PRECISION
            note = (f"its decision flips in {facts.low.name} on sample {stops[node.name].sample}, and the "
                    f"16-bit run stops on the shapes that follow")
        forced = plan.decisions[node.name].reasons[0] if plan.precision(node.name) is Precision.FP32 else None
        if forced is None and node.name in inside:
            forced = Reason("type", f"inside the LayerNormalization '{inside[node.name]}' the written model "
                                    f"computes in its place, with FP32 statistics")
        margins = (None if fp32_range is None else
                   facts.low.margins(fp32_range.max_abs, fp32_range.min_nonzero_abs))
        rows.append(NodeRow(node.name, node.op_type, verdict, findings, fp32_range, error,
                            node.name in diverging, forced, ref.graph_path, note, margins))
    ordered = sorted(enumerate(rows), key=lambda pair: _sort_key(*pair))
    return tuple(r for _, r in ordered)
