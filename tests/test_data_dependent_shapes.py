"""Data-dependent shapes (issue 33 item 4): a duration predictor rounds durations, and the length of
what follows is their sum. FP16 moves one duration across a .5 and the 16-bit run's tensors are one
frame longer than FP32's (Kokoro-82M int8 on a 57-phoneme input: 195 by 196). That is a divergence
to name and to search away, never a broadcast error of the comparison."""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import policy
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.float_types import FP16
from onnx_precision.judge import Comparison, Tolerance, compare_outputs, merge_comparisons, not_run
from onnx_precision.oracle import EmulationSession, Emulator, inspect_plan
from onnx_precision.oracle.blame import Decisions
from onnx_precision.oracle.rounding import elem_types
from onnx_precision.oracle.twin import resizable
from onnx_precision.search.prober import Prober

# 3.4995 rounds to 3 in FP32; its FP16 value is 3.5, which rounds (half to even) to 4: 11 frames, not 10
PHONEMES = np.array([[3.4995, 2.2, 1.1, 4.0]], np.float32)
CALM = np.array([[1.2, 2.2, 1.1, 4.0]], np.float32)  # no duration near a .5: 8 frames either way
NOTE = ("note: the output shape of node 'to_float' (Cast) differs from FP32's on sample 0: the decision "
        "of 'round' (Round) flipped, its inputs within tolerance")


def duration_model() -> onnx.ModelProto:
    """x (one feature per phoneme) -> MatMul (the predictor) -> Round -> Cast(int64) -> ReduceSum ->
    Range (a frame index per frame) -> Cast(float) -> Mul: y, one value per frame."""
    return _frames_model("durations", [numpy_helper.from_array(np.array(0.25, np.float32), "hop")],
                         [helper.make_node("Mul", ["index_f", "hop"], ["y"], name="times")])


def _frames_model(name: str, inits: list[onnx.TensorProto], tail: list[onnx.NodeProto]) -> onnx.ModelProto:
    """x -> MatMul (the predictor) -> Round -> Cast(int64) -> ReduceSum -> Range -> Cast(float): index_f, a
    frame index per frame, which ``tail`` (with ``inits``) makes into the output y."""
    inits = [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"), *inits]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["durations"], name="predictor"),
             helper.make_node("Round", ["durations"], ["rounded"], name="round"),
             helper.make_node("Cast", ["rounded"], ["frames_each"], name="to_int", to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["frames_each"], ["frames"], name="total", keepdims=0),
             helper.make_node("Range", ["zero", "frames", "one"], ["index"], name="range"),
             helper.make_node("Cast", ["index"], ["index_f"], name="to_float", to=TensorProto.FLOAT), *tail]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["frames"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _inspected(how: str):
    ctx = ModelContext.of(duration_model())
    plan = policy.resolve(ctx, ctx.all_low_plan())
    if how == "captured":  # no twin graph: each tensor captured and compared in numpy
        return inspect_plan(EmulationSession(ctx), plan, [{"x": PHONEMES}])
    emulator = Emulator(ctx)
    emulator.__dict__["_budget"] = 0 if how == "summarised" else 1 << 30
    if how == "whole":  # a tensor of a data-dependent size is summarised unless its size is taken as known
        emulator.__dict__["_bytes"] = lambda tensor, dims: 4.0
    twin = emulator.twin(plan, {"x": PHONEMES})
    assert twin is not None and ("index_f" in twin.twin.summaries) == (how == "summarised")
    return inspect_plan(emulator, plan, [{"x": PHONEMES}])


@pytest.mark.parametrize("how", ["summarised", "whole", "captured"])
def test_a_shape_that_differs_is_a_divergence_named_with_the_decision_that_flipped(how):
    # before: onnxruntime's "Attempting to broadcast an axis by a dimension other than 1. 10 by 11" in the
    # twin graph's summary (an internal error), and numpy's broadcast error where a tensor is fetched whole
    reference, layer = _inspected(how)
    assert reference.outputs[0]["y"].shape == (10,) and layer.outputs[0]["y"].shape == (11,)
    (change,) = layer.shape_changes
    assert (change.node, change.sample, change.decisions, change.feeding) == (
        "to_float", 0, (("round", "Round"),), ("predictor",))
    assert change.describe() == NOTE.removeprefix("note: ")
    assert layer.nodes["to_float"].reshaped and layer.nodes["times"].reshaped
    assert not layer.nodes["predictor"].reshaped and layer.nodes["round"].max_abs_err == 1.0
    # the decision is a first candidate; what feeds it is widened to first
    assert layer.first_divergence == ("round",) and layer.ranked()[0] == "predictor"
    assert reference.stats["index_f"].max_abs == 9.0  # FP32's range, measured beside the plan's


def test_only_tensors_downstream_of_a_decision_are_checked_for_their_size_in_the_twin_graph():
    # the check costs four nodes a tensor: on every tensor, a third more time a twin run (lnstack600)
    model = duration_model()
    after_round = {"rounded", "frames_each", "frames", "index", "index_f", "y"}
    assert resizable(model.graph, elem_types(model)) == after_round


def test_the_default_convert_pins_what_flips_the_rounding_and_passes(tmp_path, capsys):
    path, out = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx")
    onnx.save(duration_model(), path)
    np.savez(tmp_path / "x.npz", x=PHONEMES)
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "x.npz")]) == 0
    captured = capsys.readouterr()
    printed = captured.out.splitlines()
    assert f"{path} -> {out}: passed" in printed
    assert NOTE in captured.err.splitlines()
    assert "FP32 pins (3): predictor (search), round (search), to_int (type)" in printed
    assert any(line.startswith("before: FAIL") and line.endswith("shape [11] is not FP32's [10])")
               for line in printed)
    assert "diffuse rounding noise" not in captured.out + captured.err


