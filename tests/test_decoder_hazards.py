"""Decoder hazards as rules with evidence, and the fixes made before the search pins (issue 32, item 4): each
rule of onnx_precision.rules.decoder says what it saw (the node, the constant's value, the position bound);
a mask sentinel is written finite (-16376 in FP16), rotary positions, RMSNorm statistics and softcaps are
kept FP32, each fix measured on models/decoders' decoders and small graphs built here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import decoders
from models.decoders import generate
from models.generate import model_path as example_path
from onnx_precision import policy, rules
from onnx_precision.context import ModelContext, load_model
from onnx_precision.convert import convert_model
from onnx_precision.generation import GenerationOptions, infer_generation
from onnx_precision.judge import Tolerance, compare_outputs
from onnx_precision.oracle import Emulator
from onnx_precision.plan import PrecisionPlan
from onnx_precision.policy.decoder_rewrites import PROVENANCE
from onnx_precision.rewriter import rewrite
from onnx_precision.rules import decoder

FLOAT32_MIN = float(np.finfo(np.float32).min)
ROTARY = ("rotary_pos_cast", "rotary_pos_unsqueeze", "rotary_freqs", "rotary_angles", "rotary_cos",
          "rotary_sin")


@dataclass(frozen=True)
class S:
    """Recorded stats of one tensor (the fields rules read)."""

    max_abs: float
    min_nonzero_abs: float = 1.0
    flush_fraction: float = 0.0


def llama(sentinel: float = FLOAT32_MIN) -> ModelContext:
    """models/decoders' Llama in memory (no genai_config.json beside it: no max length known), its mask
    sentinel ``sentinel``."""
    model = decoders.tiny_llama().model
    for init in model.graph.initializer:
        if init.name == "float_min":
            init.CopyFrom(numpy_helper.from_array(np.array(sentinel, np.float32), "float_min"))
    return ModelContext.of(model)


def context(graph: onnx.GraphProto) -> ModelContext:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ModelContext.of(model)


def findings(ctx: ModelContext, rule: rules.Rule, stats=None, generation=None) -> list[rules.Finding]:
    return list(rules.run_rules(rules.ModelFacts(ctx, stats, generation), [rule]).findings)


def skipped(ctx: ModelContext, rule: rules.Rule, node: str, generation=None) -> set[str]:
    """Why ``rule`` passed over ``node``."""
    run = rules.run_rules(rules.ModelFacts(ctx, generation=generation), [rule])
    return {s.reason for s in run.skipped if s.node == node}


@pytest.mark.parametrize("sentinel", [FLOAT32_MIN, -1e9], ids=["float32-min", "minus-1e9"])
def test_the_llamas_mask_sentinel_is_named_with_its_value_and_the_softmax_it_reaches(sentinel):
    (found,) = findings(llama(sentinel), decoder.mask_sentinel)
    assert (found.node, found.severity, found.confirmed) == ("mask_sentinel", "high", True)
    assert found.evidence == {"constant": "float_min", "value": float(np.float32(sentinel)),
                              "softmax": "layers.0/attn/softmax", "written_as": -16376.0}
    assert found.message == (
        f"mask sentinel {np.float32(sentinel):.4g} (constant 'float_min') is -inf in FP16 and reaches "
        "Softmax 'layers.0/attn/softmax': a fully masked row (left padding) is NaN there; written as -16376 "
        "(0.25 of FP16's lowest finite value: scores added to it stay finite) before pinning")
    # -1e4 is finite in FP16: no sentinel to write
    assert findings(llama(-1e4), decoder.mask_sentinel) == []


def test_rotary_positions_are_flagged_where_they_can_pass_2048_and_not_under_a_shorter_max_length():
    ctx = llama()
    to_4096 = infer_generation(ctx.model, GenerationOptions(max_length=4096))
    found = findings(ctx, decoder.rotary_positions, generation=to_4096)
    assert [f.node for f in found] == list(ROTARY)
    assert {(f.severity, f.confirmed) for f in found} == {("high", True)}
    assert found[0].evidence == {
        "positions": "position_ids", "cast": "rotary_pos_cast", "frequencies": "inv_freq",
        "sin_cos": "rotary_cos/rotary_sin", "position_bound": 4096, "exact_up_to": 2048,
        "largest_angle": 4095.0, "angle_spacing": 2.0}
    assert found[0].message == (
        "positions cast from 'position_ids' reach 4095 (max length 4096): FP16 holds integers exactly only "
        "up to 2048; angles up to 4095 rad are 2 rad apart there; the 6 node(s) from 'rotary_pos_cast' to "
        "rotary_cos/rotary_sin stay FP32")
    # no max length known: the positions can pass 2048
    unknown = findings(ctx, decoder.rotary_positions)
    assert len(unknown) == 6 and unknown[0].evidence["position_bound"] == "none known"
    # a max length of 1024 (--max-length), or the genai_config.json's 128 beside the committed model: exact
    short = infer_generation(ctx.model, GenerationOptions(max_length=1024))
    assert findings(ctx, decoder.rotary_positions, generation=short) == []
    assert skipped(ctx, decoder.rotary_positions, "rotary_freqs", short) == {
        "positions stay below 1024 (the generation's max length): exact in FP16 (up to 2048)"}
    assert findings(load_model(generate.model_path("tiny_llama")), decoder.rotary_positions) == []
    # the mask's own int -> float Cast feeds no Sin/Cos
    assert skipped(ctx, decoder.rotary_positions, "mask_cast_float") == {
        "not on a path from integer positions to Sin/Cos"}


RMS_NORM = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4, 64] x) => (float[4, 64] y) {
  two = Constant<value = float {2.0}>()
  eps = Constant<value = float {1e-6}>()
  sq = Pow(x, two)
  var = ReduceMean<axes = [-1], keepdims = 1>(sq)
  var_eps = Add(var, eps)
  std = Sqrt(var_eps)
  inv = Reciprocal(std)
  y = Mul(x, inv)
}"""
STATISTIC = ["node_of_sq", "node_of_var", "node_of_var_eps", "node_of_std", "node_of_inv"]


