"""BF16 where the model's opset has none: raise the opset, verify the result, and say so.

ONNX gives most ops a ``bfloat16`` type from opset 13 (Cast too), and Conv, ConvTranspose, the pools,
HardSigmoid, Sin/Cos and a few more only from opset 22 (each schema's history). A run that asks for BF16
(``--low-precision bf16`` or ``--fallback bf16``) on an older model would keep those nodes FP32 whatever
they measure, so :func:`upgrade` raises the model's ai.onnx opset, once per run and before the model
context is built, to the lowest one at which every node that can be BF16 on the target (its schema
takes bfloat16 there and :meth:`.Target.kernel_blocker` does not refuse it) has a bfloat16 type, and
at least 13 (Cast). The upgraded model is used only if it computes what the original computes: both
run in FP32 on the run's samples with onnxruntime, and every output must agree within
:data:`MAX_REL_ERR` of its largest magnitude (NaN/Inf where the original has them); then it is the
model the run converts, writes (at the new opset) and takes its FP32 reference from. Otherwise the
original is kept, its nodes stay FP32 with their reasons, and a note says why. ``--keep-opset``
refuses instead (:func:`upgrade` with ``keep_opset``): one line naming the opset and the ops.

The same for an FP16 run of a quantized model: QuantizeLinear and DequantizeLinear take a float16
input, output and scale only from opset 19, so below it every DQ feeding a Conv/MatMul/Gemm would be
written FP32 with a Cast to the kernel (which stops TensorRT's INT8 fusion) or its whole quantized
group kept FP32. An FP16 run raises a model with Q/DQ nodes below 19 (and only such a model: only the
Q/DQ nodes count), verified and said the same way.

How: ``onnx.version_converter.convert_version``. Both it and a minimal upgrade of our own (raise
opset_import, move the attributes that became inputs: Squeeze/Unsqueeze/ReduceSum axes and Split's
split at 13, the other Reduce* axes at 18) were tried on the examples in ``models/`` and the trained
models of ``scripts/bench_precisions.py`` (PP-OCRv4 det 12 -> 22, rec 12 -> 22, cls 11 -> 22, Magika
15 -> 22, NudeNet 320n 17 -> 27, deep_cnn 17 -> 22): both gave models onnxruntime ran to the
same outputs (bit-identical, PP-OCR rec within 6e-7 / 8e-7 relative, onnxruntime's opset-13 Softmax
kernel), the converter in 0.02-0.08 s, with every node name kept. The converter is the one used: it
carries onnx's adapter for every version step of every op, including those whose meaning changed
(Softmax/LogSoftmax/Hardmax coerced to 2-D before 13, BatchNormalization's outputs at 14, Resize's
modes at 13, Clip/Pad/Slice/TopK/Dropout attributes that became inputs before 13), which a minimal
upgrade would have to copy one by one and would get silently wrong for any op it forgot (only the
verification would catch it, and only on the samples). Its known failures (an op without an adapter,
a malformed model, a node it cannot type) raise; they become a note, never a traceback. It sees the
model as loaded, its external weights left in their files (only their locations are copied), and
the verification runs the two models one after the other with the weights by reference: nothing
holds the weights twice.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import onnx
import onnx.version_converter

from . import quantized, typing_rules
from .context import ModelContext, Upgrade
from .data import SampleSpec
from .errors import ModelLoadError, PrecisionError, UsageError
from .float_types import LowPrecision, low_of
from .graph import is_onnx_domain, onnx_opset, sort_topologically, walk_nodes
from .plan import Precision, PrecisionPlan
from .storage import model_tensors
from .target import GENERIC, Target

logger = logging.getLogger(__name__)

# Outputs of the upgraded model may differ from the original's by this much, relative to the output's
# largest magnitude: onnxruntime's kernel of a newer op version may order its sums differently (PP-OCR
# rec's Softmax-13: 6e-7), and anything larger is a change of meaning.
MAX_REL_ERR = 1e-6
_LISTED = 5  # op types named in a note before "and N more"

@dataclass(frozen=True)
class Needed:
    """The opset at which the model's nodes can be BF16, and which op types need it."""

    current: int  # the model's ai.onnx opset
    opset: int  # the lowest opset that gives them all a bfloat16 type (``current`` when none needs one)
    ops: tuple[str, ...]  # op types with no bfloat16 type at ``current``, in model order

    @property
    def ops_text(self) -> str:
        shown = ", ".join(self.ops[:_LISTED])
        return shown + (f" and {len(self.ops) - _LISTED} more" if len(self.ops) > _LISTED else "")


