"""Oracle sessions: run a precision plan (or a written model) and see what FP16 does to it.

* ``emulate`` (the default, and the search's oracle): :class:`EmulationSession` builds ONE
  onnxruntime CPU session of the switch graph (see :mod:`.switch`); the FP32
  reference, every plan probe and the layerwise run are runs of it with different switches.
  :func:`run_emulated` runs any written FP16/mixed model the same way (:func:`.written.emulate_model`).
* ``native:<provider>``: :func:`run_native` runs the real model on a provider. On the CPU
  provider this HIDES overflow (it computes FP16 nodes in FP32), so it warns.
* ``reference``: :func:`run_reference` runs the real model in ``onnx.reference`` (numpy FP16
  arithmetic throughout, slow and pessimistic).

A plan is fed as one boolean vector (:meth:`SwitchModel.switch_vector`); nodes the resolved plan
keeps FP32 whatever the plan get no switch.

Sessions use ``ORT_DISABLE_ALL``: the switch graph puts every node in its own If branch, so no
fusion could apply to it anyway, and disabling them in every session of the oracle makes "all
switches off" bit-identical to the FP32 model run by :func:`run_fp32` and a plan bit-identical to
the emulation of the model the rewriter writes for it. (No level folds the Cast pairs away, not
even ``ORT_ENABLE_ALL``; a test keeps that true.)

Every function takes a :class:`~onnx_precision.context.ModelContext`: external data is read
relative to the model's own directory, whatever the working directory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from ..context import ModelContext
from ..errors import ModelLoadError
from ..plan import PrecisionPlan
from ..policy import forced_fp32
from ..storage import external_location, inline_small_external, is_external, model_tensors, read_array
from ..typing_rules import is_tensor
from .baked import build_baked_model
from .rounding import round_fp16
from .switch import build_switch_model
from .switch_graph import SwitchModel
from .weights import by_reference, weighted_session
from .written import emulate_model

log = logging.getLogger(__name__)

EMULATE = "emulate"
REFERENCE = "reference"

Feed = Mapping[str, np.ndarray]


def native_oracle(provider: str) -> str:
    return f"native:{provider}"


def session_options(threads: int | None = None) -> ort.SessionOptions:
    """The oracle's session options; ``threads`` caps onnxruntime's intra-op threads (None: all)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Prepacking copies every constant weight into a kernel layout, also those of If branches,
    # while the FP16 branches still read the original: the weights would be held twice (measured
    # on the 2.2 GB MatMul chain: 4.3 GB peak with it, 2.4 GB without, same run time).
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Fatal only: a failing run is raised as an exception, which says the same (see .blame), and a
    # user mistake must stay one line on stderr.
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    return options


def make_session(model: onnx.ModelProto, base_dir: str,
                 providers: Sequence[str] = ("CPUExecutionProvider",),
                 options: ort.SessionOptions | None = None,
                 custom_op_libraries: Sequence[str] = (), shared: MutableMapping | None = None,
                 ) -> ort.InferenceSession:
    """An onnxruntime session of an in-memory model whose external data (if any) is under base_dir,
    with the kernels of ``custom_op_libraries`` registered (a model context's, see
    :attr:`ModelContext.custom_op_libraries`)."""
    options = options or session_options()
    register_libraries(options, custom_op_libraries)
    options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                     os.path.abspath(base_dir))
    light, values = by_reference(model, base_dir, shared)
    if any(external_location(t) is not None for t in model_tensors(light)):
        if light is model:
            light = onnx.ModelProto()
            light.CopyFrom(model)  # cheap: external weights are not in the proto
        inline_small_external(light, base_dir)
    return weighted_session(light.SerializeToString(), options, list(providers), values)


def register_libraries(options: ort.SessionOptions, libraries: Sequence[str]) -> None:
    """Register each custom-op library on ``options``; one onnxruntime refuses is the user's mistake."""
    for library in libraries:
        try:
            options.register_custom_ops_library(os.path.abspath(library))
        except Exception as e:  # onnxruntime's own exception types: the library cannot be loaded
            raise ModelLoadError(f"--ort-custom-op-library {library}: onnxruntime cannot load it: "
                                 f"{ort_message(e)}") from e


def ort_message(e: BaseException) -> str:
    """The first line of an onnxruntime error, without its error-code and source-location prefixes."""
    return ort_text(str(e)) or type(e).__name__


def ort_text(text: str) -> str:
    """The first line of an onnxruntime message, without its error-code and source-location prefixes."""
    text = text.strip()
    line = text.splitlines()[0] if text else ""
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    return re.sub(r"^\S+\.(?:cc|h|cpp):\d+ \S+?\(.*?\) (?=\S)", "", line)