def test_an_rms_norms_statistic_is_flagged_and_a_layer_norms_is_left_to_its_fusion():
    ctx = ModelContext.of(onnx.parser.parse_model(RMS_NORM))
    found = findings(ctx, decoder.rms_statistics, stats={"x": S(1000.0)})
    assert [f.node for f in found] == STATISTIC
    assert found[0].confirmed is True and found[0].evidence["square_limit"] == pytest.approx(255.94, abs=0.01)
    assert found[0].evidence["statistic"] == "/".join(STATISTIC) and found[0].evidence["x"] == "x"
    assert found[0].evidence["epsilon"] == pytest.approx(1e-6) and found[0].evidence["x_max_abs"] == 1000.0
    assert [f.confirmed for f in findings(ctx, decoder.rms_statistics, stats={"x": S(100.0)})] == [False] * 5
    # the Llama's five RMSNorms, and none in a decomposed LayerNorm (written with FP32 statistics already)
    assert len(findings(llama(), decoder.rms_statistics)) == 25
    assert findings(load_model(example_path("layernorm_eps")), decoder.rms_statistics) == []


def softcapped(cap: float = 30.0) -> ModelContext:
    """Logits ``cap``·tanh(h W / ``cap``) of 8 positions over 32 tokens, as Gemma caps them."""
    w = np.random.default_rng(1).normal(0.0, 40.0, (16, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["h", "lm_head"], ["raw"], "lm_head"),
         helper.make_node("Div", ["raw", "cap"], ["scaled"], "softcap/div"),
         helper.make_node("Tanh", ["scaled"], ["capped"], "softcap/tanh"),
         helper.make_node("Mul", ["capped", "cap"], ["logits"], "softcap/scale")],
        "g", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [8, 32])],
        [numpy_helper.from_array(w, "lm_head"), numpy_helper.from_array(np.array(cap, np.float32), "cap")])
    return context(graph)