def needed_opset(model: onnx.ModelProto, target: Target, low: LowPrecision) -> Needed:
    """The lowest ai.onnx opset (at least the Cast's of ``low``) at which every node of ``model`` whose
    schema has no ``low`` type today gets one that ``target`` also has a kernel for; a node that has
    none up to the newest opset onnx knows does not count (it stays FP32 at any opset). For a type
    whose schemas have it from their first versions (FP16: not :attr:`.LowPrecision.late_schemas`)
    only the Q/DQ nodes count (their scales take float16 from opset 19): a model without them is not
    raised."""
    opsets = typing_rules.opset_map(model)
    current = opsets.get("", 0)
    types = typing_rules.tensor_types(model)
    newest = onnx.defs.onnx_opset_version()
    opset, ops = max(current, low.cast_opset), {"Cast": low.cast_opset} if current < low.cast_opset else {}
    for ref in walk_nodes(model.graph):
        node = ref.node
        if not is_onnx_domain(node.domain):
            if low.late_schemas or not quantized.is_qdq(node):
                continue
            # a com.microsoft Q/DQ in float16 is loaded as the ai.onnx one: onnxruntime's QDQ fusions
            # (MatMulAddFusion's bias DQ) write ai.onnx Q/DQ in its type, which take float16 from 19 only
            node = onnx.helper.make_node(node.op_type, node.input, node.output, node.name)
        if low.late_schemas and not typing_rules.schema_typing(node, opsets, types, low).low_blocker:
            continue
        # a DQ before 19 has no blocker, only a float output that cannot convert
        if not low.late_schemas and (not quantized.is_qdq(node) or _takes_low(node, opsets, current, types,
                                                                               target, low)):
            continue
        later = range(current + 1, newest + 1)
        since = next((v for v in later if _takes_low(node, opsets, v, types, target, low)), None)
        if since is not None:
            opset = max(opset, since)
            ops.setdefault(node.op_type, since)
    return Needed(current, opset if ops else current, tuple(ops))


def _takes_low(node: onnx.NodeProto, opsets: Mapping[str, int], opset: int,
               types: Mapping[str, onnx.TypeProto], target: Target, low: LowPrecision) -> bool:
    typing = typing_rules.schema_typing(node, {**opsets, "": opset}, types, low)
    return (typing.low_blocker is None and typing.has_float
            and target.kernel_blocker(node, low, opset) is None)


def upgrade_type(target: Target) -> LowPrecision:
    """The 16-bit type whose schemas the run raises the model's opset for: its own or its fallback
    type where that one's schemas took it late (:attr:`.LowPrecision.late_schemas`: BF16, by
    ``--low-precision bf16`` or ``--fallback bf16``), else its own (FP16: for Q/DQ nodes only)."""
    late = [low for low in (target.low, target.fallback) if low is not None and low.late_schemas]
    return late[0] if late else target.low


def for_run(target: Target, samples: SampleSpec, custom_op_libraries: Sequence[str] = (),
            keep_opset: bool = False) -> Upgrade | None:
    """What a run hands :func:`onnx_precision.context.load_model`: :func:`upgrade` with the run's
    target and samples (an FP16 run: for a model with Q/DQ nodes only, see :func:`needed_opset`)."""
    return partial(upgrade, target=target, samples=samples, custom_op_libraries=tuple(custom_op_libraries),
                   keep_opset=keep_opset)


