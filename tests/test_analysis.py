"""analyze() on every example model: the expected nodes, in order, with the right verdicts."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from conftest import unfused

import models
from models.generate import data_path, model_path, npz_bytes
from onnx_precision import analysis
from onnx_precision.cli import main
from onnx_precision.data import SampleSpec
from onnx_precision.rules import Severity


def run(name: str, tmp_path=None) -> analysis.AnalysisResult:
    """The example analysed; with ``tmp_path``, at opset 16 (conftest.unfused), written there."""
    path = model_path(name)
    if tmp_path is not None:
        path = str(tmp_path / f"{name}16.onnx")
        onnx.save(unfused(onnx.load(model_path(name))), path)
    return analysis.analyze(path, SampleSpec(inputs=data_path(name)))


def problems(result: analysis.AnalysisResult) -> list[tuple[str, str]]:
    return [(r.node, r.verdict) for r in result.problems]


@pytest.mark.parametrize("name, expected", [
    ("l2_normalize", [("sumsq", "overflow")]),
    ("softmax_nomax", [("exp", "overflow"), ("sum_exp", "overflow")]),
    ("log_underflow", [("probs", "underflow"), ("log_probs", "underflow")]),
    ("two_culprits", [("a_sumsq", "overflow"), ("b_exp", "overflow"), ("b_sum_exp", "overflow")]),
    ("dynamic_batch", [("sumsq", "overflow")]),
    ("layernorm_eps", [("ln_var", "underflow"), ("ln_add_eps", "underflow"), ("ln_sqrt", "underflow"),
                       ("ln_div", "underflow")]),  # below opset 17, see below for 17
])
def test_expected_nodes_and_verdicts(name, expected, tmp_path):
    result = run(name, tmp_path if name == "layernorm_eps" else None)
    assert problems(result) == expected
    assert result.rows[0].node == expected[0][0]
    assert not result.all_fp16.passed
    assert result.sessions_built == 1  # the twin graph: FP32 and all FP16 in one run per sample


def test_l2_normalize_names_the_sum_with_its_evidence():
    result = run("l2_normalize")
    row = result.rows[0]
    assert row.first_divergence and row.error.new_nonfinite == 1
    assert row.fp32_range.max_abs > 65504
    f = row.active_findings[0]
    assert (f.rule, f.confirmed, f.evidence["length"]) == ("reduction-overflow", True, 64)
    assert {r.node: r.verdict for r in result.rows}["normalize"] == "safe"


def test_boxfilter_blames_the_second_cumsum_not_the_first():
    result = run("nafnet_boxfilter")
    assert result.rows[0].node == "cumsum_w" and result.rows[0].verdict == "overflow"
    assert result.row("cumsum_w").first_divergence
    assert result.row("cumsum_h").verdict == "safe"
    # the integral image's corners are genuinely past 65504 in FP32 too
    assert {r.node for r in result.problems} >= {"corner_br", "corner_tl"}
    assert result.row("box_mean").verdict == "safe"


def test_layernorm_eps_explains_the_epsilon_and_where_inf_appears(tmp_path):
    result = run("layernorm_eps", tmp_path)  # node by node, as below opset 17
    eps = result.row("ln_add_eps")
    assert eps.forced_fp32 is not None and eps.forced_fp32.source == "initializer"
    rule = {f.rule: f for f in eps.findings}["epsilon-underflow"]
    assert rule.confirmed is True and rule.severity == "high"
    assert result.row("ln_div").first_divergence and result.row("ln_div").error.new_nonfinite > 0
    assert result.row("ln_mean").verdict == "safe"
    # the squares flush too, but only the mean of them (the variance) decides
    assert result.row("ln_sq").verdict == "safe"


def test_a_layer_norm_written_as_one_node_computes_its_statistics_in_fp32():
    """From opset 17 the nine nodes are written as one LayerNormalization (stash_type 1): emulated
    so, nothing flushes and all FP16 passes; eps stays FP32 in the plan (its initializer)."""
    result = run("layernorm_eps")
    assert result.all_fp16.passed and result.problems == ()
    assert result.row("ln_add_eps").forced_fp32.source == "initializer"
    assert result.row("ln_var").error.max_rel_err == 0  # the statistics: FP32 inside the written node


def test_log_underflow_marks_the_log_as_first_divergence():
    result = run("log_underflow")
    assert result.row("log_probs").first_divergence
    assert not result.row("probs").first_divergence


def test_benign_mlp_is_all_safe():
    result = run("benign_mlp")
    assert result.problems == ()
    assert all(r.verdict == "safe" for r in result.rows) and len(result.rows) == 4
    assert result.all_fp16.passed
    assert "(no node at risk)" in result.table()


def test_fp32_nan_is_the_models_fault():
    result = run("fp32_nan")
    assert result.fp32_nonfinite == "sqrt"
    assert problems(result) == [("sqrt", "fp32-nonfinite")]
    assert result.rows[0].node == "sqrt"
    text = result.table()
    assert "FP32 model itself produces NaN/Inf, first at node 'sqrt' (Sqrt)" in text
    assert "FP16 is not the cause" in text


def test_if_points_at_the_branch_and_the_suspect_inside():
    result = run("if_branch")
    assert result.rows[0].node == "branch" and result.rows[0].verdict == "overflow"
    inner = result.row("then_sumsq")
    assert inner.verdict == "overflow" and inner.graph_path == (("branch", "then_branch"),)
    assert "subgraph values are not recorded" in inner.note
    assert result.row("else_scale").verdict == "safe"


def test_a_model_without_fp32_compute_is_called_out(tmp_path):
    model = onnx.load(model_path("l2_normalize"))
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    path = str(tmp_path / "fp16.onnx")
    onnx.save(model, path)
    result = analysis.analyze(path)
    assert any("nothing in float32" in w for w in result.warnings)


def test_dynamic_batch_takes_the_worst_sample():
    result = run("dynamic_batch")
    assert result.sample_count == 2
    assert result.row("sumsq").fp32_range.max_abs > 65504  # only the second sample overflows


@pytest.mark.slow  # 1.0 s in a full run on 2 busy cores
def test_transformer_finds_the_two_culprit_layers(tmp_path):
    example = models.transformer()
    assert len(example.model.graph.node) >= 500
    path, data = str(tmp_path / "t.onnx"), str(tmp_path / "t.npz")
    onnx.save(unfused(example.model), path)  # from opset 17 the LayerNorm statistics are FP32
    with open(data, "wb") as f:
        f.write(npz_bytes(example.feeds[0]))
    result = analysis.analyze(path, SampleSpec(inputs=data))
    assert problems(result) == [("l3_ln2_sq", "overflow"), ("l8_ln2_sq", "overflow")]
    assert result.row("l3_ln2_sq").first_divergence
    assert result.sessions_built == 1  # the twin graph: FP32 and all FP16 in one run per sample


def test_synthetic_data_is_labelled_and_ranges_decide():
    default = analysis.analyze(model_path("l2_normalize"))  # uniform [0, 1): the sum stays small
    assert default.synthetic and default.problems == ()
    assert "synthetic" in default.table() and "ranges decide what overflows" in default.table()
    wide = analysis.analyze(model_path("l2_normalize"), SampleSpec(input_ranges={"x": (30.0, 55.0)}))
    assert wide.synthetic and problems(wide) == [("sumsq", "overflow")]


def test_json_has_the_table_content_and_is_deterministic(tmp_path):
    first, second = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    run("layernorm_eps", tmp_path).write_json(first)
    run("layernorm_eps", tmp_path).write_json(second)
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()
    with open(first) as f:
        doc = json.load(f)
    assert doc["format"] == "onnx-precision-analysis/1" and doc["oracle"] == "emulate"
    assert doc["samples"]["synthetic"] is False
    assert doc["verdicts"]["underflow"][0] == "ln_var"
    row = doc["rows"][0]
    assert row["node"] == "ln_var" and row["fp32_range"]["flush_fraction"] == 0.5
    assert {f["rule"] for f in doc["rows"][1]["findings"]} >= {"epsilon-underflow"}
    assert doc["rows"][1]["forced_fp32"]["source"] == "initializer"
    assert doc["all_fp16"]["passed"] is False


# --- the command line -------------------------------------------------------------------------------

def test_cli_prints_the_table_writes_json_and_exits_0(tmp_path, capsys):
    out = str(tmp_path / "analysis.json")
    code = main(["analyze", model_path("l2_normalize"), "--inputs", data_path("l2_normalize"), "--json", out])
    assert code == 0
    printed = capsys.readouterr().out
    assert "sumsq" in printed and "overflow" in printed and "reduction-overflow" in printed
    with open(out) as f:
        assert json.load(f)["rows"][0]["node"] == "sumsq"


def test_cli_exits_0_when_the_fp32_model_is_broken(capsys):
    assert main(["analyze", model_path("fp32_nan"), "--inputs", data_path("fp32_nan")]) == 0
    assert "fp32-nonfinite" in capsys.readouterr().out


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_cli_missing_model(tmp_path, capsys):
    missing = str(tmp_path / "nope.onnx")
    assert main(["analyze", missing]) == 2
    assert _one_line_error(capsys) == f"onnx-precision: error: {missing}: no such file"


def test_cli_not_an_onnx_file(tmp_path, capsys):
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"\x00\x01garbage")
    assert main(["analyze", str(bogus)]) == 2
    assert str(bogus) in _one_line_error(capsys)


def test_cli_wrong_input_name_in_data(tmp_path, capsys):
    data = tmp_path / "wrong.npz"
    data.write_bytes(npz_bytes({"not_x": np.ones((1, 64), np.float32)}))
    assert main(["analyze", model_path("l2_normalize"), "--inputs", str(data)]) == 2
    err = _one_line_error(capsys)
    assert "wrong.npz" in err and ("'x'" in err or "not_x" in err)


def test_cli_json_into_missing_directory_writes_nothing(tmp_path, capsys):
    target = tmp_path / "no_such_dir" / "a.json"
    code = main(["analyze", model_path("l2_normalize"), "--inputs", data_path("l2_normalize"),
                 "--json", str(target)])
    assert code == 2
    assert "does not exist" in _one_line_error(capsys)
    assert not os.path.exists(target.parent)


def test_cli_json_refuses_to_overwrite_the_model(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(open(model_path("benign_mlp"), "rb").read())
    before = model.read_bytes()
    assert main(["analyze", str(model), "--json", str(model)]) == 2
    assert "input file" in _one_line_error(capsys)
    assert model.read_bytes() == before


# --- the verdict from its evidence ------------------------------------------------------------------

def _node(op: str) -> onnx.NodeProto:
    return onnx.helper.make_node(op, ["a", "b"], ["c"], name="n")


def _error(diverges: bool, rel: float = 0.5, nonfinite: int = 0):
    from onnx_precision.oracle.layerwise_error import NodeError
    return NodeError("n", "Op", rel, rel, nonfinite, 0.0, diverges)


def _stats(max_abs: float, flush: float = 0.0):
    from onnx_precision.oracle.ranges import TensorStats
    return TensorStats(max_abs, 1e-3, flush, 0, 0, 16)


def _flush_finding(severity: Severity = "medium"):
    from onnx_precision import rules
    return rules.Finding("n", "Op", "flush-to-zero", "underflow", severity, {}, "m", True)


def test_verdict_precision_when_the_error_appears_without_a_range_cause():
    assert analysis.node_diagnosis(_node("Add"), (), _stats(10.0), _error(True), None) == "precision"
    assert analysis.node_diagnosis(_node("Add"), (), _stats(10.0), _error(False), None) == "safe"


def test_verdict_new_nonfinite_is_underflow_after_a_division_and_overflow_elsewhere():
    blown = _error(True, nonfinite=3)
    assert analysis.node_diagnosis(_node("Div"), (), _stats(10.0), blown, None) == "underflow"
    assert analysis.node_diagnosis(_node("Mul"), (), _stats(10.0), blown, None) == "overflow"


def test_verdict_flush_decides_only_with_an_effect_and_fp32_nan_wins():
    flush = (_flush_finding(),)
    assert analysis.node_diagnosis(_node("Mul"), flush, _stats(1.0, 0.5), _error(False), None, effect=True) \
        == "underflow"
    assert analysis.node_diagnosis(_node("Mul"), flush, _stats(1.0, 0.5), _error(False), None, effect=False) \
        == "safe"
    big = _stats(7e4)
    assert analysis.node_diagnosis(_node("Mul"), flush, big, _error(False), None, effect=False) == "overflow"
    assert analysis.node_diagnosis(_node("Mul"), flush, _stats(7e4), _error(True), "n") == "fp32-nonfinite"


def test_nan_in_the_data_is_a_warning_not_a_node_verdict(tmp_path):
    x = np.full((1, 64), 2.0, np.float32)
    x[0, 5] = np.nan
    data = tmp_path / "nan.npz"
    data.write_bytes(npz_bytes({"x": x}))
    result = analysis.analyze(model_path("l2_normalize"), SampleSpec(inputs=str(data)))
    assert result.fp32_nonfinite is None and result.problems == ()
    assert any("'x'" in w and "NaN" in w for w in result.warnings), result.warnings


def test_margins_to_the_16_bit_limits_are_reported_nearest_first(tmp_path, capsys):
    """x*x reaching 40000 is 0.71 binade from FP16's 65504: an input 1.7x larger overflows."""
    import json

    import numpy as np
    from onnx import TensorProto, helper

    from onnx_precision.cli import main

    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                               helper.make_node("Sqrt", ["sq"], ["y"], name="root")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(model, path)
    np.savez(data, x=np.array([1, 2, 100, 200], np.float32))
    assert main(["analyze", path, "--inputs", data, "--json", str(tmp_path / "a.json")]) == 0
    assert "within one binade of the 16-bit limits on the samples: square (0.71 binade(s) to overflow)" in \
        capsys.readouterr().out
    rows = {r["node"]: r for r in json.load(open(tmp_path / "a.json"))["rows"]}
    assert rows["square"]["margins"] == {"overflow_binades": 0.712, "underflow_binades": 25.0}
    # convert: the JSON report lists every FP16 node's margins, the nearest first
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "-q", "--headroom",
                 "0"]) == 0
    report = json.load(open(tmp_path / "o.report.json"))
    assert [m["node"] for m in report["margins"]] == ["square", "root"]
    assert report["margins"][0] == {"node": "square", "overflow_binades": 0.712, "underflow_binades": 25.0}