def test_a_softcaps_tanh_and_scale_are_flagged_with_the_cap_and_where_fp16_saturates():
    ctx = softcapped()
    found = findings(ctx, decoder.softcap, stats={"raw": S(400.0)})
    assert [f.node for f in found] == ["softcap/tanh", "softcap/scale"]
    assert found[0].confirmed is True and found[0].evidence["cap"] == 30.0
    assert found[0].evidence["saturates_at"] == pytest.approx(135.2, abs=0.1)  # 30 · 13 ln 2 / 2
    assert found[0].evidence["divide"] == "softcap/div" and found[0].evidence["capped"] == "raw"
    assert [f.confirmed for f in findings(ctx, decoder.softcap, stats={"raw": S(100.0)})] == [False, False]
    assert [f.confirmed for f in findings(ctx, decoder.softcap)] == [None, None]
    assert findings(softcapped(cap=-30.0), decoder.softcap) == []  # not a cap


def test_the_state_fed_back_is_named_from_input_to_output_and_a_tanh_bounded_one_is_not():
    ctx = ModelContext.of(decoders.growing_state().model)
    found = findings(ctx, decoder.state_path)
    assert [f.node for f in found] == ["state/h_unsqueeze", "state/add_past", "state/last"]
    assert found[0].evidence == {"state": "h", "fed_from": "hN", "path_nodes": 3, "steps": 64}
    assert found[0].message.startswith("on the path of state 'h' -> 'hN', fed back at each of the 64 step(s)")
    stated = infer_generation(ctx.model, GenerationOptions(steps=8))
    assert findings(ctx, decoder.state_path, generation=stated)[0].evidence["steps"] == 8
    assert findings(ctx, decoder.state_path, stats={"states": S(7e4)})[1].confirmed is True
    streaming = ModelContext.of(decoders.streaming_state().model)
    assert findings(streaming, decoder.state_path) == []
    assert skipped(streaming, decoder.state_path, "rnn0/add") == {
        "state 'state' is made by rnn0/tanh/rnn1/tanh: bounded, it cannot grow"}
    assert findings(llama(), decoder.state_path) == []  # a KV cache grows in length, not in value


def test_the_residual_stream_is_one_chain_across_layers_with_its_headroom_where_measured():
    stats = {"layers.1_out": S(3e4), "layers.0_res1": S(12.0)}
    found = findings(llama(), decoder.residual_chain, stats=stats)
    assert [(f.node, f.evidence["depth"]) for f in found] == [
        ("layers.0/Add", 1), ("layers.0/Add_1", 2), ("layers.1/Add", 3), ("layers.1/Add_1", 4)]
    assert {(f.evidence["chain_length"], f.evidence["stream_from"], f.severity) for f in found} == {
        (4, "x0", "low")}
    last = found[-1]
    assert last.confirmed is False and last.evidence["binades_left"] == pytest.approx(1.126, abs=1e-3)
    assert last.message == ("residual Add 4 of 4 on the stream from 'x0': 1.1 binade(s) left to 65504 here; "
                            "the stream grows with depth and with the steps, which the search measures")
    assert found[1].confirmed is None  # its output was not recorded
    # the masked scores' Add and the rotary Adds are no residual
    assert skipped(llama(), decoder.residual_chain, "layers.0/attn/add_mask") == {
        "not an Add of a residual stream of two Adds or more"}


# --- the fixes ----------------------------------------------------------------------------------------


def prefill() -> dict[str, np.ndarray]:
    return dict(decoders.tiny_llama().feeds[0])