def upgrade(model: onnx.ModelProto, path: str, base_dir: str, *, target: Target, samples: SampleSpec,
            custom_op_libraries: tuple[str, ...] = (), keep_opset: bool = False,
            ) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """``model`` at the opset that gives its nodes a bfloat16 type (:func:`needed_opset`; in an FP16
    run its Q/DQ nodes a float16 one), verified against ``model`` on ``samples``, and the note that
    says so; ``model`` itself and a note saying why when the upgrade fails or does not verify.
    ``keep_opset``: a UsageError instead. A model below Cast's opset 13 that cannot be upgraded is
    refused (ModelLoadError): nothing there can be BF16."""
    low = upgrade_type(target)
    if not low.late_schemas and not any(quantized.is_qdq(ref.node) for ref in walk_nodes(model.graph)):
        return model, ()
    need = needed_opset(model, target, low)
    if need.opset == need.current:
        return model, ()
    if keep_opset and not low.late_schemas:  # an FP16 run converts without it: the quantized groups stay FP32
        return model, (f"--keep-opset: opset {need.current} kept, where {need.ops_text} take no "
                       f"{low.type_name}: the quantized groups stay FP32",)
    if keep_opset:
        raise UsageError(f"{path}: --keep-opset: {low.name} needs ai.onnx opset {need.opset} for "
                         f"{need.ops_text} and the model imports opset {need.current} (without "
                         f"--keep-opset the model is upgraded and verified)")
    upgraded, failure = _converted(model, need.opset)
    err = None
    if upgraded is not None:
        err, failure = _verified(model, upgraded, base_dir, samples, custom_op_libraries)
    step = f"opset {need.current} -> {need.opset}"
    if upgraded is None or err is None:
        if need.current < low.cast_opset:
            raise ModelLoadError(f"{path}: {low.name} needs ai.onnx opset {low.cast_opset} or later (Cast "
                                 f"takes {low.type_name} from opset {low.cast_opset}) and the model imports "
                                 f"opset {need.current}; the upgrade ({step}) is not used: {failure}; use "
                                 f"--low-precision fp16")
        return model, (f"no {step} upgrade: {failure}; the nodes of {need.ops_text} stay FP32 (no "
                       f"{low.type_name} type at opset {need.current})",)
    sort_topologically(upgraded.graph)
    agreement = "bit-identical" if err == 0 else f"max rel err {err:.2g}"
    take = "takes" if len(need.ops) == 1 else "take"
    return upgraded, (f"{step} so that {need.ops_text} {take} {low.type_name} (onnx's version converter); "
                      f"the upgraded FP32 model matches the original on the samples ({agreement}) and is the "
                      f"FP32 reference; the written model is at opset {need.opset}",)