@dataclass(frozen=True)
class OracleRun:
    """Outputs of one oracle over several samples (one dict per sample)."""

    oracle: str
    outputs: tuple[dict[str, np.ndarray], ...]


class EmulationSession:
    """ONE onnxruntime CPU session that evaluates any precision plan of ``model`` by emulation.

    ``run(None, feed)`` is the FP32 model (bit-identical); ``run(plan, feed)`` rounds every tensor
    the plan makes FP16. ``sessions_built`` and ``probes_run`` count the work for reports.

    ``capture_intermediates`` (True, False or tensor names, see
    :func:`onnx_precision.emulation.build_switch_model`) decides which main-graph tensors
    ``run(..., intermediates=True)`` returns; a capturing session holds them all during each run
    (fetched or not), and its probes cost ~10-20% more than a session without capture
    (scripts/bench_oracle.py), so a search with many probes may prefer a second session built
    with ``capture_intermediates=False``. A model that already holds FP16 tensors is emulated
    first (:func:`as_fp32`). The nodes every resolved plan keeps FP32
    (:func:`onnx_precision.policy.forced_fp32`) get no switch: one that would never be turned on only
    costs an If. ``threads`` caps onnxruntime's intra-op threads. ``group_size`` is
    :func:`.switch.build_switch_model`'s: groups make each probe cheaper and the session slower
    to build, so a caller with only a couple of runs (``analyze``) passes 1. ``baked`` (the FP16
    nodes of one plan) builds :func:`.baked.build_baked_model` instead: no switch, no If, every run
    is that plan whatever ``run`` is given (see :class:`.plans.Emulator`).
    """

    def __init__(self, ctx: ModelContext, capture_intermediates: bool | Iterable[str] = True,
                 threads: int | None = None, group_size: int | None = None,
                 baked: frozenset[str] | None = None) -> None:
        self.ctx = ctx
        self.model = model = ctx.model
        base_dir = ctx.base_dir
        self.typing = ctx.typing
        fp32 = as_fp32(ctx)
        self.forced_fp32 = forced_fp32(ctx)
        types = None if fp32 is not model else ctx.types
        self.switch_model: SwitchModel = (
            build_switch_model(fp32, self.typing, base_dir, capture_intermediates, types,
                               fixed=self.forced_fp32, group_size=group_size, target=ctx.target)
            if baked is None else
            build_baked_model(fp32, self.typing, base_dir, baked, capture_intermediates, types,
                              fixed=self.forced_fp32, target=ctx.target))
        self.session = make_session(self.switch_model.model, base_dir, options=session_options(threads),
                                    custom_op_libraries=ctx.custom_op_libraries, shared=ctx.mapped_weights)
        self.sessions_built = 1
        self.probes_run = 0
        self._last: tuple[PrecisionPlan | None, np.ndarray] | None = None
        self._dtypes = input_dtypes(self.switch_model.model)
        self._float_inputs = {vi.name for vi in model.graph.input
                              if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
        self._float_outputs = {vi.name for vi in model.graph.output
                               if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}

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
        return frozenset(self.switch_model.switches) - self.forced_fp32

    def switch_feed(self, plan: PrecisionPlan | None) -> dict[str, np.ndarray]:
        if not self.switch_model.switch_input:
            return {}
        # A probe runs one plan on each sample in turn: its (read-only) vector is kept.
        if self._last is None or self._last[0] is not plan:
            fp16 = () if plan is None else [node for node in self.switch_model.switches
                                             if plan.is_fp16(node) and node not in self.forced_fp32]
            vector = self.switch_model.switch_vector(fp16)
            vector.flags.writeable = False
            self._last = (plan, vector)
        return {self.switch_model.switch_input: self._last[1]}

    def run(self, plan: PrecisionPlan | None, feed: Feed, names: Sequence[str] | None = None,
            intermediates: bool = False) -> dict[str, np.ndarray]:
        """Outputs of ``plan`` on ``feed``: the graph outputs, plus every captured intermediate
        when ``intermediates`` is set, or exactly ``names``."""
        if names is None:
            names = self.outputs + (self.intermediates if intermediates else ())
        fp16_io = plan is not None and plan.fp16_io
        full = self.switch_feed(plan)
        for name, value in cast_feed(feed, self._dtypes).items():
            full[name] = self.fed_value(plan, name, value)
        values = self.session.run(list(names), full)
        self.probes_run += 1
        result = dict(zip(names, values))
        if fp16_io:
            for name in self._float_outputs.intersection(result):
                result[name] = round_fp16(result[name])
        return result

    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray:
        """The value a graph input has under ``plan`` (FP16 graph inputs hold FP16 values)."""
        if plan is not None and plan.fp16_io and name in self._float_inputs:
            return round_fp16(value)
        return value


# --- other oracles --------------------------------------------------------------------------------

def input_dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            for vi in model.graph.input if vi.name not in inits and vi.type.tensor_type.elem_type}


