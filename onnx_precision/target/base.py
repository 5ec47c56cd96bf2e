"""What a target is: where the written model runs, as one value the model context carries.

A :class:`Target` owns the facts that differ between runtimes: the low-precision type and its
limits, how an FP16 node is spelled for the emulation (one op, or the runtime's layers), which
nodes it runs in 16 bits (whose kernels a plan must respect), how its reports name it, and the
flags exporter. Stages ask the target; nothing outside this package asks which target it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Literal, Protocol

import onnx

from ..float_types import FP16, LOW_PRECISIONS, LowPrecision
from ..graph import walk_nodes
from ..plan import PrecisionPlan
from ..suggested import RunArgs, quoted

Fresh = Callable[[str], str]  # a fresh value/node name from a base name
Accumulation = Literal["fp32", "fp16"]  # the type a kernel keeps its running sums in


class LoadedModel(Protocol):
    """What the flags exporter reads of a loaded model (a model context)."""

    @property
    def model(self) -> onnx.ModelProto: ...
    @property
    def path(self) -> str: ...
    @property
    def renamed(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def types(self) -> Mapping[str, onnx.TypeProto]: ...


class Spelling(ABC):
    """How one model's FP16 nodes compute on a target, node by node."""

    @abstractmethod
    def spell(self, node: onnx.NodeProto, low: LowPrecision = FP16) -> list[onnx.NodeProto]:
        """The nodes that compute ``node`` in ``low`` (inputs already rounded; outputs rounded by the
        caller)."""

    @abstractmethod
    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        """The computing layers the target builds for ``node`` (one entry: it is not split)."""


class OneOp(Spelling):
    """Every op computes internally in FP32 and rounds its outputs: a node is itself."""

    def spell(self, node: onnx.NodeProto, low: LowPrecision = FP16) -> list[onnx.NodeProto]:
        return [node]

    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        return [node.op_type]


