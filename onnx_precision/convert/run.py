"""The library entry point of ``onnx-precision convert``: load, choose a plan, rewrite, write.

:func:`convert` is what the CLI calls; :func:`base_plan`, :func:`plan_to_write` and :func:`verify`
are the steps, usable on their own from Python. Everything the run writes
(model, plan, TensorRT flags) is computed before the first file is written, and each file is
written atomically, so a failing run leaves nothing half-written.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from .. import helper_sessions, opset_upgrade, policy, quantized, storage
from .. import options as options_lib
from ..basis import Load, measured_model
from ..context import ModelContext, load_model
from ..costs import PhaseCost
from ..data import SampleSpec, sample_files, shape_problem
from ..errors import CustomOpError, InternalError, SearchError, UsageError
from ..float_types import low_of
from ..flops import FlopShares, estimate_flops, flop_shares
from ..judge import Comparison
from ..options import Composed, Judging, Output
from ..outcome import ConversionOutcome, Verification
from ..plan import Precision, PrecisionPlan, Reason, apply_user_choices
from ..rewriter import RewriteResult, rewrite
from ..suggested import RunArgs, quoted
from ..target import GENERIC, UNMEASURED, Target, Targeting
from ..trt.flags import trt_flags_text
from ..trt.layer_precisions import LayerFlags, layer_pins
from ..vocab import MODES, Mode, OracleName, Status
from .written_check import check_written, load_remedies

if TYPE_CHECKING:
    from ..basis import Basis
    from ..report import RunReport
    from .choose import AutoResult, Progress

logger = logging.getLogger(__name__)

_MAX_LISTED_PINS = 20
OVERLAPPED_LOAD_BYTES = 1 << 30  # written models below this are loaded by onnxruntime during verification


@dataclass(frozen=True, init=False)
class ConvertOptions(Composed):
    """``convert``'s options (the CLI's help says what each does): its own, and the groups it shares with
    ``check`` and ``analyze`` (:mod:`..options`): the samples, what the run judges by, where the written
    model runs, the files it writes. A group's field may also be given by its own name, as before the
    groups: ``ConvertOptions(tolerance=..., target=...)``."""

    mode: Mode = "auto"
    keep_fp32: tuple[str, ...] = ()  # regexes over node names
    keep_fp32_ops: tuple[str, ...] = ()
    plan_path: str | None = None  # a plan to start from (--plan)
    # TensorRT 10's --layerPrecisions/--layerOutputTypes, Polygraphy's --layer-precisions: FP32 layers pinned
    layer_flags: LayerFlags = field(default_factory=LayerFlags)
    fp16_io: bool = False
    samples: SampleSpec = field(default_factory=SampleSpec)
    validation_inputs: str | None = None  # held-out samples: verified, never searched on
    judging: Judging = field(default_factory=Judging)
    targeting: Targeting = field(default_factory=Targeting)
    output: Output = field(default_factory=Output)
    headroom: float = 2.0  # auto.DEFAULT_HEADROOM: one binade of margin over the samples (0: off)
    oracle: OracleName = "emulate"
    # the TensorRT shape profile per input, {"min"|"opt"|"max": shape} (--trt-*-shapes); else the samples'
    trt_profile: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)
    max_probes: int | None = None  # search budgets (auto mode): on exhaustion the cheapest passing
    time_budget: float | None = None  # plan probed so far is kept, marked as such
    # shrink a large passing set to a 1-minimal one, not only as far as it can win (--exhaustive-minimise)
    exhaustive_minimise: bool = False
    # static/auto: a written plan whose 16-bit share of estimated FLOPs (percent, as the summary gives
    # it) is below this fails the run (--min-16bit-share)
    min_16bit_share: float | None = None

    def __post_init__(self) -> None:
        share = self.min_16bit_share
        if share is not None and not (isinstance(share, (int, float)) and 0 <= share <= 100):
            raise UsageError(f"--min-16bit-share {share}: expected a percentage between 0 and 100")
        for name in ("keep_fp32", "keep_fp32_ops"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
                hint = f" (one is written ({value!r},))" if isinstance(value, str) else ""
                raise UsageError(f"{name} {value!r}: expected a tuple of strings{hint}")
        if not isinstance(self.samples, SampleSpec):
            raise UsageError(f"samples {self.samples!r}: expected an onnx_precision.data.SampleSpec")
        probes = self.max_probes
        if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int) or probes < 1):
            raise UsageError(f"max_probes {probes!r}: expected an integer >= 1 (None: no limit)")
        budgets = (("time_budget", self.time_budget, True), ("headroom", self.headroom, False))
        for name, value, positive in budgets:
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if value is not None and not (number and (value > 0 if positive else value >= 0)):
                raise UsageError(f"{name} {value!r}: expected a finite number {'>' if positive else '>='} 0")
        for name, shapes in self.trt_profile.items():
            for which, shape in shapes.items():
                problem = shape_problem(shape)
                if problem:
                    raise UsageError(f"--trt-{which}-shapes {name}: {problem}")


def require_options(options: object) -> ConvertOptions:
    """``options``, once it is a ConvertOptions (else a one-line UsageError)."""
    if not isinstance(options, ConvertOptions):
        raise UsageError(f"options: expected onnx_precision.convert.ConvertOptions; got "
                         f"{type(options).__name__}")
    return options


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
        nxt = [f"next: {self.next_step}"] if self.next_step else []
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


def base_plan(ctx: ModelContext, options: ConvertOptions) -> tuple[PrecisionPlan, list[str]]:
    """All nodes FP16, then --plan, --keep-fp32, --keep-fp32-op and TensorRT 10's per-layer flags
    (:mod:`..trt.layer_precisions`); returns the plan and warnings."""
    plan = ctx.all_low_plan(Reason("default", options.mode), fp16_io=options.fp16_io)
    user_plan = PrecisionPlan.load(options.plan_path) if options.plan_path else None
    plan, warnings = apply_user_choices(
        plan, ctx.node_ops, options.keep_fp32, options.keep_fp32_ops, user_plan, options.plan_path or "plan"
    )
    if not options.layer_flags:
        return plan, warnings
    pins = layer_pins(ctx.model, options.layer_flags.specs(), renamed=ctx.renamed,
                      low=ctx.target.low.name.lower())
    return plan.with_fp32_reasons(pins.reasons), warnings + list(pins.notes)


def plan_to_write(
    ctx: ModelContext, plan: PrecisionPlan, options: ConvertOptions, progress: Progress | None = None
) -> tuple[PrecisionPlan, AutoResult | None]:
    """The plan to write, resolved: ``plan`` itself in all-fp16 mode; static/auto modes load the samples and
    ask :func:`.choose.choose_plan`, which measures the run's basis on them first (:mod:`..basis`) and
    returns an AutoResult holding it (also returned)."""
    if options.mode == "all-fp16":
        return policy.resolve(ctx, plan), None
    from .. import data, oracle  # the oracle stack is only needed by the measuring modes
    from . import choose as auto

    samples = data.load_samples(ctx.model, options.samples)
    budget = auto.SearchBudget(options.max_probes, options.time_budget, options.exhaustive_minimise)
    with oracle.blame(ctx, samples):
        result = auto.choose_plan(ctx, plan, samples, options.judging, options.headroom, options.mode,
                                  progress, budget, oracle.plan_runner(options.oracle, ctx),
                                  {name: p["max"] for name, p in options.trt_profile.items() if "max" in p})
    return policy.resolve(ctx, policy.target_reasons(ctx, result.plan)), result


def planned(ctx: ModelContext, options: ConvertOptions, progress: Progress | None = None,
            ) -> tuple[PrecisionPlan, AutoResult | None, list[str]]:
    """The plan to write for ``ctx`` per ``options`` (:func:`base_plan`, then :func:`plan_to_write`),
    the search's result (static/auto modes) and the run's warnings; nothing is written."""
    measuring = options.mode != "all-fp16"
    if measuring:  # the model is the FP32 reference every plan is measured against
        from ..check import require_fp32_reference

        require_fp32_reference(ctx, "the model", "convert the FP32 model it was made from (--mode all-fp16, "
                                                 "which measures nothing, takes it as it is)")
    if ctx.renamed:
        logger.debug("named %d unnamed node(s) (node_of_<first output>)", len(ctx.renamed))
    plan, warnings = base_plan(ctx, options)
    options.judging.tolerance.require_outputs([o.name for o in ctx.model.graph.output], ctx.path)
    if options.trt_profile:
        from ..trt.flags import check_given_profile

        check_given_profile(ctx.model, options.trt_profile)
    if ctx.nothing_to_convert:
        warnings.append(f"{ctx.nothing_to_convert}: nothing to convert")
    if not measuring and (options.output.report_json or options.output.report_md):
        warnings.append("--report/--report-md apply to --mode static and auto (which verify); "
                        "no report written")
    if not measuring and (options.output.save_inputs or options.output.save_outputs):
        warnings.append("--save-inputs/--save-outputs apply to --mode static and auto (which run the model); "
                        "nothing saved")
    if not measuring and options.oracle != "emulate":
        warnings.append(f"--oracle {options.oracle} applies to --mode static and auto (which verify); "
                        "not run")
    try:
        plan, auto_result = plan_to_write(ctx, plan, options, progress)
    except CustomOpError as e:
        if options.mode != "static":
            raise
        plan, auto_result = policy.unmeasured_static_plan(ctx, plan), None
        warnings.append(f"{e.node_text}: onnxruntime has no kernel for it, so the static plan pins what the "
                        f"risk rules flag, unmeasured, and the written model is not verified (give "
                        f"--ort-custom-op-library PATH to measure)")
    return plan, auto_result, warnings


def _input_paths(model_path: str, options: ConvertOptions) -> tuple[str, ...]:
    """Every file the run reads (the model, --plan, the sample data): no output may overwrite one."""
    given = (options.plan_path, options.layer_flags.file, options.judging.reference_model)
    plan = tuple(p for p in given if p)
    held_out = sample_files(SampleSpec(inputs=options.validation_inputs)) if options.validation_inputs else ()
    return (model_path,) + plan + sample_files(options.samples) + held_out


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


def convert(model_path: str, output_path: str, options: ConvertOptions = ConvertOptions(),
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
    inputs = _input_paths(model_path, options)
    with storage.Outputs(inputs) as outputs:
        for path in _output_paths(output_path, options):
            outputs.reserve(path)
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
    cannot load at its default options, decide the outcome and make the report. The files besides
    the model (reports, plan, flags, samples) are the front door's to write."""
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
    auto_result = replace(auto_result, notes=auto_result.notes + judged)
    if auto_result.passed and not verification.verified.passed:
        # Written all the same: the model and its report are the bug report (status: failed, exit 1).
        logger.error("the plan passed the emulated search but the written model %s fails the emulated check "
                     "(a bug: please report it%s)", destination.output_path,
                     f" with {options.output.report_json}" if options.output.report_json else "")
    warnings += destination.unchecked_load(result, verification)
    outcome = _outcome(auto_result, result.plan, options, verification, tuple(warnings),
                       helper_sessions.built() - helpers_before, destination.output_path, ctx.target)
    return Conversion(ctx, result, outcome.warnings, auto_result, verification, _report(ctx, outcome))


