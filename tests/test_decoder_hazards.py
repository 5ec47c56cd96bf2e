"""Decoder hazards as rules with evidence (issue 32, item 4): each rule of onnx_precision.rules.decoder says
what it saw (the node, the constant's value, the position bound), on models/decoders' decoders and small
graphs built here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import decoders
from models.decoders import generate
from models.generate import model_path as example_path
from onnx_precision import rules
from onnx_precision.context import ModelContext, load_model
from onnx_precision.generation import GenerationOptions, infer_generation
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
