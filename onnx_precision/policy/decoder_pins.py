"""Decoder fixes that are pins: what the decoder rules (:mod:`onnx_precision.rules.decoder`) keep FP32
before the search runs, because one forward pass on the prefill cannot show it failing.

* ``rotary-positions``: the path from the positions' Cast to the Sin/Cos, where positions can pass the
  integers the 16-bit type holds exactly (no max length known, or one past 2048): the prefill's positions are
  a handful, the generation's are not. On models/decoders' Llama fed positions 4088-4095, all-FP16 logits
  are 2.68 off FP32 (62% of top-1 tokens agree) and 0.015 off with the path FP32.
* ``rms-statistics``: in a generation, every RMSNorm statistic, whatever the samples show, as
  LayerNormalization's stash_type 1 computes a LayerNorm's (:mod:`.layer_norm`) and as onnxruntime's fused
  RMSNorm and transformers' LlamaRMSNorm compute theirs: the residual stream it reads grows with the
  steps, and the statistic is a few elementwise ops of the model's FLOPs. A model run once is pinned where
  its ranges show the square passing the 16-bit maximum, as any node the samples condemn.
* ``softcap``: a softcap's Tanh and scale, where the recorded ranges show the capped values collapsing
  (or none were recorded).

The residual chain and the state path are measured, not pinned: their findings are the search's candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import rules
from ..context import ModelContext
from ..plan import PrecisionPlan, Reason
from ..rules import decoder
from ..rules.decoder.common import generation_of

if TYPE_CHECKING:
    from ..generation.description import Generation

PINNING = (decoder.rotary_positions, decoder.rms_statistics, decoder.softcap)
ALWAYS = frozenset({"rotary-positions", "rms-statistics"})  # in a generation, pinned whatever the ranges say


def decoder_pins(ctx: ModelContext, plan: PrecisionPlan, stats: Mapping | None = None,
                 generation: Generation | None = None) -> dict[str, Reason]:
    """Node -> why, for each 16-bit node of ``plan`` that a pinning decoder rule keeps FP32 (``stats``: the
    FP32 ranges where recorded; ``generation``: the run's, where it knows one, for its max length)."""
    facts = rules.ModelFacts(ctx, stats, generation)
    # a model run once (no generation) has no later steps for the samples to hide: its ranges decide
    always = ALWAYS if generation_of(facts) is not None else frozenset()
    pins: dict[str, Reason] = {}
    for found in rules.run_rules(facts, PINNING).findings:
        if plan.is_low(found.node) and found.node not in pins and (found.rule in always or found.active):
            pins[found.node] = found.reason()
    return pins