def _convert(model_path: str, output_path: str, options: ConvertOptions, progress: Progress | None,
             outputs: storage.Outputs) -> ConvertResult:
    done = conversion(partial(load_model, model_path, options.targeting.custom_op_libraries), options,
                      Destination(output_path, outputs, options.output.external_data), progress)
    ctx, auto_result = done.ctx, done.auto
    if auto_result is not None:
        _stage_samples(auto_result, options, outputs)
    if done.rewrite is None:  # no plan worth writing: the report says why
        _stage_reports(done.report, options, outputs)
        outputs.commit()
        raise SearchError(f"{done.unwritten} (no model written; report: {options.output.report_json})")
    result = done.rewrite
    if options.output.plan_out:
        outputs.stage_text(options.output.plan_out, result.plan.dumps())
    run = _run_args(model_path, output_path, options, auto_result)
    if options.output.trt_flags_path:
        text = trt_flags_text(ctx.model, _as_built_from_original(ctx, result.plan), run,
                              ctx.target.commands.cli_args(), renamed=ctx.renamed, types=ctx.types)
        caveats = _flags_caveats(ctx, result.plan)
        outputs.stage_text(options.output.trt_flags_path, _with_caveats(text, caveats))
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
    the first did, written in its place, its pins said in a note; else ``result`` as it was."""
    first = conversion_status(auto_result, verification, ctx.target)[0]
    if first != "ort-load-failed":
        return result, verification, auto_result
    started, tried = time.perf_counter(), 0
    for remedy in load_remedies(ctx, result, verification.default_load):
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
    return result, verification, auto_result


def _costs(phases: tuple[PhaseCost, ...]) -> tuple[int, int]:
    """The sessions and probes of ``phases``, together."""
    return sum(p.sessions for p in phases), sum(p.probes for p in phases)


def _run_args(model_path: str, output_path: str, options: ConvertOptions,
              auto_result: AutoResult | None) -> RunArgs:
    """What the commands the run suggests repeat of it (the shapes: the feeds it ran, if any)."""
    from ..trt.flags import sample_shapes

    shapes = sample_shapes(auto_result.basis.samples.feeds) if auto_result is not None else None
    return RunArgs(model_path, output_path, options.samples, options.judging,
                   options.targeting.custom_op_libraries, options.oracle, options.trt_profile, shapes)


def with_notes(ctx: ModelContext, result: RewriteResult, auto_result: AutoResult | None) -> RewriteResult:
    """``result`` with what a BF16 run says of the model's opset and of what cannot be BF16
    (:func:`..opset_upgrade.run_notes`): in the summary of a run that measures nothing, in the
    report's notes otherwise (:func:`_report`)."""
    if auto_result is not None:
        return result
    notes = opset_upgrade.run_notes(ctx, result.plan, estimate_flops(ctx.model, {}))
    return replace(result, notes=notes + result.notes) if notes else result


