"""A decoder's tokens, checked against the FP32 reference's: the teacher-forced top-1 agreement (every
step fed the reference's token: does the candidate choose it too?) and the free-running divergence
(fed its own tokens: where does it first leave the reference's text?).

A divergence where the reference's own choice was a near tie (its top-1 logit within ``min_margin`` of
the runner-up) says little: :attr:`TokenAgreement.first_unclear` says where that starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InternalError
from .runner import GenerationRun


@dataclass(frozen=True)
class TokenAgreement:
    """``agreeing`` of ``compared`` (step, batch row) tokens are the reference's; the first step where
    one is not (``first_divergence``), and the first step where the reference's top-1 margin is under
    the ``min_margin`` asked (``first_unclear``); None where there is none."""

    steps: int
    compared: int
    agreeing: int
    first_divergence: int | None
    first_unclear: int | None

    @property
    def share(self) -> float:
        return self.agreeing / self.compared if self.compared else 1.0

    def holds_for(self, steps: int) -> bool:
        """Whether the tokens match for the first ``steps`` steps, or up to where the reference's choice
        stops being clear if that comes first."""
        clear = steps if self.first_unclear is None else min(steps, self.first_unclear)
        return self.first_divergence is None or self.first_divergence >= clear


def token_agreement(reference: GenerationRun, candidate: GenerationRun, min_margin: float = 0.0
                    ) -> TokenAgreement:
    """How ``candidate``'s tokens agree with ``reference``'s (both runs of one decoder on one sample)."""
    if reference.tokens is None or candidate.tokens is None or reference.margins is None:
        raise InternalError("token agreement of a generation without tokens (not a decoder's)")
    if reference.tokens.shape != candidate.tokens.shape:
        raise InternalError(f"token agreement of {reference.tokens.shape} and {candidate.tokens.shape} "
                            f"tokens")
    same = reference.tokens == candidate.tokens
    differ = np.flatnonzero(~same.all(axis=0))
    unclear = np.flatnonzero((reference.margins < min_margin).any(axis=0))
    return TokenAgreement(reference.steps, int(same.size), int(same.sum()),
                          int(differ[0]) if differ.size else None, int(unclear[0]) if unclear.size else None)