def cast_feed(feed: Feed, dtypes: Mapping[str, np.dtype]) -> dict[str, np.ndarray]:
    return {k: (np.asarray(v, dtype=dtypes[k]) if k in dtypes else v) for k, v in feed.items()}


def owned(value: np.ndarray) -> np.ndarray:
    """A copy of a value onnxruntime returned, to be kept after its session: the array it returns
    may live in the session's memory arena and keep all of it (measured on the decoder at seq
    1024: a 0.12 GB output held 0.8 GB after its session was gone)."""
    return np.array(value, copy=True)


def run_session(session: ort.InferenceSession, model: onnx.ModelProto, feeds: Sequence[Feed]
                 ) -> tuple[dict[str, np.ndarray], ...]:
    """The graph outputs per feed, owned by the caller (they outlive the session)."""
    dtypes = input_dtypes(model)
    names = [o.name for o in model.graph.output]
    return tuple({n: owned(v) for n, v in zip(names, session.run(names, cast_feed(f, dtypes)))}
                 for f in feeds)


def as_fp32(ctx: ModelContext) -> onnx.ModelProto:
    """``ctx``'s model itself, or its emulation when it already holds FP16 tensors: onnxruntime's CPU
    kernels would compute those natively, so the reference and the probes would not be what FP16
    hardware computes, nor what emulating a written model computes."""
    if any(is_tensor(t) and t.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for t in ctx.types.values()):
        return emulate_model(ctx.model, ctx.base_dir)
    return ctx.model


def run_fp32(ctx: ModelContext, feeds: Sequence[Feed]) -> OracleRun:
    """The FP32 model as the oracle runs it (same session options as the switch graph; FP16
    tensors it already holds emulated, see :func:`as_fp32`)."""
    fp32 = as_fp32(ctx)
    session = make_session(fp32, ctx.base_dir, custom_op_libraries=ctx.custom_op_libraries,
                           shared=ctx.mapped_weights)
    return OracleRun("fp32", run_session(session, fp32, feeds))


def run_emulated(ctx: ModelContext, feeds: Sequence[Feed]) -> OracleRun:
    """A written FP16/mixed model, emulated on CPU (every FP16 tensor rounded)."""
    emulated = emulate_model(ctx.model, ctx.base_dir, ctx.target)
    session = make_session(emulated, ctx.base_dir, custom_op_libraries=ctx.custom_op_libraries,
                           shared=ctx.mapped_weights)
    return OracleRun(EMULATE, run_session(session, emulated, feeds))


def run_native(ctx: ModelContext, feeds: Sequence[Feed], provider: str = "CPUExecutionProvider") -> OracleRun:
    """The real model on ``provider``. On CPU, FP16 nodes are computed in FP32: overflow is hidden."""
    if provider == "CPUExecutionProvider":
        log.warning("native oracle on CPUExecutionProvider: onnxruntime computes FP16 nodes in FP32 "
                    "on CPU and hides FP16 overflow; use the emulate oracle to see it")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    session = make_session(ctx.model, ctx.base_dir, providers=[provider], options=options,
                           custom_op_libraries=ctx.custom_op_libraries)
    return OracleRun(native_oracle(provider), run_session(session, ctx.model, feeds))


def run_reference(ctx: ModelContext, feeds: Sequence[Feed]) -> OracleRun:
    """The real model in onnx.reference.ReferenceEvaluator: numpy FP16 arithmetic inside every op,
    the pessimistic bound (GPU kernels accumulate in FP32).

    Known limits: it is slow (numpy, op by op); some ops compute internally in FP32 or FP64 there
    too (BatchNormalization's statistics, reductions numpy upcasts), so it is not pessimistic
    everywhere; it needs the weights in memory (fine for models well under the machine's memory)."""
    from onnx.reference import ReferenceEvaluator
    model = ctx.model
    if any(is_external(t) for t in model_tensors(model)):
        model = onnx.ModelProto()
        model.CopyFrom(ctx.model)
        for tensor in model_tensors(model):
            if is_external(tensor):
                tensor.CopyFrom(onnx.numpy_helper.from_array(np.array(read_array(tensor, ctx.base_dir)),
                                                             tensor.name))
    evaluator = ReferenceEvaluator(model)
    dtypes = input_dtypes(model)
    names = [o.name for o in model.graph.output]
    outs = []
    for feed in feeds:
        with np.errstate(all="ignore"):
            values = evaluator.run(None, cast_feed(feed, dtypes))
        outs.append(dict(zip(names, (np.asarray(v) for v in values))))
    return OracleRun(REFERENCE, tuple(outs))
