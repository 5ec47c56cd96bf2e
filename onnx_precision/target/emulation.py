"""One job of a target: how its 16-bit nodes are spelled in an FP32 graph, so that the emulation computes
what the runtime computes.

A target's facts (:mod:`.base`) say what the runtime computes how; its :class:`Emulation` turns them into
graph nodes: a :class:`Spelling` per model, node by node (one op, the runtime's layers, a sum with its
overflow check). What a run's samples showed of those sums (:class:`Measured`: the sums proven in range,
the LayerNormalizations pre-scaled) is not the target's: it is measured once per run, held by the run's
basis (:mod:`onnx_precision.basis`), and handed to every spelling of that run, so that the search's
graphs and the written model's verification spell the same nodes alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import onnx

from ..float_types import FP16, LowPrecision

Fresh = Callable[[str], str]  # a fresh value/node name from a base name


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


@dataclass(frozen=True)
class Measured:
    """What one run's samples showed of the target's 16-bit sums, measured before any plan: the nodes whose
    FP16 sums the samples prove in range, spelled without their overflow check
    (:func:`.accumulation.proven_sums`), and the LayerNormalizations written as ``LayerNormalization(x·2^-j,
    epsilon·2^-2j)``, (name, j), so that their FP16 statistics stay in range
    (:func:`onnx_precision.policy.layer_norm_prescales`). A target that sums nothing in FP16 ignores it."""

    proven: frozenset[str] = frozenset()
    prescaled: tuple[tuple[str, int], ...] = ()


UNMEASURED = Measured()  # no proof: every sum checked (held-out samples, a model measured by no run)


class Emulation(ABC):
    """How a target's 16-bit nodes are spelled for the emulation (its facts bound at construction)."""

    @abstractmethod
    def spelling(self, model: onnx.ModelProto, base_dir: str, types: Mapping[str, onnx.TypeProto] | None,
                 fresh: Fresh, measured: Measured = UNMEASURED) -> Spelling:
        """How ``model``'s FP16 nodes compute (``types``: every value's type, or None to infer them when
        needed), given what the run measured (``measured``)."""
