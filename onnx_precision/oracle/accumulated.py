"""What each sum a target keeps in FP16 accumulates on the samples: the bound of its accumulator, measured.

For every main-graph node whose op kind the target sums in FP16 (:attr:`~onnx_precision.target.Target.
accumulation`), the bound :mod:`onnx_precision.target.accumulation` checks (Σ|x|, |A|·|B|, Σexp(x - max),
...) is computed on the FP32 model and reduced to its largest element, all nodes in one session, run once
per sample. The size up to which a plan holds and the pins a deployment profile needs are estimated from
these magnitudes (:mod:`onnx_precision.policy.shape_headroom`), and ``analyze`` shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from .. import cancel
from ..context import ModelContext
from ..graph import is_onnx_domain, onnx_opset
from ..target.accumulation import FIRST_OPSET, OVERFLOWS, SMALL_CONSTANT, computes_in
from ..trt.spell import DecompositionError, Speller
from ..typing_rules.constant_values import small_constant_arrays
from .rounding import Names
from .sessions import make_session

log = logging.getLogger(__name__)


class AccumulationBounds:
    """One session that measures, per node the target sums in FP16, the largest bound of its accumulator
    (``sessions_built`` counts it for the cost line; none is built where the target sums nothing in FP16)."""

    def __init__(self, ctx: ModelContext) -> None:
        self.ctx = ctx
        self.sessions_built = 0
        self.outputs: dict[str, str] = {}  # node -> the output holding its bound's largest element

    def measure(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
        """Node -> the largest bound over ``feeds`` ({} where the target sums nothing in FP16)."""
        return largest(self.each(feeds))

    def each(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, float]]:
        """Per feed, node -> its largest bound on it ([] where the target sums nothing in FP16)."""
        model = self._model()
        if model is None or not feeds:
            return []
        session = make_session(model, self.ctx.base_dir, custom_op_libraries=self.ctx.custom_op_libraries,
                               shared=self.ctx.mapped_weights)
        self.sessions_built += 1
        inputs = {i.name for i in session.get_inputs()}
        names = list(self.outputs.values())
        return [dict(zip(self.outputs, map(float, cancel.run(session, names, {k: v for k, v in feed.items()
                                                                               if k in inputs}))))
                for feed in feeds]

    def _model(self) -> onnx.ModelProto | None:
        ctx = self.ctx
        fp16 = {op for op, how in ctx.target.accumulation.items() if how == "fp16"}
        opset = onnx_opset(ctx.model, 13)
        refs = [ref for ref in ctx.nodes if ref.node.op_type in fp16 and not ref.graph_path
                and is_onnx_domain(ref.node.domain)]
        if not refs or opset < FIRST_OPSET:
            return None
        out = onnx.ModelProto()
        out.CopyFrom(ctx.model)
        names = Names(out)
        constants = small_constant_arrays(ctx.model, ctx.base_dir, SMALL_CONSTANT)
        for ref in refs:
            t = ctx.types.get(ref.node.input[0])
            rank = len(t.tensor_type.shape.dim) if t is not None and t.tensor_type.HasField("shape") else None
            wide = computes_in(ctx.types, ref.node.input[0])  # a float64 node's bound is float64
            s = Speller(ref.node, opset, fp16=False, fresh=names.fresh, constants=constants, rank=rank,
                        wide=wide)
            try:
                bound = OVERFLOWS[ref.node.op_type].bound(s)
            except DecompositionError as e:  # as the emulation: no check there, nothing to measure here
                log.debug("%s: accumulation not measured (%s)", ref.name, e)
                continue
            largest = names.fresh(f"{ref.name}__accumulated_max")
            s.nodes.append(helper.make_node("ReduceMax", [bound], [largest], keepdims=0,
                                            name=names.fresh(f"{largest}__node")))
            out.graph.node.extend(s.nodes)
            out.graph.output.append(helper.make_tensor_value_info(largest, wide, []))
            self.outputs[ref.name] = largest
        return out if self.outputs else None


def largest(each: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Node -> its largest bound over the feeds of ``each`` (:meth:`AccumulationBounds.each`)."""
    found: dict[str, float] = {}
    for bounds in each:
        found.update({node: max(found.get(node, 0.0), bound) for node, bound in bounds.items()})
    return found
