"""How far a generation holds: the length verified, and where the first FP16 value would pass 65 504
or a position stop being exact, estimated from the steps measured."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from models.decoders import growing_state, tiny_llama
from onnx_precision.context import ModelContext
from onnx_precision.float_types import BF16
from onnx_precision.generation import (
    GenerationOptions,
    GenerationRun,
    GenerationRunner,
    hold_bound,
    infer_generation,
)
from onnx_precision.oracle import Emulator


def _run(peaks: dict[str, Sequence[float]], start: int = 8, positions: Sequence[int] = ()) -> GenerationRun:
    steps = len(next(iter(peaks.values()))) - 1
    return GenerationRun({}, steps, "tokens", {n: tuple(p) for n, p in peaks.items()},
                         tuple(range(start, start + steps + 1)), tuple(positions))


def _reference(example, steps: int) -> tuple[GenerationRun, str | None]:
    generation = infer_generation(example.model, GenerationOptions(steps=steps))
    assert generation is not None
    runner = GenerationRunner(Emulator(ModelContext.of(example.model)), generation)
    return runner.reference(example.feeds[0]), generation.positions


def test_a_linear_growth_is_extrapolated_to_the_step_it_passes_65504():
    bound = hold_bound(_run({"state": [1000.0 + 2000.0 * s for s in range(21)], "logits": [3.0] * 21}))
    first = bound.first
    assert first is not None and (first.tensor, first.model, first.over_at) == ("state", "linear", 33)
    assert first.rate == pytest.approx(2000.0) and first.window == (10, 20)
    assert bound.limit_length == 8 + 33 and bound.holds(40) and not bound.holds(41)
    assert bound.describe() == ("verified for 20 steps (28 tokens); FP16-safe up to ~40 tokens: beyond it "
                                "'state' passes 65504 (estimated: ~2e+03 a step, linear fit over steps "
                                "10-20)")
    assert [g.model for g in bound.growths] == ["linear", "flat"]


def test_a_geometric_growth_is_extrapolated_as_one():
    bound = hold_bound(_run({"residual": [10.0 * 1.5 ** s for s in range(13)]}))
    first = bound.first
    assert first is not None and (first.model, first.over_at) == ("geometric", 22)  # 10 * 1.5**22 = 74 818
    assert first.rate == pytest.approx(1.5)
    assert bound.describe().endswith("(estimated: x1.5 a step, geometric fit over steps 6-12)")


def test_noise_and_what_a_plan_keeps_fp32_bound_nothing():
    wandering = 3.0 + np.random.default_rng(0).uniform(-0.5, 0.5, 41)
    bound = hold_bound(_run({"present.0.key": wandering}))
    assert bound.first is None and bound.limit_length is None and bound.holds(10 ** 9)
    assert bound.describe() == ("verified for 40 steps (48 tokens); nothing measured grows towards FP16's "
                                "limits over steps 20-40")
    assert hold_bound(_run({"state": [1000.0 * s for s in range(9)]}), wide={"state"}).first is None


def test_a_value_past_the_limit_within_the_steps_is_measured():
    bound = hold_bound(_run({"state": [100.0, 200.0, np.inf, np.inf], "logits": [1.0, 1.0, np.nan, np.nan]}))
    assert [(g.tensor, g.model, g.over_at) for g in bound.growths] == [("logits", "measured", 2),
                                                                       ("state", "measured", 2)]
    assert bound.describe() == ("verified for 3 steps (11 tokens); FP16 breaks within them: at 10 tokens "
                                "'logits' passes 65504 (measured at step 2)")


def test_the_llamas_positions_bound_it_at_2049_tokens_in_fp16_and_256_in_bf16():
    run, positions = _reference(tiny_llama(), steps=16)
    assert positions == "position_ids" and run.positions == tuple(range(7, 24))
    bound = hold_bound(run, position_input=positions)
    assert bound.describe() == ("verified for 16 steps (24 tokens); FP16-safe up to 2049 tokens: beyond it "
                                "'position_ids' stops being exact in FP16 (positions past 2048) (positions "
                                "grow 1 a step)")
    assert hold_bound(run, BF16, position_input=positions).limit_length == 258
    # positions kept FP32 by the plan: nothing the llama computes grows over steps 8-16 (its KV entries'
    # peaks wander; over 5 steps they can rise by chance, and a line through them says 290 000 tokens)
    assert hold_bound(run, wide={positions}, position_input=positions).first is None


def test_the_growing_states_bound_from_20_steps_errs_early_of_the_step_it_fails_at():
    run, _ = _reference(growing_state(), steps=20)
    bound = hold_bound(run)
    # its state's peaks rise by 347 and 3 900 in turn: a line (relative RMS residual 2.7%) and a geometric
    # growth (2.9%) explain them as well, and the geometric one, more pessimistic, is taken
    assert bound.describe() == ("verified for 20 steps (24 tokens); FP16-safe up to ~29 tokens: beyond it "
                                "'hN' passes 65504 (estimated: x1.065 a step, geometric fit over steps "
                                "10-20)")
    # measured over 32 steps, all-FP16 fails at step 30 (tests/test_generation.py): 4 prefill tokens + 30
    assert bound.limit_length == 30 and bound.first is not None and bound.first.over_at == 26
