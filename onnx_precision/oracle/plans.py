"""Emulating precision plans with the cheapest sessions for the work asked.

The switch graph (:func:`.switch.build_switch_model`) runs any plan without a rebuild, but it puts
every node behind Ifs: on a 26 000-node graph its onnxruntime session takes 35 s to build where the
model's own takes 1.6 s. Most conversions never need it: the FP32 reference, the caller's plan and
the plan with headroom pins are three plans, and when that plan passes nothing is searched.
:class:`Emulator` therefore runs each plan it is asked for on a *baked* session (the same graph
builder with that one plan's Casts in place and no If, as fast to build as the model), keeps the
last two, and builds the switch graph only when :meth:`Emulator.searching` says many plans
follow; from then on every plan runs there. Values are the same either way: a baked plan runs
the same kernels on the same rounded values as the switch graph's branches (tested).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np
import onnx

from ..context import ModelContext
from ..plan import PrecisionPlan
from .rounding import round_fp16
from .session import EmulationSession, Feed

# Baked sessions kept at once: the FP32 reference and one plan (analyze compares the two per sample).
KEPT = 2

_Key = tuple[frozenset[str] | None, bool]  # (FP16 nodes, or None for FP32; captures intermediates)


class Emulator:
    """Runs plans of ``ctx``'s model by emulation (see the module docstring); counts the sessions
    it built and the runs, as :class:`EmulationSession` does."""

    def __init__(self, ctx: ModelContext, threads: int | None = None) -> None:
        self.ctx = ctx
        self.model = ctx.model
        self.threads = threads
        self.sessions_built = 0
        self.probes_run = 0
        self._baked: OrderedDict[_Key, EmulationSession] = OrderedDict()
        self._switched: EmulationSession | None = None
        self._last: tuple[PrecisionPlan, frozenset[str]] | None = None

    def searching(self) -> EmulationSession:
        """The switch-graph session (built on the first call; baked sessions are dropped): from
        now on every plan runs there."""
        if self._switched is None:
            self._baked.clear()
            self._switched = EmulationSession(self.ctx, threads=self.threads)
            self.sessions_built += 1
        return self._switched

    def _fp16_nodes(self, plan: PrecisionPlan) -> frozenset[str]:
        if self._last is None or self._last[0] is not plan:
            fp16 = frozenset(n for n in self.ctx.node_ops if plan.is_fp16(n)) - self.ctx.forced_fp32
            self._last = (plan, fp16)
        return self._last[1]

    def session(self, plan: PrecisionPlan | None, capture: bool = False) -> EmulationSession:
        """The session that runs ``plan`` (capturing every intermediate when ``capture``)."""
        if self._switched is not None:
            return self._switched
        fp16 = None if plan is None else self._fp16_nodes(plan)
        for key in ((fp16, capture), (fp16, True)):
            if key in self._baked:
                self._baked.move_to_end(key)
                return self._baked[key]
        while len(self._baked) >= KEPT:
            self._baked.popitem(last=False)
        built = EmulationSession(self.ctx, capture_intermediates=capture, threads=self.threads,
                                 baked=frozenset() if fp16 is None else fp16)
        self.sessions_built += 1
        self._baked[(fp16, capture)] = built
        return built

    def run(self, plan: PrecisionPlan | None, feed: Feed, names: Sequence[str] | None = None,
            intermediates: bool = False) -> dict[str, np.ndarray]:
        """As :meth:`EmulationSession.run`."""
        session = self.session(plan, capture=intermediates)
        self.probes_run += 1
        return session.run(plan, feed, names, intermediates)

    def fed_value(self, plan: PrecisionPlan | None, name: str, value: np.ndarray) -> np.ndarray:
        """As :meth:`EmulationSession.fed_value` (no session needed)."""
        if plan is not None and plan.fp16_io and name in self._float_inputs:
            return round_fp16(value)
        return value

    @cached_property
    def _float_inputs(self) -> frozenset[str]:
        return frozenset(vi.name for vi in self.model.graph.input
                         if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT)

    @cached_property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.model.graph.output)

    @cached_property
    def producers(self) -> Mapping[str, str]:
        return {o: n.name for n in self.model.graph.node for o in n.output if o}
