"""What a target is: where the written model runs, as one value the model context carries: its facts.

A :class:`Target` owns the facts that differ between runtimes: the low-precision type and its limits,
which nodes it runs in 16 bits (whose kernels a plan must respect), how each op kind accumulates, and
how its reports name it. Its other jobs are values of their own, which it hands out: how its 16-bit
nodes are spelled for the emulation (:attr:`Target.emulation`, :mod:`.emulation`) and what the user is
told to run (:attr:`Target.commands`, :mod:`.commands`). What a run's samples showed of it (the sums
proven in range) is the run's, not the target's (:class:`.emulation.Measured`). Stages ask the target;
nothing outside this package asks which target it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Literal

import onnx

from ..float_types import LowPrecision
from .commands import Commands
from .emulation import Emulation

Accumulation = Literal["fp32", "fp16"]  # the type a kernel keeps its running sums in


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
        stored in the 16-bit type (onnxruntime's CUDA kernels); see :mod:`.quantize`."""
        return False

    @property
    def normalizes_in_input_precision(self) -> bool:
        """Whether a normalisation (LayerNormalization) fed FP16 computes its statistics in FP16 here,
        whatever its ``stash_type`` says (then statistics FP16 cannot hold need it fed FP32)."""
        return False

    def stored_in_layers(self, op_type: str) -> str:
        """Where an op's internal values are stored in the low precision between layers (a phrase
        for a rule's message), or "" where the op computes internally in FP32."""
        return ""

    @property
    @abstractmethod
    def emulation(self) -> Emulation:
        """How its 16-bit nodes are spelled in an FP32 graph, for the emulation (:mod:`.emulation`)."""

    @property
    def commands(self) -> Commands:
        """What the user is told of it as command lines (:mod:`.commands`): by default a runtime whose
        kernels onnxruntime's CUDA provider has, checked there."""
        return Commands(self.low)

    def __str__(self) -> str:
        return self.name