def left_padded() -> dict[str, np.ndarray]:
    """Two prompts of 8 tokens, the first left-padded by 2: its positions 0 and 1 see no key at all."""
    shape = decoders.LlamaShape(2, 16, 2, 32, 64)
    feed = decoders.llama_prefill(shape, np.array([[0, 0, 5, 9, 11, 3, 7, 2], [4, 8, 15, 16, 23, 42, 1, 6]]))
    feed["attention_mask"] = np.array([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8], np.int64)
    feed["position_ids"] = np.maximum(np.cumsum(feed["attention_mask"], axis=1) - 1, 0)
    return feed


def unmasked(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs without the fully masked rows of :func:`left_padded` (batch 0, positions 0 and 1)."""
    kept = {}
    for name, value in outputs.items():
        axis = 1 if name == "logits" else 2  # present.N.key: [batch, heads, positions, dim]
        kept[f"{name} (padded prompt)"] = np.take(value[:1], range(2, 8), axis=axis)
        kept[f"{name} (full prompt)"] = value[1:]
    return kept


def run_written(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def largest(ctx: ModelContext, name: str) -> float:
    """The most negative value of the constant ``name``."""
    return float(numpy_helper.to_array(ctx.constants[name]).min())


def all_fp16(ctx: ModelContext) -> PrecisionPlan:
    return policy.resolve(ctx, ctx.all_low_plan())


def pinned(plan: PrecisionPlan, pins: dict) -> PrecisionPlan:
    return plan.with_fp32_reasons({node: [reason] for node, reason in pins.items()})


def test_the_llamas_sentinel_is_written_finite_which_frees_its_mul_and_changes_no_fp32_output():
    ctx = llama()
    (found,) = findings(ctx, decoder.mask_sentinel)
    fixed = policy.rewrite_decoder_hazards(ctx)
    (done,) = fixed.sentinels
    assert (done.node, done.constant, done.copy) == ("mask_sentinel", "float_min", None)
    assert done.why == found.message
    assert largest(fixed.ctx, "float_min") == done.written_as == -16376.0
    assert largest(ctx, "float_min") == FLOAT32_MIN  # the given model is left as it was
    assert fixed.ctx.notes == (f"'mask_sentinel': {found.message}",)
    assert findings(fixed.ctx, decoder.mask_sentinel) == []
    assert policy.rewrite_decoder_hazards(fixed.ctx).ctx is fixed.ctx  # nothing left to rewrite
    # the Mul was FP32 in every plan (FP16 cannot hold its constant); all-FP16 now computes it in FP16
    assert "mask_sentinel" in policy.always_fp32(ctx) and not all_fp16(ctx).is_low("mask_sentinel")
    assert "mask_sentinel" not in policy.always_fp32(fixed.ctx)
    assert all_fp16(fixed.ctx).is_low("mask_sentinel")
    feed = prefill()
    reference = Emulator(ctx).run(None, feed)
    emulator = Emulator(fixed.ctx)
    for name, value in emulator.run(None, feed).items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-6, atol=1e-6)
    assert compare_outputs(reference, emulator.run(all_fp16(fixed.ctx), feed), Tolerance(), "emulate").passed
    written = rewrite(fixed.ctx, fixed.ctx.all_low_plan()).model
    mul = next(n for n in written.graph.node if n.name == "mask_sentinel")
    assert mul.doc_string == f"{PROVENANCE}: {found.message}"
    (sentinel,) = [i for i in written.graph.initializer if i.name in mul.input]
    assert sentinel.data_type == TensorProto.FLOAT16 and float(numpy_helper.to_array(sentinel)) == -16376.0
    assert compare_outputs(reference, run_written(written, feed), Tolerance(), "written").passed


@pytest.mark.slow  # 0.6 s in a full run on 2 busy cores
@pytest.mark.parametrize("sentinel", [FLOAT32_MIN, -1e9], ids=["float32-min", "minus-1e9"])
def test_a_left_padded_batch_is_nan_in_fp16_with_the_sentinel_and_finite_once_rewritten(sentinel):
    ctx, feed = llama(sentinel), left_padded()
    emulator = Emulator(ctx)
    reference = emulator.run(None, feed)
    assert all(np.isfinite(v).all() for v in reference.values())
    before = emulator.run(all_fp16(ctx), feed)["logits"]
    # the padding rows are NaN, and through the next layer's keys so is every row of the padded prompt
    # (onnxruntime 1.32's CPU Softmax in FP16 makes these -inf rows uniform, where IEEE arithmetic, the
    # emulation and its own float Softmax give NaN: what a padded row gives depends on the kernel)
    assert np.isnan(before[0]).all(axis=-1).tolist() == [True] * 8 and np.isfinite(before[1]).all()
    fixed = policy.rewrite_decoder_hazards(ctx).ctx
    emulator = Emulator(fixed)
    fixed_fp32 = emulator.run(None, feed)
    for name, value in unmasked(reference).items():  # FP32 changes only the rows no key is left to
        np.testing.assert_allclose(unmasked(fixed_fp32)[name], value, rtol=1e-6, atol=1e-6)
    after = emulator.run(all_fp16(fixed), feed)
    assert all(np.isfinite(v).all() for v in after.values())
    assert compare_outputs(unmasked(reference), unmasked(after), Tolerance(), "emulate").passed
    written = run_written(rewrite(fixed, fixed.all_low_plan()).model, feed)
    assert all(np.isfinite(v).all() for v in written.values())
    assert compare_outputs(unmasked(reference), unmasked(written), Tolerance(), "written").passed


def test_a_sentinel_shared_with_a_clamp_is_rewritten_in_one_copy_the_masks_alone_read():
    graph = helper.make_graph(
        [helper.make_node("Sub", ["one", "allowed"], ["inverted"], "invert"),
         helper.make_node("Mul", ["inverted", "neg_big"], ["mask"], "sentinel"),
         helper.make_node("Add", ["scores", "mask"], ["masked"], "add_mask"),
         helper.make_node("Softmax", ["masked"], ["probs"], "softmax", axis=-1),
         helper.make_node("Where", ["keep", "scores", "neg_big"], ["selected"], "select"),
         helper.make_node("Softmax", ["selected"], ["probs2"], "softmax2", axis=-1),
         helper.make_node("Max", ["scores", "neg_big"], ["floor"], "clamp")],
        "g", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("allowed", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 4])
         for out in ("probs", "probs2", "floor")],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(-1e9, np.float32), "neg_big")])
    fixed = policy.rewrite_decoder_hazards(context(graph))
    assert [(d.node, d.constant, d.copy) for d in fixed.sentinels] == [
        ("sentinel", "neg_big", "neg_big_finite"), ("select", "neg_big", "neg_big_finite")]
    nodes = {n.name: list(n.input) for n in fixed.ctx.model.graph.node}
    assert nodes["sentinel"] == ["inverted", "neg_big_finite"] and nodes["clamp"] == ["scores", "neg_big"]
    assert nodes["select"] == ["keep", "scores", "neg_big_finite"]
    assert largest(fixed.ctx, "neg_big") == -1e9 and largest(fixed.ctx, "neg_big_finite") == -16376.0
    onnx.checker.check_model(fixed.ctx.model, full_check=True)


def test_rotary_positions_up_to_4096_are_kept_fp32_which_holds_their_logits():
    ctx = llama()
    to_4096 = infer_generation(ctx.model, GenerationOptions(max_length=4096))
    plan = all_fp16(ctx)
    pins = policy.decoder_pins(ctx, plan, generation=to_4096)
    assert {n: r.detail.split(":")[0] for n, r in pins.items() if n in ROTARY} == dict.fromkeys(
        ROTARY, "rotary-positions")
    # at positions 4088-4095 all-FP16 logits are 2.7 off FP32; the path FP32 keeps them at 0.015
    feed = {**prefill(), "position_ids": np.arange(4088, 4096, dtype=np.int64)[None]}
    emulator = Emulator(ctx)
    reference = emulator.run(None, feed)
    assert not compare_outputs(reference, emulator.run(plan, feed), Tolerance(), "emulate").passed
    rotary = {n: r for n, r in pins.items() if n in ROTARY}
    assert compare_outputs(reference, emulator.run(pinned(plan, rotary), feed), Tolerance(), "emulate").passed
    short = infer_generation(ctx.model, GenerationOptions(max_length=1024))
    assert not set(policy.decoder_pins(ctx, plan, generation=short)) & set(ROTARY)


def test_in_a_generation_an_rms_norms_statistic_is_kept_fp32_whatever_the_samples_show():
    ctx = ModelContext.of(onnx.parser.parse_model(RMS_NORM))
    plan = all_fp16(ctx)
    # run once, the samples' |x| dismiss the finding; run over steps (y fed back as x), they cannot
    assert policy.decoder_pins(ctx, plan, stats={"x": S(100.0)}) == {}
    stepped = infer_generation(ctx.model, GenerationOptions(feedback=("y=x",)))
    assert stepped is not None
    pins = policy.decoder_pins(ctx, plan, stats={"x": S(100.0)}, generation=stepped)
    assert sorted(pins) == sorted(STATISTIC)
    # rows of |x| up to 1000: all-FP16 squares are inf and y is 0; the statistic FP32 keeps y
    feed = {"x": (np.random.default_rng(0).normal(0, 1, (4, 64)) * [[1000.0], [1.0], [300.0], [10.0]])
            .astype(np.float32)}
    emulator = Emulator(ctx)
    reference = emulator.run(None, feed)
    assert not compare_outputs(reference, emulator.run(plan, feed), Tolerance(), "emulate").passed
    assert compare_outputs(reference, emulator.run(pinned(plan, pins), feed), Tolerance(), "emulate").passed


def test_a_softcaps_tanh_and_scale_are_kept_fp32_where_the_ranges_show_it_saturating():
    ctx = softcapped()
    plan = all_fp16(ctx)
    saturating = policy.decoder_pins(ctx, plan, stats={"raw": S(400.0)})
    assert sorted(saturating) == ["softcap/scale", "softcap/tanh"]
    assert policy.decoder_pins(ctx, plan, stats={"raw": S(100.0)}) == {}  # the ranges dismiss it
    feed = {"h": np.random.default_rng(2).normal(0.0, 1.0, (8, 16)).astype(np.float32)}
    emulator = Emulator(ctx)
    reference = emulator.run(None, feed)["logits"]
    raw = float(np.abs(feed["h"] @ numpy_helper.to_array(ctx.constants["lm_head"])).max())
    pins = policy.decoder_pins(ctx, plan, stats={"raw": S(raw)})
    fp16 = emulator.run(plan, feed)["logits"]
    kept = emulator.run(pinned(plan, pins), feed)["logits"]
    top = reference.argmax(-1)
    # all-FP16 rounds every capped logit past 135 to 30: ties, and the first of them wins
    assert (fp16.argmax(-1) == top).mean() < 0.75 and (kept.argmax(-1) == top).all()


@pytest.mark.slow  # 1.6 s in a full run on 2 busy cores
def test_auto_conversion_pins_what_the_decoder_rules_keep_fp32_before_its_search():
    # in memory, no genai_config.json says how long the positions go: the rotary path is pinned with the
    # RMSNorms' statistics, though the prefill passes without them
    done = convert_model(decoders.tiny_llama().model, prefill())
    reasons = {n: d.reasons[0].detail.split(":")[0] for n, d in done.plan.decisions.items()
               if not d.precision.is_low and d.reasons and d.reasons[0].source == "rule"}
    assert {n for n, r in reasons.items() if r == "rotary-positions"} == set(ROTARY)
    assert len([r for r in reasons.values() if r == "rms-statistics"]) == 25
    assert done.plan.is_low("layers.0/Add") and done.plan.is_low("lm_head")
