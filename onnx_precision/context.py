"""The model context: one loaded model and everything derived from it, computed once per run.

Every stage (analysis rules, the oracle, the search, the rewriter, the TensorRT flags, the report)
takes a :class:`ModelContext` instead of a model plus its base directory, types and typing as
loose arguments. Derived facts are computed on first use and kept: the value types (one shape
inference), the node typing (one set of kernel probes), the producers and consumers of every value
(:attr:`ModelContext.index`), each float constant's range (read once). Facts that stages above own
(what keeps each node from FP16, :mod:`onnx_precision.policy`; the FP32 model the oracle runs) are
kept by :meth:`ModelContext.memo`, so the context knows nothing of them.

Loading never pulls external data into memory (``load_external_data=False``), nor the large inline
weights of a big single-file model (:func:`storage.load_light`: they are read from the model file
as if it were their data file), but for the constants of its functions
(:func:`storage.external_data.inline_function_tensors`); external tensors are read on demand, relative to
:attr:`ModelContext.base_dir` (the model's own directory, whatever the working directory). The
model must not be changed while a context holds it: the rewriter writes into a copy. A model given
in memory (:func:`in_memory_context`) gets the same checks, on a copy.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, TypeVar

import onnx
from google.protobuf.message import DecodeError

from . import storage, typing_rules, user_files
from .errors import ModelLoadError
from .float_types import LOW_TYPES, LowPrecision
from .graph import GraphCycle, GraphIndex, NodeRef, name_nodes, sort_topologically, walk_nodes
from .plan import Precision, PrecisionPlan, Reason, uniform_plan
from .storage.light_load import Moved
from .target import GENERIC, Target
from .validation import validate_model

T = TypeVar("T")
# (model, path, base_dir) -> (the model to convert, notes): what a run does to a loaded model before its
# context is built (:func:`onnx_precision.opset_upgrade.for_run`: the opset raised for BF16)
Upgrade = Callable[[onnx.ModelProto, str, str], tuple[onnx.ModelProto, tuple[str, ...]]]


@dataclass(eq=False)
class ModelContext:
    """A model whose external data (if any) lives in files under ``base_dir``, with its derived facts."""

    model: onnx.ModelProto
    path: str
    base_dir: str
    renamed: tuple[tuple[str, str], ...] = ()  # (old name or "", new name) for each node the loader named
    # Shared libraries of custom-op kernels (--ort-custom-op-library): every onnxruntime session of
    # the model, or of a graph derived from it, registers them.
    custom_op_libraries: tuple[str, ...] = ()
    # Where the written model runs (--target): its 16-bit type, how it computes FP16 nodes, whose
    # kernels bind the plan.
    target: Target = GENERIC
    notes: tuple[str, ...] = ()  # what was done to the model as loaded (its opset raised for BF16)
    # float64 compute stays float64 (--keep-float64); by default it converts as float32 compute does
    keep_float64: bool = False

    @staticmethod
    def of(model: onnx.ModelProto, base_dir: str = ".", path: str = "",
           custom_op_libraries: tuple[str, ...] = ()) -> ModelContext:
        """A context for an in-memory model (sorted and named in place, as :func:`load_model` does)."""
        sort_topologically(model.graph)
        renamed = name_nodes(model)
        return ModelContext(model, path, os.path.abspath(base_dir), tuple(renamed), custom_op_libraries)

    @cached_property
    def nodes(self) -> tuple[NodeRef, ...]:
        """Every node, subgraphs included, owners before their bodies."""
        return tuple(walk_nodes(self.model.graph))

    @cached_property
    def index(self) -> GraphIndex:
        """Producers and consumers of every value (:class:`GraphIndex`)."""
        return GraphIndex.of(self.nodes)

    @cached_property
    def node_ops(self) -> dict[str, str]:
        """Node name -> op type, in :attr:`nodes` order."""
        return {ref.name: ref.node.op_type for ref in self.nodes}

    @cached_property
    def types(self) -> dict[str, onnx.TypeProto]:
        """Every value's type (:func:`typing_rules.tensor_types`)."""
        return typing_rules.tensor_types(self.model)

    @property
    def typing(self) -> dict[str, typing_rules.NodeTyping]:
        """Every node's typing in the target's 16-bit type (:meth:`typing_in`)."""
        return self.typing_in(self.target.low)

    def typing_in(self, low: LowPrecision) -> dict[str, typing_rules.NodeTyping]:
        """Every node's typing in ``low`` (:func:`typing_rules.model_typing`), computed once: the
        schemas' answer, onnxruntime's CPU kernels asked where the target runs on them, and the
        target's own kernels (:meth:`.Target.kernel_blocker`) where it runs elsewhere."""
        if low.elem_type not in self._typings:
            typing = typing_rules.model_typing(self.model, self.types, self.target.onnxruntime_kernels(low),
                                               low, self.wide_types)
            opsets = typing_rules.opset_map(self.model)
            for ref in self.nodes:
                t = typing[ref.name]
                domain = "" if ref.node.domain == "ai.onnx" else ref.node.domain
                blocker = None if t.low_blocker or not t.has_float else self.target.kernel_blocker(
                    ref.node, low, opsets.get(domain, 0))
                if blocker:
                    typing[ref.name] = replace(t, low_blocker=blocker)
            self._typings[low.elem_type] = typing
        return self._typings[low.elem_type]

    @property
    def wide_types(self) -> tuple[int, ...]:
        """The element types a 16-bit node converts (:data:`typing_rules.WIDE`, float64 left out
        under ``keep_float64``)."""
        return (typing_rules.FLOAT,) if self.keep_float64 else typing_rules.WIDE

    @cached_property
    def _typings(self) -> dict[int, dict[str, typing_rules.NodeTyping]]:
        return {}

    @cached_property
    def nothing_to_convert(self) -> str:
        """Why no node of the model computes in float32, or "" when some do."""
        if any(t.has_float for t in self.typing.values()):
            return ""
        if any(typing_rules.elem_type(t) in LOW_TYPES for t in self.types.values()):
            already = " or ".join(low.name for low in LOW_TYPES.values())
            return f"the model computes nothing in float32 (already {already}?)"
        if self.keep_float64:
            return "the model has no float32 tensors (float64 stays float64 under --keep-float64; integer " \
                   "and other tensors stay as they are)"
        return "the model has no float32 or float64 tensors (integer and other tensors stay as they are)"

    @cached_property
    def constants(self) -> dict[str, onnx.TensorProto]:
        """Tensor name -> value of every initializer and Constant output, subgraphs included."""
        return typing_rules.constant_values(self.model)

    @cached_property
    def mapped_weights(self) -> weakref.WeakValueDictionary:
        """Memory maps of external weights, shared by the onnxruntime sessions alive at once (a map
        goes with the last session that holds it: the context outlives them all)."""
        return weakref.WeakValueDictionary()

    @cached_property
    def _ranges(self) -> dict[str, tuple[float, float]]:
        return {}

    def constant_range(self, name: str) -> tuple[float, float] | None:
        """(max |x|, smallest nonzero |x|) of a float32 (or converting float64) constant, read once
        (in chunks) per run; None for anything else."""
        tensor = self.constants.get(name)
        if tensor is None or tensor.data_type not in self.wide_types:
            return None
        if name not in self._ranges:
            self._ranges[name] = storage.value_range(tensor, self.base_dir)
        return self._ranges[name]

    def all_low_plan(self, reason: Reason | None = None, fp16_io: bool = False) -> PrecisionPlan:
        """Every node in the target's 16-bit type, with ``reason`` (by default "all FP16")."""
        low = self.target.low
        reason = Reason("default", f"all {low.name}") if reason is None else reason
        return uniform_plan(self.node_ops, Precision(low.precision), reason, fp16_io=fp16_io)

    def memo(self, compute: Callable[[ModelContext], T]) -> T:
        """``compute(self)``, computed once per context: the derived facts that stages above the
        context own (what blocks FP16, the FP32 model the oracle runs) are kept here, keyed by the
        function that computes them."""
        if compute not in self._memo:
            self._memo[compute] = compute(self)
        return self._memo[compute]

    @cached_property
    def _memo(self) -> dict[Callable, Any]:
        return {}


