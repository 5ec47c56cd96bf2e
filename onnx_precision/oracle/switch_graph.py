"""The switch graph as a value: the model one emulation session runs, and how to drive it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..graph import onnx_opset
from ..typing_rules import WIDE
from .rounding import Names


@dataclass(frozen=True)
class SwitchGroup:
    """Consecutive switched nodes of one graph behind one pair of extra boolean inputs: ``mixed``
    (the plan differs among them: each runs its own If on its own switch) and, when not mixed,
    ``on`` (all FP16, else all FP32)."""

    nodes: tuple[str, ...]
    mixed: str
    on: str


@dataclass(frozen=True)
class SwitchModel:
    """The switch graph and how to drive it."""

    model: onnx.ModelProto
    switches: Mapping[str, str]          # node name -> the switch (an element of switch_input)
    outputs: tuple[str, ...]             # the original graph outputs, in order
    intermediates: tuple[str, ...]       # main-graph float tensors exposed as extra outputs
    producers: Mapping[str, str]         # main-graph tensor -> the node that produces it
    groups: tuple[SwitchGroup, ...] = ()  # their switches follow from the nodes' (switch_vector)
    switch_input: str = ""               # the one boolean graph input holding every switch, in
    switch_order: tuple[str, ...] = ()   # this order (node switches, each group's mixed, on, written)
    written: str = ""                    # on for a plan: nodes written in another form compute it

    @cached_property
    def _positions(self) -> tuple[dict[str, int], list[tuple[np.ndarray, int, int]]]:
        at = {s: i for i, s in enumerate(self.switch_order)}
        nodes = {node: at[s] for node, s in self.switches.items()}
        groups = [(np.array([nodes[n] for n in g.nodes]), at[g.mixed], at[g.on]) for g in self.groups]
        return nodes, groups

    def switch_vector(self, fp16: Iterable[str], written: bool = True) -> np.ndarray:
        """The value of ``switch_input`` that turns the nodes ``fp16`` FP16 (all others FP32); a
        plan's (``written``) or the FP32 model's itself."""
        nodes, groups = self._positions
        vector = np.zeros(len(self.switch_order), dtype=bool)
        if self.written:
            vector[self.switch_order.index(self.written)] = written
        vector[[nodes[n] for n in fp16 if n in nodes]] = True
        for members, mixed, on in groups:
            count = int(np.count_nonzero(vector[members]))
            vector[on] = count == len(members)
            vector[mixed] = 0 < count < len(members)
        return vector


def captured(model: onnx.ModelProto, types: Mapping[str, int], outputs: tuple[str, ...],
              capture_intermediates: bool | Iterable[str]) -> tuple[str, ...]:
    """The main-graph float tensors to expose as extra outputs (see build_switch_model): float32 and
    float64 (:data:`typing_rules.WIDE`), which a 16-bit plan converts alike."""
    if not capture_intermediates:
        return ()
    wanted = None if capture_intermediates is True else set(capture_intermediates)
    existing = set(outputs)
    intermediates: list[str] = []
    for node in model.graph.node:
        for o in node.output:
            if o and o not in existing and types.get(o) in WIDE and (wanted is None or o in wanted):
                existing.add(o)
                intermediates.append(o)
    return tuple(intermediates)


def split_switches(model: onnx.ModelProto, switches: tuple[str, ...], names: Names) -> str:
    """Make ``switches`` the elements of ONE boolean graph input, split first thing in the graph;
    returns its name. onnxruntime's cost per graph input grows with their number (measured: 588
    unused boolean inputs add 4-8 ms to each run of the 2 ms transformer), while one Split into
    588 one-element tensors costs microseconds; If takes any one-element tensor as condition."""
    name = names.fresh("__fp16_switches")
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.BOOL, [len(switches)]))
    if onnx_opset(model) >= 13:  # the sizes are an input from opset 13 on, an attribute before
        sizes = names.fresh("__fp16_switch_sizes")
        model.graph.initializer.append(numpy_helper.from_array(np.ones(len(switches), np.int64), sizes))
        if model.ir_version < 4:
            model.graph.input.append(helper.make_tensor_value_info(sizes, TensorProto.INT64, [len(switches)]))
        split = helper.make_node("Split", [name, sizes], list(switches), axis=0)
    else:
        split = helper.make_node("Split", [name], list(switches), axis=0, split=[1] * len(switches))
    split.name = names.fresh(name + "__split")
    model.graph.node.insert(0, split)
    return name