def test_check_fails_an_output_whose_shape_differs_with_every_figure_saying_so(tmp_path, capsys):
    path, out, data = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx"), tmp_path / "x"
    onnx.save(duration_model(), path)
    assert main(["convert", path, "-o", out, "--mode", "all-fp16"]) == 0
    data.mkdir()
    np.savez(data / "a.npz", x=CALM)
    np.savez(data / "b.npz", x=PHONEMES)
    capsys.readouterr()
    # before: IndexError (an internal error) merging the samples' top-k checks; and "p99 0, 0/0 outside bound"
    assert main(["check", path, out, "--inputs", str(data), "--top-k", "1"]) == 1
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  y: ")]
    assert line == ("  y: max abs err inf, max rel err inf, rel RMS err inf (worst slice inf), p99 inf, "
                    "p99.9 inf, cosine 0.000000, 10/18 outside bound, top-1 agreement 0 (top-1 0, 1/2 rows "
                    "differ) [sample 1: shape [11] is not FP32's [10]]  FAIL")


def two_lengths_model() -> onnx.ModelProto:
    """Frames from the rounded durations (MatMul -> Round -> Cast(int64) -> ReduceSum -> Range -> Cast) added
    to frames of a fixed length (Range(0, 10) -> Cast): where FP16 rounds a duration the other way, the 16-bit
    run's Add meets 11 frames and 10, which onnxruntime refuses to broadcast: the run itself stops."""
    fixed = [helper.make_node("Range", ["zero", "ten", "one"], ["fixed"], name="fixed_range"),
             helper.make_node("Cast", ["fixed"], ["fixed_f"], name="fixed_float", to=TensorProto.FLOAT),
             helper.make_node("Add", ["index_f", "fixed_f"], ["y"], name="add")]
    return _frames_model("two_lengths", [numpy_helper.from_array(np.array(10, np.int64), "ten")], fixed)


TEN = np.array([[3.2, 2.2, 1.1, 4.0]], np.float32)  # 10 frames either way, as the fixed path's
STOPS = ("its 16-bit run stops on shapes that differ from FP32's: the decision of 'round' (Round) flipped (1 "
         "of 4 elements), and what follows it no longer fits together (onnxruntime: Attempting to broadcast "
         "an axis by a dimension other than 1. 10 by 11)")