def load_model(path: str, custom_op_libraries: tuple[str, ...] = (), target: Target = GENERIC,
               upgrade: Upgrade | None = None) -> ModelContext:
    """Load ``path`` (external data left on disk), check it is a valid ONNX model whose external
    data stays in its directory (:func:`onnx_precision.validation.validate_model`), apply ``upgrade``
    to it, and name its nodes."""
    model, moved = read_model_file(path)
    # A symlinked model reads its data beside the file it points to, as onnxruntime does.
    base_dir = os.path.dirname(os.path.realpath(path))
    storage.external_data.refuse_private_keys(model, path)
    storage.point_into_model_file(model, moved, os.path.basename(os.path.realpath(path)))
    return _checked_context(model, path, base_dir, custom_op_libraries, target, upgrade)


def read_written(path: str) -> tuple[onnx.ModelProto, str]:
    """A model file this run wrote and checked (:func:`.convert.written_check.check_written`), read
    back for a run of it: not checked again, and its inline weights of
    :data:`.storage.external_data.INLINE_EXTERNAL_BYTES` or more left in the file, whatever its size
    (read from there by reference, :mod:`.oracle.weights`); and the folder its external data is read
    from. On the 26 MB dynamic-quant model of scripts/bench_quantized.py the checks were 69 MB over the
    read itself."""
    model, moved = read_model_file(path, light_from=0)
    storage.point_into_model_file(model, moved, os.path.basename(os.path.realpath(path)))
    return model, os.path.dirname(os.path.realpath(path))


