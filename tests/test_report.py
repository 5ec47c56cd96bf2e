"""The conversion report: JSON content, Markdown, the terminal summary, estimated FLOPs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from conftest import parse

from onnx_precision import report as rep
from onnx_precision.cli.progress import ProgressLine
from onnx_precision.context import ModelContext
from onnx_precision.costs import PhaseCost
from onnx_precision.flops import estimate_flops
from onnx_precision.judge import Comparison, OutputMetrics, Tolerance
from onnx_precision.oracle.inspection import NodeStats
from onnx_precision.plan import Precision, Reason, uniform_plan

L2 = """
<ir_version: 8, opset_import: ["" : 17]>
l2 (float[N, 64] x) => (float[N, 64] y) {
  sq = Mul(x, x)
  axes = Constant<value = int64[1] {-1}>()
  ss = ReduceSum<keepdims = 1>(sq, axes)
  norm = Sqrt(ss)
  y = Div(x, norm)
}
"""


def metrics(name, err, cosine, nonfinite=0, passed=True):
    return OutputMetrics(name=name, max_abs_err=err, max_rel_err=err, cosine=cosine,
                         new_nonfinite=nonfinite, passed=passed, elements=64,
                         failures=() if passed
                         else ((f"{nonfinite} new NaN/Inf",) if nonfinite else ("bad",)))


def make_report(**overrides) -> rep.RunReport:
    ops = {"square": "Mul", "axes": "Constant", "sumsq": "ReduceSum", "norm": "Sqrt", "normalize": "Div"}
    plan = uniform_plan(ops, Precision.FP16, Reason("default", "auto mode"))
    plan = plan.with_fp32(["sumsq"], Reason("range", "FP32 max |x| 1.6e+05 > 65504",
                                             (("max_abs", "160000"),)))
    plan = plan.with_fp32(["sumsq", "norm"], Reason("search", "un-pinning it fails (probe 3)"))
    fields: dict[str, Any] = dict(  # each field's type is RunReport's to check
        model="l2.onnx", output="l2.fp16.onnx", mode="auto", oracle="emulate", status="passed", message="",
        plan=plan, node_ops=ops, samples_source="l2.npz", samples_synthetic=False, sample_count=2,
        tolerance=Tolerance(), headroom=2.0,
        node_flops={"square": 64, "axes": 1, "sumsq": 64, "norm": 1, "normalize": 64},
        node_stats={"sumsq": NodeStats(160000.0, 2500.0, float("inf"))},
        before=Comparison(outputs=(metrics("y", float("nan"), 0.0, nonfinite=64, passed=False),),
                          passed=False, oracle="emulate"),
        after=Comparison(outputs=(metrics("y", 1.2e-4, 0.99999),), passed=True, oracle="emulate"),
        verified=Comparison(outputs=(metrics("y", 1.2e-4, 0.99999),), passed=True, oracle="emulate"),
        phases=(PhaseCost("reference", 0.5, sessions=1, probes=1), PhaseCost("search", 0.25, probes=7),
                PhaseCost("verify", 0.1, sessions=1, probes=1)),
    )
    fields.update(overrides)
    return rep.RunReport(**fields)


def test_json_lists_each_pin_with_reasons_ranges_and_error():
    data = json.loads(rep.dumps(make_report()))
    assert data["format"] == rep.REPORT_FORMAT
    pins = {p["node"]: p for p in data["pinned"]}
    assert set(pins) == {"sumsq", "norm"}
    assert [r["source"] for r in pins["sumsq"]["reasons"]] == ["range", "search"]
    assert pins["sumsq"]["reasons"][0]["evidence"] == {"max_abs": "160000"}
    assert pins["sumsq"]["range"] == {"max_abs": 160000.0, "min_nonzero_abs": 2500.0}
    # JSON has no Infinity/NaN: they are written as strings so strict parsers read the report.
    assert pins["sumsq"]["layerwise_error"] == "inf"
    assert data["outputs"]["before"]["outputs"][0]["max_abs_err"] == "nan"
    assert data["outputs"]["before"]["passed"] is False and data["outputs"]["verified"]["passed"] is True


def test_json_counts_16bit_nodes_apart_from_fp16_ones():
    """A plan with FP16 and BF16 nodes: 16bit_nodes counts both, fp16_nodes the FP16 ones only (it
    counted BF16 nodes as FP16)."""
    report = make_report()
    report = replace(report, plan=report.plan.with_precision(["normalize"], Precision.BF16))
    share = json.loads(rep.dumps(report))["fp16_share"]
    assert (share["16bit_nodes"], share["fp16_nodes"], share["total_nodes"]) == (3, 2, 5)


def test_json_shares_costs_and_samples():
    data = json.loads(rep.dumps(make_report(samples_synthetic=True, samples_source="synthetic, seed 0")))
    assert data["fp16_share"]["fp16_nodes"] == 3 and data["fp16_share"]["total_nodes"] == 5
    assert data["fp16_share"]["nodes"] == pytest.approx(0.6)
    assert data["fp16_share"]["flops"] == pytest.approx(129 / 194)
    assert data["cost"]["sessions_built"] == 2 and data["cost"]["probes_run"] == 9
    assert [p["name"] for p in data["cost"]["phases"]] == ["reference", "search", "verify"]
    assert data["samples"]["synthetic"] is True and "--inputs" in data["samples"]["note"]
    json.loads(rep.dumps(make_report()), parse_constant=pytest.fail)  # strictly valid JSON


def test_markdown_has_pins_and_before_after_tables():
    text = rep.to_markdown(make_report())
    assert "| `sumsq` | ReduceSum | range: FP32 max |" in text.replace("\\|", "|")
    assert "search: un-pinning it fails (probe 3)" in text
    assert "## Before: all FP16 (emulated): FAIL (emulate)" in text
    assert "## Verified: the written model (emulated): pass (emulate)" in text
    assert "| search | 0.250 | 0 | 7 |" in text


def test_summary_is_short_and_says_what_matters():
    lines = rep.summary_lines(make_report(), ["l2.fp16.report.json"])
    assert 5 <= len(lines) <= 10
    text = "\n".join(lines)
    assert "FP16: 3/5 nodes (60.0%)" in text
    assert "FP32 pins (2): sumsq (range/search), norm (search)" in text
    # the NaN count once, and the statistics said to cover what is finite in both (none here)
    assert ("before: FAIL (worst y: rel RMS err 0, max abs err nan, cosine 0.000000, 64 new NaN/Inf "
            "(statistics over the 0 of 64 elements finite in both))") in text
    assert "verified: pass" in text
    assert "cost: 2 session(s), 9 probe(s), 0.85 s; report: l2.fp16.report.json" in text


def test_summary_of_a_model_with_no_pins():
    report = make_report(plan=uniform_plan(["a", "b"], Precision.FP16, Reason("default", "")), node_ops={})
    assert "FP32 pins: none" in rep.summary_lines(report)


def test_written_atomically_next_to_nothing_else(tmp_path):
    path = tmp_path / "r.json"
    rep.write_json(make_report(), str(path))
    rep.write_markdown(make_report(), str(tmp_path / "r.md"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]
    assert json.loads(path.read_text())["status"] == "passed"


def test_estimate_flops_matmul_and_elementwise():
    model = parse("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[B, 32] x) => (float[B, 16] y) {
      h = MatMul(x, w)
      y = Relu(h)
    }
    """)
    model.graph.initializer.append(__import__("onnx").numpy_helper.from_array(
        __import__("numpy").ones((32, 16), "float32"), "w"))
    model.graph.node[0].name, model.graph.node[1].name = "mm", "relu"
    flops = estimate_flops(model, {"x": (4, 32)})
    assert flops == {"mm": 2 * 4 * 16 * 32, "relu": 4 * 16}


