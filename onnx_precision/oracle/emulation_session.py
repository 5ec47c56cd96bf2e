"""Emulating precision plans on onnxruntime's CPU provider: :class:`EmulationSession`.

A plan's FP16 tensors are rounded through ``Cast(FLOAT16) -> Cast(FLOAT)`` pairs in an FP32 graph,
which onnxruntime honours (its own FP16 kernels on CPU compute in FP32 and hide overflow). One
session of the switch graph (:mod:`.switch_builder`) runs any plan: the FP32 reference, every probe and
the layerwise run are runs of it with different switches.

A plan is fed as one boolean vector (:meth:`SwitchModel.switch_vector`); nodes the resolved plan
keeps FP32 whatever the plan get no switch. A plan runs as the rewriter writes it: with its
LayerNorm pins (:func:`onnx_precision.policy.layer_norm_pins`), each fused LayerNorm computed as
the LayerNormalization written (:func:`onnx_precision.policy.written_forms`), each quantized group
in one type (:func:`onnx_precision.policy.resolution.group_pins`).

Sessions use ``ORT_DISABLE_ALL``: the switch graph puts every node in its own If branch, so no
fusion could apply to it anyway, and disabling them in every session of the oracle makes "all
switches off" bit-identical to the FP32 model run by :func:`run_fp32` and a plan bit-identical to
the emulation of the model the rewriter writes for it. (No level folds the Cast pairs away, not
even ``ORT_ENABLE_ALL``; a test keeps that true.)

Every function takes a :class:`~onnx_precision.context.ModelContext`: external data is read
relative to the model's own directory, whatever the working directory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx

from .. import cancel
from ..context import ModelContext
from ..errors import InternalError
from ..float_types import LOW_TYPES, LowPrecision
from ..plan import PrecisionPlan
from ..policy import always_fp32, layer_norm_pins, written_forms
from ..policy.resolution import dequantize_copies, group_pins
from ..target import UNMEASURED, Measured
from ..typing_rules import is_tensor
from .baked import build_baked_model
from .blame import Diagnose, named_stop
from .inspection import Chunks, Inspector
from .sessions import Feed, cast_feed, input_dtypes, make_session, session_options
from .switch_builder import EmulationSource, build_switch_model
from .switch_graph import SwitchModel
from .written import emulate_model

EMULATE = "emulate"


class EmulationSession:
    """ONE onnxruntime CPU session that evaluates any precision plan of ``model`` by emulation.

    ``run(None, feed)`` is the FP32 model (bit-identical); ``run(plan, feed)`` rounds every tensor
    the plan makes FP16. ``sessions_built`` and ``probes_run`` count the work for reports.

    ``capture_intermediates`` (True, False or tensor names, see
    :func:`onnx_precision.oracle.switch_builder.build_switch_model`) decides which main-graph tensors
    ``run(..., intermediates=True)`` returns; a capturing session holds them all during each run
    (fetched or not), and its probes cost ~10-20% more than a session without capture
    (scripts/bench_oracle.py), so a search with many probes may prefer a second session built
    with ``capture_intermediates=False``. A model that already holds FP16 tensors is emulated
    first (:func:`as_fp32`). The nodes every written model computes in FP32
    (:func:`onnx_precision.policy.always_fp32`) get no switch: one that would never be turned on only
    costs an If. ``threads`` caps onnxruntime's intra-op threads. ``group_size`` is
    :func:`.switch_builder.build_switch_model`'s: groups make each probe cheaper and the session slower
    to build, so a caller with only a couple of runs (``analyze``) passes 1. ``baked`` (the 16-bit
    nodes of one plan and their types) builds :func:`.baked.build_baked_model` instead: no switch,
    no If, every run is that plan whatever ``run`` is given (see :class:`.emulator.Emulator`; a node
of ``baked`` that :func:`~onnx_precision.policy.always_fp32` holds computes in its type there: the
emulator names such a node only in a type that holds its constants);
    with ``fp32_model`` it is no plan's but the FP32 model itself (nothing in a written form).
    ``measured``: what the run measured of the target's sums (:class:`~onnx_precision.target.Measured`).
    ``diagnose`` tells a plan's run that onnxruntime stopped because a decision flipped
    (:meth:`.emulator.Emulator.diverged`), which :meth:`run` raises as such.
    """

    def __init__(self, ctx: ModelContext, capture_intermediates: bool | Iterable[str] = True,
                 threads: int | None = None, group_size: int | None = None,
                 baked: Mapping[str, LowPrecision] | None = None, fp32_model: bool = False,
                 measured: Measured = UNMEASURED, diagnose: Diagnose | None = None) -> None:
        self.ctx = ctx
        self._diagnose = diagnose
        self.model = model = ctx.model
        base_dir = ctx.base_dir
        self.typing = ctx.typing
        fp32 = as_fp32(ctx)
        self.always_fp32 = always_fp32(ctx)
        types = None if fp32 is not model else ctx.types
        forms = {} if fp32_model else written_forms(ctx)
        fixed = self.always_fp32 if baked is None else self.always_fp32 - frozenset(baked)
        copies = frozenset() if fp32_model else dequantize_copies(ctx)  # as the rewriter writes them
        source = EmulationSource(fp32, self.typing, base_dir, types, fixed, ctx.target, measured, forms,
                                 copies)
        self.switch_model: SwitchModel = (
            build_switch_model(source, capture_intermediates, group_size) if baked is None else
            build_baked_model(source, baked, capture_intermediates))
        self.session = make_session(self.switch_model.model, base_dir, options=session_options(threads),
                                    custom_op_libraries=ctx.custom_op_libraries, shared=ctx.mapped_weights)
        self.sessions_built = 1
        self.probes_run = 0
        self._last: tuple[PrecisionPlan | None, np.ndarray] | None = None
        self._dtypes = input_dtypes(self.switch_model.model)
        self.io = FloatIO(model)

    oracle = EMULATE

    def searching(self) -> EmulationSession:
        """Every plan runs on this one session."""
        return self

    @property
    def inspection(self) -> Inspector:
        return Inspector(self)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.switch_model.outputs

    @property
    def intermediates(self) -> tuple[str, ...]:
        return self.switch_model.intermediates

    @property
    def producers(self) -> Mapping[str, str]:
        return self.switch_model.producers

    @property
    def switchable(self) -> frozenset[str]:
        """Nodes whose precision changes anything in the emulation."""
        return frozenset(self.switch_model.switches) - self.always_fp32

    def switch_feed(self, plan: PrecisionPlan | None) -> dict[str, np.ndarray]:
        if not self.switch_model.switch_input:
            return {}
        # A probe runs one plan on each sample in turn: its (read-only) vector is kept.
        if self._last is None or self._last[0] is not plan:
            written = None if plan is None else group_pins(self.ctx, layer_norm_pins(self.ctx, plan))
            fp16 = () if written is None else [node for node in self.switch_model.switches
                                                if written.is_low(node) and node not in self.always_fp32]
            if any(written is not None and written.precision(n).value != self.low.precision for n in fp16):
                raise InternalError(f"a plan with nodes in another type than {self.low.name} runs on a "
                                    f"baked session (Emulator), not on the switch graph")
            vector = self.switch_model.switch_vector(fp16, written=plan is not None)
            vector.flags.writeable = False
            self._last = (plan, vector)
        return {self.switch_model.switch_input: self._last[1]}

    def run(self, plan: PrecisionPlan | None, feed: Feed, names: Sequence[str] | None = None,
            intermediates: bool | tuple[str, ...] = False) -> dict[str, np.ndarray]:
        """Outputs of ``plan`` on ``feed``: the graph outputs, plus every captured intermediate
        when ``intermediates`` is True or those of them it names, or exactly ``names``."""
        if names is None and isinstance(intermediates, tuple):
            exposed = set(self.intermediates)
            names = self.outputs + tuple(n for n in intermediates if n in exposed)
        elif names is None:
            names = self.outputs + (self.intermediates if intermediates else ())
        fp16_io = plan is not None and plan.fp16_io
        full = self.switch_feed(plan)
        for name, value in cast_feed(feed, self._dtypes).items():
            full[name] = self.fed_value(plan, name, value)
        # a plan whose rounding flipped a decision, so that shapes downstream no longer fit together, is a
        # failing candidate (blame.ShapesDiverged), not a fault of the emulation
        with named_stop(self._diagnose, plan, feed):
            values = cancel.run(self.session, list(names), full)
        self.probes_run += 1
        result = dict(zip(names, values))
        if fp16_io:
            for name in self.io.outputs.intersection(result):
                result[name] = self.low.round(result[name])
        return result

    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray:
        """The value a graph input has under ``plan`` (:meth:`FloatIO.fed`)."""
        return self.io.fed(plan, name, value, self.low)

    @property
    def low(self) -> LowPrecision:
        return self.ctx.target.low

    def twin(self, plan: PrecisionPlan | None, feed: Feed | None = None) -> None:
        """No twin graph: every tensor this session captures is compared in one chunk."""
        return None

    def chunks(self, feed: Feed | None = None) -> Chunks:
        return Chunks((), (), 0, whole=True)


class FloatIO:
    """The float32 graph inputs and outputs of a model: what a plan with FP16 graph I/O rounds."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.inputs = frozenset(vi.name for vi in model.graph.input
                                if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT)
        self.outputs = frozenset(vi.name for vi in model.graph.output
                                 if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT)

    def fed(self, plan: PrecisionPlan | None, name: str, value: np.ndarray, low: LowPrecision) -> np.ndarray:
        """The value graph input ``name`` has under ``plan`` (16-bit graph inputs hold values of
        the type ``low``)."""
        if plan is not None and plan.fp16_io and name in self.inputs:
            return low.round(value)
        return value


def as_fp32(ctx: ModelContext) -> onnx.ModelProto:
    """``ctx``'s model itself, or its emulation when it already holds FP16 tensors: onnxruntime's CPU
    kernels would compute those natively, so the reference and the probes would not be what FP16
    hardware computes, nor what emulating a written model computes. Made once per context."""
    return ctx.memo(_as_fp32)


def _as_fp32(ctx: ModelContext) -> onnx.ModelProto:
    if any(is_tensor(t) and t.tensor_type.elem_type in LOW_TYPES for t in ctx.types.values()):
        return emulate_model(ctx.model, ctx.base_dir)
    return ctx.model
