"""The plan a conversion writes: the user's plan (:func:`base_plan`: all 16-bit, then ``--plan``,
``--keep-fp32``, ``--keep-fp32-op`` and TensorRT's per-layer flags), then, in the measuring modes, the one
the search chooses on the run's basis (:func:`plan_to_write`); :func:`planned` is both, with the run's
warnings."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import policy
from ..context import ModelContext
from ..errors import CustomOpError
from ..plan import PrecisionPlan, Reason, apply_user_choices
from ..trt.layer_precisions import layer_pins
from .options import ConvertOptions

if TYPE_CHECKING:
    from .choose import AutoResult, Progress

logger = logging.getLogger(__name__)


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
    """The plan to write, resolved: ``plan`` itself in all-fp16 mode; static/auto modes load the samples (a
    generation's, where the model runs one: :func:`..basis.run_samples`) and ask
    :func:`.choose.choose_plan`, which measures the run's basis on them first (:mod:`..basis`) and returns an
    AutoResult holding it (also returned)."""
    if options.mode == "all-fp16":
        return policy.resolve(ctx, plan), None
    from .. import oracle  # the oracle stack is only needed by the measuring modes
    from ..basis import generation_of, run_samples
    from . import choose as auto

    samples = run_samples(ctx, options.samples, generation_of(ctx, options.generation))
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
    if measuring:  # generation options for a model that runs none
        from ..basis import generation_of, unused_generation

        warnings += unused_generation(options.generation, generation_of(ctx, options.generation))
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