def _flags_caveats(ctx: ModelContext, plan: PrecisionPlan) -> list[str]:
    """What the flags file must warn of: a plan measured for onnxruntime whose written model has 16-bit
    LayerNormalizations, whose statistics TensorRT computes in 16 bits in a strongly typed network
    (onnxruntime in FP32, as stash_type says; see :attr:`.Target.normalizes_in_input_precision`)."""
    if ctx.target.normalizes_in_input_precision:
        return []
    fused = {ln.add for ln in policy.decomposed_layer_norms(ctx)}
    normalizations = [n for n, op in ctx.node_ops.items()
                      if plan.is_low(n) and (n in fused or op == "LayerNormalization")]
    if not normalizations:
        return []
    return [f"# Note: this plan was measured for onnxruntime, which computes the statistics of its "
            f"{len(normalizations)} 16-bit LayerNormalization(s) in FP32; a strongly typed TensorRT network "
            f"computes them in 16 bits. For the model TensorRT builds, convert with --target tensorrt."]


def _with_caveats(text: str, caveats: list[str]) -> str:
    """``text`` with ``caveats`` after its first line."""
    if not caveats:
        return text
    first, _, rest = text.partition("\n")
    return "\n".join([first, *caveats, rest]) if rest else "\n".join([first, *caveats]) + "\n"


