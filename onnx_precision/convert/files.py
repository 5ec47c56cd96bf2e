"""What a conversion writes besides the model, but its reports: the commands it suggests (:func:`run_args`),
the TensorRT flags' plan and caveats, the feeds and reference outputs for Polygraphy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import policy, storage
from ..context import ModelContext
from ..plan import PrecisionPlan, Reason
from ..suggested import RunArgs
from .options import ConvertOptions

if TYPE_CHECKING:
    from .choose import AutoResult


def run_args(model_path: str, output_path: str, options: ConvertOptions,
              auto_result: AutoResult | None) -> RunArgs:
    """What the commands the run suggests repeat of it (the shapes: the feeds it ran, if any; a generation's,
    its first and last steps', the range its steps span)."""
    from ..trt.flags import sample_shapes

    shapes = None
    if auto_result is not None:
        basis = auto_result.basis
        feeds = basis.forward.feeds
        # a generation's profile: its most common shape (TensorRT's opt) is a decode step's, one whole feed
        # (K of them to one prefill), not each input's own most common, which need not run together
        shapes = sample_shapes(feeds if basis.generation is None else (*feeds, *feeds[1::2]))
    return RunArgs(model_path, output_path, options.samples, options.judging,
                   options.targeting.custom_op_libraries, options.oracle, options.trt_profile, shapes,
                   options.generation)


def flags_caveats(ctx: ModelContext, plan: PrecisionPlan) -> list[str]:
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


def with_caveats(text: str, caveats: list[str]) -> str:
    """``text`` with ``caveats`` after its first line."""
    if not caveats:
        return text
    first, _, rest = text.partition("\n")
    return "\n".join([first, *caveats, rest]) if rest else "\n".join([first, *caveats]) + "\n"


def as_built_from_original(ctx: ModelContext, plan: PrecisionPlan) -> PrecisionPlan:
    """``plan`` as flags on the original model must state it: the statistics of each LayerNorm the
    written model computes as one LayerNormalization (FP32 statistics, stash_type 1) are separate
    layers in the original, which TensorRT would run in FP16 unless pinned."""
    inside = [n for n in policy.always_fp32(ctx) if plan.is_low(n)]
    why = Reason("type", "inside a LayerNorm the written model computes as one LayerNormalization with FP32 "
                         "statistics; the original's layers need the pin")
    return plan.with_fp32(inside, why) if inside else plan


def stage_samples(auto_result: AutoResult, options: ConvertOptions, outputs: storage.Outputs) -> None:
    """--save-inputs/--save-outputs: the feeds and the FP32 reference, to hand a case to someone with
    Polygraphy (``polygraphy run ... --load-inputs FEEDS --load-outputs REFERENCE``); a generation's are
    its first and last steps' feeds (one forward pass each, as Polygraphy runs a model) and their outputs."""
    from ..data.files import polygraphy_feeds_json, polygraphy_outputs_json

    if options.output.save_inputs:
        outputs.stage_text(options.output.save_inputs, polygraphy_feeds_json(auto_result.basis.forward.feeds))
    if options.output.save_outputs:
        outputs.stage_text(options.output.save_outputs,
                           polygraphy_outputs_json(auto_result.reference_outputs, "onnx-precision-fp32"))
