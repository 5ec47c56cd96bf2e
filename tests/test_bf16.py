"""BF16 as the run's 16-bit type and as the fallback before FP32 (issue 19)."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from test_opset_upgrade import relu_at_opset_11

from models import generate
from onnx_precision.cli import main
from onnx_precision.float_types import BF16, FP16

L2 = "l2_normalize"


def _every_bf16_value_and_the_midpoints_around_it() -> np.ndarray:
    """Each of the 65 536 BFLOAT16 patterns as float32, the float32 halfway to the next pattern (the
    ties) and the float32 values either side of each tie: every rounding decision there is."""
    upper = np.arange(65536, dtype=np.uint32) << np.uint32(16)
    ties = upper | np.uint32(0x8000)
    with np.errstate(invalid="ignore"):
        values = [upper.view(np.float32), ties.view(np.float32)]
        values += [np.nextafter(ties.view(np.float32), np.float32(d)) for d in (np.inf, -np.inf)]
    return np.concatenate(values).astype(np.float32)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a.view(np.uint32)[~nan],
                                                                      b.view(np.uint32)[~nan]))


def test_bf16_rounding_is_bit_exact_against_ml_dtypes_and_onnxruntimes_cast_pair():
    values = _every_bf16_value_and_the_midpoints_around_it()
    ours = BF16.round(values)
    with np.errstate(over="ignore", invalid="ignore"):
        reference = values.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert _bits_equal(ours, reference)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
         helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], "pair",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        assert _bits_equal(ours, session.run(None, {"x": values})[0])
    # the facts the rules read, at the edges: ties to even, the largest finite value, overflow
    edges = np.array([1.0001, 3.14159, 70000.5, 256.0, 257.0, 259.0, BF16.max, 3.4e38], np.float32)
    assert BF16.round(edges).tolist() == [1.0, 3.140625, 70144.0, 256.0, 256.0, 260.0, BF16.max, np.inf]
    assert BF16.exact_int == 256 and FP16.exact_int == 2048 and BF16.flush == 2.0 ** -134


def _l2(tmp_path, *flags: str) -> tuple[dict, onnx.ModelProto]:
    out = str(tmp_path / "o.onnx")
    assert main(["convert", generate.model_path(L2), "-o", out, "--inputs", generate.data_path(L2), "-q",
                 *flags]) == 0
    return json.load(open(tmp_path / "o.report.json")), onnx.load(out)


def _precisions(report: dict) -> dict[str, str]:
    return {name: d["precision"] for name, d in report["plan"]["nodes"].items()}


def test_bf16_holds_the_sum_of_squares_that_overflows_fp16_and_the_written_model_is_bf16(tmp_path):
    fp16, _ = _l2(tmp_path)
    assert [p["node"] for p in fp16["pinned"]] == ["sumsq", "norm"]  # 1.2e5 > 65504
    report, model = _l2(tmp_path, "--low-precision", "bf16")
    assert report["status"] == "passed" and report["low_precision"] == "bf16" and report["pinned"] == []
    assert set(_precisions(report).values()) == {"bf16"}
    assert report["fp16_share"]["flops_by_precision"] == {"bf16": 1.0}
    casts = [(n.name, n.attribute[0].i) for n in model.graph.node if n.op_type == "Cast"]
    assert casts == [("x_cast_bf16", TensorProto.BFLOAT16), ("y_bf16_cast_fp32", TensorProto.FLOAT)]
    assert {p.key: p.value for p in model.metadata_props}["onnx_precision.target"] == "generic"


def test_the_fallback_moves_the_overflowing_pins_to_bf16_and_keeps_the_rest_fp16(tmp_path):
    report, model = _l2(tmp_path, "--fallback", "bf16")
    assert report["status"] == "passed" and report["pinned"] == []
    assert _precisions(report) == {"square": "fp16", "sumsq": "bf16", "norm": "bf16", "normalize": "fp16"}
    reasons = report["plan"]["nodes"]["sumsq"]["reasons"]
    assert reasons[-1]["detail"].startswith("FP16 fails here; BF16 holds")
    # why FP16 failed
    assert reasons[0]["detail"] == "'sumsq' reaches 1.219e+05 in FP32, over the FP16 maximum 65504"
    markdown = open(tmp_path / "o.report.md").read()
    assert "## BF16 nodes (2)" in markdown and "| `sumsq` | ReduceSum | range: 'sumsq' reaches" in markdown
    shares = report["fp16_share"]["flops_by_precision"]
    assert set(shares) == {"fp16", "bf16"} and abs(sum(shares.values()) - 1) < 1e-9
    types = {n.name: n.attribute[0].i for n in model.graph.node if n.op_type == "Cast"}
    assert TensorProto.BFLOAT16 in types.values() and TensorProto.FLOAT16 in types.values()
    # the written mixed model passes check, which emulates it as written
    assert main(["check", generate.model_path(L2), str(tmp_path / "o.onnx"), "--inputs",
                 generate.data_path(L2)]) == 0


def test_check_judges_a_bf16_candidate_made_elsewhere_and_fails_a_bad_one(tmp_path):
    """A candidate written by hand (as another tool would): BF16 rounding of a sum of squares is
    fine; the same model with the sum stored in FP16 overflows, and check says so."""
    def candidate(low: int, path: str) -> None:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
        nodes = [helper.make_node("Cast", ["x"], ["xl"], to=low, name="to_low"),
                 helper.make_node("Mul", ["xl", "xl"], ["sq"], name="square"),
                 helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sumsq", keepdims=1),
                 helper.make_node("Sqrt", ["s"], ["n"], name="norm"),
                 helper.make_node("Div", ["xl", "n"], ["yl"], name="normalize"),
                 helper.make_node("Cast", ["yl"], ["y"], to=TensorProto.FLOAT, name="to_fp32")]
        axes = onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes")
        graph = helper.make_graph(nodes, "c", [x], [y], [axes])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    good, bad = str(tmp_path / "bf16.onnx"), str(tmp_path / "fp16.onnx")
    candidate(TensorProto.BFLOAT16, good)
    candidate(TensorProto.FLOAT16, bad)
    model, data = generate.model_path(L2), generate.data_path(L2)
    assert main(["check", model, good, "--inputs", data]) == 0
    assert main(["check", model, bad, "--inputs", data]) == 1


def test_bf16_below_opset_13_that_cannot_be_raised_is_one_line_and_writes_nothing(tmp_path, capsys,
                                                                                   monkeypatch):
    # a model below opset 13 is raised (tests/test_opset_upgrade.py); where that fails, nothing can be BF16
    def fails(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        raise RuntimeError("No Adapter For Relu")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fails)
    path = relu_at_opset_11(str(tmp_path / "old.onnx"))
    for flags in (["--low-precision", "bf16"], ["--fallback", "bf16"]):
        assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), *flags]) == 2
        assert capsys.readouterr().err.strip() == (
            f"onnx-precision: error: {path}: BF16 needs ai.onnx opset 13 or later (Cast takes bfloat16 from "
            f"opset 13) and the model imports opset 11; the upgrade (opset 11 -> 13) is not used: onnx's "
            f"version converter fails: No Adapter For Relu; use --low-precision fp16")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["old.onnx"]


def test_a_fallback_in_the_runs_own_type_is_a_usage_error(tmp_path, capsys):
    assert main(["convert", generate.model_path(L2), "-o", str(tmp_path / "o.onnx"), "--low-precision",
                 "bf16", "--fallback", "bf16"]) == 2
    assert "--fallback bf16 with --low-precision bf16" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("target, blocked", [
    ("generic", "onnxruntime's CUDA provider has no bfloat16 Conv kernel"),
    ("tensorrt", None),  # TensorRT builds Conv in BF16 (onnx-tensorrt operators.md)
])
def test_a_node_the_target_has_no_bf16_kernel_for_stays_fp32_with_that_reason(tmp_path, target, blocked):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    w = onnx.numpy_helper.from_array(np.full((2, 2, 3, 3), 0.1, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    path = str(tmp_path / "conv.onnx")
    # Conv's schema takes bfloat16 from Conv-22
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                                opset_imports=[helper.make_opsetid("", 22)]), path)
    out = str(tmp_path / "o.onnx")
    plan = str(tmp_path / "plan.json")
    assert main(["convert", path, "-o", out, "--mode", "all-fp16", "--low-precision", "bf16", "--target",
                 target, "--save-plan", plan, "-q"]) == 0
    nodes_json = json.load(open(plan))["nodes"]
    if blocked is None:
        assert nodes_json["conv"]["precision"] == "bf16"
    else:
        assert nodes_json["conv"]["precision"] == "fp32"
        assert nodes_json["conv"]["reasons"][-1] == {"source": "type", "detail": blocked}
    assert nodes_json["relu"]["precision"] == "bf16"


def test_the_fallback_sends_range_failures_to_bf16_and_precision_failures_to_fp32(tmp_path):
    """Branch a's sum of squares (about 1e5) overflows FP16 and fits BF16; branch b adds 1000 to
    values of about 0.05 and takes it off again: stored in FP16 (spacing 0.5 at 1000) or BF16
    (spacing 4), or read so by the Sub, they are lost, so both stay FP32, and say BF16 failed too."""
    axes = onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes")
    offset = onnx.numpy_helper.from_array(np.array(1000.0, np.float32), "offset")
    nodes = [helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sumsq", keepdims=1),
             helper.make_node("Sqrt", ["s"], ["n"], name="norm"),
             helper.make_node("Div", ["a", "n"], ["ya"], name="normalize"),
             helper.make_node("Add", ["b", "offset"], ["shifted"], name="shift"),
             helper.make_node("Sub", ["shifted", "offset"], ["yb"], name="unshift")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 64]) for n in ("a", "b", "ya", "yb")]
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "m.npz")
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", io[:2], io[2:], [axes, offset]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    gen = np.random.default_rng(3)
    np.savez(data, a=gen.uniform(30, 55, (1, 64)).astype(np.float32),
             b=gen.normal(0, 0.05, (1, 64)).astype(np.float32))
    out = str(tmp_path / "o.onnx")
    assert main(["convert", path, "-o", out, "--inputs", data, "--fallback", "bf16", "-q"]) == 0
    report = json.load(open(tmp_path / "o.report.json"))
    assert _precisions(report) == {"square": "fp16", "sumsq": "bf16", "norm": "bf16", "normalize": "fp16",
                                   "shift": "fp32", "unshift": "fp32"}
    assert [p["node"] for p in report["pinned"]] == ["shift", "unshift"]
    assert all(p["reasons"][-1]["detail"].startswith("BF16 fails too: ") for p in report["pinned"])
    assert main(["check", path, out, "--inputs", data]) == 0


def test_the_rules_judge_the_runs_own_type():
    """One table of facts per type: a difference of inputs up to 30 that cancels to at most 1 keeps
    11 - 4.9 = 6.1 bits in FP16 (fine) and 8 - 4.9 = 3.1 in BF16 (a precision finding); a sum of
    squares of 1e5 overflows FP16 and not BF16; integers carried in floats are exact up to 2048 in
    FP16 and up to 256 in BF16."""
    from onnx_precision import rules
    from onnx_precision.context import ModelContext
    from onnx_precision.oracle import TensorStats
    from onnx_precision.target import GenericTarget

    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [8]) for n in ("a", "b", "c")]
    nodes = [helper.make_node("Sub", ["a", "b"], ["d"], name="diff"),
             helper.make_node("Mul", ["c", "c"], ["sq"], name="square"),
             helper.make_node("CumSum", ["sq", "axis"], ["run"], name="running")]
    axis = onnx.numpy_helper.from_array(np.array(0, np.int64), "axis")
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [8]) for n in ("d", "run")]
    model = helper.make_model(helper.make_graph(nodes, "g", x, outs, [axis]),
                              opset_imports=[helper.make_opsetid("", 17)])

    def stats(m: float) -> TensorStats:
        return TensorStats(m, 0.5, 0.0, 0, 0, 8)

    recorded = {"a": stats(30.0), "b": stats(30.0), "d": stats(1.0), "c": stats(300.0), "sq": stats(9e4),
                "run": stats(1e5)}
    found = {}
    for low in (FP16, BF16):
        ctx = ModelContext.of(onnx.ModelProto.FromString(model.SerializeToString()))
        ctx.target = GenericTarget(low)
        found[low.name] = {(f.rule, f.kind) for f in rules.run_rules(rules.ModelFacts(ctx, recorded)).findings
                           if f.confirmed}
    assert ("cancellation", "precision") in found["BF16"]
    assert ("cancellation", "precision") not in found["FP16"]
    assert ("cumsum", "overflow") in found["FP16"] and ("cumsum", "overflow") not in found["BF16"]
    [bf16_cancel] = [f for f in rules.run_rules(rules.ModelFacts(ctx, recorded)).findings
                     if f.rule == "cancellation"]
    assert bf16_cancel.message == ("inputs up to 30 cancel to at most 1: the difference keeps 3.1 of BF16's "
                                   "8 bits")


def test_the_flags_file_writes_bf16_where_trtexec_takes_it_and_points_to_the_strongly_typed_model(tmp_path):
    model, data = generate.model_path(L2), generate.data_path(L2)
    flags = str(tmp_path / "f.txt")
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--fallback", "bf16",
                 "--trt-flags", flags, "-q"]) == 0
    lines = open(flags).read().splitlines()
    assert lines[0] == "# onnx-precision: TensorRT flags for 0 node(s) pinned to FP32 and 2 in BF16."
    old = lines[lines.index("# TensorRT 8.6 to 9.0 (weakly typed; these flags are deprecated in 10.12 and "
                            "removed in 11.0).") + 2]
    assert old == f"# (not the plan measured) trtexec --onnx={model} --fp16"  # no bf16 before 9.1
    new = lines[lines.index("# TensorRT 9.1 to 10.11 (weakly typed; these flags are deprecated in 10.12 and "
                            "removed in 11.0).") + 1]
    assert new == (f"trtexec --onnx={model} --fp16 --bf16 --precisionConstraints=obey "
                   f"--layerPrecisions=sumsq:bf16,norm:bf16 --layerOutputTypes=sumsq:bf16,norm:bf16")
    hint = "build the Cast-pinned model with --stronglyTyped (TensorRT 9.0 and later) instead"
    assert f"#   not expressed: the 2 BF16 node(s): trtexec before 9.1 has no bf16; {hint}" in lines
    assert (f"#   not expressed: the FP16 layers: with --bf16 on, TensorRT may run an unconstrained layer in "
            f"BF16 rather than FP16; {hint}") in lines
    assert any(line.startswith(f"polygraphy convert {model} --fp16 --bf16 --precision-constraints obey "
                               f"--layer-precisions sumsq:bfloat16 norm:bfloat16") for line in lines)
    assert main(["convert", model, "-o", str(tmp_path / "b.onnx"), "--inputs", data, "--low-precision",
                 "bf16", "--trt-flags", flags, "-q"]) == 0
    assert f"trtexec --onnx={model} --bf16" in open(flags).read().splitlines()
    # and --fp16-io in a BF16 run is bfloat16 I/O
    assert main(["convert", model, "-o", str(tmp_path / "b.onnx"), "--inputs", data, "--low-precision",
                 "bf16", "--fp16-io", "--trt-flags", flags, "-q"]) == 0
    assert (f"trtexec --onnx={model} --bf16 --inputIOFormats=bf16:chw --outputIOFormats=bf16:chw"
            in open(flags).read().splitlines())


def test_a_fallback_point_replays_with_its_bf16_nodes(tmp_path):
    report, _ = _l2(tmp_path, "--fallback", "bf16")
    chosen = report["tradeoff"]["chosen"]
    points = report["tradeoff"]["points"]
    # one point per plan measured: the fallback's all-BF16 trial passed and was kept, so it is the chosen one
    assert [p["point"] for p in points] == list(range(len(points))) and chosen == points[-1]["point"]
    assert report["tradeoff"]["note"].endswith(", then the BF16 fallback")
    [point] = [p for p in points if p["point"] == chosen]
    assert point["bf16"] == ["norm", "sumsq"] and point["pinned"] == [] and point["passed"] is True
    out, plan = str(tmp_path / "r.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", generate.model_path(L2), "-o", out, "--mode", "all-fp16", "--plan",
                 f"{tmp_path / 'o.report.json'}@{chosen}", "--save-plan", plan, "-q"]) == 0
    replayed = {n: d["precision"] for n, d in json.load(open(plan))["nodes"].items()}
    assert replayed == _precisions(report)
    # a run that starts from a mixed plan that fails searches on baked sessions (the switch graph rounds
    # one type): sumsq in BF16 holds 1.2e5, but an FP16 norm reads it rounded to FP16, which is inf
    mixed = {"nodes": {"sumsq": {"precision": "bf16"}}}
    json.dump(mixed, open(plan, "w"))
    assert main(["convert", generate.model_path(L2), "-o", str(tmp_path / "s.onnx"), "--inputs",
                 generate.data_path(L2), "--plan", plan, "-q"]) == 0
    searched = json.load(open(tmp_path / "s.report.json"))
    assert _precisions(searched) == {"square": "fp16", "sumsq": "bf16", "norm": "fp32", "normalize": "fp16"}


def test_a_bf16_weight_large_enough_to_go_to_onnxruntime_by_reference_converts(tmp_path):
    """Weights over 64 KiB reach onnxruntime by reference, as arrays; a bfloat16 one goes as its bits."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.05, (256, 256)).astype(np.float32),
                                     "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])], [w])
    path, data = str(tmp_path / "mm.onnx"), str(tmp_path / "x.npz")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.savez(data, x=np.random.default_rng(1).normal(0, 1, (4, 256)).astype(np.float32))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--low-precision", "bf16",
                 "-q"]) == 0
    [weight] = onnx.load(str(tmp_path / "o.onnx")).graph.initializer
    assert weight.data_type == TensorProto.BFLOAT16
    assert json.load(open(tmp_path / "o.report.json"))["pinned"] == []