@pytest.mark.parametrize("searching", [False, True], ids=["baked", "switch graph"])
def test_a_plan_whose_run_stops_on_a_flipped_decision_is_a_failing_candidate(searching):
    # before: onnxruntime's broadcast error out of the probe, "internal error: onnxruntime rejects a graph
    # derived from ..."
    ctx = ModelContext.of(two_lengths_model())
    plan = policy.resolve(ctx, ctx.all_low_plan())
    emulator = Emulator(ctx)
    runner = emulator.searching() if searching else emulator
    reference = emulator.run(None, {"x": PHONEMES})
    prober = Prober(runner, [{"x": TEN}, {"x": PHONEMES}], [emulator.run(None, {"x": TEN}), reference],
                    Tolerance())
    assert prober.passes(plan) == (False, f"sample 1, output 'y' {STOPS}")
    assert prober.last_errors == {"y": float("inf")}
    fp32 = plan.with_fp32(["predictor", "round", "to_int"])
    assert prober.passes(fp32) == (True, "")


def test_an_emulator_that_diagnosed_a_stop_is_freed_with_its_sessions_by_reference_counting():
    """Its sessions map the model's weights: a reference cycle back to the emulator (a session's diagnosis,
    the cut model's emulator factory) kept them all alive until Python's cycle collector ran, past the
    emulator's last use (scripts/bench_large_model.py's auto conversion held 1.66x its model, bound 1.3x)."""
    ctx = ModelContext.of(two_lengths_model())
    plan = policy.resolve(ctx, ctx.all_low_plan())
    emulator = Emulator(ctx)
    with pytest.raises(Exception, match="stops on shapes"):
        emulator.run(plan, {"x": PHONEMES})  # a session built, the stop diagnosed by the cut model's emulator
    assert emulator.near_edges(plan, True, [{"x": PHONEMES}])
    freed = weakref.ref(emulator)
    gc.disable()
    try:
        del emulator
        assert freed() is None
    finally:
        gc.enable()


def test_a_run_that_fails_where_no_decision_flipped_is_not_said_to_have_diverged():
    ctx = ModelContext.of(two_lengths_model())
    plan = policy.resolve(ctx, ctx.all_low_plan())
    decisions = Decisions(ctx, Emulator)
    assert decisions.diverged(plan, {"x": PHONEMES}, RuntimeError("not onnxruntime's")) is None
    assert decisions.flipped(plan, {"x": TEN}) == ()  # no duration near a .5
    flips = decisions.flipped(plan, {"x": PHONEMES})
    assert [(f.node, f.differ, f.size) for f in flips] == [("round", 1, 4)]
    assert decisions.feeding(flips) == ("predictor",)


@pytest.mark.parametrize("how", ["twin", "captured"])
def test_the_layerwise_run_of_a_plan_that_stops_names_the_decision_that_flipped(how):
    # before: the twin graph's run (or the captured one's) ended in onnxruntime's broadcast error
    ctx = ModelContext.of(two_lengths_model())
    plan = policy.resolve(ctx, ctx.all_low_plan())
    emulator = Emulator(ctx)
    session = emulator if how == "twin" else EmulationSession(ctx, diagnose=emulator.diverged)
    reference, layer = inspect_plan(session, plan, [{"x": TEN}, {"x": PHONEMES}])
    (change,) = layer.shape_changes
    assert (change.sample, change.decisions, change.feeding) == (1, (("round", "Round"),), ("predictor",))
    assert change.describe() == ("the 16-bit run stops on sample 1 where shapes differ from FP32's "
                                 "(onnxruntime: Attempting to broadcast an axis by a dimension other than 1. "
                                 "10 by 11): the decision of 'round' (Round) flipped")
    assert layer.first_divergence == ("round",) and layer.ranked() == ("predictor",)
    assert reference.outputs[1]["y"].shape == (10,)  # FP32's own run, measured all the same


def test_the_default_convert_pins_what_flips_the_rounding_where_the_16bit_run_stops(tmp_path, capsys):
    # before: exit 1, "internal error: onnxruntime rejects a graph derived from ...: ... 10 by 11"
    path, out = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx")
    onnx.save(two_lengths_model(), path)
    np.savez(tmp_path / "x.npz", x=PHONEMES)
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "x.npz")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"{path} -> {out}: passed" in printed
    assert "FP32 pins (3): predictor (search), round (search), to_int (type)" in printed
    assert any(line.startswith("before: FAIL") and line.endswith(f"{STOPS})") for line in printed)


