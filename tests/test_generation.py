"""A generation described and run: which outputs feed which inputs (optimum, genai_config.json and
recurrent-state names, the user's overrides), K steps on the emulation with each step fed its own
state, teacher forcing, the first failing step named by the ordinary comparison, memory flat in K."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import parse

import models
from models.decoders import GROWING_STATE_NODES, growing_state, streaming_state, tiny_llama
from models.decoders.generate import model_path
from onnx_precision.context import ModelContext
from onnx_precision.errors import DataError, UsageError
from onnx_precision.generation import (
    Feedback,
    GenerationOptions,
    GenerationRunner,
    Tokens,
    first_feed,
    infer_generation,
    split_step_name,
    step_name,
    token_agreement,
)
from onnx_precision.judge import Tolerance
from onnx_precision.oracle import Emulator, PlanRunner, reference_runner
from onnx_precision.plan import PrecisionPlan
from onnx_precision.search.prober import Prober

LLAMA = tiny_llama()
LLAMA_FEED = LLAMA.feeds[0]


def _runner(example: models.Example, steps: int, **options) -> tuple[GenerationRunner, ModelContext]:
    ctx = ModelContext.of(example.model)
    generation = infer_generation(example.model, GenerationOptions(steps=steps, **options))
    assert generation is not None
    return GenerationRunner(Emulator(ctx), generation), ctx


# --- the description --------------------------------------------------------------------------------

def test_optimum_names_describe_the_llama():
    generation = infer_generation(LLAMA.model)
    assert generation is not None
    assert generation.feedback == tuple(Feedback(f"present.{i}.{kind}", f"past_key_values.{i}.{kind}", "kv")
                                        for i in range(2) for kind in ("key", "value"))
    assert generation.tokens == Tokens("logits", "input_ids")
    assert (generation.attention_mask, generation.position_ids, generation.cache_position) == (
        "attention_mask", "position_ids", None)
    assert generation.source == "optimum names" and generation.chunking is None
    assert generation.summary() == "decoder: 2 KV pairs fed back, greedy, 64 steps"


def test_the_genai_config_beside_the_model_describes_it():
    generation = infer_generation(onnx.load(model_path("tiny_llama")), model_path=model_path("tiny_llama"))
    assert generation is not None and generation.source == "genai_config.json"
    assert generation.max_length == 128 and len(generation.feedback) == 4
    assert generation.summary() == "decoder: 2 KV pairs fed back, greedy, 64 steps, held to 128 tokens"


def _renamed(model: onnx.ModelProto, names: Mapping[str, str]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in [*copy.graph.input, *copy.graph.output]:
        vi.name = names.get(vi.name, vi.name)
    for node in copy.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    return copy


def test_a_genai_config_names_tensors_no_convention_does(tmp_path):
    names = {f"{side}.{i}.{kind}": f"{'cache' if side == 'past_key_values' else 'fresh'}_{kind[0]}{i}"
             for side in ("past_key_values", "present") for i in range(2) for kind in ("key", "value")}
    names.update({"input_ids": "tokens", "logits": "scores", "position_ids": "where"})
    model = _renamed(LLAMA.model, names)
    path = str(tmp_path / "decoder.onnx")
    onnx.save(model, path)
    assert infer_generation(model, model_path=path) is None  # nothing by names
    config = models.decoders.tiny_llama_genai_config()
    decoder = config["model"]["decoder"]
    decoder["filename"] = "decoder.onnx"
    decoder["inputs"].update(input_ids="tokens", position_ids="where", past_key_names="cache_k%d",
                             past_value_names="cache_v%d")
    decoder["outputs"].update(logits="scores", present_key_names="fresh_k%d", present_value_names="fresh_v%d")
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    generation = infer_generation(model, model_path=path)
    assert generation is not None
    assert [(f.output, f.input) for f in generation.feedback] == [
        ("fresh_k0", "cache_k0"), ("fresh_v0", "cache_v0"), ("fresh_k1", "cache_k1"),
        ("fresh_v1", "cache_v1")]
    assert generation.tokens == Tokens("scores", "tokens") and generation.position_ids == "where"
    # a config of another file of the directory (a Whisper encoder's) is not this model's
    decoder["filename"] = "encoder.onnx"
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    assert infer_generation(model, model_path=path) is None
    # unless the user names it
    named = GenerationOptions(genai_config=str(tmp_path / "genai_config.json"))
    assert infer_generation(model, named, model_path=path) == generation
    (tmp_path / "genai_config.json").write_text('{"model": []}')
    with pytest.raises(UsageError) as e:
        infer_generation(model, model_path=path)
    assert str(e.value) == (f"{tmp_path / 'genai_config.json'}: model is not an object (expected "
                            f"onnxruntime-genai's genai_config.json)")
    with pytest.raises(UsageError) as e:
        infer_generation(model, GenerationOptions(genai_config=str(tmp_path / "none.json")), model_path=path)
    assert str(e.value) == f"--genai-config {tmp_path / 'none.json'}: no such file"
    decoder["filename"] = "decoder.onnx"
    decoder["num_hidden_layers"] = 3
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError) as e:
        infer_generation(model, model_path=path)
    assert str(e.value) == (f"{tmp_path / 'genai_config.json'}: names output 'fresh_k2' (layer 2 of 3), "
                            f"which the model does not have")


STATES = parse("""
<ir_version: 8, opset_import: ["" : 17]>
states (float[1, 4] x, float[2, 1, 8] state, float[1, 8] h0, float[1, 8] c, float[1, 8] state_in,
        float[1, 8] memory, int64[1, 8] step_count, float[1, 3] hidden, float[1, 8] z_in) =>
       (float[1, 4] xn, float[2, 1, 8] stateN, float[1, 8] hn, float[1, 8] cN, float[1, 8] state_out,
        float[1, 8] new_memory, int64[1, 8] step_countN, float[1, 8] hiddenN, float[1, 8] z_out) {
    stateN = Identity (state)
    hn = Identity (h0)
    cN = Identity (c)
    state_out = Identity (state_in)
    new_memory = Identity (memory)
    step_countN = Identity (step_count)
    hiddenN = Identity (h0)
    z_out = Identity (z_in)
    xn = Identity (x)
}
""")


def test_recurrent_state_names_feed_their_inputs_when_the_types_agree():
    generation = infer_generation(STATES)
    assert generation is not None
    # not hiddenN ([1, 8] is no [1, 3]), nor step_countN, z_out, xn: no recurrent names
    assert [(f.output, f.input, f.kind) for f in generation.feedback] == [
        ("stateN", "state", "state"), ("hn", "h0", "state"), ("cN", "c", "state"),
        ("state_out", "state_in", "state"), ("new_memory", "memory", "state")]
    assert generation.tokens is None and generation.source == "state names"
    # streaming: its signal is chunked by its declared last dimension; inputs of other sizes are fed whole
    assert generation.chunking is not None and generation.chunking.inputs == ("x",)
    assert generation.summary() == "streaming: 5 states fed back, chunks of 4, 64 steps"


def test_a_model_feeding_nothing_back_is_no_generation():
    assert infer_generation(models.benign_mlp().model) is None
    assert infer_generation(LLAMA.model, GenerationOptions(off=True)) is None


def test_a_cache_without_tokens_to_decode_is_refused_not_judged_one_pass():
    model = _renamed(LLAMA.model, {"logits": "hidden"})
    with pytest.raises(UsageError) as e:
        infer_generation(model, model_path="llm/decoder.onnx")
    assert str(e.value) == ("llm/decoder.onnx: it feeds a KV cache back ('present.0.key' -> "
                            "'past_key_values.0.key') but has no integer 'input_ids' and float 'logits' to "
                            "decode greedily; --no-generation judges one forward pass instead")


def test_the_users_options_override_what_is_inferred():
    # names with "=" in them: the pair is split where both halves name the model's tensors
    inputs = [models.tensor("a=b", [1, 8]), models.tensor("x", [1, 8])]
    plain = models.make_model("acc", [models.node("Add", ["a=b", "x"], ["s=t"], "add")], inputs,
                              [models.tensor("s=t", [1, 8])])
    options = GenerationOptions(feedback=("s=t=a=b",), steps=5, max_length=300, chunk=8)
    generation = infer_generation(plain, options)
    assert generation is not None
    assert generation.feedback == (Feedback("s=t", "a=b", "state"),) and generation.source == "--feedback"
    assert generation.summary() == "streaming: 1 state fed back, chunks of 8, 5 steps, held to 300 chunks"
    swapped = GenerationOptions(feedback=("present.0.key=past_key_values.0.value",))
    llama = infer_generation(LLAMA.model, swapped)
    assert llama is not None and llama.source == "optimum names and --feedback"
    assert [(f.output, f.input) for f in llama.feedback][-2:] == [
        ("present.1.value", "past_key_values.1.value"), ("present.0.key", "past_key_values.0.value")]


@pytest.mark.parametrize("options, message", [
    (dict(feedback=("logits",)),
     "--feedback 'logits': expected OUT=IN, an output of the model and the input it feeds at the next step"),
    (dict(feedback=("nope=input_ids",)),
     "--feedback nope=input_ids: the model has no output 'nope' (outputs: logits, present.0.key, "
     "present.0.value, present.1.key, present.1.value)"),
    (dict(feedback=("logits=nope",)),
     "--feedback logits=nope: the model has no input 'nope' (inputs: input_ids, attention_mask, "
     "position_ids, past_key_values.0.key, past_key_values.0.value, past_key_values.1.key, "
     "past_key_values.1.value)"),
    (dict(feedback=("logits=input_ids",)), "--feedback logits=input_ids: output 'logits' (float32['batch', "
                                           "'sequence_length', 64]) cannot be fed as input 'input_ids' "
                                           "(int64['batch', 'sequence_length'])"),
    (dict(steps=0), "--steps 0: expected an integer >= 1"),
    (dict(max_length=0), "--max-length 0: expected an integer >= 1"),
    (dict(chunk=16), "--chunk 16: the model is a decoder (it is fed its tokens), not a streaming model"),
])
def test_a_wrong_option_is_one_line_naming_it(options, message):
    with pytest.raises(UsageError) as e:
        infer_generation(LLAMA.model, GenerationOptions(**options))
    assert str(e.value) == message


def test_a_streaming_model_is_chunked_by_its_declared_chunk():
    generation = infer_generation(streaming_state().model)
    assert generation is not None and generation.chunking is not None
    assert (generation.chunking.inputs, generation.chunking.size) == (("input",), 64)
    assert generation.summary() == "streaming: 1 state fed back, chunks of 64, 64 steps"


def test_step_names_round_trip():
    assert step_name("logits", 7) == "logits@step 7"
    assert split_step_name("a@step 3@step 12") == ("a@step 3", 12)
    assert split_step_name("logits") is None and split_step_name("x@step y") is None


# --- running it -------------------------------------------------------------------------------------

def _plain_onnxruntime_greedy(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], steps: int
                              ) -> tuple[list[np.ndarray], list[int]]:
    """A greedy generation as onnxruntime users write one, to check the runner against."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feed = dict(feed)
    logits, tokens = [], []
    for _ in range(steps + 1):
        out = dict(zip(names, session.run(names, feed)))
        logits.append(out["logits"])
        token = int(out["logits"][0, -1].argmax())
        tokens.append(token)
        feed["input_ids"] = np.array([[token]], np.int64)
        feed["attention_mask"] = np.ones((1, feed["attention_mask"].shape[1] + 1), np.int64)
        feed["position_ids"] = feed["position_ids"][:, -1:] + 1
        for name in names[1:]:
            feed[name.replace("present", "past_key_values")] = out[name]
    return logits, tokens


