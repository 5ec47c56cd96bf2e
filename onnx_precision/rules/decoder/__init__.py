"""Decoder hazards as rules: what FP16 breaks in a generation that one forward pass on the prefill hides.

Each finding says what it saw (the node, the constant's value, the position bound); the patterns are found
once per model context and shared with :mod:`onnx_precision.policy.decoder_rewrites` and
:mod:`onnx_precision.policy.decoder_pins`, which fix what a rule flags before the search pins anything. One
module per rule, as :mod:`onnx_precision.rules` keeps one per op family (:mod:`.common`: what they share);
:data:`RULES` lists them in the order they run.

* ``mask-sentinel`` (:mod:`.masks`): an additive mask's sentinel (float32's minimum, -1e9) that the
  16-bit type makes -inf, on its way to a Softmax: a fully masked row (a left-padded batch's padding) is all
  -inf there and its softmax NaN, which the next layer's keys carry to every row. Fixed by writing the
  sentinel finite, two binades inside the type's range (:func:`.masks.written_sentinel`,
  :mod:`~onnx_precision.policy.decoder_rewrites`).
* ``rotary-positions`` (:mod:`.rotary`): integer positions cast to float, times inverse frequencies, into
  Sin/Cos. The 16-bit type holds integers exactly only up to 2048 (BF16: 256), and the angles are rounded
  at their magnitude: where positions can pass that (the generation's max length, or none known) the path
  from the Cast to the Sin/Cos is kept FP32 (:mod:`~onnx_precision.policy.decoder_pins`).
* ``rms-statistics`` (:mod:`.rms`): an RMSNorm's mean of squares, x² past 65504 once |x| passes 256, as a
  decoder's residual stream does late in a generation. Its statistic is kept FP32, as
  LayerNormalization's ``stash_type`` 1 keeps a decomposed LayerNorm's
  (:mod:`onnx_precision.policy.layer_norm` writes those as one such node already: a centred mean of
  squares is not this rule's).
* ``residual-chain`` (:mod:`.residual`): the residual stream's Adds, layer after layer (x + f(x), its x
  read by the branch too): its headroom shrinks with depth. Measured, not pinned: the finding places each
  Add in its chain, and the search decides.
* ``softcap`` (:mod:`.softcaps`): c·tanh(x / c) (Gemma's logit and attention caps): tanh rounds to ±1 for
  |x/c| past 4.5 in FP16, so the capped values collapse onto ±c. Its Tanh and scale are kept FP32 where
  that stands.
* ``state-path`` (:mod:`.states`): the nodes between a recurrent state input and the output fed back into
  it at the next step (the generation's description knows the pairs): what each step adds accumulates
  over the steps.
"""

from __future__ import annotations

from .masks import mask_sentinel
from .residual import residual_chain
from .rms import rms_statistics
from .rotary import rotary_positions
from .softcaps import softcap
from .states import state_path

RULES = (mask_sentinel, rotary_positions, rms_statistics, residual_chain, softcap, state_path)