def written_context(ctx: ModelContext, plan: PrecisionPlan, reload: Callable[[Target], ModelContext],
                    ) -> tuple[ModelContext, PrecisionPlan]:
    """The context the written model is made from, and the plan to write into it: ``ctx`` and
    ``plan``, unless ``ctx``'s model was upgraded (:func:`upgrade`) and ``plan`` has no node that
    needs it (none is in a 16-bit type that its op takes only at the raised opset, as the Convs of a
    ``--fallback bf16`` run that all stay FP16): then the model as given, at its own opset (``reload``:
    loaded with the target it is given, not upgraded), with a note saying so in place of the
    upgrade's (the reloaded model's own notes kept: a decoder's sentinels written finite), and ``plan``
    for its nodes (the upgrade keeps every node's name; the nodes its adapters added are left out),
    resolved again when written. The written model is verified as always. A
    ``--low-precision bf16`` run keeps ``ctx``: its 16-bit nodes are BF16."""
    if not ctx.notes or ctx.target.low.late_schemas:
        return ctx, plan
    # loaded for an FP16 target, which refuses nothing below BF16's Cast opset; the run's target is
    # put back once the original is the model to write; its mask sentinels written finite, as the run
    # measured it (basis.measured_model)
    from .policy import rewrite_decoder_hazards

    original = rewrite_decoder_hazards(reload(GENERIC)).ctx
    current, raised = onnx_opset(original.model), onnx_opset(ctx.model)
    if current == raised:
        return ctx, plan  # the upgrade was not applied (its note says why)
    lows = sorted({d.precision for d in plan.decisions.values() if d.precision.is_low})
    for precision in lows:
        ops = set(needed_opset(original.model, ctx.target, low_of(precision)).ops)
        # below the type's Cast opset every node in it needs the upgrade
        if any(plan.decisions[ref.name].precision is precision and ("Cast" in ops or ref.node.op_type in ops)
               for ref in original.nodes if ref.name in plan.decisions):
            return ctx, plan
    low = upgrade_type(ctx.target)
    upgraded_for = needed_opset(original.model, ctx.target, low)
    what = (f"no node of {upgraded_for.ops_text} is {low.name}" if Precision(low.precision) in lows
            else f"no node went {low.name}")
    note = (f"opset kept at {current}: {what} (the plan was measured on the model raised to opset {raised}, "
            f"which matches it on the samples; the model written at opset {current} is verified as always)")
    # a model with no node in the upgrade's type (BF16) is written, loaded and verified for the target's
    # own (FP16) alone (below opset 13 a BF16 target refuses it); every target is a frozen dataclass
    target = ctx.target if Precision(low.precision) in lows else replace(ctx.target, fallback=None)  # type: ignore[type-var]
    kept = replace(original, target=target, keep_float64=ctx.keep_float64, notes=original.notes + (note,))
    return kept, PrecisionPlan({ref.name: plan.decisions[ref.name] for ref in original.nodes
                                if ref.name in plan.decisions}, plan.fp16_io)


# Inline initializers of more bytes than this go through the version converter as placeholders: it
# parses, converts and serializes its own copies of everything it is given (a 26 MB dynamic-quant
# model peaked 150 MB above the loaded proto through it, 25 MB with placeholders), and its adapters
# read only small constants (axes, pads, shapes, scales), which stay inline.
CONVERT_INLINE_BYTES = 1024
_HELD = "onnx_precision.held_by_caller"


def _converted(model: onnx.ModelProto, opset: int) -> tuple[onnx.ModelProto | None, str]:
    """``model`` at ``opset`` by onnx's version converter, or None and why not. Its large inline
    main-graph initializers are placeholders there (:data:`CONVERT_INLINE_BYTES`), given back after."""
    held = {t.name: t for t in model.graph.initializer if len(t.raw_data) > CONVERT_INLINE_BYTES}
    shell = onnx.ModelProto()
    shell.CopyFrom(model)
    for tensor in shell.graph.initializer:
        if tensor.name in held:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            tensor.external_data.add(key="location", value=_HELD)
    try:
        converted = onnx.version_converter.convert_version(shell, opset)
    except Exception as e:  # the converter's C++ errors reach Python as several types: each is a reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"onnx's version converter fails: {first}"
    for tensor in converted.graph.initializer:
        if tensor.name in held:
            tensor.CopyFrom(held[tensor.name])
    if any(e.value == _HELD for tensor in model_tensors(converted) for e in tensor.external_data):
        return None, "onnx's version converter renamed or moved a weight"  # not seen: no adapter does
    return converted, ""


