"""The library entry point of ``onnx-precision convert``: load, choose a plan, rewrite, write.

:func:`convert` is what the CLI calls (on files) and :func:`conversion` the one pipeline it and
:func:`.in_memory.convert_model` run; its steps live by job beside it: the options
(:mod:`.options`), the plan (:mod:`.planning`), the written model's checks and the verdict
(:mod:`.verification`), the files besides the model (:mod:`.files`). Everything the run writes
(model, plan, TensorRT flags, reports) is computed before the first file is written, and each file is
written atomically, so a failing run leaves nothing half-written.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from .. import coverage, helper_sessions, memory, opset_upgrade, quantized, storage
from .. import options as options_lib
from ..basis import Load, measured_model
from ..context import ModelContext, load_model
from ..costs import PhaseCost
from ..errors import InternalError, SearchError, UsageError
from ..flops import FlopShares, flop_shares, shapeless_flops
from ..outcome import ConversionOutcome, Verification
from ..plan import Precision, PrecisionPlan
from ..rewriter import RewriteResult, rewrite
from ..run_inputs import check_data_file, protected_paths
from ..suggested import quoted
from ..target import GENERIC, UNMEASURED, Target
from ..trt.flags import trt_flags_text
from ..vocab import MODES
from .files import as_built_from_original, flags_caveats, run_args, stage_samples, with_caveats
from .options import DEFAULTS, ConvertOptions, require_options
from .planning import planned
from .verification import conversion_status, share_gate, verify
from .written_check import check_written, load_remedies

if TYPE_CHECKING:
    from ..report import RunReport
    from .choose import AutoResult, Progress

logger = logging.getLogger(__name__)

_MAX_LISTED_PINS = 20


@dataclass(frozen=True)
class ConvertResult:
    """What a conversion did: the plan written, the files, and what the user should know."""

    model_path: str
    output_path: str
    plan: PrecisionPlan
    rewrite: RewriteResult
    warnings: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # every file written, model first
    auto: AutoResult | None = None  # static/auto modes
    report: RunReport | None = None  # static/auto modes (verified output)
    report_paths: tuple[str, ...] = ()
    nothing_to_convert: str = ""  # why no node computes in float32 ("" when some do)
    next_step: str = ""  # the command that builds or runs the written model on its target
    check_step: str = ""  # all-fp16 mode: the command that checks the written model as the run would have
    # what the counts and shares count (the report's in static/auto modes, :func:`..flops.flop_shares`
    # in all-fp16): the nodes that compute in a float type, each where the written file computes it
    shares: FlopShares = field(default_factory=FlopShares)
    # all-fp16 mode: the quantized compute FP32 whatever the plan says, listed as no pins (the nodes inside
    # onnxruntime's fused integer kernels, the integer ops with no 16-bit type), and the notes that say so
    # (quantized.unpinned, quantized.unpinned_notes)
    unpinned: tuple[str, ...] = ()
    unpinned_notes: tuple[str, ...] = ()

    @property
    def all_warnings(self) -> tuple[str, ...]:
        """Every warning of the run once (the report's include the sample data's)."""
        return tuple(dict.fromkeys(self.warnings + (self.report.warnings if self.report else ())))

    @property
    def exit_code(self) -> int:
        """0 passed (or written unchecked), 3 passed but onnxruntime's default options cannot load the
        written model (the workaround is in the report), 1 any other failure."""
        if self.report is None:
            return 0
        return {"passed": 0, "ort-load-failed": 3}.get(self.report.status, 1)

    def verdict_line(self) -> str:
        """The one line ``-q`` prints: what was written and whether it passed (and why not), the
        worst output and its statistic, the 16-bit share."""
        if self.report is None:
            return (f"{self.model_path} -> {self.output_path}: written, not verified (--mode all-fp16 runs "
                    f"nothing)")
        from ..report import verdict_line

        return verdict_line(self.report)

    def summary_lines(self) -> list[str]:
        plan = self.plan
        fp32 = plan.fp32_nodes
        if self.nothing_to_convert:
            if self.report is None:
                return [f"{self.output_path}: nothing to convert ({self.nothing_to_convert}); written with "
                        f"no precision changed"]
            from ..report import summary_lines  # its FP16 line says why
            return [f"{self.output_path}: nothing to convert; written with no precision changed"] + \
                summary_lines(self.report, self.report_paths)
        lines = [
            f"{self.output_path}: {_counts(plan, self.shares)}, "
            f"{self.rewrite.casts_added} Cast(s) added, {self.rewrite.initializers_converted} initializer(s) "
            f"converted, {self.rewrite.initializers_duplicated} kept in both precisions"]
        held = self.report.runtimes if self.report is not None else None  # where it was judged, it says
        # a model written as it was read has nothing to check: check refuses a copy of its reference
        nxt = [f"next: {self.next_step}" + (f"; {held.short()}" if held else "")] \
            if self.next_step and self.rewrite.changed else []
        if self.report is not None:  # static/auto: the report's summary says the rest
            from ..report import summary_lines
            return lines + summary_lines(self.report, self.report_paths) + [f"note: {n}" for n in
                                                                          self.rewrite.notes] + nxt
        unpinned = set(self.unpinned)
        fp32 = tuple(n for n in fp32 if n not in unpinned)
        for name in fp32[:_MAX_LISTED_PINS]:
            reasons = plan.decisions[name].reasons
            why = f"{reasons[-1].source}: {reasons[-1].detail}" if reasons else "fp32"
            lines.append(f"  FP32 {name} ({why})")
        if len(fp32) > _MAX_LISTED_PINS:
            lines.append(f"  ... and {len(fp32) - _MAX_LISTED_PINS} more FP32 node(s) (see --save-plan)")
        lines.extend(f"note: {n}" for n in self.rewrite.notes + self.unpinned_notes if n)
        lines.extend(f"wrote {p}" for p in self.written[1:])
        return lines + nxt + [  # the warning last: it is what a user of this mode must not miss
            f"not verified: --mode all-fp16 runs nothing (--mode auto or static verifies it); to check it: "
            f"{self.check_step}"]


def _counts(plan: PrecisionPlan, shares: FlopShares) -> str:
    """"5 node(s) FP16, 2 FP32", with BF16 where the plan has some (and FP16 only where it has); of the
    nodes that compute in a float type, each in the precision it computes in, in the written file
    (:meth:`..flops.FlopShares.precisions`), as the shares count them: quantized compute apart, "(14
    quantized node(s) apart)"."""
    precisions = [p for n, p in shares.precisions(plan).items() if n not in shares.quantized]
    every = [(precisions.count(p), p) for p in Precision]
    counts = [(n, p.name) for n, p in every if n and p.is_low] or [(0, Precision.FP16.name)]
    counts += [(n, p.name) for n, p in every if not p.is_low]
    apart = f" ({len(shares.quantized)} quantized node(s) apart)" if shares.quantized else ""
    return ", ".join(f"{n} node(s) {name}" if i == 0 else f"{n} {name}"
                     for i, (n, name) in enumerate(counts)) + apart


