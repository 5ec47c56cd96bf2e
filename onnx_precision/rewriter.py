"""Write a precision plan into a model: FP16 nodes get float16 tensors, FP32 nodes are pinned by Casts.

The rules (see :mod:`onnx_precision.typing_rules` for which tensors of a node convert):

- A node's wide tensors are float32 or float64 (:data:`typing_rules.WIDE`; float64 stays as it is
  under ``--keep-float64``); an FP32 node keeps each in its own type, so a float64 node kept wide
  stays float64, and a Cast back from 16 bits writes the tensor's original type.

- A tensor is float16 iff its producer is an FP16 node that converts it (or it is an FP32 graph
  input and ``plan.fp16_io``). A consumer that needs the other type reads a Cast of it; there is
  one Cast per (tensor, type) in a graph, shared by every consumer, named from the tensor
  (``<tensor>_fp16`` / ``<tensor>_fp32``). Consumers in a subgraph that need an outer tensor
  converted share a Cast placed before the node that owns the subgraph.
- A float16 value widened by a Cast already in the model is narrowed back by reusing the Cast's
  input, never by a second Cast (the pair would cancel).
- Constant values (initializers and Constant nodes) are never Cast at run time: each is converted
  in place when every consumer needs the other type, kept when none does, and duplicated
  (``<name>_fp16``) when both do. Conversion goes through :func:`onnx_precision.storage.cast_initializer`.
- A 16-bit node with no 16-bit output (ArgMax, Shape, IsNaN) reads its float input as it is
  written, no Cast in front: reading a wide tensor it computes wide, and the plan the result carries
  (and the model's stamp hashes) says FP32 there, with why.
- Graph outputs keep their names and order: when the producer writes another type, the producer's
  tensor is renamed ``<name>_fp16``/``_fp32`` and the Cast writes the output name.
- Cast ``to``, ``dtype`` and ``Optional``'s ``type`` attributes and ConstantOfShape values follow the
  node's precision; control-flow bodies of an FP16 If/Loop/Scan take and give float16 values.
- Node names, graph I/O, IR version and opsets are kept; node order stays topological; value_info
  types follow the written types so the full checker passes.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import onnx
from onnx import TensorProto, helper

from . import policy
from . import typing_rules as tr
from .context import ModelContext
from .float_types import LOW_PRECISIONS, LOW_TYPES, LowPrecision, low_of
from .graph import fresh_name, graphs_with_owner, is_onnx_domain, model_names, subgraphs, walk_nodes
from .plan import PrecisionPlan, Reason
from .policy.resolution import DQ_COPY_SOURCE, dequantize_copies
from .storage import cast_initializer
from .target.sum_rewrite import prescaled_layer_norm, rewritten_nodes

logger = logging.getLogger(__name__)

FLOAT = TensorProto.FLOAT
DOUBLE = TensorProto.DOUBLE
FLOAT16 = TensorProto.FLOAT16  # the type whose accumulation the sum rewrites guard (target/sum_rewrite.py)
_LOWS = tuple(LOW_TYPES)
_FLOATS = (FLOAT, DOUBLE, *_LOWS)
_SUFFIX: dict[int, str] = {FLOAT: "fp32", DOUBLE: "fp64",
                           **{t: low.precision for t, low in LOW_TYPES.items()}}


@dataclass(frozen=True)
class RewriteResult:
    """The written model and what it took."""

    model: onnx.ModelProto
    plan: PrecisionPlan  # the resolved plan that was written
    casts_added: int
    initializers_converted: int  # converted in place
    initializers_duplicated: int  # one copy per type, because consumers of both kinds exist
    notes: tuple[str, ...] = ()


@dataclass
class _Scope:
    """One graph being rewritten: where its new nodes go and which Casts it already has."""

    graph: onnx.GraphProto
    local: set  # names defined in this graph (inputs, initializers, node outputs)
    parent: _Scope | None
    nodes: list = field(default_factory=list)
    casts: dict = field(default_factory=dict)  # (tensor, type) -> cast output name


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, plan: PrecisionPlan, ctx: ModelContext, fuse: bool,
                 prescaled: Mapping[str, int]) -> None:
        self.model = model  # the copy being written
        self.index = ctx.index  # the original's producers: same names, same outputs
        self.plan = plan
        self.base_dir = ctx.base_dir
        self.types = ctx.types
        self.ctx = ctx
        self.low = ctx.target.low  # the graph I/O's type under fp16_io
        self.taken = model_names(model)
        self.written: dict[str, int] = {}  # float tensor -> element type in the output model
        self.widened_from: dict[str, str] = {}  # output of a widening Cast -> its float16 input
        self.renamed: dict[str, str] = {}  # graph output -> the name its producer now writes
        self.output_alias: dict[tuple[str, int], str] = {}  # (source, type) -> required cast output name
        self.const_plan: dict[str, set] = {}  # constant -> element types its consumers need
        self.constants = tr.constant_values(model)
        self.new_value_info: dict[str, onnx.TypeProto] = {}
        self.casts_added = 0
        self.converted = 0
        self.duplicated = 0
        self.notes: list[str] = []
        self.weight_inputs_converted = 0
        self.onnx_opset = tr.opset_map(model).get("", 13)
        # decomposed LayerNorms written as one LayerNormalization, by their last node
        self.layer_norms = {ln.add: ln for ln in policy.decomposed_layer_norms(ctx)} if fuse else {}
        self.fused: list[int] = []  # the type each LayerNormalization written in their place computes in
        # means written as sums of pre-scaled terms where they are FP16 (policy.accumulation_fix)
        self.sum_rewrites = policy.sum_rewrites(ctx) if fuse else {}
        self.rewritten: list[str] = []
        self.prescaled = prescaled  # LayerNormalizations written on x·2^-j where FP16 (name -> j)
        self.retyped = 0  # node outputs written in another type than they had
        self.added_casts: set[str] = set()
        # 16-bit nodes with no 16-bit output that read a wide tensor as it is written: node -> (tensor,
        # its written type); they compute wide, and the written plan says so (_as_written)
        self.reads_wide: dict[str, tuple[str, int]] = {}
        # shared DQs whose 16-bit readers read a copy in their type (copy_dequantize): output -> node
        # (the model's own, rewritten in place: its copies read its inputs as written)
        copied = dequantize_copies(ctx)
        self.dequantized = {n.output[0]: n for n in model.graph.node if n.name in copied}
        self.dequantize_copies: list[str] = []

    # --- what each side needs --------------------------------------------------------------

    def orig(self, name: str) -> int | None:
        return tr.elem_type(self.types.get(name))

    def typing(self, name: str) -> tr.NodeTyping:
        """The node's typing in its plan's 16-bit type (the run's type for an FP32 node)."""
        precision = self.plan.decisions.get(name)
        low = low_of(precision.precision) if precision and precision.precision.is_low else self.low
        return self.ctx.typing_in(low)[name]

    def low_type(self, name: str) -> LowPrecision | None:
        """The 16-bit type the node computes in, or None where it stays FP32."""
        decision = self.plan.decisions.get(name)
        if decision is None or not decision.precision.is_low:
            return None
        low = low_of(decision.precision)
        typing = self.ctx.typing_in(low).get(name)
        return low if typing is not None and not typing.fp16_blocker else None

    def converts_to(self, node: onnx.NodeProto) -> int | None:
        low = self.low_type(node.name)
        return None if low is None else low.elem_type

    def required(self, node: onnx.NodeProto, i: int) -> int | None:
        """The element type ``node`` needs on input ``i``; None when any float type will do."""
        name = node.input[i]
        orig = self.orig(name)
        if orig not in _FLOATS:
            return None
        t = self.typing(node.name)
        to = self.converts_to(node)
        if to is not None:
            if i in t.convertible_inputs:
                return to
            if i in t.flexible_inputs:
                return None
        return orig

    def produced(self, node: onnx.NodeProto, i: int) -> int | None:
        orig = self.orig(node.output[i])
        to = self.converts_to(node) if orig in tr.WIDE else None
        if to is not None and i in self.typing(node.name).convertible_outputs:
            return to
        return orig

    def io_type(self, name: str, owner: onnx.NodeProto | None) -> int | None:
        """Element type of a graph input/output: the main graph's follow fp16_io, a body's its owner."""
        orig = self.orig(name)
        if orig not in self.ctx.wide_types:
            return orig
        if owner is None:  # fp16_io converts float32 tensors; sequences/optionals keep their type
            fp16_io = self.plan.fp16_io and orig == FLOAT and tr.is_tensor(self.types.get(name))
            return self.low.elem_type if fp16_io else orig
        to = self.converts_to(owner)
        return orig if to is None else to

    # --- pre-pass: constants and graph outputs -----------------------------------------------

    def plan_constants(self) -> None:
        for ref in walk_nodes(self.model.graph):
            for i, name in enumerate(ref.node.input):
                if name in self.constants:
                    need = self.required(ref.node, i)
                    if need is not None:
                        self.const_plan.setdefault(name, set()).add(need)
                dq = self.dequantized.get(name)
                if dq is not None and self.copies_for(name, self.required(ref.node, i)) \
                        and dq.input[1] in self.constants:  # the copy's scale, in its type
                    self.const_plan.setdefault(dq.input[1], set()).add(self.low.elem_type)
        for graph, owner in graphs_with_owner(self.model.graph):
            for out in graph.output:
                if out.name in self.constants:
                    need = self.io_type(out.name, owner)
                    if need in _FLOATS:
                        self.const_plan.setdefault(out.name, set()).add(need)

    def plan_main_outputs(self) -> None:
        for out in self.model.graph.output:
            node = self.index.main_producer(out.name)
            if node is None or out.name in self.renamed or out.name in self.constants:
                continue
            i = list(node.output).index(out.name)
            have, need = self.produced(node, i), self.io_type(out.name, None)
            if have in _FLOATS and need in _FLOATS and have != need:
                new = self.fresh(f"{out.name}_{_SUFFIX[have]}")
                self.renamed[out.name] = new
                if out.name in self.types:
                    self.new_value_info[new] = tr.with_elem_type(self.types[out.name], have)
                self.output_alias[(new, need)] = out.name

    # --- names --------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def name_of(self, name: str) -> str:
        return self.renamed.get(name, name)

    # --- conversions ------------------------------------------------------------------------

    def version(self, scope: _Scope, name: str, to: int, reader: str = "") -> str:
        """The name of ``name`` as element type ``to``, adding a shared Cast where needed (tagged with
        why: the first ``reader`` that needs it, or the graph output)."""
        source = self.name_of(name)
        have = self.written.get(source, self.orig(name))
        if have == to or have not in _FLOATS:
            return source
        narrow = self.widened_from.get(source)
        if narrow is not None and self.written.get(narrow) == to:
            return narrow  # float16 -> float -> float16 is lossless: use the float16 original
        if scope.parent is not None and source not in scope.local:
            return self.version(scope.parent, source, to, reader)
        key = (source, to)
        if key not in scope.casts:
            copied = reader and self.copies_for(source, to)
            scope.casts[key] = (self.copy_dequantize(scope, source, to, reader) if copied
                                else self.add_cast(scope, source, to, reader))
        return scope.casts[key]

    def copies_for(self, tensor: str, to: int | None) -> bool:
        """Whether a reader of ``tensor`` that needs it as ``to`` reads a copy of its DequantizeLinear
        in that type (:func:`.policy.resolution.dequantize_copies`): the DQ is written wide, ``to`` is
        the target's 16-bit type."""
        dq = self.dequantized.get(tensor)
        return dq is not None and to == self.low.elem_type and self.produced(dq, 0) in tr.WIDE

    def copy_dequantize(self, scope: _Scope, source: str, to: int, reader: str) -> str:
        """A copy of ``source``'s DequantizeLinear computing in ``to``, named ``<dq>__fp16`` (its output
        ``<source>__fp16``), placed before its first such ``reader``: one DQ per type, as onnxruntime
        gives each node unit its own DQ at load, so no Cast sits between a DQ and its reader."""
        dq = self.dequantized[source]
        copy = onnx.NodeProto()
        copy.CopyFrom(dq)
        suffix = _SUFFIX[to]
        copy.name = self.fresh(f"{dq.name}__{suffix}")
        copy.output[0] = out = self.fresh(f"{source}__{suffix}")
        copy.input[1] = self.version(scope, dq.input[1], to, reader)  # the scale's copy in that type
        copy.doc_string = (f"onnx-precision: DequantizeLinear '{dq.name}' in {self.low.name} for its "
                           f"{self.low.name} reader(s), first '{reader}', where '{dq.name}' stays FP32 for "
                           f"the others: one DQ per type, no Cast between a DQ and its reader (as "
                           f"{DQ_COPY_SOURCE} gives each node unit its own DQ)")
        scope.nodes.append(copy)
        scope.local.add(out)
        self.written[out] = to
        self.new_value_info[out] = tr.with_elem_type(self.types[source], to)
        self.dequantize_copies.append(dq.name)
        return out

    def why(self, reader: str, to: int) -> str:
        """A Cast's tag: what the tool added it for (a later reader, or ``check``, can tell)."""
        if not reader:
            return f"onnx-precision: the graph's output in {tr.type_name(to)}"
        decision = self.plan.decisions.get(reader)
        sources = "/".join(dict.fromkeys(r.source for r in decision.reasons)) if decision else ""
        low = self.low_type(reader)
        kind = ("float64" if to == DOUBLE else "FP32") if low is None else low.name
        return f"onnx-precision: for {kind} node '{reader}'" + (f" ({sources})" if sources else "")

    def add_cast(self, scope: _Scope, source: str, to: int, reader: str = "") -> str:
        if self.types.get(source) is not None and not tr.is_tensor(self.types[source]):
            # resolve_plan keeps sequence/optional values on one side; reaching here is a bug
            raise RuntimeError(f"cannot Cast non-tensor value '{source}'")
        alias = self.output_alias.get((source, to))
        out = alias if alias is not None else self.fresh(f"{source}_{_SUFFIX[to]}")
        node_name = self.fresh(f"{source}_cast_{_SUFFIX[to]}")
        # Cast-1 (opsets before 6) names its target type with a string
        target = to if self.onnx_opset >= 6 else TensorProto.DataType.Name(to)
        scope.nodes.append(helper.make_node("Cast", [source], [out], name=node_name, to=target,
                                            doc_string=self.why(reader, to)))
        self.added_casts.add(node_name)
        scope.local.add(out)
        self.written[out] = to
        src_type = self.types.get(source) or self.new_value_info.get(source)
        if src_type is not None and tr.is_tensor(src_type):
            self.new_value_info[out] = tr.with_elem_type(src_type, to)
        self.casts_added += 1
        return out

    def convert_constants(self, scope: _Scope) -> None:
        """Initializers of this graph: convert in place, keep, or add a copy of the other type."""
        graph = scope.graph
        added = []
        inputs = {v.name for v in graph.input}
        for init in graph.initializer:
            if init.name in inputs and self.written.get(init.name) == init.data_type:
                # IR < 4 style: the weight is also a graph input, which keeps its type as every
                # graph input does (--fp16-io aside); FP16 consumers read a Cast of it
                continue
            plan = self.decide_constant(init.name, init.data_type)
            if plan is None:
                continue
            in_place, to = plan
            if in_place:
                init.CopyFrom(cast_initializer(init, self.base_dir, to, init.name))
                self.written[init.name] = to
                if init.name in inputs:  # IR < 4 style: the weight is also a (rarely fed) graph input
                    self.weight_inputs_converted += 1
            else:
                copy_name = self.fresh(f"{init.name}_{_SUFFIX[to]}")
                added.append(cast_initializer(init, self.base_dir, to, copy_name))
                self.register_copy(scope, init.name, copy_name, to)
        graph.initializer.extend(added)

    def decide_constant(self, name: str, have: int) -> tuple[bool, int] | None:
        """(in place?, type) for a constant whose consumers need another type; None: keep."""
        needs = self.const_plan.get(name, set())
        others = [t for t in needs if t != have]
        if not others:
            return None
        to = others[0]
        if have in needs:
            self.duplicated += 1
            return False, to
        self.converted += 1
        return True, to

    def register_copy(self, scope: _Scope, name: str, copy_name: str, to: int) -> None:
        scope.casts[(name, to)] = copy_name
        scope.local.add(copy_name)
        self.written[copy_name] = to
        self.new_value_info[copy_name] = tr.with_elem_type(self.types[name], to)

    def constant_node(self, scope: _Scope, node: onnx.NodeProto) -> None:
        """A Constant node: its value converted in place, or a second Constant of the other type."""
        out = node.output[0]
        value = tr.constant_tensor(node)
        decided = None if value is None else self.decide_constant(out, value.data_type)
        if value is None or decided is None:
            scope.nodes.append(node)
            return
        in_place, to = decided
        converted = cast_initializer(value, self.base_dir, to, "value")
        if in_place:
            _set_constant_value(node, converted)
            self.written[out] = to
            self.new_value_info[out] = tr.with_elem_type(self.types[out], to)
            scope.nodes.append(node)
            return
        scope.nodes.append(node)
        copy_name = self.fresh(f"{out}_{_SUFFIX[to]}")
        scope.nodes.append(
            helper.make_node(
                "Constant", [], [copy_name], name=self.fresh(f"{node.name}_{_SUFFIX[to]}"), value=converted
            )
        )
        self.register_copy(scope, out, copy_name, to)

    # --- graphs and nodes ---------------------------------------------------------------------

    def rewrite_graph(
        self, graph: onnx.GraphProto, owner: onnx.NodeProto | None, parent: _Scope | None
    ) -> None:
        local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        local |= {o for n in graph.node for o in n.output if o}
        scope = _Scope(graph, local, parent)
        for v in graph.input:
            t = self.io_type(v.name, owner)
            if t in _FLOATS:
                self.written[v.name] = t
        self.convert_constants(scope)
        for node in list(graph.node):
            if (
                node.op_type == "Constant"
                and is_onnx_domain(node.domain)
                and node.output
                and node.output[0] in self.constants
            ):
                self.constant_node(scope, node)
            else:
                self.rewrite_node(scope, node)
        self.finish_outputs(scope, owner)
        del graph.node[:]
        graph.node.extend(scope.nodes)
        self.update_types(graph)

    def rewrite_node(self, scope: _Scope, node: onnx.NodeProto) -> None:
        for _attr_name, body in subgraphs(node):
            self.rewrite_graph(body, node, scope)
        for i, name in enumerate(node.input):
            if not name:
                continue
            need = self.required(node, i)
            node.input[i] = self.name_of(name) if need is None else self.version(scope, name, need, node.name)
        low = self.low_type(node.name)
        read = self.read_wide(node) if low is not None else None
        if read is not None:
            self.reads_wide[node.name] = read
        if low is not None and any(
            self.orig(node.output[i]) in tr.WIDE for i in self.typing(node.name).convertible_outputs
        ):
            tr.retarget_attributes(node, self.model, self.base_dir, low)
        for i, name in enumerate(node.output):
            if not name:
                continue
            t = self.produced(node, i)
            node.output[i] = self.name_of(name)
            if t in _FLOATS:
                self.written[node.output[i]] = t
                self.retyped += int(t != self.orig(name))
        if (
            node.op_type == "Cast"
            and is_onnx_domain(node.domain)
            and self.written.get(node.input[0]) in _LOWS
            and self.written.get(node.output[0]) in tr.WIDE
        ):
            self.widened_from[node.output[0]] = node.input[0]
        scope.nodes.append(node)
        if scope.parent is None and node.name in self.layer_norms:
            self.fuse(scope, self.layer_norms[node.name])
        rewrite = self.sum_rewrites.get(node.name) if scope.parent is None else None
        if rewrite is not None and self.written.get(node.output[0]) == FLOAT16:
            scope.nodes[-1:] = rewritten_nodes(rewrite, node, self.onnx_opset, self.fresh, FLOAT16)
            self.rewritten.append(node.name)

    def read_wide(self, node: onnx.NodeProto) -> tuple[str, int] | None:
        """(input, written type) when ``node``, planned 16-bit, has no 16-bit output and reads its float
        input as it is written (typing's flexible inputs: ArgMax, Shape, IsNaN, a Cast to an integer or,
        under --keep-float64, to float64), and that input is written wide: the node then computes in
        that wide type; else None."""
        t = self.typing(node.name)
        if t.convertible_inputs or t.convertible_outputs:
            return None
        read = [(node.input[i], self.written.get(node.input[i], self.orig(node.input[i])))
                for i in t.flexible_inputs]
        wide = [(name, elem) for name, elem in read if elem in tr.WIDE]
        return wide[0] if wide and len(wide) == len(read) else None

    def fuse(self, scope: _Scope, ln: policy.DecomposedLayerNorm) -> None:
        """Replace ``ln``'s nine written nodes by one LayerNormalization in the type of its tail (the
        plan gives Mul and Add one type, :func:`policy.layer_norm_pins`), named after the last Add."""
        # the nine nodes were just written: look back from the end (a full scan per LayerNorm would
        # make a stack of thousands quadratic)
        at = {}
        for k in range(len(scope.nodes) - 1, -1, -1):
            if scope.nodes[k].name in ln.nodes:
                at[scope.nodes[k].name] = k
                if len(at) == len(ln.nodes):
                    break
        mul, add = scope.nodes[at[ln.mul]], scope.nodes[at[ln.add]]
        to = self.written.get(add.output[0], FLOAT)
        if to not in (FLOAT, *_LOWS):
            return  # kept float64 (--keep-float64): LayerNormalization's stash_type 1 would take its
            # statistics to FP32; with no 16-bit member there is no mixed type for onnxruntime to bind
        scale, bias = mul.input[ln.scale_index], add.input[ln.bias_index]
        if self.written.get(scale, self.orig(scale)) != to or self.written.get(bias, self.orig(bias)) != to:
            return  # a constant kept in the other type: the nodes stay as they are
        x = self.version(scope, ln.x, to)
        for k in sorted(at.values(), reverse=True):
            del scope.nodes[k]
        fused = ln.fused(x, scale, bias, add.output[0])
        shift = self.prescaled.get(ln.add)
        scope.nodes.extend([fused] if shift is None or to != FLOAT16 else
                           prescaled_layer_norm(fused, shift, self.fresh, FLOAT16))
        self.fused.append(to)

    def fused_statistics(self) -> str:
        """Where the fused LayerNormalizations compute their statistics on the target: stash_type 1 asks
        for FP32, which a target that normalizes in its input's type does not apply to a 16-bit one
        (:attr:`.Target.normalizes_in_input_precision`)."""
        target = self.ctx.target
        low = [t for t in self.fused if t in _LOWS]
        if not low or not target.normalizes_in_input_precision:
            return "statistics in FP32, stash_type 1"
        types = "/".join(p.name for p in LOW_PRECISIONS.values() if p.elem_type in low)
        wide = len(self.fused) - len(low)
        return (f"stash_type 1, which {target.title} does not apply: it computes the statistics of the "
                f"{len(low)} {types} one(s) in {types}, their input's type"
                + (f"; the {wide} FP32 one(s) in FP32" if wide else ""))

    def finish_outputs(self, scope: _Scope, owner: onnx.NodeProto | None) -> None:
        """Graph outputs get the type their consumer (the application or the owner node) expects."""
        for out in scope.graph.output:
            need = self.io_type(out.name, owner)
            if need not in _FLOATS:
                continue
            if owner is not None:  # a body's outputs are positional: point them at the right version
                out.name = self.version(scope, out.name, need)
            elif out.name in self.renamed:  # the Cast writes the output's own name (output_alias)
                self.version(scope, out.name, need)

    def update_types(self, graph: onnx.GraphProto) -> None:
        """Declared types follow the written ones; new tensors get value_info with their shape."""
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            t = self.written.get(vi.name)
            if t is not None and tr.elem_type(vi.type) in _FLOATS and tr.elem_type(vi.type) != t:
                vi.type.CopyFrom(tr.with_elem_type(vi.type, t))
        declared = {vi.name for vi in list(graph.input) + list(graph.output) + list(graph.value_info)}
        for node in graph.node:
            for name in node.output:
                if name in self.new_value_info and name not in declared:
                    graph.value_info.append(onnx.ValueInfoProto(name=name, type=self.new_value_info[name]))
                    declared.add(name)

    def run(self) -> None:
        self.plan_constants()
        self.plan_main_outputs()
        self.rewrite_graph(self.model.graph, None, None)
        if self.fused:
            self.casts_added -= _drop_dead_casts(self.model.graph, self.added_casts)
            # what the fused nodes alone read (a Pow's exponent, an epsilon now an attribute) is gone,
            # and not counted as converted or kept in both types
            given = {i.name: i.data_type for i in self.ctx.model.graph.initializer}
            for init in _drop_unread_initializers(self.model.graph, self.ctx.model):
                if init.name not in given:
                    self.duplicated -= 1
                elif init.data_type != given[init.name]:
                    self.converted -= 1
            self.notes.append(f"{len(self.fused)} decomposed LayerNorm(s) written as one LayerNormalization "
                              f"each, named after their last Add ({self.fused_statistics()}), so that "
                              f"onnxruntime's LayerNormFusion cannot bind mixed types")
        if self.rewritten:
            self.notes.append(f"{len(self.rewritten)} mean(s) written as a ReduceSum of pre-scaled terms "
                              f"({_listed(self.rewritten)}), each keeping its name, so that a runtime that "
                              f"sums in FP16 cannot overflow them: the plan's 'rewritten' reasons give each "
                              f"form")
        if self.dequantize_copies:
            copied = list(dict.fromkeys(self.dequantize_copies))
            self.notes.append(f"{len(copied)} shared DequantizeLinear(s) kept FP32 are given a copy in "
                              f"{self.low.name} for their {self.low.name} readers ({_listed(copied)}; each "
                              f"named '<dq>__{self.low.precision}'), so that no Cast sits between a DQ and "
                              f"its reader ({DQ_COPY_SOURCE} does the same at load)")
        if self.weight_inputs_converted:
            self.notes.append(
                f"{self.weight_inputs_converted} initializer(s) also listed as graph inputs "
                f"(IR < 4 style) were converted: those inputs are now {self.low.type_name}"
            )
        if self.casts_added and not any(is_onnx_domain(o.domain) for o in self.model.opset_import):
            version = _default_opset_for(self.model)
            self.model.opset_import.append(helper.make_opsetid("", version))
            self.notes.append(f"the model imports no ai.onnx opset; added opset {version} for the Casts")


PROVENANCE = "onnx_precision."  # the prefix of the written model's metadata keys


def _stamp(model: onnx.ModelProto, plan: PrecisionPlan, ctx: ModelContext) -> None:
    """Record in the written model what wrote it: the tool's version, the plan's hash (its JSON's
    sha256, as ``--save-plan`` writes it) and the target the plan was made for."""
    from . import __version__

    stamp = {"version": __version__, "plan_sha256": hashlib.sha256(plan.dumps().encode()).hexdigest(),
             "target": ctx.target.name}
    kept = {p.key: p.value for p in model.metadata_props if not p.key.startswith(PROVENANCE)}
    onnx.helper.set_model_props(model, {**kept, **{PROVENANCE + k: v for k, v in stamp.items()}})


def _drop_dead_casts(graph: onnx.GraphProto, added: set[str]) -> int:
    """Remove the Casts of ``added`` nothing reads any more (a fusion took their readers); returns
    how many."""
    dropped = 0
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.name in added and n.output[0] not in read]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
        dropped += len(dead)
    produced = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    kept = [vi for vi in graph.value_info if vi.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return dropped


def _drop_unread_initializers(graph: onnx.GraphProto, original: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Remove the initializers of ``graph`` that no node (a subgraph's included) or output reads any
    more, but that ``original`` read or that the rewrite added (a fusion took their readers); returns
    them. One ``original`` left unread stays: the model as it was given."""
    def reads(g: onnx.GraphProto) -> set[str]:
        return ({i for ref in walk_nodes(g) for i in ref.node.input} | {o.name for o in g.output}
                | {v.name for v in g.input})

    read, before = reads(graph), reads(original.graph)
    given = {i.name for i in original.graph.initializer}
    dead = [i for i in graph.initializer if i.name not in read and (i.name in before or i.name not in given)]
    for init in dead:
        graph.initializer.remove(init)
    return dead


def _default_opset_for(model: onnx.ModelProto) -> int:
    """The ai.onnx opset released with the model's other opsets (for models importing only ML ops)."""
    imported = {o.domain: o.version for o in model.opset_import}
    released = [
        onnx_opset
        for _release, ir, onnx_opset, ml_opset, *_ in helper.VERSION_TABLE
        if ml_opset is not None and ml_opset == imported.get("ai.onnx.ml") and ir <= model.ir_version
    ]
    # the newest such release, and never before Cast-6 (Cast-1 took its target type as a string)
    return max(released + [6]) if released else 13


def _set_constant_value(node: onnx.NodeProto, value: onnx.TensorProto) -> None:
    kept = [a for a in node.attribute if a.name not in ("value", "value_float", "value_floats")]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("value", value))


def _listed(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"'{n}'" for n in names[:shown]) + more


def _flush_notes(ctx: ModelContext, plan: PrecisionPlan, shown: int = 3) -> list[str]:
    """Say which FP16 nodes lose tiny weight values to zero: harmless, but never silent. Only the
    notes of the node's own type count: a BF16 fallback node keeps the reason FP16 failed there."""
    flushed = [
        (name, r.detail)
        for name in plan.low_nodes
        for r in plan.decisions[name].reasons
        if r.source == "initializer"
        and r == policy.blockers(ctx, low_of(plan.precision(name))).notes.get(name)
    ]
    if not flushed:
        return []
    listed = "; ".join(f"{name}: {detail}" for name, detail in flushed[:shown])
    more = f"; and {len(flushed) - shown} more (see the plan)" if len(flushed) > shown else ""
    return [f"{len(flushed)} FP16 node(s) have weights whose tiniest values flush to zero: {listed}{more}"]


def rewrite(ctx: ModelContext, plan: PrecisionPlan, fuse_layer_norms: bool = True,
            prescaled: Mapping[str, int] | None = None) -> RewriteResult:
    """Write ``plan`` into a copy of ``ctx``'s model.

    The rewriter writes resolved plans only: an unresolved one is resolved first
    (:func:`onnx_precision.policy.resolve`), so nodes that cannot be FP16 are written FP32 with their
    reason; the resolved plan comes back in the result. Nodes the plan does not name stay as they
    are. ``fuse_layer_norms``: decomposed LayerNorms are written as one LayerNormalization from opset
    17, the plan pinned to fit (:mod:`onnx_precision.policy.layer_norm`), as the emulation of a plan
    assumes, and where the target sums in FP16 each 16-bit mean over many elements is written as a sum of
    pre-scaled terms (:mod:`onnx_precision.policy.accumulation_fix`); off, every node is written as it is.
    ``prescaled``: the LayerNormalizations written on x·2^-j where FP16 (name -> j: the target the plan
    was measured on, :attr:`.Target.prescaled`).
    """
    first = policy.resolve(ctx, plan)
    pinned = policy.layer_norm_pins(ctx, first) if fuse_layer_norms else first
    prescaled = (prescaled or {}) if fuse_layer_norms else {}
    reasoned = policy.rewrite_reasons(ctx, pinned, prescaled) if fuse_layer_norms else pinned
    resolved = policy.resolve(ctx, reasoned)
    out = onnx.ModelProto()
    out.CopyFrom(ctx.model)
    rewriter = _Rewriter(out, resolved, ctx, fuse_layer_norms, prescaled)
    rewriter.run()
    forced = [n for n in resolved.fp32_nodes if plan.is_low(n) and (pinned.is_low(n) or not first.is_low(n))]
    notes = list(rewriter.notes)
    if forced:
        notes.append(f"{len(forced)} node(s) kept FP32 because FP16 is not possible there")
    notes.extend(_flush_notes(ctx, resolved))
    written = _as_written(resolved, rewriter.reads_wide, ctx)
    changed = any((rewriter.casts_added, rewriter.converted, rewriter.duplicated, rewriter.fused,
                   rewriter.rewritten, rewriter.retyped))
    if changed or not any(p.key.startswith(PROVENANCE) for p in out.metadata_props):
        _stamp(out, written, ctx)  # a model converted again and left as it was keeps its stamp
    return RewriteResult(
        out, written, rewriter.casts_added, rewriter.converted, rewriter.duplicated, tuple(notes)
    )


def _as_written(plan: PrecisionPlan, reads_wide: Mapping[str, tuple[str, int]], ctx: ModelContext,
                ) -> PrecisionPlan:
    """``plan`` as the model is written: each 16-bit node that has no 16-bit output and reads a wide
    tensor as it is written (:meth:`_Rewriter.read_wide`) computes wide, so the plan says FP32 and why
    (the plan's FP32 covers float64: the node keeps its tensor's type). Still resolved: an FP32 node
    that converts nothing blocks nothing."""
    if not reads_wide:
        return plan
    reasons = {}
    for name, (value, elem) in reads_wide.items():
        asked = plan.decisions[name]
        sources = "/".join(dict.fromkeys(r.source for r in asked.reasons))
        low = asked.precision.value
        planned = f"planned {low}: {sources}" if sources else f"planned {low}"
        reasons[name] = (Reason("type", f"reads '{value}' as it is written, {_SUFFIX[elem].upper()}: "
                                        f"{ctx.node_ops[name]} has no {low} output, so no Cast puts its "
                                        f"input in {low} ({planned})"),)
    return replace(plan.with_fp32_reasons(reasons), resolved=True)
