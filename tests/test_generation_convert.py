"""convert, check and the CLI over a whole generation (issue 32): a decoder given only its prefill feeds is
judged over K steps, teacher-forced by the FP32 reference's tokens; the search, the verification and
check name the first failing step; the summary states the generation, the steps verified and the bound."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import parse

from models.decoders import GROWING_STATE_NODES
from models.decoders.generate import model_path, prefill_path
from onnx_precision import check
from onnx_precision.cli import main
from onnx_precision.convert import ConvertOptions, convert
from onnx_precision.data import SampleSpec
from onnx_precision.errors import UsageError
from onnx_precision.options import GenerationOptions
from onnx_precision.plan import PrecisionPlan
from onnx_precision.report import from_json

GROWING, LLAMA, STREAMING = "growing_state", "tiny_llama", "streaming_state"
# the state's path and what reads it: a decode step's running sum is one increment, which FP16 holds
STATE = set(GROWING_STATE_NODES) - {"state/cumsum"}


def _convert(name: str, out: str, **options: object):
    samples = SampleSpec(inputs=prefill_path(name))
    return convert(model_path(name), out, ConvertOptions(samples=samples, **options))


def _generation_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(("generation:", "tokens:", "before:"))]


@pytest.mark.slow  # 0.6 s in a full run on 2 busy cores
def test_growing_state_is_caught_at_step_30_from_its_prefill_alone_and_its_state_kept_fp32(tmp_path, capsys):
    out, plan = str(tmp_path / "g.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", model_path(GROWING), "-o", out, "--inputs", prefill_path(GROWING),
                 "--save-plan", plan]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert _generation_lines(printed) == [
        "before: FAIL at step 30 (output 'logits@step 30' 32 new NaN/Inf)",
        "generation: decoder: 1 state fed back, greedy, 64 steps (state names)",
        # the logits' peaks rise by turns over steps 32-43, then steadily: a line and a geometric growth
        # explain them about as well, and the geometric one, more pessimistic, is taken
        "generation: verified for 64 steps (68 tokens); FP16-safe up to ~538 tokens: beyond it 'logits' "
        "passes 65504 (estimated: x1.016 a step, geometric fit over steps 32-64)",
        "tokens: teacher-forced top-1 agrees with FP32 on 65 of 65 steps (100%); free-running greedy matches "
        "FP32 on all 65 steps"]
    assert set(PrecisionPlan.load(plan).fp32_nodes) == STATE
    saved = json.load(open(str(tmp_path / "g.report.json")))
    assert saved["generation"]["failing_step"] is None
    assert from_json(saved).generation_lines == tuple(line for line in _generation_lines(printed)
                                                      if not line.startswith("before:"))
    # the written model stays finite over the K steps (its verification ran them), and check says so
    result = check.check(model_path(GROWING), out, SampleSpec(inputs=prefill_path(GROWING)))
    assert result.passed and result.generation is not None and result.generation.failing is None
    assert len(result.comparison.outputs) == 65  # logits at steps 0-64


def test_one_forward_pass_writes_the_all_fp16_plan_which_check_fails_at_step_30(tmp_path, capsys):
    out = str(tmp_path / "g16.onnx")
    assert main(["convert", model_path(GROWING), "-o", out, "--inputs", prefill_path(GROWING),
                 "--no-generation", "-q"]) == 0  # the prefill passes: the gap a generation closes
    assert ": passed;" in capsys.readouterr().out
    assert not any(n.op_type == "Cast" and n.name.startswith("state/") for n in onnx.load(out).graph.node)
    assert main(["check", model_path(GROWING), out, "--inputs", prefill_path(GROWING)]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert "generation: fails at step 30 of 64: output 'logits@step 30' 32 new NaN/Inf" in printed
    assert printed[3].startswith("  logits@step 30: ") and printed[4] == (
        "  (31 outputs compared over the generation's steps; -v lists each)")  # it stopped at step 30
    # over 20 steps the all-FP16 candidate passes, and the bound says where it breaks
    result = check.check(model_path(GROWING), out, SampleSpec(inputs=prefill_path(GROWING)), steps=20)
    assert result.passed and result.generation is not None
    assert result.generation.bound.describe() == (
        "verified for 20 steps (24 tokens); FP16-safe up to ~29 tokens: beyond it 'hN' passes 65504 "
        "(estimated: x1.065 a step, geometric fit over steps 10-20)")


@pytest.mark.slow  # 1.0 s in a full run on 2 busy cores
def test_the_search_judges_a_horizon_and_searches_again_past_the_step_the_whole_generation_fails(tmp_path):
    # headroom off: the ranges at the last step pin nothing, so the plan chosen over steps 0-8 (all FP16)
    # fails at step 30 of the whole generation; the search runs again over 60 steps and pins the state
    result = _convert(GROWING, str(tmp_path / "g.onnx"), headroom=0)
    assert result.exit_code == 0 and result.auto is not None
    assert set(result.plan.fp32_nodes) == STATE
    assert result.auto.notes[0] == (
        "the plan chosen over steps 0-8 failed at step 30 (output 'logits@step 30' 32 new NaN/Inf); plans "
        "were judged over the generation's steps 0-60 (the search's horizon), the plan chosen over all 64")
    after = result.auto.after
    assert after is not None and after.passed and len(after.outputs) == 65


@pytest.mark.slow  # 2.0 s in a full run on 2 busy cores
def test_max_length_pins_what_the_bound_says_breaks_before_it(tmp_path):
    plain = _convert(GROWING, str(tmp_path / "a.onnx"), headroom=0, generation=GenerationOptions(steps=20))
    assert plain.exit_code == 0 and plain.plan.fp32_nodes == ()  # 20 steps pass all FP16
    held = _convert(GROWING, str(tmp_path / "b.onnx"), headroom=0,
                    generation=GenerationOptions(steps=20, max_length=64))
    assert held.exit_code == 0
    reasons = {n: held.plan.decisions[n].reasons[-1].detail for n in held.plan.fp32_nodes}
    assert set(reasons) == STATE
    assert reasons["state/add_past"] == ("--max-length 64: state 'hN' passes 65504 at ~30 tokens (estimated: "
                                         "x1.065 a step, geometric fit over steps 10-20)")
    assert "generation: --max-length 64: the plan holds to it" in held.summary_lines()
    # to 4096 tokens the logits pass 65504 too: kept FP32 where they are made. The read-out's sum ('mixed':
    # an embedding plus 'read', 1e-4 x the state) is no trend: 2.1, 2.4, 2.6, 3.0, 3.7, 4.1, 3.9, 4.3, 5.6 at
    # steps 0, 2, 5, ..., 20 fall at step 15 (at steps 0, 5, 10, 15 and 20 alone a geometric fit passed
    # 65504 at ~225 tokens); 'read', which its FP16 Add now reads, grows on a line, past 65504 far beyond
    far = _convert(GROWING, str(tmp_path / "c.onnx"), headroom=0,
                   generation=GenerationOptions(steps=20, max_length=4096))
    assert far.exit_code == 0 and far.report is not None
    reasons = {n: far.plan.decisions[n].reasons[-1].detail for n in far.plan.fp32_nodes}
    assert set(reasons) == STATE | {"readout/lm_head"}
    assert reasons["readout/lm_head"] == ("--max-length 4096: 'logits' passes 65504 at ~198 tokens "
                                          "(estimated: x1.052 a step, geometric fit over steps 10-20)")
    assert far.report.generation_lines[1:3] == (
        "generation: verified for 20 steps (24 tokens); FP16-safe up to ~348375 tokens: beyond it 'read' "
        "passes 65504 (estimated: ~0.188 a step, linear fit over steps 0, 2, 5, 7, 10, 12, 15, 17, 20)",
        "generation: --max-length 4096: the plan holds to it")
    # a fit over 3 steps decides nothing: tiny_llama's cache entries look geometric over steps 2-4 (and are
    # flat over 64); its genai_config.json's 128 tokens hold as far as 4 steps tell, and it says so
    short = _convert(LLAMA, str(tmp_path / "d.onnx"), generation=GenerationOptions(steps=4))
    assert short.exit_code == 0 and short.report is not None
    assert short.report.generation_lines[2] == (
        "generation: --max-length 128: the plan holds to it as far as 4 steps tell: too few to extrapolate "
        "'present.1.value' (estimated: x1.418 a step, geometric fit over steps 2-4) past them; --steps 16 or "
        "more judges it")


@pytest.mark.slow  # 1.8 s in a full run on 2 busy cores
def test_tiny_llama_from_its_prompt_alone_agrees_with_fp32_token_for_token(tmp_path):
    prompt = tmp_path / "prompt.npz"
    with np.load(prefill_path(LLAMA)) as data:
        np.savez(prompt, input_ids=data["input_ids"])  # no cache, no mask, no positions: the first step's
    result = convert(model_path(LLAMA), str(tmp_path / "l.onnx"),
                     ConvertOptions(samples=SampleSpec(inputs=str(prompt))))
    assert result.exit_code == 0 and result.report is not None
    verdict = result.report.generation
    tokens = verdict["tokens"]
    assert isinstance(tokens, dict) and tokens["top1_agreement"] >= 0.99 and tokens["clear_32"]
    assert verdict["description"] == "decoder: 2 KV pairs fed back, greedy, 64 steps, held to 128 tokens"
    assert verdict["holds_max_length"] is True  # genai_config.json's search.max_length
    assert result.report.generation_lines[1] == (
        "generation: verified for 64 steps (72 tokens); FP16-safe up to 2049 tokens: beyond it "
        "'position_ids' stops being exact in FP16 (positions past 2048) (positions grow 1 a step)")
    # the mask's sentinel was written finite before anything was measured
    assert any(n.startswith("'mask_sentinel': mask sentinel") for n in result.report.notes)


def test_a_streaming_model_is_fed_its_sample_a_chunk_at_a_time(tmp_path):
    result = _convert(STREAMING, str(tmp_path / "s.onnx"))  # 512 samples, declared chunk 64
    assert result.exit_code == 0 and result.report is not None
    assert result.report.generation_lines[:2] == (
        "generation: streaming: 1 state fed back, chunks of 64, 64 steps (state names)",
        "generation: verified for 64 steps (65 chunks); nothing measured grows towards FP16's limits over "
        "steps 32-64")
    with pytest.raises(UsageError) as e:
        _convert(STREAMING, str(tmp_path / "h.onnx"), generation=GenerationOptions(chunk=32))
    assert str(e.value) == ("--chunk 32: the model's signal 'input' takes 64 elements a step (its declared "
                            "last dimension)")


ARGPARSE = "onnx-precision convert: error: argument"


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], f"{ARGPARSE} --steps: '0': expected an integer >= 1 (see --help)"),
    (["--feedback", "logits"], f"{ARGPARSE} --feedback: 'logits': expected OUT=IN, an output of the model "
                               f"and the input it feeds at the next step (see --help)"),
    (["--feedback", "nope=h"], "onnx-precision: error: --feedback nope=h: the model has no output 'nope' "
                               "(outputs: logits, hN)"),
    (["--chunk", "16"], "onnx-precision: error: --chunk 16: the model is a decoder (it is fed its tokens), "
                        "not a streaming model"),
    (["--max-length", "-3"], f"{ARGPARSE} --max-length: '-3': expected an integer >= 1 (see --help)"),
])
def test_a_wrong_generation_flag_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    out = tmp_path / "x.onnx"
    given = ["--inputs", prefill_path(GROWING), *args]
    assert main(["convert", model_path(GROWING), "-o", str(out), *given]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not out.exists()


def test_generation_flags_on_a_model_that_runs_none_are_said_to_change_nothing(tmp_path, save):
    model = save(parse("""<ir_version: 8, opset_import: ["": 17]>
g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }"""))
    result = convert(model, str(tmp_path / "o.onnx"), ConvertOptions(generation=GenerationOptions(steps=8)))
    assert ("--steps: the model feeds no output back as an input (no generation is inferred: --feedback "
            "OUT=IN names one), so it is judged on one forward pass") in result.all_warnings