def input_paths(model_path: str | None, options: ConvertOptions) -> tuple[str, ...]:
    """Every file a run of ``model_path`` (None: a model in memory) reads, the models' data files
    included (:func:`..run_inputs.protected_paths`): no output may overwrite one."""
    return protected_paths(models=(model_path, options.judging.reference_model),
                           files=(options.plan_path, options.layer_flags.file,
                                  options.generation.genai_config, *options.targeting.custom_op_libraries),
                           samples=(options.samples.inputs, options.validation_inputs))


def _output_paths(output_path: str, options: ConvertOptions) -> list[str]:
    files = options.output
    return [p for p in (output_path, files.plan_out, files.trt_flags_path, files.report_json, files.report_md,
                        _tradeoff_path(options), files.save_inputs, files.save_outputs) if p]


def _tradeoff_path(options: ConvertOptions) -> str | None:
    """The trade-off picture: beside the Markdown report of every measuring run (static and auto),
    so a rerun always replaces the picture of the run before."""
    from ..report import tradeoff_path

    report_md = options.output.report_md
    return tradeoff_path(report_md) if report_md and options.mode != "all-fp16" else None


def convert(model_path: str, output_path: str, options: ConvertOptions = DEFAULTS,
            progress: Progress | None = None) -> ConvertResult:
    """Convert ``model_path`` to ``output_path`` per ``options`` (see the CLI help for each).

    static/auto modes also verify the written file (emulated, and natively with --oracle
    cuda/tensorrt) and write the JSON/Markdown reports; ``progress(phase, done, left)`` is called
    during the search. Every output path is checked before any work, every file is staged, and
    all of them are moved into place together at the end: a failed or interrupted run leaves none.
    """
    model_path = options_lib.model_path(model_path)
    if not isinstance(output_path, (str, os.PathLike)):
        raise UsageError(f"output: expected the path to write the model to; got {type(output_path).__name__}")
    output_path = os.fspath(output_path)
    require_options(options)
    if options.mode not in MODES:
        raise ValueError(f"convert: mode {options.mode!r} is not one of {MODES}")
    measuring = options.mode != "all-fp16"
    if measuring:
        from .. import oracle
        from .. import report as report_lib

        oracle.require_oracle(options.oracle)
        files = options.output
        report_json, report_md = report_lib.default_paths(output_path, files.report_json, files.report_md)
        options = replace(options, output=replace(files, report_json=report_json, report_md=report_md))
    inputs = input_paths(model_path, options)
    with storage.Outputs(inputs) as outputs:
        for path in _output_paths(output_path, options):
            outputs.reserve(path)
        check_data_file(output_path, inputs)
        return _convert(model_path, output_path, options, progress, outputs)


