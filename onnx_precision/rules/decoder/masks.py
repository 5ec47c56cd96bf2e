"""The ``mask-sentinel`` rule: an additive mask's sentinel (float32's minimum, -1e9) that the 16-bit type
makes -inf on its way to a Softmax, and what it is written as instead (:func:`written_sentinel`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ...float_types import LowPrecision
from ...storage import read_array
from ...typing_rules import constant_tensor
from ..constants import MASK_MAGNITUDE
from ..facts import HIGH, OVERFLOW, Finding, ModelFacts, finding
from ..ops import RuleOutput
from ..registry import rule, skip
from .common import MOVES

# what an additive mask goes through on its way to the Softmax: broadcasts, sums, selections
_MASK_PATH = MOVES | {"Add", "Sub", "Mul", "Where", "Min", "Max", "Cast"}
MASK_REACH = 4  # ops from the sentinel's node to the Softmax it masks, at most
# A sentinel is written as this share of the 16-bit type's lowest finite value (-16376 in FP16): exp of it
# is 0 in every type, a score added to it stays finite up to |score| = 3/4 of the maximum, and the sum stays
# within the default headroom (max/2), so neither the headroom nor the range pins keep the mask's path FP32.
# The lowest value itself (-65504) makes every score below -16 -inf again, and on models/decoders' Llama
# both pins took the sentinel's Mul, the masked Adds and the Softmaxes (scores reach -65510 in FP32).
SENTINEL_SHARE = 0.25


def written_sentinel(low: LowPrecision) -> float:
    """What a mask sentinel is written as in ``low`` (:data:`SENTINEL_SHARE` of its lowest finite value)."""
    return -low.max * SENTINEL_SHARE


@dataclass(frozen=True)
class Sentinel:
    """A mask sentinel the 16-bit type makes -inf: the float ``constant`` that ``node`` reads (None: the
    node is a ConstantOfShape and the sentinel its value), its most negative ``value``, and the Softmax
    ``softmax`` its mask reaches."""

    node: str
    constant: str | None
    value: float
    softmax: str


def sentinels(facts: ModelFacts, node: onnx.NodeProto) -> list[Sentinel]:
    """The mask sentinels ``node`` reads (or is: a ConstantOfShape of one) that the 16-bit type makes
    -inf and whose mask reaches a Softmax."""
    sources: list[tuple[str | None, np.ndarray | None]]
    if node.op_type == "ConstantOfShape":
        value = constant_tensor(node)
        sources = [(None, read_array(value, facts.ctx.base_dir))] if value is not None else []
    else:
        sources = [(name, facts.constant(name)) for name in node.input if name and facts.is_float(name)]
    found = []
    for name, values in sources:
        if values is None or values.size == 0 or values.dtype.kind != "f" or not _sentinel(values, facts):
            continue
        softmax = _masked_softmax(facts, node.output[0])
        if softmax is not None:
            found.append(Sentinel(node.name, name, float(np.min(values)), softmax))
    return found


def _sentinel(values: np.ndarray, facts: ModelFacts) -> bool:
    """Mask values (some hugely negative, none hugely positive) of which the 16-bit type makes some -inf."""
    wide = values.astype(np.float32)
    return (bool(np.any(wide <= -MASK_MAGNITUDE)) and not bool(np.any(wide >= MASK_MAGNITUDE))
            and bool(np.any(np.isneginf(facts.low.round(wide)))))


def _masked_softmax(facts: ModelFacts, tensor: str) -> str | None:
    """The first Softmax ``tensor`` reaches through at most :data:`MASK_REACH` mask-building ops."""
    frontier, seen = [tensor], set()
    for _ in range(MASK_REACH):
        following: list[str] = []
        for name in frontier:
            for ref in facts.index.consumers.get(name, ()):
                if ref.node.op_type in ("Softmax", "LogSoftmax"):
                    return ref.name
                if ref.node.op_type in _MASK_PATH and ref.name not in seen:
                    seen.add(ref.name)
                    following.extend(o for o in ref.node.output if o)
        frontier = following
    return None


def sentinel_finding(facts: ModelFacts, node: onnx.NodeProto, found: Sentinel) -> Finding:
    """The ``mask-sentinel`` finding of one sentinel: what it is, what the type makes of it, what it is
    written as."""
    low, written = facts.low, written_sentinel(facts.low)
    what = f"constant '{found.constant}'" if found.constant else f"{node.op_type} value"
    return finding(node, "mask-sentinel", OVERFLOW, HIGH,
                   f"mask sentinel {found.value:.4g} ({what}) is -inf in {low.name} and reaches Softmax "
                   f"'{found.softmax}': a fully masked row (left padding) is NaN there; written as "
                   f"{written:.6g} ({SENTINEL_SHARE:g} of {low.name}'s lowest finite value: scores added to "
                   f"it stay finite) before pinning", True,
                   constant=found.constant or f"{node.op_type} value", value=found.value,
                   softmax=found.softmax, written_as=written)


@rule("Add", "Sub", "Mul", "Where", "Min", "Max", "ConstantOfShape")
def mask_sentinel(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An additive mask's sentinel that the 16-bit type makes -inf on its way to a Softmax."""
    found = sentinels(facts, node)
    if not found:
        yield skip(f"no mask value that {facts.low.name} makes -inf on its way to a Softmax")
    for sentinel in found:
        yield sentinel_finding(facts, node, sentinel)