def test_a_scalar_keeps_its_shape_when_rounded_to_bf16(tmp_path):
    """y = x * c + c over scalars: a BF16 rounding that made them shape (1,) failed 'before' on shape."""
    assert BF16.round(np.array(3.3, np.float32)).shape == () and BF16.round(np.float32(3.3)).shape == ()
    c = onnx.numpy_helper.from_array(np.array(1.5, np.float32), "c")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["m"], name="mul"),
                               helper.make_node("Add", ["m", "c"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [c])
    path, data = str(tmp_path / "s.onnx"), str(tmp_path / "x.npz")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.savez(data, x=np.array(2.0, np.float32))
    for io in ([], ["--fp16-io"]):
        assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--low-precision",
                     "bf16", "-q", *io]) == 0
        assert json.load(open(tmp_path / "o.report.json"))["pinned"] == []


def test_an_all_bf16_plan_in_an_fp16_run_searches_and_a_bf16_model_is_analyzed(tmp_path):
    model, data = generate.model_path(L2), generate.data_path(L2)
    plan = str(tmp_path / "plan.json")
    json.dump({"nodes": {n: {"precision": "bf16"} for n in ("square", "sumsq", "normalize")}},
              open(plan, "w"))
    # norm stays FP16 and reads the BF16 sum of squares rounded to FP16: inf, so a search runs on it
    assert main(["convert", model, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "--plan", plan,
                 "-q"]) == 0
    assert _precisions(json.load(open(tmp_path / "o.report.json")))["norm"] == "fp32"
    bf16, _ = _l2(tmp_path, "--low-precision", "bf16")
    assert main(["analyze", str(tmp_path / "o.onnx"), "--inputs", data]) == 0  # a BF16 model is emulated
