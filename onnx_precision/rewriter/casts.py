"""The Casts a written model gets: one per (tensor, type) in a graph, shared by every reader, named
from the tensor (``<tensor>_fp16`` / ``<tensor>_fp32``) and tagged with why; a float16 value widened
by a Cast already in the model narrowed back by reusing that Cast's input; and, where a shared
DequantizeLinear stays FP32, a copy of it in the 16-bit type in place of a Cast after it. Also what the
model being written holds so far (:class:`Written`), which every part of the rewrite reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from .. import typing_rules as tr
from ..context import ModelContext
from ..graph import fresh_name, model_names
from ..plan import PrecisionPlan
from ..policy.resolution import DQ_COPY_SOURCE, dequantize_copies
from .sides import DOUBLE, FLOATS, SUFFIX, Sides


@dataclass
class Scope:
    """One graph being rewritten: where its new nodes go and which Casts it already has."""

    graph: onnx.GraphProto
    local: set  # names defined in this graph (inputs, initializers, node outputs)
    parent: Scope | None
    nodes: list = field(default_factory=list)
    casts: dict = field(default_factory=dict)  # (tensor, type) -> cast output name


class Written:
    """What the model being written holds so far: each float tensor's element type in it, the names it
    takes, the graph outputs whose producers write another name, and the types of the tensors added."""

    def __init__(self, model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto]) -> None:
        self.types = types  # the original's value types
        self.taken = model_names(model)
        self.elem: dict[str, int] = {}  # float tensor -> element type in the output model
        self.renamed: dict[str, str] = {}  # graph output -> the name its producer now writes
        self.value_info: dict[str, onnx.TypeProto] = {}  # added tensor -> its type

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def name_of(self, name: str) -> str:
        return self.renamed.get(name, name)


class Casts:
    """The Casts (and DequantizeLinear copies) added to the model being written, and how many."""

    def __init__(self, model: onnx.ModelProto, ctx: ModelContext, plan: PrecisionPlan, sides: Sides,
                 written: Written) -> None:
        self.sides = sides
        self.written = written
        self.plan = plan
        self.low = ctx.target.low
        self.onnx_opset = tr.opset_map(model).get("", 13)
        self.widened_from: dict[str, str] = {}  # output of a widening Cast -> its float16 input
        self.output_alias: dict[tuple[str, int], str] = {}  # (source, type) -> required cast output name
        self.added: set[str] = set()  # the Cast nodes added
        self.count = 0  # Casts added, less those dropped again
        # shared DQs whose 16-bit readers read a copy in their type (copy_dequantize): output -> node
        # (the model's own, rewritten in place: its copies read its inputs as written)
        copied = dequantize_copies(ctx)
        self.dequantized = {n.output[0]: n for n in model.graph.node if n.name in copied}
        self.dequantize_copies: list[str] = []

    def version(self, scope: Scope, name: str, to: int, reader: str = "") -> str:
        """The name of ``name`` as element type ``to``, adding a shared Cast where needed (tagged with
        why: the first ``reader`` that needs it, or the graph output)."""
        source = self.written.name_of(name)
        have = self.written.elem.get(source, self.sides.orig(name))
        if have == to or have not in FLOATS:
            return source
        narrow = self.widened_from.get(source)
        if narrow is not None and self.written.elem.get(narrow) == to:
            return narrow  # float16 -> float -> float16 is lossless: use the float16 original
        if scope.parent is not None and source not in scope.local:
            return self.version(scope.parent, source, to, reader)
        key = (source, to)
        if key not in scope.casts:
            copied = reader and self.copies_for(source, to)
            scope.casts[key] = (self.copy_dequantize(scope, source, to, reader) if copied
                                else self.add(scope, source, to, reader))
        return scope.casts[key]

    def copies_for(self, tensor: str, to: int | None) -> bool:
        """Whether a reader of ``tensor`` that needs it as ``to`` reads a copy of its DequantizeLinear
        in that type (:func:`onnx_precision.policy.resolution.dequantize_copies`): the DQ is written
        wide, ``to`` is the target's 16-bit type."""
        dq = self.dequantized.get(tensor)
        return dq is not None and to == self.low.elem_type and self.sides.produced(dq, 0) in tr.WIDE

    def copy_dequantize(self, scope: Scope, source: str, to: int, reader: str) -> str:
        """A copy of ``source``'s DequantizeLinear computing in ``to``, named ``<dq>__fp16`` (its output
        ``<source>__fp16``), placed before its first such ``reader``: one DQ per type, as onnxruntime
        gives each node unit its own DQ at load, so no Cast sits between a DQ and its reader."""
        dq = self.dequantized[source]
        copy = onnx.NodeProto()
        copy.CopyFrom(dq)
        suffix = SUFFIX[to]
        copy.name = self.written.fresh(f"{dq.name}__{suffix}")
        copy.output[0] = out = self.written.fresh(f"{source}__{suffix}")
        copy.input[1] = self.version(scope, dq.input[1], to, reader)  # the scale's copy in that type
        copy.doc_string = (f"onnx-precision: DequantizeLinear '{dq.name}' in {self.low.name} for its "
                           f"{self.low.name} reader(s), first '{reader}', where '{dq.name}' stays FP32 for "
                           f"the others: one DQ per type, no Cast between a DQ and its reader (as "
                           f"{DQ_COPY_SOURCE} gives each node unit its own DQ)")
        scope.nodes.append(copy)
        scope.local.add(out)
        self.written.elem[out] = to
        self.written.value_info[out] = tr.with_elem_type(self.written.types[source], to)
        self.dequantize_copies.append(dq.name)
        return out

    def why(self, reader: str, to: int) -> str:
        """A Cast's tag: what the tool added it for (a later reader, or ``check``, can tell)."""
        if not reader:
            return f"onnx-precision: the graph's output in {tr.type_name(to)}"
        decision = self.plan.decisions.get(reader)
        sources = "/".join(dict.fromkeys(r.source for r in decision.reasons)) if decision else ""
        low = self.sides.low_type(reader)
        kind = ("float64" if to == DOUBLE else "FP32") if low is None else low.name
        return f"onnx-precision: for {kind} node '{reader}'" + (f" ({sources})" if sources else "")

    def add(self, scope: Scope, source: str, to: int, reader: str = "") -> str:
        types, written = self.written.types, self.written
        if types.get(source) is not None and not tr.is_tensor(types[source]):
            # resolve_plan keeps sequence/optional values on one side; reaching here is a bug
            raise RuntimeError(f"cannot Cast non-tensor value '{source}'")
        alias = self.output_alias.get((source, to))
        out = alias if alias is not None else written.fresh(f"{source}_{SUFFIX[to]}")
        node_name = written.fresh(f"{source}_cast_{SUFFIX[to]}")
        # Cast-1 (opsets before 6) names its target type with a string
        target = to if self.onnx_opset >= 6 else TensorProto.DataType.Name(to)
        scope.nodes.append(helper.make_node("Cast", [source], [out], name=node_name, to=target,
                                            doc_string=self.why(reader, to)))
        self.added.add(node_name)
        scope.local.add(out)
        written.elem[out] = to
        src_type = types.get(source) or written.value_info.get(source)
        if src_type is not None and tr.is_tensor(src_type):
            written.value_info[out] = tr.with_elem_type(src_type, to)
        self.count += 1
        return out
