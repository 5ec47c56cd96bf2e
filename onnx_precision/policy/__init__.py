"""Plan policy over the model context: what a plan must pin before, and whatever, the search finds.

* :mod:`.resolution`: a requested plan made writable (nodes that cannot be FP16 become FP32, with why);
* :mod:`.pins`: headroom, range, rule and target pins, each with its reason;
* :mod:`.shape_headroom`: what a longer axis than the samples' can make overflow;
* :mod:`.layer_norm`: decomposed LayerNorms, written as one LayerNormalization from opset 17;
* :mod:`.accumulation_fix`: means written as sums of pre-scaled terms where the target sums in FP16;
* :mod:`.decoder_rewrites` and :mod:`.decoder_pins`: decoder hazards fixed before the search pins (a mask
  sentinel written finite; rotary positions, RMSNorm statistics and softcaps kept FP32).
"""

from .accumulation_fix import layer_norm_prescales, rewrite_reasons, rewritten, sum_rewrites, written_forms
from .decoder_pins import decoder_pins
from .decoder_rewrites import DecoderRewrite, rewrite_decoder_hazards
from .layer_norm import (
                         DecomposedLayerNorm,
                         always_fp32,
                         decomposed_layer_norms,
                         fused_names,
                         layer_norm_pins,
                         tied,
)
from .pins import (
                   FLUSH_SHARE,
                   flagged,
                   headroom_pins,
                   low_holders,
                   range_flags,
                   rule_pins,
                   target_reasons,
                   underflow_headroom,
                   unmeasured_static_plan,
                   with_flags,
)
from .resolution import NodeBlockers, blockers, forced_fp32, held_in, node_blockers, resolve, resolve_plan
from .shape_headroom import SizeBound, accumulation_pins, largest, shape_headroom_pins, size_bounds

__all__ = ["DecomposedLayerNorm", "always_fp32", "decomposed_layer_norms", "fused_names", "layer_norm_pins",
           "tied", "written_forms", "layer_norm_prescales", "rewrite_reasons", "rewritten", "sum_rewrites",
           "FLUSH_SHARE", "low_holders", "flagged", "headroom_pins", "range_flags", "rule_pins",
           "target_reasons", "underflow_headroom", "unmeasured_static_plan", "with_flags", "NodeBlockers",
           "blockers", "forced_fp32", "held_in", "node_blockers", "resolve", "resolve_plan", "largest",
           "shape_headroom_pins", "SizeBound", "accumulation_pins", "size_bounds", "decoder_pins",
           "DecoderRewrite", "rewrite_decoder_hazards"]