def test_the_reference_generation_is_a_plain_greedy_loop_on_one_session():
    runner, ctx = _runner(LLAMA, steps=8)
    as_runner: PlanRunner = runner  # a plan runner itself (mypy checks the protocol)
    assert as_runner.outputs == tuple(f"logits@step {s}" for s in range(9))
    reference = runner.reference(LLAMA_FEED)
    logits, tokens = _plain_onnxruntime_greedy(LLAMA.model, LLAMA_FEED, 8)
    for step in range(9):  # to float32 rounding: the oracle's sessions hold the weights by reference
        np.testing.assert_allclose(reference.at("logits", step), logits[step], rtol=1e-5, atol=1e-6)
    assert reference.tokens is not None and reference.tokens[0].tolist() == tokens
    assert runner.sessions_built == 1 and runner.probes_run == 9  # one session, a short run a step
    assert reference.lengths == tuple(range(8, 17)) and reference.positions == tuple(range(7, 16))
    # a candidate is one more session, whatever the steps
    runner.run(ctx.all_low_plan(), LLAMA_FEED)
    assert runner.sessions_built == 2 and runner.probes_run == 18


def test_a_prefill_of_tokens_alone_is_completed_as_a_generation_starts():
    generation = infer_generation(LLAMA.model)
    assert generation is not None
    feed = first_feed(generation, {"input_ids": LLAMA_FEED["input_ids"]})
    assert feed.keys() == LLAMA_FEED.keys()
    for name, value in LLAMA_FEED.items():
        np.testing.assert_array_equal(feed[name], value)
        assert feed[name].dtype == value.dtype
    with pytest.raises(DataError) as e:
        first_feed(generation, {"attention_mask": LLAMA_FEED["attention_mask"]})
    assert str(e.value) == ("the sample has no 'input_ids': a decoder's generation starts from its prompt "
                            "tokens")
    filled = {**LLAMA_FEED, "past_key_values.0.key": np.zeros((1, 2, 3, 8), np.float32)}
    del filled["attention_mask"]
    with pytest.raises(DataError) as e:
        first_feed(generation, filled)
    assert str(e.value) == ("the sample gives cache 'past_key_values.0.key' but not 'attention_mask': with a "
                            "cache already filled, its mask and positions are the sample's to give")