def test_a_tensor_of_zeros_has_no_margin_and_the_json_says_inf(tmp_path):
    """An all-zero tensor (Kokoro-82M int8 has some) is infinitely far from both limits: the JSON
    said inf, which JSON cannot hold, and analyze --json stopped with an internal error."""
    import json

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from onnx_precision.cli import main

    zero = numpy_helper.from_array(np.zeros(4, np.float32), "zero")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "zero"], ["y"], name="silence")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(model, path)
    np.savez(data, x=np.array([1, 2, 3, 4], np.float32))
    assert main(["analyze", path, "--inputs", data, "--json", str(tmp_path / "a.json"), "-q"]) == 0
    rows = {r["node"]: r for r in json.load(open(tmp_path / "a.json"))["rows"]}
    assert rows["silence"]["margins"] == {"overflow_binades": "inf", "underflow_binades": "inf"}


@pytest.mark.slow  # 0.9 s in a full run on 2 busy cores
def test_nodes_inside_a_layernorm_written_as_one_node_are_said_to_compute_in_fp32(tmp_path):
    """From opset 17 the written model computes each decomposed LayerNorm as one LayerNormalization
    with FP32 statistics: its sum of squares (1.55e5) is a risk that the written model never takes."""
    example = models.transformer()
    path, data = str(tmp_path / "t.onnx"), str(tmp_path / "t.npz")
    onnx.save(example.model, path)
    with open(data, "wb") as f:
        f.write(npz_bytes(example.feeds[0]))
    result = analysis.analyze(path, SampleSpec(inputs=data))
    assert result.all_fp16 is not None and result.all_fp16.passed
    row = result.row("l3_ln2_sq")
    assert row.verdict == "overflow" and row.forced_fp32 is not None
    assert row.forced_fp32.detail == ("inside the LayerNormalization 'l3_ln2_shift' the written model "
                                      "computes in its place, with FP32 statistics")
    assert "overflow (fp32)" in result.table()
