"""Issue 20's small bugs, each with the behaviour that shows it fixed."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from models import generate
from onnx_precision import rules
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.trt.versions import NEWEST


def test_the_fast_fp16_cast_runs():
    """storage.fast_cast imported helper_sessions from the wrong package: the fast path never ran."""
    from onnx_precision.storage import fast_cast

    fast_cast._session.cache_clear()
    assert fast_cast._session() is not None


def test_a_rule_never_says_over_none_elements():
    """A CumSum whose length the shapes do not give is a "running sum", not one "over None elements"."""
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(np.array(0, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    findings = rules.run_rules(rules.ModelFacts(ModelContext.of(model))).findings
    assert [f.message for f in findings] == ["running sum: increments fall below FP16 spacing"]


def test_a_pin_found_by_the_headroom_and_the_range_flags_carries_the_reason_once(tmp_path):
    out = str(tmp_path / "o.onnx")
    name = "l2_normalize"
    assert main(["convert", generate.model_path(name), "-o", out, "--inputs", generate.data_path(name),
                 "-q"]) == 0
    reasons = json.load(open(tmp_path / "o.report.json"))["pinned"][0]["reasons"]
    details = [r["detail"] for r in reasons]
    assert len(details) == len(set(details)) and sum("over the FP16 maximum" in d for d in details) == 1


def test_saved_inputs_and_outputs_round_trip_through_polygraphys_loaders(tmp_path):
    import onnxruntime as ort
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    name = "two_culprits"
    feeds, outs = str(tmp_path / "inputs.json"), str(tmp_path / "outputs.json")
    assert main(["convert", generate.model_path(name), "-o", str(tmp_path / "o.onnx"), "-q",
                 "--load-inputs", generate.data_path(name), "--save-inputs", feeds, "--save-outputs",
                 outs]) == 0
    data = dict(np.load(generate.data_path(name)))
    loaded = load_json(feeds)
    assert len(loaded) == 1 and loaded[0].keys() == data.keys()
    assert all(np.array_equal(loaded[0][k], data[k]) for k in data)
    results = RunResults.load(outs)
    [(runner, iterations)] = list(results.items())
    want = ort.InferenceSession(generate.model_path(name)).run(None, data)
    assert runner == "onnx-precision-fp32" and len(iterations) == 1
    assert all(np.allclose(iterations[0][o.name], w, rtol=1e-6)
               for o, w in zip(onnx.load(generate.model_path(name)).graph.output, want))
    # and the saved feeds are data again (--inputs reads Polygraphy JSON)
    assert main(["convert", generate.model_path(name), "-o", str(tmp_path / "p.onnx"), "-q", "--inputs",
                 feeds]) == 0


def test_a_shape_given_to_inputs_says_to_use_input_shapes(tmp_path, capsys):
    name = "dynamic_batch"
    assert main(["convert", generate.model_path(name), "-o", str(tmp_path / "o.onnx"),
                 "--inputs", "x:[2,64]"]) == 2
    assert capsys.readouterr().err.strip() == (
        "onnx-precision: error: x:[2,64]: no such file or directory; it reads like input shapes "
        "(Polygraphy's --inputs takes shapes): give them with --input-shapes x:[2,64]")
    assert not (tmp_path / "o.onnx").exists()


def test_off_a_terminal_a_long_run_logs_its_phases_and_a_heartbeat_every_30_s_and_never_goes_back():
    import io

    from onnx_precision.cli.progress import ProgressLine

    now = [0.0]
    log = io.StringIO()
    progress = ProgressLine(log, clock=lambda: now[0])
    progress("load", 0, 0)
    progress.tick()
    assert log.getvalue() == ""  # a run under 5 s prints nothing: a quick error stays one line
    now[0] = 6.0
    progress.tick()
    progress("search", 3, 7, 0.5)
    now[0] = 20.0
    progress.tick()  # 14 s of silence: no beat yet
    now[0] = 37.0
    progress.tick()
    progress("search", 4, 1, 0.5)  # the search needs fewer probes than estimated: no line goes back
    now[0] = 70.0
    progress.tick()
    assert log.getvalue().splitlines() == [
        "progress: load (6 s elapsed)",
        "progress: search: [######..............] probe 3 of about 10, best 16-bit share 50.0% (6 s elapsed)",
        "progress: still search (37 s elapsed, 3 probe(s) done)",
        "progress: still search (70 s elapsed, 4 probe(s) done)"]
    quiet = io.StringIO()
    silent = ProgressLine(quiet, enabled=False, clock=lambda: now[0])  # -q
    silent("search", 1, 1)
    silent.tick()
    assert quiet.getvalue() == ""


def test_check_writes_its_result_as_json(tmp_path, capsys):
    name = "l2_normalize"
    out = str(tmp_path / "o.onnx")
    assert main(["convert", generate.model_path(name), "-o", out, "--inputs", generate.data_path(name),
                 "-q"]) == 0
    path = str(tmp_path / "check.json")
    assert main(["check", generate.model_path(name), out, "--inputs", generate.data_path(name), "--json",
                 path]) == 0
    result = json.load(open(path))
    assert result["format"] == "onnx-precision-check/1" and result["passed"] is True
    assert result["oracle"] == "emulate" and result["samples"]["count"] == 1
    [y] = result["comparison"]["outputs"]
    assert y["name"] == "y" and y["passed_by"] == "all |err| <= atol 0.001" and y["new_nonfinite"] == 0
    assert result["tolerance"]["error_stat"] == "rms"


def test_the_written_model_says_what_wrote_it_and_every_cast_why(tmp_path):
    import hashlib

    name = "l2_normalize"
    out, plan = str(tmp_path / "o.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", generate.model_path(name), "-o", out, "--inputs", generate.data_path(name), "-q",
                 "--save-plan", plan]) == 0
    model = onnx.load(out)
    props = {p.key: p.value for p in model.metadata_props}
    from onnx_precision import __version__

    assert props["onnx_precision.version"] == __version__ and props["onnx_precision.target"] == "generic"
    assert props["onnx_precision.plan_sha256"] == hashlib.sha256(open(plan, "rb").read()).hexdigest()
    casts = {n.name: n.doc_string for n in model.graph.node if n.op_type == "Cast"}
    assert casts["sq_cast_fp32"].startswith("onnx-precision: for FP32 node 'sumsq' (")
    assert all(doc.startswith("onnx-precision: ") for doc in casts.values())


def test_the_summary_ends_with_the_command_that_runs_the_model_on_its_target(tmp_path, capsys):
    name = "l2_normalize"
    model, out = generate.model_path(name), str(tmp_path / "o.onnx")
    assert main(["convert", model, "-o", out, "--inputs", generate.data_path(name)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"next: onnx-precision check {model} {out} --inputs {generate.data_path(name)} --oracle cuda  "
        f"# checks it on the GPU (onnxruntime-gpu's CUDA provider) as this run judged it; holds on: generic, "
        f"tensorrt {NEWEST}, webgpu, openvino-gpu, fp16-accumulate (emulated on the samples)")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--target", "tensorrt"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == (f"next: trtexec --onnx={out} --stronglyTyped  # TensorRT 9.0 and later builds it as "
                         f"written (--trt-flags for older)")
    assert lines[-1] == (f"not verified: --mode all-fp16 runs nothing (--mode auto or static verifies it); "
                         f"to check it: onnx-precision check {model} {out} --target tensorrt")
