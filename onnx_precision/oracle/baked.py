"""Baked emulation graphs: ONE plan's rounding in place, no switch.

The switch graph (:mod:`.switch_builder`) runs any plan, at the price of an If around every node (its
session builds 20x slower than the model's on a 26 000-node graph). A graph baked for one plan
holds the same Casts on the same values as the branches that plan takes in the switch graph, so
its outputs are bit-identical, and its session builds about as fast as the model's. A tensor that
a baked FP16 node writes is rounded already; any other tensor an FP16 node reads gets one shared
rounded copy (weights held in the proto: computed once, at build time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..float_types import LowPrecision
from ..graph import subgraphs
from .rounding import round_nodes
from .switch_builder import EmulationSource, Scopes, SwitchBuilder, assemble
from .switch_graph import SwitchModel


class BakedBuilder(SwitchBuilder):
    def __init__(self, model: onnx.ModelProto, source: EmulationSource,
                 type_protos: Mapping[str, onnx.TypeProto], lows: Mapping[str, LowPrecision],
                 keep: Iterable[str] = ()) -> None:
        super().__init__(model, source, type_protos, keep)
        self.lows = dict(lows)
        self.rounded_outputs: dict[str, int] = {}  # tensors a baked node wrote rounded, to that type
        self.true_name = ""
        self.spans: list[int] = []  # per main-graph node, where its baked nodes end

    def rewrite(self, graph: onnx.GraphProto, scopes: Scopes) -> None:
        scopes = scopes + [{}]
        new_nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            for _, sub in subgraphs(node):
                self.rewrite(sub, scopes)
            self._bake(node, scopes, new_nodes)
            if len(scopes) == 1:
                self.spans.append(len(new_nodes))
        del graph.node[:]
        graph.node.extend(new_nodes)

    def _bake(self, node: onnx.NodeProto, scopes: Scopes, out: list[onnx.NodeProto]) -> None:
        """The node as the plan runs it: as it is, or FP16 (what the then-branch of its If in the
        switch graph computes)."""
        if node.name in self.forms:
            node = self._form(node, node.output)  # a plan's: what the rewriter writes in its place
        if node.name not in self.lows or not self.switchable(node):
            out.append(node)
            return
        low = self.lows[node.name]
        if any(True for _ in subgraphs(node)):  # control flow: its bodies are baked themselves
            for i in self._inputs(node):
                src = node.input[i]
                node.input[i] = src if self.rounded_outputs.get(src) == low.elem_type else \
                    self.rounded(src, scopes, out, low) or src
            out.append(node)
            for i in self._outputs(node):
                exact = self.names.fresh(node.output[i] + "__exact")
                out.extend(round_nodes(exact, node.output[i], self.names, low, self.wide(node.output[i])))
                self.rounded_outputs[node.output[i]] = low.elem_type
                node.output[i] = exact
            return
        if any(n in self.external for n in node.input):
            # Rounded at run time, inside an If that runs when the node does: as plain nodes,
            # onnxruntime would run every weight's Casts first (they depend on nothing) and hold
            # all the rounded weights at once (measured: 6.9 GB peak for the 2.2 GB model).
            out.append(self._branch_on_switch(node, self._always(), scopes, out))
            self.switched.difference_update(node.output)
            self.rounded_outputs.update((node.output[i], low.elem_type) for i in self._outputs(node))
            return
        low_copy = onnx.NodeProto()
        low_copy.CopyFrom(node)
        self._low_nodes(node, low_copy, scopes, out, out, {}, {}, self.rounded_outputs)

    def _always(self) -> str:
        """A constant true condition in the main graph (made once)."""
        if not self.true_name:
            self.true_name = self.names.fresh("__fp16_baked_true")
            graph = self.model.graph
            graph.initializer.append(numpy_helper.from_array(np.array(True), self.true_name))
            if self.model.ir_version < 4:
                graph.input.append(helper.make_tensor_value_info(self.true_name, TensorProto.BOOL, []))
        return self.true_name


def build_baked_model(source: EmulationSource, lows: Mapping[str, LowPrecision],
                      capture_intermediates: bool | Iterable[str] = True) -> SwitchModel:
    """``source.model`` with the nodes of ``lows`` computing in their 16-bit type, emulated (the
    others are :func:`.switch_builder.build_switch_model`'s), and each node of ``source.forms`` computing
    the form written in its place (give none for the FP32 model itself); it has no switch input."""
    def builder(out: onnx.ModelProto, type_protos: Mapping[str, onnx.TypeProto], keep: tuple[str, ...],
                ) -> SwitchBuilder:
        return BakedBuilder(out, source, type_protos, lows, keep)

    return assemble(source, capture_intermediates, builder)
