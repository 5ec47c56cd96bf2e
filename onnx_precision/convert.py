"""The library entry point of ``onnx-precision convert``: load, choose a plan, rewrite, write.

:func:`convert` is what the CLI calls; :func:`base_plan`, :func:`choose_plan` and
:func:`convert_model` are the steps, usable on their own from Python. Everything the run writes
(model, plan, TensorRT flags) is computed before the first file is written, and each file is
written atomically, so a failing run leaves nothing half-written.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from . import helper_sessions, model_io, saving
from .compare import Tolerance
from .data import SampleSpec, sample_files
from .errors import OutputError, SearchError
from .plan import Precision, PrecisionPlan, Reason, apply_user_choices, uniform_plan
from .rewriter import RewriteResult, rewrite

logger = logging.getLogger(__name__)

MODES = ("all-fp16", "static", "auto")
_MAX_LISTED_PINS = 20


@dataclass(frozen=True)
class ConvertOptions:
    mode: str = "auto"  # "all-fp16" | "static" | "auto"
    keep_fp32: tuple[str, ...] = ()  # regexes over node names
    keep_fp32_ops: tuple[str, ...] = ()
    plan_path: str | None = None  # a plan to start from (--plan)
    fp16_io: bool = False
    external_data: bool = False  # write weights to <output>.data (forced for models over 2 GB)
    trt_flags_path: str | None = None
    plan_out: str | None = None  # write the final plan as JSON
    samples: SampleSpec = field(default_factory=SampleSpec)
    tolerance: Tolerance = field(default_factory=Tolerance)
    headroom: float = 2.0  # auto.DEFAULT_HEADROOM: one binade of margin over the samples (0: off)
    report_json: str | None = None
    report_md: str | None = None
    oracle: str = "emulate"  # "emulate" | "cuda" | "tensorrt"


@dataclass(frozen=True)
class ConvertResult:
    """What a conversion did: the plan written, the files, and what the user should know."""

    model_path: str
    output_path: str
    plan: PrecisionPlan
    rewrite: RewriteResult
    warnings: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # every file written, model first
    auto: Any = None  # onnx_precision.auto.AutoResult in static/auto modes
    report: Any = None  # onnx_precision.report.RunReport in static/auto modes (verified output)
    report_paths: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if self.report is None or self.report.status == "passed" else 1

    def summary_lines(self) -> list[str]:
        plan = self.plan
        fp32 = plan.fp32_nodes
        lines = [f"warning: {w}" for w in self.warnings]
        lines.append(
            f"{self.output_path}: {len(plan.fp16_nodes)} node(s) FP16, {len(fp32)} FP32, "
            f"{self.rewrite.casts_added} Cast(s) added, {self.rewrite.initializers_converted} initializer(s) "
            f"converted, {self.rewrite.initializers_duplicated} kept in both precisions")
        if self.report is not None:  # static/auto: the report's summary says the rest
            from .report import summary_lines
            return lines + summary_lines(self.report, self.report_paths) + [f"note: {n}" for n in self.rewrite.notes]
        for name in fp32[:_MAX_LISTED_PINS]:
            reasons = plan.decisions[name].reasons
            why = f"{reasons[-1].source}: {reasons[-1].detail}" if reasons else "fp32"
            lines.append(f"  FP32 {name} ({why})")
        if len(fp32) > _MAX_LISTED_PINS:
            lines.append(f"  ... and {len(fp32) - _MAX_LISTED_PINS} more FP32 node(s) (see --save-plan)")
        lines.extend(f"note: {n}" for n in self.rewrite.notes)
        lines.extend(f"wrote {p}" for p in self.written[1:])
        return lines


def node_ops(model) -> dict[str, str]:
    return {ref.name: ref.node.op_type for ref in model_io.walk_nodes(model.graph)}


def base_plan(loaded: model_io.LoadedModel, options: ConvertOptions) -> tuple[PrecisionPlan, list[str]]:
    """All nodes FP16, then --plan, --keep-fp32 and --keep-fp32-op; returns the plan and warnings."""
    ops = node_ops(loaded.model)
    plan = uniform_plan(ops, Precision.FP16, Reason("default", options.mode), fp16_io=options.fp16_io)
    user_plan = PrecisionPlan.load(options.plan_path) if options.plan_path else None
    return apply_user_choices(plan, ops, options.keep_fp32, options.keep_fp32_ops, user_plan,
                              options.plan_path or "plan")


def choose_plan(loaded: model_io.LoadedModel, plan: PrecisionPlan, options: ConvertOptions,
                progress: Any = None) -> tuple[PrecisionPlan, Any]:
    """The plan to write: ``plan`` itself in all-fp16 mode; static/auto modes ask
    :func:`onnx_precision.auto.choose_plan` (which returns an AutoResult, also returned)."""
    if options.mode == "all-fp16":
        return plan, None
    from . import auto, data  # the oracle stack is only needed by the measuring modes
    samples = data.load_samples(loaded.model, options.samples)
    result = auto.choose_plan(loaded, plan, samples, options.tolerance, options.headroom, options.mode, progress)
    return result.plan, result


def convert_model(loaded: model_io.LoadedModel, plan: PrecisionPlan, auto_result: Any = None) -> RewriteResult:
    """Rewrite ``loaded`` for ``plan`` (resolved for types and initializers) in memory; the typing
    a search already computed (``auto_result``) is reused."""
    if auto_result is not None and auto_result.typing:
        return rewrite(loaded.model, plan, loaded.base_dir, types=auto_result.types, typing=auto_result.typing)
    return rewrite(loaded.model, plan, loaded.base_dir)


def _input_paths(model_path: str, options: ConvertOptions) -> tuple[str, ...]:
    """Every file the run reads (the model, --plan, the sample data): no output may overwrite one."""
    plan = (options.plan_path,) if options.plan_path else ()
    return (model_path,) + plan + sample_files(options.samples)


def _check_paths(inputs: tuple[str, ...], output_path: str, options: ConvertOptions) -> None:
    """Refuse outputs that would overwrite an input or each other, before any work is done."""
    outputs = [p for p in (output_path, options.plan_out, options.trt_flags_path, options.report_json,
                           options.report_md) if p]
    seen = set()
    for path in outputs:
        target = saving.check_output_path(path, inputs)
        if target in seen:
            raise OutputError(f"{path}: given for two different outputs")
        seen.add(target)


def convert(model_path: str, output_path: str, options: ConvertOptions = ConvertOptions(),
            progress: Any = None) -> ConvertResult:
    """Convert ``model_path`` to ``output_path`` per ``options`` (see the CLI help for each).

    static/auto modes also verify the written file (emulated, and natively with --oracle
    cuda/tensorrt) and write the JSON/Markdown reports; ``progress(phase, done, left)`` is called
    during the search."""
    if options.mode not in MODES:
        raise ValueError(f"convert: mode {options.mode!r} is not one of {MODES}")
    measuring = options.mode != "all-fp16"
    if measuring:
        from . import check, report as report_lib
        check.require_oracle(options.oracle)
        reports = report_lib.default_paths(output_path, options.report_json, options.report_md)
        options = replace(options, report_json=reports[0], report_md=reports[1])
    inputs = _input_paths(model_path, options)
    _check_paths(inputs, output_path, options)
    helpers_before = helper_sessions.built()
    loaded = model_io.load_model(model_path)
    if loaded.renamed:
        logger.debug("named %d unnamed node(s) (node_of_<first output>)", len(loaded.renamed))
    plan, warnings = base_plan(loaded, options)
    if not measuring and (options.report_json or options.report_md):
        warnings.append("--report/--report-md apply to --mode static and auto (which verify); no report written")
    if not measuring and options.oracle != "emulate":
        warnings.append(f"--oracle {options.oracle} applies to --mode static and auto (which verify); not run")
    plan, auto_result = choose_plan(loaded, plan, options, progress)
    if auto_result is not None and not auto_result.writable:
        report = report_lib.for_conversion(loaded.model, model_path, None, auto_result.plan, auto_result.samples,
                                           options.tolerance, options.mode, options.oracle, auto_result,
                                           warnings=warnings, helper_sessions=helper_sessions.built() - helpers_before)
        paths = report_lib.write_reports(report, options.report_json, options.report_md, inputs)
        raise SearchError(f"{auto_result.message} (no model written; report: {paths[0]})")
    started = time.perf_counter()
    result = convert_model(loaded, plan, auto_result)
    texts = []
    if options.plan_out:
        texts.append((options.plan_out, result.plan.dumps()))
    if options.trt_flags_path:
        from .trt.flags import sample_shapes, trt_flags_text
        shapes = sample_shapes(auto_result.samples.feeds) if auto_result is not None else None
        texts.append((options.trt_flags_path, trt_flags_text(
            loaded.model, result.plan, model_path, output_path, renamed=loaded.renamed, input_shapes=shapes,
            atol=options.tolerance.atol, rtol=options.tolerance.rtol)))
    model_io.save_model(result.model, output_path, source_dir=loaded.base_dir,
                        external_data=True if options.external_data else None, input_paths=inputs)
    for path, text in texts:
        model_io.write_text(path, text, input_paths=inputs)
    written = (output_path,) + tuple(p for p, _ in texts)
    if auto_result is None:
        return ConvertResult(model_path, output_path, result.plan, result, tuple(warnings), written)
    write = report_lib.PhaseCost("write", time.perf_counter() - started)
    verified, native, phases = check.verify_output(output_path, auto_result, options.tolerance, options.oracle)
    if auto_result.passed and not verified.passed:
        logger.error("BUG: the plan passed the emulated search but the written model %s fails the emulated "
                     "check; please report it with %s", output_path, options.report_json)
    report = report_lib.for_conversion(loaded.model, model_path, output_path, result.plan, auto_result.samples,
                                       options.tolerance, options.mode, options.oracle, auto_result, verified,
                                       native, (write,) + phases, warnings, helper_sessions.built() - helpers_before)
    paths = report_lib.write_reports(report, options.report_json, options.report_md, inputs)
    return ConvertResult(model_path, output_path, result.plan, result, tuple(warnings), written + paths,
                         auto_result, report, paths)