class _Nudging:
    """The emulator, recording the tokens each step is fed; a plan's logits at step 3 get their
    runner-up token raised above the top one (a candidate that chooses differently there)."""

    oracle = "nudging"
    inspection = None

    def __init__(self, ctx: ModelContext) -> None:
        self.emulator = Emulator(ctx)
        self.outputs = self.emulator.outputs
        self.switchable = self.emulator.switchable
        self.sessions_built = self.probes_run = 0
        self.fed: list[int] = []
        self.arrays: list[weakref.ref] = []

    def run(self, plan: PrecisionPlan | None, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.fed.append(int(feed["input_ids"][0, -1]))
        values = self.emulator.run(plan, feed)
        self.arrays += [weakref.ref(v) for n, v in values.items() if n.startswith("present")]
        if plan is not None and feed["attention_mask"].shape[1] == 8 + 3:
            last = values["logits"][0, -1]
            last[np.argsort(last)[-2]] = last.max() + 1.0
        return values

    def searching(self) -> _Nudging:
        return self


def test_candidates_are_fed_the_references_tokens_and_free_running_their_own():
    ctx = ModelContext.of(LLAMA.model)
    generation = infer_generation(LLAMA.model, GenerationOptions(steps=6))
    assert generation is not None
    nudging = _Nudging(ctx)
    runner = GenerationRunner(nudging, generation)
    plan = ctx.all_low_plan()
    forced = runner.generate(plan, LLAMA_FEED)  # runs the reference first, once
    reference_tokens = nudging.fed[1:7]  # the reference's own greedy choices, fed at steps 1-6
    assert runner.reference(LLAMA_FEED).tokens is not None
    assert forced.teacher_forced and nudging.fed[8:14] == reference_tokens
    assert forced.tokens is not None and forced.tokens[0, 3] != reference_tokens[3]  # its own choice
    nudging.fed.clear()
    free = runner.free_running(plan, LLAMA_FEED)
    assert nudging.fed[4] == free.tokens[0, 3] != reference_tokens[3]  # fed its own choice from step 4
    reference = runner.reference(LLAMA_FEED)
    agreement = token_agreement(reference, forced)
    assert (agreement.compared, agreement.agreeing, agreement.first_divergence) == (7, 6, 3)
    assert not token_agreement(reference, free).holds_for(4) and token_agreement(reference, free).holds_for(3)
    # the feed of a failing step, to look inside it: teacher-forced as the comparison saw it
    assert int(runner.feed_at(plan, LLAMA_FEED, 4)["input_ids"][0, 0]) == reference_tokens[3]


def test_memory_stays_flat_no_step_state_is_kept():
    ctx = ModelContext.of(LLAMA.model)
    sizes = {}
    for steps in (4, 12):
        generation = infer_generation(LLAMA.model, GenerationOptions(steps=steps))
        assert generation is not None
        nudging = _Nudging(ctx)
        run = GenerationRunner(nudging, generation).reference(LLAMA_FEED)
        gc.collect()
        assert len(nudging.arrays) == 4 * (steps + 1) and not [r for r in nudging.arrays if r() is not None]
        assert set(run.outputs) == {f"logits@step {s}" for s in range(steps + 1)}
        sizes[steps] = run.nbytes
    # what a step adds: its logits [1, 1, 64] in float32, its token and margin
    assert (sizes[12] - sizes[4]) / 8 == 64 * 4 + 8 + 4


def test_naive_fp16_fails_the_growing_state_at_step_30_and_its_state_pinned_passes():
    example = growing_state()
    runner, ctx = _runner(example, steps=32)
    reference = runner.reference(example.feeds[0])
    assert reference.peaks["hN"][29] < 65504 < reference.peaks["hN"][30]  # FP32 is fine: 64 276, 68 176
    prober = Prober(runner, example.feeds, [reference.outputs], Tolerance())
    plan = ctx.all_low_plan()
    assert prober.passes(plan) == (False, "output 'logits@step 30' 32 new NaN/Inf")
    assert prober.passes(plan.with_fp32(GROWING_STATE_NODES)) == (True, "")
    # the prefill alone, as before generations, passes: one forward pass cannot see it
    assert Prober(runner.runner, example.feeds, [runner.runner.run(None, example.feeds[0])],
                  Tolerance()).passes(plan) == (True, "")


def test_any_runner_runs_a_generation_the_written_fp16_model_in_onnx_reference_too():
    example = growing_state()
    ctx = ModelContext.of(example.model)
    generation = infer_generation(example.model, GenerationOptions(steps=31))
    assert generation is not None
    runner = GenerationRunner(reference_runner(ctx), generation)
    prober = Prober(runner, example.feeds, [runner.run(None, example.feeds[0])], Tolerance())
    assert prober.passes(ctx.all_low_plan()) == (False, "output 'logits@step 30' 32 new NaN/Inf")
    # one written model per plan, run once a step
    assert (runner.oracle, runner.sessions_built, runner.probes_run) == ("reference", 2, 64)


def test_a_streaming_model_is_fed_its_chunks_in_turn_with_its_state():
    example = streaming_state()
    runner, ctx = _runner(example, steps=9)
    sample = example.feeds[0]
    run = runner.reference(sample)
    state = sample["state"]
    emulator = Emulator(ctx)
    for step in range(10):  # 8 chunks, then the first again
        at = (step % 8) * 64
        out = emulator.run(None, {"input": sample["input"][:, at:at + 64], "state": state})
        np.testing.assert_array_equal(run.at("output", step), out["output"])
        state = out["stateN"]
    assert run.lengths == tuple(range(1, 11)) and run.tokens is None and run.positions == ()
    assert Prober(runner, [sample], [run.outputs], Tolerance()).passes(ctx.all_low_plan()) == (True, "")
    with pytest.raises(DataError) as e:
        runner.reference({"input": sample["input"][:, :100], "state": state})
    assert str(e.value) == ("input 'input': 100 elements along its last axis are not a whole number of "
                            "64-element chunks")


def test_per_output_tolerances_apply_at_every_step_and_the_search_shares_the_reference():
    runner, _ = _runner(growing_state(), steps=2)
    tol = Tolerance().with_output("logits", rtol=0.5).with_output("hN", rtol=0.1)
    assert [name for name, _ in runner.tolerance(tol).per_output] == ["logits@step 0", "logits@step 1",
                                                                     "logits@step 2"]
    assert runner.tolerance(Tolerance()) == Tolerance()
    runner.reference(growing_state().feeds[0])
    searching = runner.searching()
    assert searching.outputs == runner.outputs and searching._taught is runner._taught