def _as_built_from_original(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` as flags on the original model must state it: the statistics of each LayerNorm the
    written model computes as one LayerNormalization (FP32 statistics, stash_type 1) are separate
    layers in the original, which TensorRT would run in FP16 unless pinned."""
    inside = [n for n in policy.always_fp32(ctx) if plan.is_low(n)]
    why = Reason("type", "inside a LayerNorm the written model computes as one LayerNormalization with FP32 "
                         "statistics; the original's layers need the pin")
    return plan.with_fp32(inside, why) if inside else plan


def _stage_samples(auto_result: AutoResult, options: ConvertOptions, outputs: storage.Outputs) -> None:
    """--save-inputs/--save-outputs: the feeds and the FP32 reference, to hand a case to someone with
    Polygraphy (``polygraphy run ... --load-inputs FEEDS --load-outputs REFERENCE``)."""
    from ..data import polygraphy_feeds_json, polygraphy_outputs_json

    if options.output.save_inputs:
        outputs.stage_text(options.output.save_inputs, polygraphy_feeds_json(auto_result.basis.samples.feeds))
    if options.output.save_outputs:
        outputs.stage_text(options.output.save_outputs,
                           polygraphy_outputs_json(auto_result.reference_outputs, "onnx-precision-fp32"))


def verify(ctx: ModelContext, staged_model: str | ModelContext, auto_result: AutoResult,
           options: ConvertOptions, write: PhaseCost) -> Verification:
    """The written model read back (or written in memory, as a context) and checked: emulated,
    natively on ``--oracle``'s runtime, and, when both pass, loaded by onnxruntime at its default
    options in a child process."""
    from .. import oracle

    # A small model's default load runs in a child while this process verifies (a large one's after
    # it: two copies of its weights at once would double the run's memory); it is waited for only
    # when everything else passed.
    # onnxruntime's CPU provider has no BF16 kernels: a BF16 model is verified by emulating the
    # written file, and never loaded there
    loads = all(low_of(d.precision).cpu_kernels
                for d in auto_result.plan.decisions.values() if d.precision.is_low)
    early = loads and auto_result.passed and _stored_bytes(staged_model) < OVERLAPPED_LOAD_BYTES
    loading = oracle.DefaultLoad(staged_model, ctx.custom_op_libraries) if early else None
    basis = auto_result.basis
    try:
        with oracle.blame(ctx, basis.samples):
            verified, native, phases = oracle.verify_output(
                staged_model, basis.samples.feeds, basis.references, basis.tolerances, options.oracle,
                ctx.custom_op_libraries, ctx.target, basis.measured)
        default_load = ""
        if loads and auto_result.passed and verified.passed and (native is None or native.passed):
            started = time.perf_counter()
            loading = loading or oracle.DefaultLoad(staged_model, ctx.custom_op_libraries)
            default_load = loading.problem()
            phases += (PhaseCost("default load", time.perf_counter() - started),)
    finally:
        if loading is not None:
            loading.cancel()
    validation, failure = None, ""
    if options.validation_inputs:
        started = time.perf_counter()
        validation, failure = _validate(ctx, staged_model, options.validation_inputs, basis)
        phases += (PhaseCost("validation", time.perf_counter() - started, sessions=2, probes=2),)
    return Verification(verified, native, default_load, (write,) + phases, validation, failure)


def _validate(ctx: ModelContext, staged_model: str | ModelContext, inputs: str, basis: Basis,
              ) -> tuple[Comparison, str]:
    """The written model on the held-out samples ``inputs``, judged as ``basis`` judges the run's own
    (:meth:`..basis.Basis.held_out`: against the FP32 model ``ctx`` on them, or a quantized model's
    reference, each held-out sample within its own bound)."""
    from .. import data, oracle

    held_out = data.load_samples(ctx.model, SampleSpec(inputs=inputs, option="--validation-inputs"))
    with oracle.blame(ctx, held_out):
        judged = basis.held_out(ctx, held_out)
        comparison, failure = oracle.validate_written(staged_model, held_out.feeds, judged.references,
                                                      judged.tolerances, ctx.custom_op_libraries, ctx.target)
    return comparison, failure and f"held-out {failure} ({inputs})"


def _stored_bytes(model_path: str | ModelContext) -> int:
    """The written model's bytes on disk, its external data file included (in memory, its proto's)."""
    if isinstance(model_path, ModelContext):
        return model_path.model.ByteSize()
    data = model_path + ".data"
    return os.path.getsize(model_path) + (os.path.getsize(data) if os.path.exists(data) else 0)


def _outcome(auto_result: AutoResult, plan: PrecisionPlan, options: ConvertOptions,
             verification: Verification | None, warnings: tuple[str, ...], helpers: int,
             output_path: str | None = None, target: Target = GENERIC) -> ConversionOutcome:
    status, message, more = conversion_status(auto_result, verification, target)
    status, message = share_gate(status, message, plan, auto_result.shares, options.min_16bit_share)
    return ConversionOutcome(auto_result, plan, status, message, auto_result.mode, options.oracle,
                             output_path, verification, warnings + more, helpers,
                             _tradeoff_path(options), _before_plan(options))


def conversion_status(auto_result: AutoResult, verification: Verification | None, target: Target,
                      ) -> tuple[Status, str, tuple[str, ...]]:
    """The run's status and message, and warnings to add: the search's, unless the written model
    fails the emulated check (a bug), fails natively, or, where the target runs on onnxruntime,
    cannot be loaded at onnxruntime's default options (elsewhere that is a warning)."""
    status, message = auto_result.status, auto_result.message
    if status != "passed" or verification is None:
        return status, message, ()
    if not verification.verified.passed:
        return "failed", "the written model fails the emulated check (a bug: please report it)", ()
    native = verification.native
    if native is not None and not native.passed:
        return "failed", f"the written model fails on {native.oracle} (passes emulated)", ()
    if verification.validation_failure:
        return "failed", f"the written model fails {verification.validation_failure}", ()
    if verification.default_load:
        if target.onnxruntime_kernels(target.low):
            return "ort-load-failed", f"the written model passes, but {verification.default_load}", ()
        from ..oracle.default_load import LoadFailure

        cpu_only = LoadFailure.of(verification.default_load).cpu_only
        return status, message, (f"{verification.default_load} ({target.title} builds the model; "
                                 f"onnxruntime is not the target{', and ' + cpu_only if cpu_only else ''})",)
    return status, message, ()


def share_gate(status: Status, message: str, plan: PrecisionPlan, shares: FlopShares,
               minimum: float | None) -> tuple[Status, str]:
    """--min-16bit-share: a plan that passes with less of its estimated FLOPs in 16 bits than
    ``minimum`` percent (the share the summary gives, ``shares``) fails, and its message says so."""
    share = 100 * shares.low(plan)
    if minimum is None or status not in ("passed", "ort-load-failed") or share >= minimum:
        return status, message
    digits = 1  # as many as keep the share printed below the bound (49.96% is not "50.0%")
    while digits < 6 and float(f"{share:.{digits}f}") >= minimum:
        digits += 1
    of = "of the non-quantized FLOPs" if shares.quantized else "of FLOPs"
    why = f"16-bit share {share:.{digits}f}% {of} is below --min-16bit-share {minimum:g}"
    return "failed", why + (f"; {message}" if message else "")


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
