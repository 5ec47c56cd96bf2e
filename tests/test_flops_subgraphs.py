"""FLOP estimates inside If branches, Loop and Scan bodies and of recurrent ops, and what a share says
of the compute it could not weigh (issue 33, item 1).

Silero VAD's whole network sits in an If: its STFT Conv (a 258 x 1 x 256 basis) was estimated at 1 FLOP
and its two LSTMs at 1, so a BF16 run whose every Conv and LSTM stays FP32 read "51.5% of estimated
FLOPs" and passed --min-16bit-share 50. A captcha reader's LSTM (~167 MFLOP) was estimated at its output's
size. The models here are shaped like those (:mod:`models.compute`); each figure is checked against the
hand formula.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import models
from models import compute
from onnx_precision.cli import main
from onnx_precision.flops import FlopShares, NodeFlops, estimate_flops, integer_kernel_flops, unknown_cost
from onnx_precision.plan import Precision, PrecisionPlan, Reason, uniform_plan


def _shapes(example: compute.Example) -> dict[str, tuple[int, ...]]:
    return {name: np.shape(value) for name, value in example.feeds[0].items()}


def test_a_conv_in_an_if_branch_reading_outer_scope_weights_costs_its_conv():
    # each branch pads the audio by amounts it computes from constants (Concat, Reshape, Slice,
    # Transpose), then convolves it with a main-graph basis: 2 x frames x bins x kernel; 16 kHz:
    # (4096 + 2 x 64 - 256) / 128 + 1 = 32 frames of 258 bins, 8 kHz: 64 frames of 130; was 512 and 256
    example = compute.stft_in_if()
    flops = estimate_flops(example.model, _shapes(example))
    assert flops["k16_stft"] == 2 * 32 * 258 * 256 == 4_227_072
    assert flops["k8_stft"] == 2 * 64 * 130 * 128 == 2_129_920
    assert flops["k16_pad"] == 4096 + 128 and flops["k8_pad"] == 4096 + 64  # the padded audio written
    assert flops["k16_power"] == 32 * 258
    assert unknown_cost(flops) == {}  # both branches counted: the sample rate is a value, not a shape


def test_an_if_on_a_known_input_value_counts_the_branch_it_takes():
    example = compute.stft_in_if()
    flops = estimate_flops(example.model, _shapes(example), example.feeds[0])  # sr = 16000
    assert flops["k16_stft"] == 4_227_072
    # the 8 kHz branch is not run: its nodes are counted (the model holds them) and weigh nothing
    assert {n: f for n, f in flops.items() if n.startswith("k8_") and f} == {
        "k8_pad": 1.0, "k8_unsqueeze": 1.0, "k8_stft": 1.0, "k8_power": 1.0}
    assert unknown_cost(flops) == {}


def test_convert_counts_the_branch_its_sample_takes(tmp_path):
    # Silero VAD branches on its sample rate, an input: the 16 kHz sample runs the 16 kHz STFT only
    example = compute.stft_in_if()
    path, data = str(tmp_path / "vad.onnx"), str(tmp_path / "audio.npz")
    onnx.save(example.model, path)
    np.savez(data, **example.feeds[0])
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "-q"]) == 0
    with open(tmp_path / "o.report.json", encoding="utf-8") as f:
        nodes = json.load(f)["nodes"]
    assert (nodes["k16_stft"]["flops"], nodes["k8_stft"]["flops"]) == (4_227_072, 1)  # was 2 129 920


def test_a_branch_reading_an_outer_constant_as_axes_has_its_shapes():
    # models/if_branch: the then branch's ReduceSum reads its axes from a main-graph initializer, which
    # ONNX's inference of the branch does not see: the Sqrt after it was of unknown cost
    example = models.build("if_branch")
    flops = estimate_flops(example.model, _shapes(example))
    assert unknown_cost(flops) == {} and flops["then_norm"] == 1 and flops["then_normalize"] == 64


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_recurrent_op_costs_its_gates_at_every_step(kind):
    # 64 steps (image columns) x batch 1 x 2 directions x gates x 64 hidden x (2 x (32 inputs + 64
    # hidden) + 3): the two products of every gate, then bias, activation and state update; the LSTM
    # was estimated at its output's 8 192 elements
    example = compute.crnn(kind)
    flops = estimate_flops(example.model, _shapes(example))
    gates = compute.GATES[kind]
    assert flops["rnn"] == 64 * 1 * 2 * gates * 64 * (2 * (32 + 64) + 3)
    assert flops["conv"] == 2 * (32 * 8 * 64) * 9 and flops["head"] == 2 * 64 * 37 * 128


def test_a_dynamically_quantized_lstm_costs_an_lstm_as_int8_compute():
    # com.microsoft DynamicQuantizeLSTM (int8 W [2, 32, 256], R [2, 64, 256]): ONNX infers nothing of
    # it, so its cost was its input's size and every shape after it unknown (2 048 and 1 FLOP)
    example = compute.quantized_lstm()
    flops = estimate_flops(example.model, _shapes(example))
    lstm = 64 * 2 * 4 * 64 * (2 * (32 + 64) + 3)
    assert flops["rnn"] == lstm == 6_389_760
    assert flops["join_directions"] == 64 * 2 * 64  # its output's shape declared as an LSTM's
    assert integer_kernel_flops(example.model, _shapes(example), {"rnn"}) == {"rnn": lstm}
    assert unknown_cost(flops) == {}


def test_a_run_counts_a_dynamically_quantized_lstm_as_int8(tmp_path, capsys):
    # it was float compute planned FP32 (onnxruntime's kernel takes float32 only), at 2 048 FLOPs:
    # "FP16: 6/7 nodes (85.7%)" of a model whose compute is mostly the int8 LSTM's
    example = compute.quantized_lstm()
    path, data = str(tmp_path / "q.onnx"), str(tmp_path / "x.npz")
    onnx.save(example.model, path)
    np.savez(data, **example.feeds[0])
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data]) == 0
    assert ("FP16: 6/6 non-quantized nodes (100.0%), 100.0% of the non-quantized estimated FLOPs; 87.1% of "
            "all FLOPs are INT8") in capsys.readouterr().out.splitlines()


def _value(name: str, shape: list, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(graph: onnx.GraphProto, *domains: str) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets)


def _loop_model(trips: int | None) -> onnx.ModelProto:
    """x [4, 16] -> Loop whose body multiplies the carried value by w [16, 16]: ``trips`` times (a
    Constant trip count), or, with None, while its iteration number is below 4 (no trip count: a while
    loop, 5 iterations)."""
    flag, i64 = TensorProto.BOOL, TensorProto.INT64
    keep_going = (helper.make_node("Identity", ["cond"], ["cond_out"], name="keep_going") if trips is not None
                  else helper.make_node("Less", ["i", "last"], ["cond_out"], name="keep_going"))
    step = helper.make_node("MatMul", ["h", "w"], ["h2"], name="step")
    body = helper.make_graph([step, keep_going], "body",
                             [_value("i", [], i64), _value("cond", [], flag), _value("h", [4, 16])],
                             [_value("cond_out", [], flag), _value("h2", [4, 16])])
    count = [] if trips is None else [helper.make_node("Constant", [], ["n"], name="trips",
                                                       value=helper.make_tensor("t", i64, [], [trips]))]
    loop = helper.make_node("Loop", ["" if trips is None else "n", "go", "x"], ["y"], name="loop",
                            body=body)
    inits = [helper.make_tensor("go", flag, [], [True]), helper.make_tensor("last", i64, [], [4]),
             onnx.numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")]
    return _model(helper.make_graph(count + [loop], "loop", [_value("x", [4, 16])], [_value("y", [4, 16])],
                                    inits))


def test_a_loop_body_counts_once_per_iteration_of_its_constant_trip_count():
    flops = estimate_flops(_loop_model(5), {"x": (4, 16)})
    assert flops["step"] == 5 * 2 * 4 * 16 * 16 and unknown_cost(flops) == {}


def test_a_loop_whose_trip_count_is_not_a_constant_is_compute_of_unknown_cost():
    flops = estimate_flops(_loop_model(None), {"x": (4, 16)})
    assert flops["step"] == 2 * 4 * 16 * 16 and flops["keep_going"] == 0  # one iteration, and said so
    assert unknown_cost(flops) == {"step": "MatMul in Loop 'loop', whose trip count is not a constant"}


def test_a_run_says_how_much_compute_its_share_could_not_weigh_and_the_gate_refuses_it(tmp_path, capsys):
    path, data = str(tmp_path / "loop.onnx"), str(tmp_path / "x.npz")
    onnx.save(_loop_model(None), path)
    np.savez(data, x=np.random.default_rng(0).uniform(-1, 1, (4, 16)).astype(np.float32))
    unknown = ("the cost of 1 node(s) is unknown (1 MatMul in Loop 'loop', whose trip count is not a "
               "constant)")
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data]) == 0
    assert f"FP16: 2/2 nodes (100.0%), 100.0% of estimated FLOPs; {unknown}, each counted 1 FLOP" in \
        capsys.readouterr().out.splitlines()
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data,
                 "--min-16bit-share", "50"]) == 1  # exit 0: the guess was 100%
    assert capsys.readouterr().out.splitlines()[1].endswith(
        f": failed (the 16-bit share cannot be held to --min-16bit-share 50: {unknown}, e.g. 'step' (MatMul "
        f"in Loop 'loop', whose trip count is not a constant); the share of the rest is 100.0%)")


def test_a_scan_body_counts_once_per_step():
    steps = [helper.make_node("Add", ["acc", "row"], ["acc2"], name="accumulate"),
             helper.make_node("Identity", ["acc2"], ["seen"], name="emit")]
    body = helper.make_graph(steps, "body", [_value("acc", [8]), _value("row", [8])],
                             [_value("acc2", [8]), _value("seen", [8])])
    scan = helper.make_node("Scan", ["init", "x"], ["total", "all"], name="scan", body=body,
                            num_scan_inputs=1)
    graph = helper.make_graph([scan], "scan", [_value("x", ["T", 8])],
                              [_value("total", [8]), _value("all", ["T", 8])],
                              [onnx.numpy_helper.from_array(np.zeros(8, np.float32), "init")])
    flops = estimate_flops(_model(graph), {"x": (30, 8)})
    assert flops["accumulate"] == flops["emit"] == 30 * 8


def test_an_op_of_an_unknown_domain_or_an_attention_kernel_is_of_unknown_cost():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="custom", domain="acme.ops"),
             helper.make_node("MultiHeadAttention", ["m", "m", "m"], ["a"], name="attention",
                              domain="com.microsoft", num_heads=2),
             helper.make_node("Gelu", ["a"], ["y"], name="gelu", domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [_value("x", [1, 4, 8])], [_value("y", [1, 4, 8])])
    flops = estimate_flops(_model(graph, "acme.ops", "com.microsoft"), {"x": (1, 4, 8)})
    assert unknown_cost(flops) == {"custom": "Mystery", "attention": "MultiHeadAttention"}
    assert flops["custom"] == flops["attention"] == 1.0 and flops["gelu"] == 32  # elementwise, its output


def _shares(flops: dict[str, float], unknown: dict[str, str]) -> tuple[FlopShares, PrecisionPlan]:
    plan = uniform_plan(flops, Precision.FP16, Reason("default", "all"))
    return FlopShares(NodeFlops(flops, unknown)), plan


def test_the_share_gate_refuses_a_share_that_counts_compute_of_unknown_cost():
    shares, plan = _shares({"conv": 1000.0, "rnn": 1.0, "mm": 1.0},
                           {"rnn": "LSTM", "mm": "MatMul in Loop 'loop', whose trip count is not a constant"})
    assert shares.low(plan) == 1.0  # every node FP16: the guess would pass any bound
    assert shares.unknown_note(plan) == ("the cost of 2 node(s) is unknown (1 LSTM, 1 MatMul in Loop 'loop', "
                                         "whose trip count is not a constant), each counted 1 FLOP")
    assert shares.short_of(plan, 50) == (
        "the 16-bit share cannot be held to --min-16bit-share 50: the cost of 2 node(s) is unknown (1 LSTM, "
        "1 MatMul in Loop 'loop', whose trip count is not a constant), e.g. 'rnn' (LSTM); the share of the "
        "rest is 100.0%")
    # quantized compute is apart from the share: its unknown cost does not stop the gate
    assert FlopShares(shares.node_flops, {"rnn": "INT8", "mm": "INT8"}).short_of(plan, 50) == ""
    known, plan = _shares({"conv": 1000.0, "relu": 10.0}, {})
    assert known.short_of(plan, 50) == "" and known.unknown_note(plan) == ""
    assert known.short_of(plan.with_fp32(["conv"]), 50) == \
        "16-bit share 1.0% of FLOPs is below --min-16bit-share 50"