@dataclass(frozen=True)
class Destination:
    """Where the written model goes: staged at ``output_path`` among ``outputs`` (the CLI's files, moved
    into place together at the end), or, without ``outputs``, kept in memory (``output_path``: what the
    report calls it)."""

    output_path: str
    outputs: storage.Outputs | None = None
    external_data: bool = False  # --external-data: the weights in <output>.data

    def write(self, ctx: ModelContext, result: RewriteResult) -> str | ModelContext:
        """``result``'s model written (staged, replacing one staged before) and checked: the staged
        path, or in memory the written model's context."""
        if self.outputs is None:
            check_written(result.model, ctx)
            return ModelContext(result.model, ctx.path, ctx.base_dir, (), ctx.custom_op_libraries, ctx.target)
        staged = storage.save_model(result.model, self.output_path, source_dir=ctx.base_dir,
                                    external_data=True if self.external_data else None, outputs=self.outputs)
        check_written(staged, ctx)
        return staged

    def unchecked_load(self, result: RewriteResult, verification: Verification) -> list[str]:
        """What the verification could not check here: in memory, the load at onnxruntime's default
        options of a model whose weights are still in files (its child is handed the model's bytes)."""
        from ..oracle.default_load import loadable_in_memory

        if self.outputs is not None or not verification.verified.passed or loadable_in_memory(result.model):
            return []
        return ["onnxruntime's default-options load of the converted model was not checked: its weights are "
                "in files until it is saved (save it, then 'onnx-precision check' it)"]


@dataclass(frozen=True)
class Conversion:
    """What :func:`conversion` did."""

    ctx: ModelContext  # the context the model was written from
    rewrite: RewriteResult | None  # None: the search found no plan worth writing (``unwritten`` says why)
    warnings: tuple[str, ...]
    auto: AutoResult | None = None  # static/auto modes
    verification: Verification | None = None  # static/auto modes, when a model was written
    report: RunReport | None = None  # static/auto modes
    unwritten: str = ""


def conversion(load: Load, options: ConvertOptions, destination: Destination,
               progress: Progress | None = None) -> Conversion:
    """The conversion both front doors run, :func:`convert` on files and :func:`.convert_model` in
    memory: load, plan (and search), write to ``destination``, verify, remedy a model onnxruntime
    cannot load at its default options, decide the outcome and make the report, whose notes say the
    memory it held (:class:`..memory.Watch`). The files besides the model (reports, plan, flags,
    samples) are the front door's to write."""
    with memory.Watch(options.judging.memory_budget) as watch:
        return _conversion(load, options, destination, progress, watch)