def test_estimate_flops_uses_sample_shape_for_symbolic_dims():
    model = parse(L2)
    from onnx_precision.graph import name_nodes
    name_nodes(model)
    small = estimate_flops(model, {"x": (1, 64)})
    large = estimate_flops(model, {"x": (8, 64)})
    assert large["node_of_sq"] == 8 * small["node_of_sq"] == 512
    assert large["node_of_ss"] == 512  # a reduction counts the elements it reads, not its 8 outputs


def test_default_report_paths_are_siblings_of_the_output():
    assert rep.default_paths("out/m.fp16.onnx", None, None) == ("out/m.fp16.report.json",
                                                                 "out/m.fp16.report.md")
    assert rep.default_paths("m", "r.json", None) == ("r.json", "m.report.md")


def _outcome(model, verified: Comparison, native: Comparison | None = None, default_load: str = "",
             target=None):
    """A measured conversion of ``model`` whose search passed, checked as given."""
    import numpy as np

    from onnx_precision.basis import AsGiven, Basis
    from onnx_precision.convert.run import ConvertOptions, _outcome
    from onnx_precision.data import Samples
    from onnx_precision.judge import Tolerance
    from onnx_precision.outcome import AutoResult, Verification
    from onnx_precision.target import GENERIC

    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP16, Reason("default", "auto"))
    samples = Samples(({"x": np.ones((3, 64), np.float32)},), True, "synthetic, seed 0")
    passing = Comparison((metrics("y", 0.0, 1.0),), True, "emulate")
    basis = Basis(samples, AsGiven(Tolerance(), ({"y": np.ones((3, 64), np.float32)},)))
    auto = AutoResult(plan, "passed", "", "auto", passing, passing, {}, (PhaseCost("reference", 0.1, 1, 1),),
                      None, (), 2.0, basis)
    verification = Verification(verified, native, default_load, (PhaseCost("verify", 0.1, 1, 1),))
    return _outcome(auto, plan, ConvertOptions(), verification, ("w",), 0, "l2.fp16.onnx", target or GENERIC)


