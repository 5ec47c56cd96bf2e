"""Where a plan holds: the written model judged on every runtime of the registry (issue 33, item 3).

A MatMul whose sum cancels (terms of ±100·x over 64 elements: Σ|a||b| past 65504, the sum itself a few
hundred) fits FP16 where kernels sum in FP32 (generic, TensorRT) and overflows where they sum in FP16
(onnxruntime's WebGPU shaders, OpenVINO's GPU kernels, the fp16-accumulate bound), as PP-OCRv4 det's
written model gave 614 400 new NaN/Inf under ``check --target webgpu`` after a generic run that said
"any FP16 runtime runs it".
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from models.generate import data_path, model_path
from onnx_precision.basis import measure
from onnx_precision.cli import main
from onnx_precision.context import ModelContext, load_model
from onnx_precision.data import SampleSpec, load_samples
from onnx_precision.report import from_json, to_markdown
from onnx_precision.rewriter import rewrite
from onnx_precision.runtimes import FirstFailure, JudgedAs, RuntimeTable, RuntimeVerdict, judge, judged_as
from onnx_precision.target import GENERIC, TensorRTTarget
from onnx_precision.trt.versions import NEWEST

K = 64
TRT = f"tensorrt {NEWEST}"
FIRST = "first: node 'mm' (MatMul) makes 16 NaN/Inf from finite inputs"


def cancelling_matmul() -> onnx.ModelProto:
    """x (in [0, 1)) * 100, then MatMul with weights of ±100 alternating along K: every product is up to
    10^4, their magnitudes sum past 65504, the sum cancels to a few hundred."""
    w = (np.where(np.arange(K)[:, None] % 2 == 0, 100.0, -100.0) * np.ones((K, 8))).astype(np.float32)
    nodes = [h.make_node("Mul", ["x", "hundred"], ["xs"], name="scale"),
             h.make_node("MatMul", ["xs", "w"], ["m"], name="mm"),
             h.make_node("Relu", ["m"], ["y"], name="relu")]
    graph = h.make_graph(nodes, "cancelling", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, K])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                         [nh.from_array(np.array(100, np.float32), "hundred"), nh.from_array(w, "w")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def written(tmp_path) -> tuple[str, str]:
    """The FP32 model and its all-FP16 rewrite for the generic target, as files."""
    fp32, fp16 = str(tmp_path / "mm.onnx"), str(tmp_path / "mm16.onnx")
    onnx.save(cancelling_matmul(), fp32)
    ctx = load_model(fp32)
    onnx.save(rewrite(ctx, ctx.all_low_plan()).model, fp16)
    return fp32, fp16


def test_the_written_model_holds_where_sums_are_fp32_and_names_the_first_node_where_they_are_not(written):
    fp32, fp16 = written
    ctx = load_model(fp32)
    basis = measure(ctx, load_samples(ctx.model, SampleSpec()))
    table = judge(fp16, ctx, basis)
    assert [(v.runtime, v.passed, v.as_run) for v in table.verdicts] == [
        ("generic", True, True), (TRT, True, False), ("webgpu", False, False), ("openvino-gpu", False, False),
        ("fp16-accumulate", False, False)]
    # the runtimes failing alike, together
    fails = "webgpu, openvino-gpu, fp16-accumulate"
    assert table.line() == f"holds on: generic, {TRT}; fails on: {fails} ({FIRST})"
    assert table.short() == f"holds on: generic, {TRT}; fails on: {fails} (emulated on the samples)"
    assert [v.worst for v in table.fails] == ["worst y: 8 new NaN/Inf"] * 3
    assert RuntimeTable.from_json(table.to_json()) == table
    # the model in memory is judged alike
    assert judge(load_model(fp16), ctx, basis).line() == table.line()


def test_the_target_a_candidate_records_is_the_one_it_is_judged_under_unless_one_is_named(written, tmp_path):
    fp32, fp16 = written
    assert judged_as(fp16, GENERIC).target.name == "generic"  # convert stamped "generic"
    model = onnx.load(fp16)
    onnx.helper.set_model_props(model, {"onnx_precision.target": "webgpu"})
    stamped = str(tmp_path / "webgpu.onnx")
    onnx.save(model, stamped)
    found = judged_as(stamped, GENERIC)
    assert found.target.name == "webgpu" and found.source == (
        "recorded in the candidate, metadata onnx_precision.target; --target overrides it")
    assert judged_as(stamped, GENERIC, recorded=False) == JudgedAs(GENERIC, "given")  # --target generic
    tensorrt = TensorRTTarget()
    assert judged_as(stamped, tensorrt) == JudgedAs(tensorrt, "given")  # a target named is kept
    del model.metadata_props[:]
    onnx.save(model, stamped)
    assert judged_as(stamped, GENERIC).source == "the default: the candidate records none"


def test_a_failure_shown_by_a_cast_the_writer_added_is_named_at_the_node_that_made_it():
    """models/layernorm_eps written all FP16 for generic: its decomposed LayerNorm fused into one
    LayerNormalization ('ln_shift', writing 'y_fp16', a name the FP32 model does not have) whose statistics
    TensorRT computes in FP16, where its epsilon flushes to zero. The error first shows at the Cast back to
    FP32 the writer added ('y_fp16_cast_fp32'); the node that made it is the LayerNormalization."""
    ctx = load_model(model_path("layernorm_eps"))
    basis = measure(ctx, load_samples(ctx.model, SampleSpec(inputs=data_path("layernorm_eps"))))
    written = ModelContext(rewrite(ctx, ctx.all_low_plan()).model, "", ctx.base_dir)
    table = judge(written, ctx, basis)
    first = "first: node 'ln_shift' (LayerNormalization) makes 128 NaN/Inf from finite inputs"
    assert table.line() == f"holds on: generic, webgpu, openvino-gpu, fp16-accumulate; fails on: {TRT} " \
                           f"({first})"


def test_convert_says_where_its_plan_holds_in_the_summary_the_next_line_and_the_reports(tmp_path, capsys):
    """The generic run's summary said nothing of other runtimes, its next: line "any FP16 runtime runs it"."""
    path, out = str(tmp_path / "mm.onnx"), str(tmp_path / "o.onnx")
    onnx.save(cancelling_matmul(), path)
    assert main(["convert", path, "-o", out]) == 0
    stdout = capsys.readouterr().out
    fails = "webgpu, openvino-gpu, fp16-accumulate"
    assert f"\nruntimes: holds on: generic, {TRT}; fails on: {fails} ({FIRST})\n" in stdout
    nxt = next(line for line in stdout.splitlines() if line.startswith("next: "))
    assert nxt.endswith(f"as this run judged it; holds on: generic, {TRT}; fails on: {fails} (emulated on "
                        f"the samples)") and "any FP16 runtime" not in stdout
    report = json.loads((tmp_path / "o.report.json").read_text())
    verdicts = [(v["runtime"], v["passed"], (v["first_failure"] or {}).get("node"))
                for v in report["runtimes"]]
    assert verdicts == [("generic", True, None), (TRT, True, None), ("webgpu", False, "mm"),
                        ("openvino-gpu", False, "mm"), ("fp16-accumulate", False, "mm")]
    assert from_json(report).runtimes == RuntimeTable.from_json(report["runtimes"])
    markdown = (tmp_path / "o.report.md").read_text()
    assert ("| webgpu | FAIL | worst y: 8 new NaN/Inf | node 'mm' (MatMul) makes 16 NaN/Inf from finite "
            "inputs |\n") in markdown
    # a node's name is data: a cell holds it whole, on its row
    hostile = RuntimeTable((RuntimeVerdict("webgpu", False, "worst y: 1 new NaN/Inf",
                                           FirstFailure("m|m`\nx", "MatMul", 1, 0.0)),))
    row = next(line for line in to_markdown(replace(from_json(report), runtimes=hostile)).splitlines()
               if line.startswith("| webgpu |"))
    assert row.count(" | ") == 3 and "m\\|m" in row


def test_check_judges_a_candidate_under_the_target_it_records(tmp_path, capsys):
    """Before: check judged as generic whatever the candidate was written for, without a word."""
    path, out = str(tmp_path / "mm.onnx"), str(tmp_path / "o.onnx")
    onnx.save(cancelling_matmul(), path)
    assert main(["convert", path, "-o", out, "-q"]) == 0
    model = onnx.load(out)
    onnx.helper.set_model_props(model, {"onnx_precision.target": "webgpu"})
    stamped = str(tmp_path / "webgpu.onnx")
    onnx.save(model, stamped)
    capsys.readouterr()
    assert main(["check", path, stamped, "--json", str(tmp_path / "c.json")]) == 1
    stdout = capsys.readouterr().out
    assert ("; target: webgpu (recorded in the candidate, metadata onnx_precision.target; --target overrides "
            "it)\n") in stdout
    result = json.loads((tmp_path / "c.json").read_text())
    assert (result["target"], result["passed"]) == ("webgpu", False)
    assert [v["runtime"] for v in result["runtimes"] if v["passed"]] == ["generic", TRT]
    assert main(["check", path, stamped, "--target", "generic"]) == 0
    assert "; target: generic (given)\n" in capsys.readouterr().out