def _conversion(load: Load, options: ConvertOptions, destination: Destination, progress: Progress | None,
                watch: memory.Watch) -> Conversion:
    helpers_before = helper_sessions.built()
    if progress is not None:
        progress("load", 0, 0, None)
    ctx = measured_model(load, options.targeting, options.judging, options.samples)
    plan, auto_result, warnings = planned(ctx, options, progress)
    if auto_result is not None and not auto_result.writable:
        auto_result = replace(auto_result, notes=auto_result.notes + auto_result.basis.notes(None))
        outcome = _outcome(auto_result, auto_result.plan, options, None, tuple(warnings),
                           helper_sessions.built() - helpers_before)
        return Conversion(ctx, None, outcome.warnings, auto_result, report=_report(ctx, outcome),
                          unwritten=auto_result.message)
    # the model at its own opset, for a target (opset_upgrade.written_context)
    ctx, plan = opset_upgrade.written_context(ctx, plan, lambda target: load(target, None))
    started = time.perf_counter()
    if progress is not None:
        progress("write", 0, 0, None)
    measured = UNMEASURED if auto_result is None else auto_result.basis.measured  # its LayerNorms pre-scaled
    result = with_notes(ctx, rewrite(ctx, plan, measured=measured), auto_result)
    written = destination.write(ctx, result)
    if auto_result is None:
        return Conversion(ctx, result, tuple(warnings))
    write = PhaseCost("write", time.perf_counter() - started)
    if progress is not None:
        progress("verify", 0, 0, None)
    verification = verify(ctx, written, auto_result, options, write)
    result, verification, auto_result = _load_remedy(ctx, result, verification, auto_result, options,
                                                     destination)
    judged = auto_result.basis.notes(verification.verified)  # a quantized model's: its gate's
    # what the verification never saw: the bodies of the model's control flow no sample runs
    unrun = coverage.unrun_note(coverage.unrun_bodies(ctx.model, auto_result.basis.forward.feeds),
                                auto_result.shares.precisions(result.plan))
    auto_result = replace(auto_result, notes=auto_result.notes + judged + ((unrun,) if unrun else ()))
    if auto_result.passed and not verification.verified.passed:
        # Written all the same: the model and its report are the bug report (status: failed, exit 1).
        logger.error("the plan passed the emulated search but the written model %s fails the emulated check "
                     "(a bug: please report it%s)", destination.output_path,
                     f" with {options.output.report_json}" if options.output.report_json else "")
    warnings += destination.unchecked_load(result, verification)
    said = _memory_note(ctx, watch, options.judging.memory_budget is not None)
    auto_result = replace(auto_result, notes=auto_result.notes + ((said,) if said else ()))
    outcome = _outcome(auto_result, result.plan, options, verification, tuple(warnings),
                       helper_sessions.built() - helpers_before, destination.output_path, ctx.target)
    return Conversion(ctx, result, outcome.warnings, auto_result, verification, _report(ctx, outcome))


def _memory_note(ctx: ModelContext, watch: memory.Watch, budget_given: bool) -> str:
    """What the run held, against its budget, where that is worth saying
    (:meth:`..memory.RunMemory.worth_saying`; else ""): the weights are mapped from their files, never
    held, so what it holds is activations and what a node computes from a weight (its 16-bit rounding)."""
    if not memory.measurable():  # no /proc: every figure would read 0 ("budget 0.00 GB")
        unmeasured = f"memory: budget {memory.gigabytes(watch.budget)}, not measured (no /proc here)"
        return unmeasured if budget_given else ""
    figures = watch.figures(memory.files_bytes([ctx.path, *storage.external_files(ctx.model, ctx.base_dir)]))
    if not figures.worth_saying(budget_given):
        return ""
    over = ", over its budget" if figures.over else ""
    return f"memory: {figures.text}{over}"


def _convert(model_path: str, output_path: str, options: ConvertOptions, progress: Progress | None,
             outputs: storage.Outputs) -> ConvertResult:
    done = conversion(partial(load_model, model_path, options.targeting.custom_op_libraries), options,
                      Destination(output_path, outputs, options.output.external_data), progress)
    ctx, auto_result = done.ctx, done.auto
    if auto_result is not None:
        stage_samples(auto_result, options, outputs)
    if done.rewrite is None:  # no plan worth writing: the report says why
        _stage_reports(done.report, options, outputs)
        outputs.commit()
        raise SearchError(f"{done.unwritten} (no model written; report: {options.output.report_json})")
    result = done.rewrite
    if options.output.plan_out:
        outputs.stage_text(options.output.plan_out, result.plan.dumps())
    run = run_args(model_path, output_path, options, auto_result)
    if options.output.trt_flags_path:
        text = trt_flags_text(ctx.model, as_built_from_original(ctx, result.plan), run,
                              ctx.target.commands.cli_args(), renamed=ctx.renamed, types=ctx.types)
        caveats = flags_caveats(ctx, result.plan)
        outputs.stage_text(options.output.trt_flags_path, with_caveats(text, caveats))
    texts = tuple(p for p in (options.output.plan_out, options.output.trt_flags_path) if p)
    if done.report is None:
        outputs.commit()
        return ConvertResult(model_path, output_path, result.plan, result, done.warnings,
                             (output_path,) + texts, nothing_to_convert=ctx.nothing_to_convert,
                             next_step=ctx.target.commands.next_step(result.model, run),
                             check_step=quoted(run.check_args(ctx.target.commands.cli_args())),
                             shares=flop_shares(ctx, {}),
                             unpinned=quantized.unpinned(ctx), unpinned_notes=quantized.unpinned_notes(ctx))
    paths = _stage_reports(done.report, options, outputs)
    outputs.commit()
    return ConvertResult(model_path, output_path, result.plan, result, done.warnings,
                         (output_path,) + texts + paths, auto_result, done.report, paths,
                         ctx.nothing_to_convert,
                         ctx.target.commands.next_step(result.model, run), shares=done.report.shares)