def _verified(original: onnx.ModelProto, upgraded: onnx.ModelProto, base_dir: str, spec: SampleSpec,
              custom_op_libraries: Sequence[str]) -> tuple[float | None, str]:
    """The largest relative difference between the two models' FP32 outputs on the samples, or None
    and why it is no match (or could not be measured)."""
    from . import data
    from .data.synthetic import SymbolicDimensions
    from .oracle.sessions import make_session, ort_message, run_session

    try:
        feeds = data.load_samples(original, spec).feeds
    except SymbolicDimensions as e:
        return None, f"no samples to verify it on ({e})"
    shared: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    outputs = []
    for which, model in (("original", original), ("upgraded", upgraded)):
        try:
            # one model at a time: its session (and the weights it maps) is gone before the next
            outputs.append(run_session(make_session(model, base_dir, custom_op_libraries=custom_op_libraries,
                                                    shared=shared), model, feeds))
        except PrecisionError:
            raise
        except Exception as e:  # onnxruntime's own exception types: the model does not run
            return None, f"onnxruntime cannot run the {which} model in FP32: {ort_message(e)}"
    worst = 0.0
    for ref_feed, new_feed in zip(*outputs):
        for name, ref in ref_feed.items():
            err = _rel_err(ref, new_feed[name])
            if err is None or err > MAX_REL_ERR:
                shown = "differs in shape, type or NaN/Inf" if err is None else f"max rel err {err:.2g}"
                return None, (f"the upgraded FP32 model does not match the original on the samples ({name}: "
                              f"{shown}, over {MAX_REL_ERR:g})")
            worst = max(worst, err)
    return worst, ""


def _rel_err(ref: np.ndarray, new: np.ndarray) -> float | None:
    """max |new - ref| over max |ref| where ref is finite (0 where both are 0); None when the two differ
    in shape, type or where they are not finite."""
    if ref.shape != new.shape or ref.dtype != new.dtype:
        return None
    if ref.dtype.kind != "f":
        return 0.0 if np.array_equal(ref, new) else None
    finite = np.isfinite(ref)
    if not np.array_equal(finite, np.isfinite(new)) or not np.array_equal(ref[~finite], new[~finite],
                                                                          equal_nan=True):
        return None
    diff = float(np.max(np.abs(ref[finite].astype(np.float64) - new[finite]), initial=0.0))
    scale = float(np.max(np.abs(ref[finite]), initial=0.0))
    return diff / scale if scale else (0.0 if diff == 0 else None)


def run_notes(ctx: ModelContext, plan: PrecisionPlan, flops: Mapping[str, float]) -> tuple[str, ...]:
    """The notes a BF16 run adds to its summary: what was done to the model's opset (the context's
    notes), and what still cannot be BF16 in the written ``plan``: its FP32 nodes that have no
    bfloat16 type or kernel on the target, grouped by why, the largest by ``flops`` first."""
    low = upgrade_type(ctx.target)
    if not low.late_schemas:
        return ctx.notes
    typing = ctx.typing_in(low)
    newest = onnx.defs.onnx_opset_version()
    groups: dict[str, list[str]] = {}
    for ref in ctx.nodes:
        blocker = typing[ref.name].low_blocker
        if blocker and ref.name in plan.decisions and not plan.is_low(ref.name):
            # a target without the kernel at any opset is the reason, rather than the opset's schema
            why = ctx.target.kernel_blocker(ref.node, low, newest) or blocker
            groups.setdefault(why, []).append(ref.name)
    if not groups:
        return ctx.notes
    total = sum(flops.get(n, 0.0) for n in plan.decisions) or 1.0

    def share(names: Sequence[str]) -> float:
        return 100 * sum(flops.get(n, 0.0) for n in names) / total

    ranked = sorted(groups.items(), key=lambda g: -share(g[1]))
    count = sum(len(names) for names in groups.values())
    parts = [f"{len(names)} node(s) ({share(names):.3g}%): {why}" for why, names in ranked[:3]]
    more = f"; {len(ranked) - 3} more reason(s) in the report" if len(ranked) > 3 else ""
    every = [n for names in groups.values() for n in names]
    return ctx.notes + (f"{count} node(s) cannot be {low.name} ({share(every):.3g}% of estimated FLOPs)"
                        f" and stay FP32: {'; '.join(parts)}{more}",)