def test_analyze_names_the_decision_whose_flip_stops_the_16bit_run(tmp_path, capsys):
    # before: exit 1, "internal error ...: ValueError: compare_samples: 1 reference samples but 0 candidates"
    path, data = str(tmp_path / "d.onnx"), tmp_path / "x"
    onnx.save(two_lengths_model(), path)
    data.mkdir()
    np.savez(data / "a.npz", x=TEN)
    np.savez(data / "b.npz", x=PHONEMES)
    assert main(["analyze", path, "--inputs", str(data)]) == 0
    printed = capsys.readouterr().out.splitlines()
    stops = ("the 16-bit run stops on sample 1 where shapes differ from FP32's (onnxruntime: Attempting to "
             "broadcast an axis by a dimension other than 1. 10 by 11): the decision of 'round' (Round) "
             "flipped")
    assert printed[3:] == [
        "all-FP16 (emulate oracle, rms: rel RMS err <= 0.05, every slice <= 0.2 (or all |err| <= atol "
        f"0.001)): fails: y: {stops}",
        "verdicts: 1 precision, 8 safe",
        "",
        "node   op     verdict    FP32 max|x|  min|x|>0  FP16 rel err  rules",
        "round  Round  precision  4            1         - *           -",
        "... 8 more nodes: safe",
        "* first divergence: the emulated FP16 error appears at this node",
        "",
        "round: its decision flips in FP16 on sample 1, and the 16-bit run stops on the shapes that follow"]


def test_check_fails_a_candidate_whose_run_stops_on_a_flipped_decision_naming_it(tmp_path, capsys):
    # before: exit 2, "c.onnx: onnxruntime cannot run the candidate on the samples: ... 10 by 11" (and
    # the runtimes' judgement an internal error of blame's)
    path, cand, data = str(tmp_path / "d.onnx"), str(tmp_path / "c.onnx"), tmp_path / "x"
    onnx.save(two_lengths_model(), path)
    assert main(["convert", path, "-o", cand, "--mode", "all-fp16"]) == 0
    data.mkdir()
    np.savez(data / "a.npz", x=TEN)
    np.savez(data / "b.npz", x=PHONEMES)
    capsys.readouterr()
    assert main(["check", path, cand, "--inputs", str(data)]) == 1
    printed = capsys.readouterr().out.splitlines()
    (line,) = [line for line in printed if line.startswith("  y: ")]
    # the 10 elements counted are sample 0's: sample 1's run stopped, and nothing of it was compared
    # (before: "0/10 outside bound [sample 1: ...]", and the closing line "FAIL: out of tolerance or
    # non-finite", where nothing was out of tolerance)
    assert line == ("  y: max abs err inf, max rel err inf, rel RMS err inf (worst slice inf), p99 inf, "
                    "p99.9 inf, cosine 0.000000, 0/10 outside bound (sample 1 not compared: its run "
                    f"stopped) [sample 1: {STOPS}]  FAIL")
    assert printed[-1] == ("FAIL: the candidate's run stops on sample 1 (a flipped decision changed its "
                           "shapes); the samples compared are within tolerance")
    assert ("runtimes: holds on: none; fails on: generic, tensorrt 10.15, webgpu, openvino-gpu, "
            "fp16-accumulate (first: the 16-bit run stops on sample 1 where shapes differ from FP32's "
            "(onnxruntime: Attempting to broadcast an axis by a dimension other than 1. 10 by 11): the "
            "decision of 'round' (Round) flipped)") in printed
    # -q says the same, not the stand-in statistics of the sample that stopped ("rel RMS err inf")
    assert main(["check", path, cand, "--inputs", str(data), "-q"]) == 1
    assert capsys.readouterr().out == (f"{cand} against {path}: failed; worst y: sample 1 not compared (the "
                                       f"run stopped); FP16: 100.0% of estimated FLOPs\n")
    assert main(["check", path, cand, "--inputs", str(data / "a.npz")]) == 0  # 10 frames: it runs


