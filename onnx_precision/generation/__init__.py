"""Decoders and stateful models judged over a whole generation, not one forward pass.

A decoder's samples are its prefill feeds; FP16 that passes the prefill can overflow its KV cache,
recurrent state or residual at step 30. This package runs the generation:

* :mod:`.description`: :class:`Generation`, the frozen description (which outputs feed which inputs,
  greedy tokens, what grows, how many steps); what the user says over it is the option group
  :class:`~onnx_precision.options.GenerationOptions`;
* :mod:`.infer`: :func:`infer_generation`, the description told from the model's names (optimum,
  onnxruntime-genai, recurrent states) or its ``genai_config.json``; None for a model that is no
  generation;
* :mod:`.steps`: each step's feed, made from the step before;
* :mod:`.runner`: :class:`GenerationRunner`, a :class:`~onnx_precision.oracle.PlanRunner` wrapping any
  other, whose outputs are every step's (``logits@step 7``), teacher-forced by the FP32 reference's
  tokens; :class:`GenerationRun`, what one generation kept;
* :mod:`.bound`: :func:`hold_bound`, the length verified and where FP16 would first break;
* :mod:`.tokens`: :func:`token_agreement`, teacher-forced top-1 agreement and free-running divergence.

For the search, the convert and check stages: wrap the runner (``GenerationRunner(runner, generation)``),
take the references as ``runner.run(None, sample)`` per sample (or :meth:`GenerationRunner.reference`
for the whole :class:`GenerationRun`), judge with ``runner.tolerance(tol)``; the prober and the
comparison need nothing else.
"""

from __future__ import annotations

from ..options import GenerationOptions
from .bound import Growth, HoldBound, hold_bound
from .description import DEFAULT_STEPS, HORIZON, Chunking, Feedback, Generation, InputSpec, Tokens
from .infer import GENAI_CONFIG, infer_generation, split_pair
from .runner import (
    GenerationRun,
    GenerationRunner,
    failing_step,
    merge_ran,
    split_step_name,
    step_name,
    step_tolerance,
)
from .steps import first_feed, next_feed
from .tokens import TokenAgreement, token_agreement

__all__ = [
    "DEFAULT_STEPS", "GENAI_CONFIG", "HORIZON", "Chunking", "Feedback", "Generation", "GenerationOptions",
    "GenerationRun", "GenerationRunner", "Growth", "HoldBound", "InputSpec", "TokenAgreement", "Tokens",
    "failing_step", "first_feed", "hold_bound", "infer_generation", "merge_ran", "next_feed", "split_pair",
    "split_step_name", "step_name", "step_tolerance", "token_agreement",
]
