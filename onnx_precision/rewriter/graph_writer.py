"""Writing a resolved plan into a copy of the model, graph by graph and node by node: each node's
inputs in the types it needs (:class:`~.casts.Casts`), its outputs in the types it writes, its
constants converted (:class:`~.constants.Constants`), its attributes retargeted, its decomposed
LayerNorm fused (:class:`~.layer_norms.LayerNormFusion`) or its mean written as a sum of pre-scaled
terms; graph outputs keep their names, and declared types follow the written ones."""

from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import helper

from .. import policy
from .. import typing_rules as tr
from ..context import ModelContext
from ..graph import is_onnx_domain, subgraphs
from ..plan import PrecisionPlan
from ..policy.resolution import DQ_COPY_SOURCE
from ..target.sum_rewrite import rewritten_nodes
from .casts import Casts, Scope, Written
from .constants import Constants
from .layer_norms import LayerNormFusion
from .sides import FLOAT16, FLOATS, LOWS, SUFFIX, Sides


class GraphWriter:
    """Writes ``plan`` into ``model`` (a copy of ``ctx``'s) in place: :meth:`run`. What it did is
    counted on its parts (``casts.count``, ``constants.converted``/``duplicated``,
    ``layer_norms.fused``) and here (``rewritten``, ``retyped``, ``reads_wide``, ``notes``)."""

    def __init__(self, model: onnx.ModelProto, plan: PrecisionPlan, ctx: ModelContext, fuse: bool,
                 prescaled: Mapping[str, int]) -> None:
        self.model = model  # the copy being written
        self.index = ctx.index  # the original's producers: same names, same outputs
        self.plan = plan
        self.ctx = ctx
        self.base_dir = ctx.base_dir
        self.low = ctx.target.low
        self.sides = Sides(ctx, plan)
        self.written = Written(model, ctx.types)
        self.casts = Casts(model, ctx, plan, self.sides, self.written)
        self.constants = Constants(model, ctx, self.sides, self.casts, self.written)
        self.layer_norms = LayerNormFusion(ctx, self.sides, self.casts, self.written, fuse, prescaled)
        # means written as sums of pre-scaled terms where they are FP16 (policy.accumulation_fix)
        self.sum_rewrites = policy.sum_rewrites(ctx) if fuse else {}
        self.rewritten: list[str] = []
        self.retyped = 0  # node outputs written in another type than they had
        # 16-bit nodes with no 16-bit output that read a wide tensor as it is written: node -> (tensor,
        # its written type); they compute wide, and the written plan says so (rewriter._as_written)
        self.reads_wide: dict[str, tuple[str, int]] = {}
        self.notes: list[str] = []

    def plan_main_outputs(self) -> None:
        """A main-graph output whose producer writes another type than the output is declared in: the
        producer writes a renamed tensor, and a Cast writes the output's own name."""
        sides, written = self.sides, self.written
        for out in self.model.graph.output:
            node = self.index.main_producer(out.name)
            if node is None or out.name in written.renamed or out.name in self.constants.values:
                continue
            i = list(node.output).index(out.name)
            have, need = sides.produced(node, i), sides.io_type(out.name, None)
            if have in FLOATS and need in FLOATS and have != need:
                new = written.fresh(f"{out.name}_{SUFFIX[have]}")
                written.renamed[out.name] = new
                if out.name in written.types:
                    written.value_info[new] = tr.with_elem_type(written.types[out.name], have)
                self.casts.output_alias[(new, need)] = out.name

    def rewrite_graph(
        self, graph: onnx.GraphProto, owner: onnx.NodeProto | None, parent: Scope | None
    ) -> None:
        local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        local |= {o for n in graph.node for o in n.output if o}
        scope = Scope(graph, local, parent)
        for v in graph.input:
            t = self.sides.io_type(v.name, owner)
            if t in FLOATS:
                self.written.elem[v.name] = t
        self.constants.convert(scope)
        for node in list(graph.node):
            if (
                node.op_type == "Constant"
                and is_onnx_domain(node.domain)
                and node.output
                and node.output[0] in self.constants.values
            ):
                self.constants.constant_node(scope, node)
            else:
                self.rewrite_node(scope, node)
        self.finish_outputs(scope, owner)
        del graph.node[:]
        graph.node.extend(scope.nodes)
        self.update_types(graph)

    def rewrite_node(self, scope: Scope, node: onnx.NodeProto) -> None:
        sides, written = self.sides, self.written
        for _attr_name, body in subgraphs(node):
            self.rewrite_graph(body, node, scope)
        for i, name in enumerate(node.input):
            if not name:
                continue
            need = sides.required(node, i)
            node.input[i] = written.name_of(name) if need is None else self.casts.version(scope, name, need,
                                                                                           node.name)
        low = sides.low_type(node.name)
        read = self.read_wide(node) if low is not None else None
        if read is not None:
            self.reads_wide[node.name] = read
        if low is not None and any(
            sides.orig(node.output[i]) in tr.WIDE for i in sides.typing(node.name).convertible_outputs
        ):
            tr.retarget_attributes(node, self.model, self.base_dir, low)
        for i, name in enumerate(node.output):
            if not name:
                continue
            t = sides.produced(node, i)
            node.output[i] = written.name_of(name)
            if t in FLOATS:
                written.elem[node.output[i]] = t
                self.retyped += int(t != sides.orig(name))
        if (
            node.op_type == "Cast"
            and is_onnx_domain(node.domain)
            and written.elem.get(node.input[0]) in LOWS
            and written.elem.get(node.output[0]) in tr.WIDE
        ):
            self.casts.widened_from[node.output[0]] = node.input[0]
        scope.nodes.append(node)
        if scope.parent is None and node.name in self.layer_norms.by_add:
            self.layer_norms.fuse(scope, self.layer_norms.by_add[node.name])
        rewrite = self.sum_rewrites.get(node.name) if scope.parent is None else None
        if rewrite is not None and written.elem.get(node.output[0]) == FLOAT16:
            scope.nodes[-1:] = rewritten_nodes(rewrite, node, self.casts.onnx_opset, written.fresh, FLOAT16)
            self.rewritten.append(node.name)

    def read_wide(self, node: onnx.NodeProto) -> tuple[str, int] | None:
        """(input, written type) when ``node``, planned 16-bit, has no 16-bit output and reads its float
        input as it is written (typing's flexible inputs: ArgMax, Shape, IsNaN, a Cast to an integer or,
        under --keep-float64, to float64), and that input is written wide: the node then computes in
        that wide type; else None."""
        t = self.sides.typing(node.name)
        if t.convertible_inputs or t.convertible_outputs:
            return None
        read = [(node.input[i], self.written.elem.get(node.input[i], self.sides.orig(node.input[i])))
                for i in t.flexible_inputs]
        wide = [(name, elem) for name, elem in read if elem in tr.WIDE]
        return wide[0] if wide and len(wide) == len(read) else None

    def finish_outputs(self, scope: Scope, owner: onnx.NodeProto | None) -> None:
        """Graph outputs get the type their consumer (the application or the owner node) expects."""
        for out in scope.graph.output:
            need = self.sides.io_type(out.name, owner)
            if need not in FLOATS:
                continue
            if owner is not None:  # a body's outputs are positional: point them at the right version
                out.name = self.casts.version(scope, out.name, need)
            elif out.name in self.written.renamed:  # the Cast writes the output's own name (output_alias)
                self.casts.version(scope, out.name, need)

    def update_types(self, graph: onnx.GraphProto) -> None:
        """Declared types follow the written ones; new tensors get value_info with their shape."""
        written = self.written
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            t = written.elem.get(vi.name)
            if t is not None and tr.elem_type(vi.type) in FLOATS and tr.elem_type(vi.type) != t:
                vi.type.CopyFrom(tr.with_elem_type(vi.type, t))
        declared = {vi.name for vi in list(graph.input) + list(graph.output) + list(graph.value_info)}
        for node in graph.node:
            for name in node.output:
                if name in written.value_info and name not in declared:
                    graph.value_info.append(onnx.ValueInfoProto(name=name, type=written.value_info[name]))
                    declared.add(name)

    def run(self) -> None:
        self.constants.plan()
        self.plan_main_outputs()
        self.rewrite_graph(self.model.graph, None, None)
        fused = self.layer_norms.clean_up(self.model, self.constants)
        if fused:
            self.notes.append(fused)
        if self.rewritten:
            self.notes.append(f"{len(self.rewritten)} mean(s) written as a ReduceSum of pre-scaled terms "
                              f"({_listed(self.rewritten)}), each keeping its name, so that a runtime that "
                              f"sums in FP16 cannot overflow them: the plan's 'rewritten' reasons give each "
                              f"form")
        if self.casts.dequantize_copies:
            copied = list(dict.fromkeys(self.casts.dequantize_copies))
            self.notes.append(f"{len(copied)} shared DequantizeLinear(s) kept FP32 are given a copy in "
                              f"{self.low.name} for their {self.low.name} readers ({_listed(copied)}; each "
                              f"named '<dq>__{self.low.precision}'), so that no Cast sits between a DQ and "
                              f"its reader ({DQ_COPY_SOURCE} does the same at load)")
        if self.constants.weight_inputs_converted:
            self.notes.append(
                f"{self.constants.weight_inputs_converted} initializer(s) also listed as graph inputs "
                f"(IR < 4 style) were converted: those inputs are now {self.low.type_name}"
            )
        if self.casts.count and not any(is_onnx_domain(o.domain) for o in self.model.opset_import):
            version = _default_opset_for(self.model)
            self.model.opset_import.append(helper.make_opsetid("", version))
            self.notes.append(f"the model imports no ai.onnx opset; added opset {version} for the Casts")


def _listed(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"'{n}'" for n in names[:shown]) + more


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