def test_the_samples_whose_run_stopped_are_named_as_not_compared():
    """A merge names each sample whose run stopped (judge.not_run) as not compared, in the line and in
    the JSON (there only where one stopped)."""
    ref = {"y": np.ones(4, np.float32)}
    ran = compare_outputs(ref, ref, Tolerance(), "emulate")
    merged = merge_comparisons([not_run(ref, "stops", "emulate"), ran, not_run(ref, "stops", "emulate")],
                               "emulate")
    (y,) = merged.outputs
    assert y.summary().endswith("0/4 outside bound (samples 0, 2 not compared: their runs stopped) "
                                "[sample 0: stops; sample 2: stops]")
    assert y.to_json()["not_compared"] == [0, 2]
    assert Comparison.from_json(merged.to_json()).outputs == merged.outputs
    assert "not_compared" not in ran.outputs[0].to_json()


def test_a_held_out_sample_whose_run_stops_fails_the_convert_naming_the_decision(tmp_path, capsys):
    # before: exit 1, "internal error ...: onnxruntime rejects a graph derived from ...: ... 10 by 11"
    path, out = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx")
    onnx.save(two_lengths_model(), path)
    np.savez(tmp_path / "ten.npz", x=TEN)  # the search sees no flip: every node FP16
    np.savez(tmp_path / "held.npz", x=PHONEMES)
    held = str(tmp_path / "held.npz")
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "ten.npz"),
                 "--validation-inputs", held]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert f"{path} -> {out}: failed (the written model fails held-out output 'y' {STOPS} ({held}))" in (
        printed)
    assert ("validation: FAIL (worst y: rel RMS err inf, max abs err inf, cosine 0.000000; "
            f"{STOPS})") in printed


KNIFE = ("note: 'round' decides on a value within 0.3 FP16 step of its boundary on sample 1 (3.4995, 0.0005 "
         "from 3.5): a 16-bit node upstream can flip it and change a shape after it, and the plan keeps what "
         "feeds it FP32")


def test_a_decision_on_a_knife_edge_is_named_as_why_what_feeds_it_stays_fp32(tmp_path, capsys):
    # before: the pins' reasons ("search") were all a user was told
    path, out, data = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx"), tmp_path / "x"
    onnx.save(two_lengths_model(), path)
    data.mkdir()
    np.savez(data / "a.npz", x=TEN)
    np.savez(data / "b.npz", x=PHONEMES)  # 3.4995: a quarter of an FP16 step (2^-9 there) below 3.5
    assert main(["convert", path, "-o", out, "--inputs", str(data)]) == 0
    assert KNIFE in capsys.readouterr().out.splitlines()
    assert KNIFE.removeprefix("note: ") in json.loads((tmp_path / "o.report.json").read_text())["notes"]
    # 10 frames: every duration 0.2 or more (over 100 steps) from a boundary, here with the predictor kept
    # FP32 all the same: no note
    np.savez(tmp_path / "ten.npz", x=TEN)
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "ten.npz"), "--keep-fp32",
                 "predictor"]) == 0
    assert "step of its boundary" not in capsys.readouterr().out