def test_the_status_is_decided_by_convert_from_the_search_and_the_verification():
    from onnx_precision.target import TensorRTTarget

    model = parse(L2)
    from onnx_precision.graph import name_nodes
    name_nodes(model)
    passing = Comparison((metrics("y", 0.0, 1.0),), True, "emulate")
    failing = Comparison((metrics("y", 1.0, 0.5, passed=False),), False, "emulate")
    gpu_failing = Comparison((metrics("y", 1.0, 0.5, passed=False),), False, "native:CUDAExecutionProvider")
    assert (_outcome(model, passing).status, _outcome(model, passing).message) == ("passed", "")
    bug = _outcome(model, failing)
    assert bug.status == "failed" and bug.message.startswith("the written model fails the emulated check")
    gpu = _outcome(model, passing, gpu_failing)
    assert gpu.message == "the written model fails on native:CUDAExecutionProvider (passes emulated)"
    crash = "onnxruntime at its default options cannot load it: Type parameter (T) bound to different types"
    ort = _outcome(model, passing, default_load=crash)
    assert ort.status == "ort-load-failed" and ort.message == f"the written model passes, but {crash}"
    # a target that does not run on onnxruntime passes, with the load problem as a warning
    trt = _outcome(model, passing, default_load=crash, target=TensorRTTarget())
    assert trt.status == "passed" and trt.warnings == ("w", f"{crash} (TensorRT 10.15 builds the model; "
                                                            f"onnxruntime is not the target)")
    report = rep.for_conversion(ModelContext.of(model, path="l2.onnx"), ort)
    assert report.status == "ort-load-failed" and report.output == "l2.fp16.onnx"
    assert [p.name for p in report.phases] == ["reference", "verify"] and report.sessions_built == 2
    assert report.node_flops["node_of_sq"] == 3 * 64 and report.sample_count == 1 and report.samples_synthetic


def test_progress_line_only_on_a_terminal():
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet, tty = io.StringIO(), Tty()
    for stream in (quiet, tty):
        progress = ProgressLine(stream)
        progress("search", 3, 5)
        progress.close()
    assert quiet.getvalue() == ""
    assert "search: [#######.............] probe 3 of about 8" in tty.getvalue()
    assert tty.getvalue().endswith("\r")


def test_markdown_with_headroom_off():
    assert "- headroom: off (only the search pins)" in rep.to_markdown(make_report(headroom=0.0))


def test_a_written_report_reads_back_into_the_same_value(tmp_path):
    from models import generate
    from onnx_precision.cli import main

    out = str(tmp_path / "o.onnx")
    data = generate.data_path("layernorm_eps")
    assert main(["convert", generate.model_path("layernorm_eps"), "-o", out, "--inputs", data, "-q"]) == 0
    written = json.load(open(tmp_path / "o.report.json"))
    back = rep.from_json(written)
    assert rep.to_json(back) == written
    assert back.plan.fp32_nodes == tuple(p["node"] for p in written["pinned"])
    assert back.points and back.verified is not None and back.verified.passed
    assert rep.to_markdown(back) == open(tmp_path / "o.report.md").read()


def test_samples_of_several_shapes_are_reported_per_shape(tmp_path, capsys):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from onnx_precision.cli import main

    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                               helper.make_node("ReduceSum", ["sq"], ["y"], name="sum", keepdims=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i, length in enumerate((16, 64, 64)):
        np.savez(data / f"s{i}.npz", x=rng.standard_normal((1, length)).astype(np.float32))
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", str(data)]) == 0
    verified = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verified:")][0]
    assert "; x:1x16 (1 sample(s)): y rel RMS err " in verified
    assert "; x:1x64 (2 sample(s)): y rel RMS err" in verified
    report = json.load(open(tmp_path / "o.report.json"))
    by_shape = report["outputs"]["verified"]["by_shape"]
    assert [(s["shapes"], s["samples"], s["passed"]) for s in by_shape] == [("x:1x16", 1, True),
                                                                             ("x:1x64", 2, True)]
    assert "- by shape: x:1x64 (2 sample(s))" in open(tmp_path / "o.report.md").read()
    assert rep.from_json(report).verified.by_shape[1][1].samples == 2  # the report reads it back


def test_estimate_flops_counts_no_constant_and_ignores_a_converters_negative_dims():
    """A Constant computes nothing; value_info with dim -1 (what some version converters write for an
    unknown dim) is no shape, so the sample's shapes still reach the MatMul after it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Constant", [], ["w"], name="weights",
                              value=onnx.numpy_helper.from_array(np.ones((32, 16), np.float32))),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="mm")]
    stale = helper.make_tensor_value_info("r", TensorProto.FLOAT, [-1, 32])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 16])],
                              value_info=[stale])
    flops = estimate_flops(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                           {"x": (4, 32)})
    assert flops == {"weights": 0.0, "relu": 4 * 32, "mm": 2 * 4 * 16 * 32}
