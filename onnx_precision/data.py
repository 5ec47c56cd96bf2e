"""Sample data: the feeds the oracle runs (from files, or synthesised from the model's inputs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class SampleSpec:
    """Where feeds come from. ``inputs`` is an .npz (one feed), a directory of .npz (one feed
    each) or a Polygraphy JSON (``polygraphy run --save-inputs``); None means synthetic feeds from
    the model's input metadata, seeded."""

    inputs: str | None = None
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Samples:
    feeds: tuple[dict[str, np.ndarray], ...]
    synthetic: bool
    source: str  # a one-line description for reports ("synthetic, seed 0, uniform [0, 1)", "data.npz")
    warnings: tuple[str, ...] = ()