def read_model_file(path: str, light_from: int | None = None) -> tuple[onnx.ModelProto, Moved]:
    """The model file ``path`` with its weights left on disk (external data unread, large inline
    weights of a file of ``light_from`` bytes or more located by :func:`storage.load_light`, for
    :func:`storage.point_into_model_file`; None: its default), once it is a regular file that parses;
    else a one-line :class:`ModelLoadError`."""
    user_files.regular_file(path, user_files.MODEL)
    try:
        light = storage.load_light(path, light_from)
        return light if light is not None else (onnx.load(path, load_external_data=False), [])
    except DecodeError as e:
        graphs = storage.light_load.graphs_past_depth_limit(path)
        if graphs is not None:  # a valid file, but onnx cannot parse it
            raise ModelLoadError(
                f"{path}: its subgraphs nest {graphs - 1} deep (If, Loop or Scan bodies within bodies), past "
                f"protobuf's recursion limit of {storage.light_load.PROTOBUF_DEPTH_LIMIT} nested messages: "
                f"onnx cannot parse it") from e
        raise ModelLoadError(
            f"{path}: not an ONNX model (protobuf does not parse; truncated or another format)"
        ) from e
    except PermissionError:
        raise ModelLoadError(f"{path}: permission denied") from None
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path}: cannot load: {e}") from e
    except MemoryError:
        raise ModelLoadError(f"{path}: no memory to load it") from None


def _check_opset_takes(low: LowPrecision, model: onnx.ModelProto, path: str) -> None:
    """A model whose opset has no Cast to ``low`` can neither be emulated nor written in it (Cast and
    most ops take bfloat16 from opset 13); raising the opset would change other ops' meaning, so
    that is the user's step, with onnx's own converter."""
    opset = typing_rules.opset_map(model).get("")
    if opset is not None and opset < low.cast_opset:
        raise ModelLoadError(
            f"{path}: {low.name} needs ai.onnx opset {low.cast_opset} or later (Cast takes {low.type_name} "
            f"from opset {low.cast_opset}) and the model imports opset {opset}; convert it first with "
            f"onnx.version_converter.convert_version(model, {low.cast_opset}), or use --low-precision fp16")


IN_MEMORY = "<in-memory model>"  # what messages and reports call a model given as a ModelProto


def in_memory_context(model: onnx.ModelProto, base_dir: str | None = None,
                      custom_op_libraries: tuple[str, ...] = (), target: Target = GENERIC,
                      upgrade: Upgrade | None = None) -> ModelContext:
    """A context for an in-memory ``model``, checked as :func:`load_model` checks a file; ``model``
    itself is left as it is (the context holds a copy).

    A model whose tensors keep their data in files (``onnx.load(path, load_external_data=False)``)
    needs ``base_dir``, the directory those files' locations are relative to (the model file's);
    a model holding its weights needs none.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    storage.external_data.refuse_private_keys(copy, IN_MEMORY)
    if base_dir is None:
        external = next((t for t in storage.external_data.all_tensors(copy) if storage.is_external(t)), None)
        if external is not None:
            location = storage.external_location(external)
            raise ModelLoadError(f"{IN_MEMORY}: tensor '{external.name}' keeps its data in '{location}', a "
                                 f"file relative to the model's directory: give base_dir (the model file's "
                                 f"directory), or pass the model's path")
    return _checked_context(copy, IN_MEMORY, os.path.abspath(base_dir or "."), custom_op_libraries, target,
                            upgrade)


def _checked_context(model: onnx.ModelProto, path: str, base_dir: str, custom_op_libraries: tuple[str, ...],
                     target: Target, upgrade: Upgrade | None = None) -> ModelContext:
    """The context of ``model``, sorted and its nodes named, once it is a valid ONNX model whose
    external data stays in ``base_dir`` (then ``upgrade`` gives the model to convert and its notes);
    ``path`` names it in messages."""
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{path}: not an ONNX model (no graph)")
    try:
        sort_topologically(model.graph)
    except GraphCycle as e:
        raise ModelLoadError(f"{path}: {e}") from e
    storage.check_model_external_data(model, base_dir, path)
    storage.external_data.inline_function_tensors(model, base_dir)
    validate_model(model, path, base_dir)
    for library in custom_op_libraries:
        if not os.path.isfile(library):
            raise ModelLoadError(f"--ort-custom-op-library {library}: no such file")
    model, notes = upgrade(model, path, base_dir) if upgrade is not None else (model, ())
    for low in (target.low, target.fallback):
        if low is not None:
            _check_opset_takes(low, model, path)
    return ModelContext(model, path, base_dir, tuple(name_nodes(model)), tuple(custom_op_libraries), target,
                        notes)