def _load_remedy(ctx: ModelContext, result: RewriteResult, verification: Verification,
                 auto_result: AutoResult, options: ConvertOptions, destination: Destination,
                 ) -> tuple[RewriteResult, Verification, AutoResult]:
    """Where the target runs on onnxruntime and it cannot load the written model at its default
    options: the first rewrite with more FP32 pins that loads (:func:`.load_remedies`) and passes as
    the first did, written in its place, its pins said in a note; else ``result`` as it was, and a note
    of the pins tried."""
    first = conversion_status(auto_result, verification, ctx.target)[0]
    if first != "ort-load-failed":
        return result, verification, auto_result
    started, tried = time.perf_counter(), 0
    search = load_remedies(ctx, result, verification.default_load)
    for remedy in search:
        tried += 1
        staged = destination.write(ctx, remedy.result)
        checked = verify(ctx, staged, auto_result, options, PhaseCost("write", 0.0))
        if conversion_status(auto_result, checked, ctx.target)[0] == "passed":
            cost = PhaseCost("load remedy", time.perf_counter() - started, *_costs(checked.phases))
            notes = auto_result.notes + (remedy.note(ctx.target.low.name),)
            return (remedy.result, replace(checked, phases=verification.phases + (cost,)),
                    replace(auto_result, notes=notes))
    if tried:  # the model first written goes back in place
        destination.write(ctx, result)
    said = search.note(ctx.target.low.name)
    phases = (PhaseCost("load remedy", time.perf_counter() - started),) if search.tried else ()
    return (result, replace(verification, phases=verification.phases + phases),
            replace(auto_result, notes=auto_result.notes + (said,)) if said else auto_result)


def _costs(phases: tuple[PhaseCost, ...]) -> tuple[int, int]:
    """The sessions and probes of ``phases``, together."""
    return sum(p.sessions for p in phases), sum(p.probes for p in phases)


def with_notes(ctx: ModelContext, result: RewriteResult, auto_result: AutoResult | None) -> RewriteResult:
    """``result`` with what a BF16 run says of the model's opset and of what cannot be BF16
    (:func:`..opset_upgrade.run_notes`): in the summary of a run that measures nothing, in the
    report's notes otherwise (:func:`_report`)."""
    if auto_result is not None:
        return result
    notes = opset_upgrade.run_notes(ctx, result.plan, shapeless_flops(ctx))
    return replace(result, notes=notes + result.notes) if notes else result


def _outcome(auto_result: AutoResult, plan: PrecisionPlan, options: ConvertOptions,
             verification: Verification | None, warnings: tuple[str, ...], helpers: int,
             output_path: str | None = None, target: Target = GENERIC) -> ConversionOutcome:
    status, message, more = conversion_status(auto_result, verification, target)
    status, message = share_gate(status, message, plan, auto_result.shares, options.min_16bit_share)
    return ConversionOutcome(auto_result, plan, status, message, auto_result.mode, options.oracle,
                             output_path, verification, warnings + more, helpers,
                             _tradeoff_path(options), _before_plan(options))


def _report(ctx: ModelContext, outcome: ConversionOutcome) -> RunReport:
    from .. import report as report_lib

    report = report_lib.for_conversion(ctx, outcome)
    notes = opset_upgrade.run_notes(ctx, outcome.plan, report.node_flops)
    return replace(report, notes=notes + report.notes) if notes else report


def _before_plan(options: ConvertOptions) -> str:
    """What the search's "before" measured: all FP16, or the plan the user's options made of it."""
    flags = [flag for flag, given in (("--plan", options.plan_path), ("--keep-fp32", options.keep_fp32),
                                      ("--keep-fp32-op", options.keep_fp32_ops),
                                      ("--layer-precisions", options.layer_flags)) if given]
    return f"your plan, from {', '.join(flags)}" if flags else f"all {options.targeting.target.low.name}"


def _stage_reports(report: RunReport | None, options: ConvertOptions, outputs: storage.Outputs,
                   ) -> tuple[str, ...]:
    from .. import report as report_lib

    if report is None or options.output.report_json is None or options.output.report_md is None:
        raise InternalError("static/auto modes always have a report and its paths (report.default_paths)")
    outputs.stage_text(options.output.report_json, report_lib.dumps(report))
    outputs.stage_text(options.output.report_md, report_lib.to_markdown(report))
    if report.tradeoff_svg:
        outputs.stage_text(report.tradeoff_svg, report_lib.tradeoff_svg(report))
        return options.output.report_json, options.output.report_md, report.tradeoff_svg
    return options.output.report_json, options.output.report_md
