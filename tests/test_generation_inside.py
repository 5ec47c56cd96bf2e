"""How far a plan holds, from what grows inside the model (issue 32 item 3): the ranges and the 16-bit sums
measured at a few of a generation's steps are extrapolated against the position, and ``--max-length`` keeps
FP32 what they say passes 65 504 before it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models import Example, const, make_model, node, rng, tensor
from onnx_precision.context import ModelContext
from onnx_precision.convert import ConvertOptions, convert
from onnx_precision.data import SampleSpec
from onnx_precision.generation import GenerationRun, hold_bound
from onnx_precision.generation.inside import StepRanges, measured_steps, traced
from onnx_precision.options import GenerationOptions

INT64 = 7
RESIDUAL = "layers.0/Add_2"


def residual_decoder(hidden: int = 8, vocab: int = 16, prefill: int = 8, slope: float = 215.0) -> Example:
    """A token decoder whose residual stream inside the model grows with the position: ``layers.0/Add_2``
    adds ``slope`` x position to the token's embedding (900-1 000) in one channel, and its read-out, scaled
    by 1e-4, feeds the logits and a bounded recurrent state ``h`` -> ``hN`` (what makes it a generation). The
    residual is about 16 000 at the 64th decode step and passes 65 504 near position 300; no output shows it.
    """
    gen = rng(7)
    slopes = gen.uniform(0.0, slope / 2, hidden)
    slopes[3] = slope
    inits = [
        const("embed", gen.uniform(900.0, 1000.0, (vocab, hidden))), const("slope", slopes),
        const("read_scale", 1e-4), const("half", 0.5), const("last", -1, np.int64),
        const("axis_last", [-1], np.int64), const("axis_1", [1], np.int64),
        const("out_w", gen.normal(0.0, 1.0, (hidden, vocab))),
    ]
    nodes = [
        node("Gather", ["embed", "input_ids"], ["e"], "embed"),
        node("Cast", ["position_ids"], ["pos_f"], "positions/cast", to=1),
        node("Unsqueeze", ["pos_f", "axis_last"], ["pos_3d"], "positions/unsqueeze"),
        node("Mul", ["pos_3d", "slope"], ["drift"], "layers.0/drift"),
        node("Add", ["e", "drift"], [RESIDUAL], RESIDUAL),
        node("Mul", [RESIDUAL, "read_scale"], ["scaled"], "layers.0/scale"),
        node("Gather", ["scaled", "last"], ["last_scaled"], "state/last", axis=1),
        node("Mul", ["h", "half"], ["h_half"], "state/decay"),
        node("Add", ["h_half", "last_scaled"], ["h_mix"], "state/add"),
        node("Tanh", ["h_mix"], ["hN"], "state/tanh"),
        node("Unsqueeze", ["h", "axis_1"], ["h_3d"], "readout/h"),
        node("Add", ["scaled", "h_3d"], ["mixed"], "readout/add"),
        node("MatMul", ["mixed", "out_w"], ["logits"], "readout/lm_head"),
    ]
    inputs = [tensor("input_ids", ["batch", "sequence_length"], INT64),
              tensor("position_ids", ["batch", "sequence_length"], INT64), tensor("h", ["batch", hidden])]
    outputs = [tensor("logits", ["batch", "sequence_length", vocab]), tensor("hN", ["batch", hidden])]
    model = make_model("residual_decoder", nodes, inputs, outputs, inits)
    feed = {"input_ids": gen.integers(0, vocab, (1, prefill)).astype(np.int64)}
    return Example("residual_decoder", model, (feed,), residual_decoder.__doc__ or "")


def _convert(tmp_path, max_length: int | None = None):
    example = residual_decoder()
    model, prefill = str(tmp_path / "residual.onnx"), str(tmp_path / "prefill.npz")
    onnx.save(example.model, model)
    np.savez(prefill, input_ids=example.feeds[0]["input_ids"])
    options = ConvertOptions(samples=SampleSpec(inputs=prefill),
                             generation=GenerationOptions(steps=64, max_length=max_length))
    return convert(model, str(tmp_path / "r.onnx"), options)


def test_a_residual_inside_the_model_that_grows_with_the_position_bounds_the_plan(tmp_path):
    result = _convert(tmp_path)
    assert result.exit_code == 0 and result.report is not None
    assert result.plan.fp32_nodes == ()  # 64 steps pass all FP16: the residual is ~16 000 at the last
    assert result.report.generation_lines[1] == (
        "generation: verified for 64 steps (72 tokens); FP16-safe up to ~301 tokens: beyond it "
        "'layers.0/Add_2' passes 65504 (estimated: ~215 a step, linear fit over steps 0, 8, 16, 24, 32, 40, "
        "48, 56, 64)")
    bound = result.report.generation["bound"]
    assert isinstance(bound, dict) and bound["limit_length"] == 302
    assert bound["first"] == {
        "tensor": RESIDUAL, "kind": "value", "limit": 65504.0, "model": "linear",
        "how": "estimated: ~215 a step, linear fit over steps 0, 8, 16, 24, 32, 40, 48, 56, 64"}


def test_max_length_keeps_the_residual_fp32_where_it_is_made_and_read_which_moves_the_bound_past_it(tmp_path):
    result = _convert(tmp_path, max_length=512)
    assert result.exit_code == 0 and result.report is not None
    reasons = {n: result.plan.decisions[n].reasons[-1].detail for n in result.plan.fp32_nodes}
    # the residual's producer and its reader, and the drift it adds (past 65504 at ~306 tokens)
    assert set(reasons) == {RESIDUAL, "layers.0/scale", "layers.0/drift"}
    assert reasons[RESIDUAL] == ("--max-length 512: 'layers.0/Add_2' passes 65504 at ~302 tokens (estimated: "
                                 "~215 a step, linear fit over steps 0, 8, 16, 24, 32, 40, 48, 56, 64)")
    bound = result.report.generation["bound"]
    assert isinstance(bound, dict) and bound["limit_length"] > 512
    assert result.report.generation_lines[1:3] == (
        "generation: verified for 64 steps (72 tokens); FP16-safe up to 2049 tokens: beyond it "
        "'position_ids' stops being exact in FP16 (positions past 2048) (positions grow 1 a step)",
        "generation: --max-length 512: the plan holds to it")


def _inside(peaks: dict[str, list[float]], sums: dict[str, list[float]] | None = None) -> GenerationRun:
    steps = measured_steps(64)
    ranges = StepRanges(steps, {n: tuple(p) for n, p in peaks.items()},
                        {n: tuple(p) for n, p in (sums or {}).items()})
    return GenerationRun({}, 64, "tokens", {}, tuple(range(42, 42 + 65)), inside=ranges)


def test_a_trend_from_the_steps_measured_rises_at_each_and_the_more_pessimistic_fit_that_explains_it():
    # SmolLM2-135M's attention scores in layer 1 at steps 0, 8, ..., 64 (an FP32 trace): read at 0, 32 and 64
    # alone they rise, and a geometric fit through them passes 65504 at step ~1 440; they fall at steps 8,
    # 24, 40 and 48
    scores = [141.861, 112.966, 121.784, 107.479, 147.216, 145.871, 136.114, 166.648, 186.265]
    # its positions as floats, 41 to 105: a line (a geometric fit, clearly worse, passes 65504 at step 507)
    positions = [41.0 + s for s in measured_steps(64)]
    doubling = [100.0 * 2 ** (s / 16) for s in measured_steps(64)]
    # a rise with scatter that a line explains best (relative RMS residual 1.3%) and a geometric growth about
    # as well (2.0%): the geometric fit passes 65504 at step 984, the line at 532 832; the sooner is taken
    drifting = [10.0, 11.4, 12.3, 13.0, 13.8, 15.2, 16.3, 17.0, 18.0]
    # Whisper tiny.en's layer-0 scores: at steps 0, 16, 32, 48 and 64 alone (49.7, 82.7, 127.9, 130.3, 274.0)
    # they rise at each, and a geometric fit passes 65504 at step 291; the eighths show a level that shifts
    # after the transcript ends (step 53), not a growth (in FP32 to step 445 they peak at 468)
    shifted = [49.7, 125.2, 82.7, 93.4, 127.9, 91.0, 130.3, 258.2, 274.0]
    bound = hold_bound(_inside({"qk": scores, "pos_f": positions, "doubling": doubling, "drift": drifting,
                                "whisper_qk": shifted}))
    found = {g.tensor: (g.model, g.over_at) for g in bound.growths}
    assert found["qk"] == ("flat", None) and found["whisper_qk"] == ("flat", None)
    assert found["pos_f"] == ("linear", 65464)  # 105 + 65400 = 65505
    assert found["doubling"] == ("geometric", 150)  # 100 * 2**(150/16) = 66 398, the first past 65504
    assert found["drift"] == ("geometric", 984)
    assert bound.first is not None and bound.first.tensor == "doubling"
    assert bound.first.text() == (
        "estimated: x1.044 a step, geometric fit over steps 0, 8, 16, 24, 32, 40, 48, 56, 64")


def test_a_sum_the_target_keeps_in_fp16_bounds_it_and_one_the_plan_keeps_fp32_does_not():
    run = _inside({}, {"attn/softmax": [43.0 + s for s in measured_steps(64)]})
    bound = hold_bound(run)
    # 107 at step 64, 1 a step: 65504 at step 65461, past it at 65462; the least-squares slope over the nine
    # steps is 1 + 2e-16, which puts the bound a token early (errs early, not late)
    assert bound.describe() == (
        "verified for 64 steps (106 tokens); FP16-safe up to ~65502 tokens: beyond it the FP16 sum of "
        "'attn/softmax' passes 65504 (estimated: ~1 a step, linear fit over steps 0, 8, 16, 24, 32, 40, 48, "
        "56, 64)")
    assert hold_bound(run, wide_sums={"attn/softmax"}).first is None


def test_only_what_computes_is_traced_inside():
    model = residual_decoder().model
    # not the embedding (a Gather's), the positions as floats (a Cast's: theirs is the positions' bound), the
    # state's last value or the graph's inputs and outputs (traced at every step)
    assert traced(ModelContext.of(model)) == {"drift", RESIDUAL, "scaled", "h_half", "h_mix", "mixed"}
    assert measured_steps(64) == (0, 8, 16, 24, 32, 40, 48, 56, 64)
    assert measured_steps(20) == (0, 2, 5, 7, 10, 12, 15, 17, 20) and measured_steps(2) == (0, 1, 2)


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_a_short_generation_measures_each_of_its_steps(steps):
    assert measured_steps(steps) == tuple(range(steps + 1))