def test_a_rounding_of_weights_alone_is_no_knife_edge_of_the_samples(tmp_path, capsys):
    """A bias quantised in the graph (Kokoro-82M int8's 'bias_quant_rounded': 1342.0007 cast to an integer,
    0.0007 from 1342) rounds the same on every sample: it was named as the knife edge the samples sit on,
    and no sample moves it."""
    model = two_lengths_model()
    # 342.0007 from weights alone (0.003 FP16 step from 342); 1342.0007 from the sample (3.2 x 419.37522),
    # where FP16's step is 1, so that every value is within a step of a whole number
    model.graph.initializer.extend([numpy_helper.from_array(np.array([342.0007], np.float32), "bias"),
                                    numpy_helper.from_array(np.array([1.0], np.float32), "unit"),
                                    numpy_helper.from_array(np.array([419.37522], np.float32), "big")])
    model.graph.node.extend([helper.make_node("Mul", ["bias", "unit"], ["bias_scaled"], name="bias_scale"),
                             helper.make_node("Cast", ["bias_scaled"], ["bias_q"], name="bias_quant_rounded",
                                              to=TensorProto.INT32),
                             helper.make_node("Gather", ["x", "zero"], ["x0"], name="first_row", axis=1),
                             helper.make_node("Mul", ["x0", "big"], ["large"], name="scale_large"),
                             helper.make_node("Floor", ["large"], ["large_floor"], name="large_floor")])
    model.graph.output.extend([helper.make_tensor_value_info("bias_q", TensorProto.INT32, [1]),
                               helper.make_tensor_value_info("large_floor", TensorProto.FLOAT, [1])])
    path, out = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx")
    onnx.save(model, path)
    np.savez(tmp_path / "ten.npz", x=TEN)
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "ten.npz"), "--keep-fp32",
                 "predictor|bias_scale|scale_large"]) == 0
    assert "step of its boundary" not in capsys.readouterr().out


def test_a_knife_edge_after_another_decision_is_found_too():
    """Kokoro-82M int8's '/encoder/Round' (2.49820, 0.9 FP16 step from 2.5) follows other decisions (a
    Floor of its quantised biases): a decision is looked at whether or not one is upstream of it."""
    model = two_lengths_model()
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "nothing"))
    # the predictor reads x + 0 * Ceil(x): the Round after it is no longer one of the first decisions
    model.graph.node[0].input[0] = "x_again"
    model.graph.node.extend([helper.make_node("Ceil", ["x"], ["x_ceil"], name="ceil"),
                             helper.make_node("Mul", ["x_ceil", "nothing"], ["x_zero"], name="times_zero"),
                             helper.make_node("Add", ["x", "x_zero"], ["x_again"], name="x_again")])
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes[-3:] + nodes[:-3])  # topological order
    ctx = ModelContext.of(model)
    plan = policy.resolve(ctx, ctx.all_low_plan()).with_fp32(["predictor"])
    decisions = Decisions(ctx, Emulator)
    assert [n.name for n in decisions._first] == ["ceil"]
    (edge,) = decisions.near_edges(plan, False, [{"x": TEN}, {"x": PHONEMES}], FP16)
    assert (edge.node, edge.sample, edge.boundary, edge.kept) == ("round", 1, 3.5, True)
    assert edge.value == pytest.approx(3.4995)
    assert edge.steps == pytest.approx(0.256, abs=0.001)  # 0.0005 in steps of 2^-9


def test_a_knife_edge_that_sets_a_length_is_named_before_a_nearer_one_that_moves_a_value(tmp_path, capsys):
    """Kokoro-82M int8's bias quantisations (a Floor of hundreds of values, one 0.031 FP16 step from a whole
    number) were named before its '/encoder/Round' (0.92 step), whose durations set the audio's length: a
    flip of the one moves a bias by its quantum, of the other changes a shape."""
    model = two_lengths_model()
    model.graph.initializer.append(numpy_helper.from_array(np.array([2.272818], np.float32), "w_bias"))
    model.graph.node.extend([helper.make_node("Gather", ["x", "one"], ["x1"], name="second", axis=1),
                             helper.make_node("Mul", ["x1", "w_bias"], ["bias_f"], name="bias_scale"),
                             helper.make_node("Floor", ["bias_f"], ["bias_q"], name="bias_floor")])
    model.graph.output.append(helper.make_tensor_value_info("bias_q", TensorProto.FLOAT, [1]))
    path, out, data = str(tmp_path / "d.onnx"), str(tmp_path / "o.onnx"), tmp_path / "x"
    onnx.save(model, path)
    data.mkdir()
    np.savez(data / "a.npz", x=TEN)
    np.savez(data / "b.npz", x=PHONEMES)  # x[0, 1] = 2.2 in both: 5.0002 floored, 0.05 FP16 step from 5
    assert main(["convert", path, "-o", out, "--inputs", str(data), "--keep-fp32", "bias_scale"]) == 0
    assert KNIFE + " (1 more decision(s) as near: 'bias_floor')" in capsys.readouterr().out.splitlines()
