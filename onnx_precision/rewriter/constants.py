"""Constant values in the written model (initializers and Constant nodes): never Cast at run time, each
converted in place when every reader needs the other type, kept when none does, and duplicated
(``<name>_fp16``) when both do. Conversion goes through :func:`onnx_precision.storage.cast_initializer`."""

from __future__ import annotations

import onnx
from onnx import helper

from .. import typing_rules as tr
from ..context import ModelContext
from ..graph import graphs_with_owner, walk_nodes
from ..storage import cast_initializer
from .casts import Casts, Scope, Written
from .sides import FLOATS, SUFFIX, Sides


class Constants:
    """The model's constant values, what type each reader needs them in, and how many were converted
    in place (``converted``) or kept in both types (``duplicated``)."""

    def __init__(self, model: onnx.ModelProto, ctx: ModelContext, sides: Sides, casts: Casts,
                 written: Written) -> None:
        self.model = model
        self.base_dir = ctx.base_dir
        self.sides = sides
        self.casts = casts
        self.written = written
        self.low = ctx.target.low
        self.values = tr.constant_values(model)
        self.needs: dict[str, set] = {}  # constant -> element types its consumers need
        self.converted = 0  # converted in place
        self.duplicated = 0  # one copy per type, because consumers of both kinds exist
        self.weight_inputs_converted = 0  # initializers also listed as graph inputs (IR < 4 style)

    def plan(self) -> None:
        """What type each reader, and each graph output, needs each constant in."""
        sides, casts = self.sides, self.casts
        for ref in walk_nodes(self.model.graph):
            for i, name in enumerate(ref.node.input):
                if name in self.values:
                    need = sides.required(ref.node, i)
                    if need is not None:
                        self.needs.setdefault(name, set()).add(need)
                dq = casts.dequantized.get(name)
                if dq is not None and casts.copies_for(name, sides.required(ref.node, i)) \
                        and dq.input[1] in self.values:  # the copy's scale, in its type
                    self.needs.setdefault(dq.input[1], set()).add(self.low.elem_type)
        for graph, owner in graphs_with_owner(self.model.graph):
            for out in graph.output:
                if out.name in self.values:
                    need = sides.io_type(out.name, owner)
                    if need in FLOATS:
                        self.needs.setdefault(out.name, set()).add(need)

    def convert(self, scope: Scope) -> None:
        """Initializers of this graph: convert in place, keep, or add a copy of the other type."""
        graph = scope.graph
        added = []
        inputs = {v.name for v in graph.input}
        for init in graph.initializer:
            if init.name in inputs and self.written.elem.get(init.name) == init.data_type:
                # IR < 4 style: the weight is also a graph input, which keeps its type as every
                # graph input does (--fp16-io aside); FP16 consumers read a Cast of it
                continue
            plan = self.decide(init.name, init.data_type)
            if plan is None:
                continue
            in_place, to = plan
            if in_place:
                init.CopyFrom(cast_initializer(init, self.base_dir, to, init.name))
                self.written.elem[init.name] = to
                if init.name in inputs:  # IR < 4 style: the weight is also a (rarely fed) graph input
                    self.weight_inputs_converted += 1
            else:
                copy_name = self.written.fresh(f"{init.name}_{SUFFIX[to]}")
                added.append(cast_initializer(init, self.base_dir, to, copy_name))
                self.register_copy(scope, init.name, copy_name, to)
        graph.initializer.extend(added)

    def decide(self, name: str, have: int) -> tuple[bool, int] | None:
        """(in place?, type) for a constant whose consumers need another type; None: keep."""
        needs = self.needs.get(name, set())
        others = [t for t in needs if t != have]
        if not others:
            return None
        to = others[0]
        if have in needs:
            self.duplicated += 1
            return False, to
        self.converted += 1
        return True, to

    def register_copy(self, scope: Scope, name: str, copy_name: str, to: int) -> None:
        scope.casts[(name, to)] = copy_name
        scope.local.add(copy_name)
        self.written.elem[copy_name] = to
        self.written.value_info[copy_name] = tr.with_elem_type(self.written.types[name], to)

    def constant_node(self, scope: Scope, node: onnx.NodeProto) -> None:
        """A Constant node: its value converted in place, or a second Constant of the other type."""
        out = node.output[0]
        value = tr.constant_tensor(node)
        decided = None if value is None else self.decide(out, value.data_type)
        if value is None or decided is None:
            scope.nodes.append(node)
            return
        in_place, to = decided
        converted = cast_initializer(value, self.base_dir, to, "value")
        if in_place:
            _set_constant_value(node, converted)
            self.written.elem[out] = to
            self.written.value_info[out] = tr.with_elem_type(self.written.types[out], to)
            scope.nodes.append(node)
            return
        scope.nodes.append(node)
        copy_name = self.written.fresh(f"{out}_{SUFFIX[to]}")
        scope.nodes.append(
            helper.make_node(
                "Constant", [], [copy_name], name=self.written.fresh(f"{node.name}_{SUFFIX[to]}"),
                value=converted
            )
        )
        self.register_copy(scope, out, copy_name, to)


def _set_constant_value(node: onnx.NodeProto, value: onnx.TensorProto) -> None:
    kept = [a for a in node.attribute if a.name not in ("value", "value_float", "value_floats")]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("value", value))