class Target(ABC):
    """Where the written model runs (see the module docstring); ``low`` is its 16-bit type."""

    low: LowPrecision
    fallback: LowPrecision | None  # tried before FP32 for what fails in ``low`` (--fallback bf16)

    @property
    @abstractmethod
    def name(self) -> str:
        """As results record it: "generic" or "tensorrt X.Y"."""

    @property
    @abstractmethod
    def title(self) -> str:
        """As a sentence names it: "generic", "TensorRT X.Y"."""

    @abstractmethod
    def onnxruntime_kernels(self, low: LowPrecision) -> bool:
        """Whether the written model must run on onnxruntime's CPU provider as written in ``low``:
        then a node onnxruntime has no kernel for in that type stays FP32, and a written model that
        onnxruntime cannot load at its default options fails the run. A target that runs elsewhere
        is not held to it."""

    def kernel_blocker(self, node: onnx.NodeProto, low: LowPrecision, opset: int) -> str | None:
        """Why the target has no kernel for ``node`` in ``low`` (then it stays FP32), where that is
        a fact of the target rather than of onnxruntime's CPU provider (``opset``: the node's
        domain's opset); None when it has one."""
        return None

    @property
    def proven(self) -> frozenset[str]:
        """The FP16 sums proven within range on the samples (:meth:`proving`): none by default."""
        return frozenset()

    def proving(self, nodes: frozenset[str]) -> Target:
        """This target with the FP16 sums of ``nodes`` proven within the 16-bit range on the samples, spelled
        without their overflow check (:func:`.accumulation.proven_sums`); one that sums nothing in FP16 is
        itself."""
        return self

    @property
    def prescaled(self) -> tuple[tuple[str, int], ...]:
        """The LayerNormalizations written as ``LayerNormalization(x·2^-j, epsilon·2^-2j)`` (name, j) so that
        their FP16 statistics stay in range on the samples (:meth:`prescaling`): none by default."""
        return ()

    def prescaling(self, shifts: tuple[tuple[str, int], ...]) -> Target:
        """This target with the LayerNormalizations ``shifts`` names pre-scaled by 2^-j
        (:func:`onnx_precision.policy.layer_norm_prescales`); one whose statistics sum in FP32 is itself."""
        return self

    @abstractmethod
    def spelling(self, model: onnx.ModelProto, base_dir: str,
                 types: Mapping[str, onnx.TypeProto] | None, fresh: Fresh) -> Spelling:
        """How ``model``'s FP16 nodes compute here (``types``: every value's type, or None to infer
        them when needed)."""

    @property
    def accumulation(self) -> Mapping[str, Accumulation]:
        """How each op kind's kernel accumulates here, by op type; an op kind left out keeps its sums in
        FP32 (or sums nothing). An "fp16" op kind is emulated with the overflow of its sums
        (:mod:`.accumulation`)."""
        return {}

    @property
    def counts_in_low(self) -> frozenset[str]:
        """The op kinds (means) whose kernel divides its sum by the number of terms converted to the
        16-bit type: from 65520 terms that count is inf in FP16 and the mean 0 (:mod:`.accumulation`)."""
        return frozenset()

    @property
    def quantizes_by_reciprocal(self) -> bool:
        """Whether a 16-bit QuantizeLinear multiplies by ``1/scale`` held in the 16-bit type (then a scale
        below 1/65504 gives inf, and 0 * inf = NaN) rather than dividing by the scale, its quotient
        stored in the 16-bit type (onnxruntime's CUDA kernels); see :mod:`..oracle.qdq_spelling`."""
        return False

    @property
    def normalizes_in_input_precision(self) -> bool:
        """Whether a normalisation (LayerNormalization) fed FP16 computes its statistics in FP16 here,
        whatever its ``stash_type`` says (then statistics FP16 cannot hold need it fed FP32)."""
        return False

    def cli_args(self) -> list[str]:
        """The options that select this target in a suggested command (``--target``, ``--low-precision``;
        at their defaults left out)."""
        return ["--low-precision", self.low.precision] if self.low is not FP16 else []

    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        """What to do with the written ``model`` on this target, as one command line that runs when
        pasted, its shell comment saying what it does: here the check on the GPU, judged as the run
        judged."""
        types = "/".join(low.name for low in written_lows(model)) or self.low.name
        provider = {"cuda": "CUDA", "tensorrt": "TensorRT"}[run.native_oracle]
        return (f"{quoted(run.check_args(self.cli_args(), run.native_oracle))}  # checks it on the GPU "
                f"(onnxruntime-gpu's {provider} provider) as this run judged it; any {types} runtime runs it")

    def stored_in_layers(self, op_type: str) -> str:
        """Where an op's internal values are stored in the low precision between layers (a phrase
        for a rule's message), or "" where the op computes internally in FP32."""
        return ""

    def flags_text(self, model: LoadedModel, plan: PrecisionPlan, run: RunArgs) -> str:
        """The ``--trt-flags`` file: TensorRT's flags for the plan, per release, whatever the target
        the plan was measured on (a generic plan is also a TensorRT user's starting point), and the
        lines that check an engine as ``run`` judged the model."""
        from ..trt.flags import trt_flags_text

        return trt_flags_text(model.model, plan, run, self.cli_args(), renamed=model.renamed,
                              types=model.types)

    def __str__(self) -> str:
        return self.name


def written_lows(model: onnx.ModelProto) -> list[LowPrecision]:
    """The 16-bit types a written model holds tensors in (what a runtime must run it in): those its Casts
    write, its initializers and its I/O are in. A --fallback bf16 run whose plan put no node in BF16
    writes FP16 alone."""
    elems = {init.data_type for init in model.graph.initializer}
    elems |= {vi.type.tensor_type.elem_type for vi in (*model.graph.input, *model.graph.output)}
    elems |= {a.i for ref in walk_nodes(model.graph) if ref.node.op_type == "Cast"
              for a in ref.node.attribute if a.name == "to"}
    return [low for low in LOW_PRECISIONS.values() if low.elem_type in elems]
