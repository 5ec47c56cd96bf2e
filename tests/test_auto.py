"""Choosing a plan: the search on the example models, 1-minimality, headroom, static mode, errors."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import unfused

import models
from onnx_precision.context import ModelContext, load_model
from onnx_precision.convert import choose as auto
from onnx_precision.data import Samples
from onnx_precision.errors import PrecisionError, SearchError
from onnx_precision.graph import walk_nodes
from onnx_precision.judge import Tolerance, compare_samples
from onnx_precision.options import Judging
from onnx_precision.oracle import EmulationSession, run_emulated
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.rewriter import rewrite

# The FP32 nodes each example needs (default headroom), by the search or the headroom rule;
# "ln_add_eps" is forced by its initializer (eps = 1e-12 is 0 in FP16), and all layernorm_eps needs:
# written as one LayerNormalization, its statistics are FP32 (below opset 17, UNFUSED_LAYERNORM_EPS).
EXPECTED = {
    "l2_normalize": ("sumsq", "norm"),
    "nafnet_boxfilter": ("cumsum_w", "corner_br", "corner_tr", "corner_bl", "corner_tl", "box_sub_top",
                         "box_sub_left", "box_add_corner"),
    "layernorm_eps": ("ln_add_eps",),
    "softmax_nomax": ("exp", "sum_exp", "normalize"),
    "log_underflow": ("probs", "log_probs"),
    "benign_mlp": (),
    "two_culprits": ("a_sumsq", "a_norm", "b_exp", "b_sum_exp", "b_normalize"),
    "if_branch": ("then_sumsq", "then_norm"),
    "dynamic_batch": ("sumsq", "norm"),
}
UNFUSED_LAYERNORM_EPS = ("ln_sq", "ln_var", "ln_add_eps", "ln_sqrt")


def load(name: str, tmp_path, below_17: bool = False) -> tuple[ModelContext, Samples]:
    """The example, loaded; ``below_17``: at opset 16 (conftest.unfused)."""
    example = models.build(name)
    path = os.path.join(str(tmp_path), f"{name}.onnx")
    onnx.save(unfused(example.model) if below_17 else example.model, path)
    return load_model(path), Samples(example.feeds, False, name)


def all_fp16(loaded: ModelContext, fp16_io: bool = False):
    names = [r.name for r in walk_nodes(loaded.model.graph)]
    return uniform_plan(names, Precision.FP16, Reason("default", "test"), fp16_io)


def choose(name: str, tmp_path, below_17: bool = False, **kwargs,
           ) -> tuple[auto.AutoResult, ModelContext, Samples]:
    loaded, samples = load(name, tmp_path, below_17)
    result = auto.choose_plan(loaded, all_fp16(loaded), samples, Judging(), **kwargs)
    return result, loaded, samples


def written_passes(loaded, plan, samples, fuse: bool = True) -> bool:
    """Write ``plan`` with the rewriter and emulate the written model (what convert verifies);
    ``fuse`` off writes every node as it is (no LayerNormalization in place of its nodes)."""
    written = rewrite(loaded, plan, fuse_layer_norms=fuse).model
    refs = [{o.name: out[o.name] for o in loaded.model.graph.output}
            for out in run_emulated(loaded, samples.feeds).outputs]
    cands = run_emulated(ModelContext.of(written), samples.feeds).outputs
    return compare_samples(refs, cands, Tolerance(), "emulate").passed


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_models_pin_exactly_the_expected_nodes(name, tmp_path):
    result, loaded, samples = choose(name, tmp_path)
    assert result.status == auto.PASSED, result.message
    assert result.plan.fp32_nodes == EXPECTED[name]
    assert result.after.passed
    phases = {p.name: p for p in result.phases}
    # A baked session each for FP32, the caller's plan and (when headroom pins change it) the base
    # plan; when a search follows, the base plan capturing its tensors for the layerwise comparison,
    # then the switch graph, one session for all the probes.
    searched = "search" in phases
    assert result.sessions_built == 2 + phases["start"].sessions + 2 * int(searched)
    assert phases["start"].sessions == int(phases["start"].probes == 1)
    if searched:
        assert phases["layerwise"].sessions == 1 and phases["switch graph"].sessions == 1
        assert phases["search"].sessions == 0 and phases["after"].sessions == 0
    assert written_passes(loaded, result.plan, samples)
    if name == "layernorm_eps":  # written as one LayerNormalization, statistics in FP32: all FP16 holds
        assert result.before.passed and written_passes(loaded, all_fp16(loaded), samples)
        assert not written_passes(loaded, all_fp16(loaded), samples, fuse=False)  # node by node it breaks
    elif EXPECTED[name]:
        assert not result.before.passed
        assert not written_passes(loaded, all_fp16(loaded), samples, fuse=False)


def test_below_opset_17_a_layer_norm_is_searched_node_by_node(tmp_path):
    result, loaded, samples = choose("layernorm_eps", tmp_path, below_17=True)
    assert not result.before.passed and result.plan.fp32_nodes == UNFUSED_LAYERNORM_EPS
    assert written_passes(loaded, result.plan, samples)
    assert not any(n.op_type == "LayerNormalization" for n in rewrite(loaded, result.plan).model.graph.node)


def test_two_independent_culprits_found_by_search_are_one_minimal(tmp_path):
    # Headroom off: the search alone must find both branches.
    result, loaded, samples = choose("two_culprits", tmp_path, headroom=0)
    assert set(result.plan.fp32_nodes) == {"a_sumsq", "a_norm", "b_exp", "b_sum_exp", "b_normalize"}
    assert all(r.source == "search"
               for n in result.plan.fp32_nodes for r in result.plan.decisions[n].reasons[:1])
    session = EmulationSession(loaded, capture_intermediates=False)
    refs = [session.run(None, f) for f in samples.feeds]
    for node in result.plan.fp32_nodes:
        unpinned = result.plan.with_fp16([node])
        cands = [session.run(unpinned, f) for f in samples.feeds]
        assert not compare_samples(refs, cands, Tolerance(), "emulate").passed, f"{node} was not needed"


def test_one_session_for_every_probe(tmp_path):
    result, _, _ = choose("layernorm_eps", tmp_path, below_17=True)
    # FP32 and all FP16 baked, all FP16 capturing (layerwise), then the switch graph for the search
    assert result.sessions_built == 4
    assert result.search is not None and result.search.probes_run >= 5
    phases = {p.name: p for p in result.phases}
    assert phases["reference"].sessions == 1 and phases["before"].sessions == 1
    assert phases["layerwise"].sessions == 1 and phases["switch graph"].sessions == 1
    assert phases["search"].sessions == 0
    assert result.probes_run == sum(p.probes for p in result.phases)


def test_search_verdicts_name_the_failure(tmp_path):
    result, _, _ = choose("log_underflow", tmp_path)
    reasons = result.plan.decisions["log_probs"].reasons
    search = [r for r in reasons if r.source == "search"]
    assert search and "output 'log_p'" in search[0].detail and "NaN/Inf" in search[0].detail
    assert any(r.source == "rule" for r in reasons)  # the confirmed rule finding is attached too
    assert result.node_stats["probs"].min_nonzero_abs < 6e-8
    assert result.node_stats["log_probs"].layerwise_error == float("inf")


def test_range_pins_are_marked_and_can_be_turned_off(tmp_path):
    # 'sumsq' reaches 1.2e5 > 65504: a range pin (not headroom), for its producer and its consumer.
    with_headroom, _, _ = choose("l2_normalize", tmp_path)
    assert auto.pinned_by(with_headroom.plan, "range") == ("sumsq", "norm")
    assert auto.pinned_by(with_headroom.plan, "headroom") == ()
    assert with_headroom.search is None  # range pins alone passed: no search needed
    searched, _, _ = choose("l2_normalize", tmp_path, headroom=0)
    assert auto.pinned_by(searched.plan, "headroom") == ()
    assert auto.pinned_by(searched.plan, "search") == ("sumsq", "norm")


def test_headroom_pins_a_node_whose_outputs_still_pass(tmp_path):
    # 'sq' reaches about 55^2 = 3025 > 65504/30 = 2183: the outputs pass with it in FP16, but a
    # large headroom pins its producer (and its consumer, already pinned for the sum) anyway.
    result, _, _ = choose("l2_normalize", tmp_path, headroom=30)
    assert set(result.plan.fp32_nodes) == {"square", "sumsq", "norm"}
    assert "square" in auto.pinned_by(result.plan, "headroom")


def test_if_model_pins_nodes_inside_the_branch(tmp_path):
    result, _, _ = choose("if_branch", tmp_path)
    assert result.plan.fp32_nodes == ("then_sumsq", "then_norm")
    assert result.plan.is_fp16("branch") and result.plan.is_fp16("add_bias")


def test_dynamic_batch_only_the_second_sample_overflows(tmp_path):
    result, _, samples = choose("dynamic_batch", tmp_path, headroom=0)
    assert [f["x"].shape[0] for f in samples.feeds] == [2, 5]
    assert result.plan.fp32_nodes == ("sumsq", "norm")
    assert result.before.samples == 2 and not result.before.passed
    # The evidence for each pin is the second sample: the first passes in all-FP16.
    for node in result.plan.fp32_nodes:
        detail = next(r.detail for r in result.plan.decisions[node].reasons if r.source == "search")
        assert "sample 1" in detail


def test_fp32_model_already_nan(tmp_path):
    result, _, _ = choose("fp32_nan", tmp_path)
    assert result.status == auto.FP32_NONFINITE
    assert "'sqrt'" in result.message and "not a 16-bit precision problem" in result.message
    with pytest.raises(SearchError) as err:
        result.raise_if_failed()
    assert err.value.exit_code == 1


def test_static_mode_pins_rules_and_ranges_without_search(tmp_path):
    result, _, _ = choose("log_underflow", tmp_path, mode="static")
    assert result.search is None and result.status == auto.PASSED
    assert set(result.plan.fp32_nodes) == {"probs", "log_probs"}
    assert {r.source for r in result.plan.decisions["log_probs"].reasons} >= {"rule", "range"}


def test_static_mode_says_when_its_plan_fails(tmp_path):
    # The branch's ranges are not recorded, so static mode cannot see the overflow inside If.
    result, _, _ = choose("if_branch", tmp_path, mode="static")
    assert result.status == auto.FAILED and "--mode auto" in result.message


def test_search_fails_when_even_all_fp32_is_out_of_tolerance(tmp_path):
    loaded, samples = load("benign_mlp", tmp_path)
    # FP16 graph inputs round the feed itself: no FP32 node can undo that under a zero tolerance.
    result = auto.choose_plan(loaded, all_fp16(loaded, fp16_io=True), samples,
                              Judging(Tolerance(error_stat="max", atol=0.0, rtol=0.0, min_cosine=1.0)))
    assert result.status == auto.FAILED
    assert "even with every float node in FP32" in result.message
    assert result.search is not None and not result.search.passed


@pytest.mark.parametrize("headroom", [0.5, -1.0, float("nan")])
def test_bad_headroom_is_a_one_line_error(headroom, tmp_path):
    loaded, samples = load("benign_mlp", tmp_path)
    with pytest.raises(PrecisionError, match="--headroom") as err:
        auto.choose_plan(loaded, all_fp16(loaded), samples, Judging(), headroom=headroom)
    assert err.value.exit_code == 2  # a bad argument, not a failed search


def test_user_pins_are_kept(tmp_path):
    loaded, samples = load("benign_mlp", tmp_path)
    base = all_fp16(loaded).with_fp32(["relu"], Reason("user", "--keep-fp32 relu"))
    result = auto.choose_plan(loaded, base, samples, Judging())
    assert result.plan.fp32_nodes == ("relu",)
    assert result.plan.decisions["relu"].reasons[0].source == "user"


def test_progress_is_reported_during_the_search(tmp_path):
    loaded, samples = load("layernorm_eps", tmp_path, below_17=True)
    calls = []
    auto.choose_plan(loaded, all_fp16(loaded), samples, Judging(),
                     progress=lambda phase, done, left, best: calls.append((phase, done, left)))
    phases = [c[0] for c in calls if c[1] == c[2] == 0]  # each phase is announced as it starts
    assert phases[:2] == ["reference", "before"] and "search" in phases and phases[-1] == "after"
    probes = [c for c in calls if c[0] == "search" and (c[1] or c[2])]
    assert probes and [c[1] for c in probes] == sorted(c[1] for c in probes) and probes[-1][2] == 0


def test_reference_outputs_are_the_fp32_outputs(tmp_path):
    result, loaded, samples = choose("benign_mlp", tmp_path)
    fp32 = run_emulated(loaded, samples.feeds).outputs
    assert np.array_equal(result.reference_outputs[0]["y"], fp32[0]["y"])


# --- through convert: the product's main path ------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shipped(name: str) -> tuple[str, str]:
    data = os.path.join(ROOT, "models", f"{name}.npz")
    return os.path.join(ROOT, "models", f"{name}.onnx"), data if os.path.exists(data) else data[:-4]


@pytest.fixture
def count_sessions(monkeypatch):
    """Counts the onnxruntime sessions of the model built by anyone. Not counted: single-node
    helper sessions, cached per process (so whether a test sees them depends on test order):
    typing_rules' probes of whether onnxruntime loads an op in FP16, fast_cast's Cast node."""
    import traceback

    import onnxruntime as ort

    built = []
    original = ort.InferenceSession

    class Counted(original):
        def __init__(self, *args, **kwargs):
            if not any(f.filename.endswith("helper_sessions.py") for f in traceback.extract_stack()):
                built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", Counted)
    return built


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_convert_verifies_and_reports_every_example(name, tmp_path, capsys, count_sessions):
    import json

    from onnx_precision.cli import main

    model, data = shipped(name)
    out = str(tmp_path / f"{name}.fp16.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data]) == 0
    report = json.load(open(str(tmp_path / f"{name}.fp16.report.json")))
    assert tuple(p["node"] for p in report["pinned"]) == EXPECTED[name]
    assert report["status"] == "passed" and report["outputs"]["verified"]["passed"] is True
    phases = {p["name"]: p for p in report["cost"]["phases"]}
    # FP32 and the caller's plan baked, the headroom-pinned plan when it differs, the layerwise
    # capture and the switch graph when a search follows, the verification of the written file, and the
    # written file on the runtimes that spell it otherwise than the run's own target.
    expected = 3 + phases["start"]["sessions"] + 2 * int("search" in phases) + phases["runtimes"]["sessions"]
    assert report["cost"]["sessions_built"] == expected == len(count_sessions)
    assert os.path.exists(str(tmp_path / f"{name}.fp16.report.md"))
    summary = capsys.readouterr().out.splitlines()
    # 15: the memory note, and if_branch's of the else_branch no sample runs
    assert 5 <= len(summary) <= 15 and any(line.startswith("verified: pass") for line in summary)
    # a plan that keeps every node FP32 writes the model as it read it, which check refuses as a copy
    copy = report["fp16_share"]["16bit_nodes"] == 0
    assert main(["check", model, out, "--inputs", data]) == (2 if copy else 0)


def test_report_counts_every_session_built_model_and_helper_alike(tmp_path, monkeypatch):
    import json

    import onnxruntime as ort

    from onnx_precision.cli import main
    from onnx_precision.typing_rules import kernels

    monkeypatch.setattr(kernels, "_PROBES", {})  # a fresh cache: the kernel probes run again
    built = []
    original = ort.InferenceSession

    class Counted(original):
        def __init__(self, *args, **kwargs):
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", Counted)
    shipped_model, data = shipped("layernorm_eps")
    model = str(tmp_path / "ln16.onnx")  # below opset 17: searched node by node
    onnx.save(unfused(onnx.load(shipped_model)), model)
    assert main(["convert", model, "-o", str(tmp_path / "ln.onnx"), "--inputs", data, "-q"]) == 0
    cost = json.load(open(str(tmp_path / "ln.report.json")))["cost"]
    runtimes = next(p["sessions"] for p in cost["phases"] if p["name"] == "runtimes")
    # 3 baked, switch graph, verify, and the written model on the runtimes that spell it otherwise
    assert cost["sessions_built"] == 5 + runtimes and cost["helper_sessions"] > 0
    assert cost["sessions_built"] + cost["helper_sessions"] == len(built)


def test_convert_fp32_nan_model_fails_names_the_node_and_writes_the_report(tmp_path, capsys):
    import json

    from onnx_precision.cli import main

    model, data = shipped("fp32_nan")
    out = str(tmp_path / "nan.fp16.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data]) == 1
    err = capsys.readouterr().err
    assert "node 'sqrt'" in err and "FP32 model itself" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(out)
    report = json.load(open(str(tmp_path / "nan.fp16.report.json")))
    assert report["status"] == "fp32-nonfinite" and "'sqrt'" in report["message"]
    assert sorted(os.listdir(tmp_path)) == ["nan.fp16.report.json", "nan.fp16.report.md",
                                            "nan.fp16.report.tradeoff.svg"]  # saying no plan was measured


def test_convert_api_returns_plan_metrics_and_paths(tmp_path):
    from onnx_precision.convert import ConvertOptions, convert
    from onnx_precision.data import SampleSpec

    model, data = shipped("two_culprits")
    out = str(tmp_path / "two.onnx")
    result = convert(model, out, ConvertOptions(samples=SampleSpec(inputs=data),
                                                report_json=str(tmp_path / "r.json")))
    assert result.exit_code == 0 and result.report.verified.passed
    assert result.plan.fp32_nodes == EXPECTED["two_culprits"]
    assert result.report_paths == (str(tmp_path / "r.json"), str(tmp_path / "two.report.md"),
                                   str(tmp_path / "two.report.tradeoff.svg"))
    assert {m.name for m in result.report.after.outputs} == {"y_a", "y_b"}


def test_convert_static_mode_and_quiet(tmp_path, capsys):
    from onnx_precision.cli import main

    model, data = shipped("log_underflow")
    out = str(tmp_path / "s.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "--mode", "static", "-q"]) == 0
    # -q: the verdict line alone, with the worst output and the 16-bit share
    assert capsys.readouterr().out == (f"{model} -> {out}: passed; worst log_p: rel RMS err 0; FP16: 0/2 "
                                       f"nodes (0.0%), 0.0% of estimated FLOPs\n")
    import json
    report = json.load(open(str(tmp_path / "s.report.json")))
    assert report["mode"] == "static" and [p["node"] for p in report["pinned"]] == ["probs", "log_probs"]


def test_convert_without_inputs_says_the_data_was_synthetic(tmp_path, capsys):
    from onnx_precision.cli import main

    model, _ = shipped("benign_mlp")
    assert main(["convert", model, "-o", str(tmp_path / "b.onnx")]) == 0
    import json
    report = json.load(open(str(tmp_path / "b.report.json")))
    assert report["samples"]["synthetic"] is True and "--inputs" in report["samples"]["note"]


def test_convert_native_oracle_missing_is_an_error_before_any_work(tmp_path, capsys):
    import onnxruntime as ort

    from onnx_precision.cli import main

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    model, data = shipped("benign_mlp")
    assert main(["convert", model, "-o", str(tmp_path / "b.onnx"), "--inputs", data, "--oracle", "cuda"]) == 2
    assert "CUDAExecutionProvider" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_written_model_failing_verification_is_loud(tmp_path, capsys, monkeypatch):
    """If what is written differed from what was searched, the verification must catch it."""
    import onnx_precision.convert.run as convert_lib
    from onnx_precision.cli import main

    def write_all_fp16(ctx, plan, **options):  # a rewriter bug: ignores the pins
        return rewrite(ctx, plan.with_fp16(plan.fp32_nodes), **options)

    monkeypatch.setattr(convert_lib, "rewrite", write_all_fp16)
    model, data = shipped("l2_normalize")
    assert main(["convert", model, "-o", str(tmp_path / "l2.onnx"), "--inputs", data]) == 1
    captured = capsys.readouterr()
    assert "the plan passed the emulated search but the written model" in captured.err
    assert "(a bug: please report it with" in captured.err
    assert "verified: FAIL" in captured.out
    import json
    report = json.load(open(str(tmp_path / "l2.report.json")))
    assert report["status"] == "failed" and report["outputs"]["verified"]["passed"] is False


def test_convert_static_plan_that_fails_is_written_with_exit_1(tmp_path, capsys):
    from onnx_precision.cli import main

    model, data = shipped("if_branch")
    out = str(tmp_path / "if.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "--mode", "static"]) == 1
    assert os.path.exists(out)  # a first look: written, and reported as failing
    assert "verified: FAIL" in capsys.readouterr().out


def test_verbose_logs_every_probe(tmp_path, capsys):
    from onnx_precision.cli import main

    model, data = shipped("log_underflow")
    assert main(["convert", model, "-o", str(tmp_path / "l.onnx"), "--inputs", data, "-v"]) == 0
    err = capsys.readouterr().err
    assert "probe 1 (candidates): 2 pinned -> pass" in err


def _fake_gpu(monkeypatch, providers):
    """CUDA "available", its sessions made on the CPU provider; ``providers`` records the requests."""
    import onnxruntime as ort

    from onnx_precision.oracle import runners, whole_runs

    real = whole_runs.native_executor

    def executor(ctx, provider):
        providers.append(provider)
        return real(ctx, "CPUExecutionProvider")

    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(whole_runs, "native_executor", executor)
    monkeypatch.setattr(runners, "native_executor", executor)


def test_convert_native_oracle_drives_the_search_and_verifies_the_written_model(tmp_path, monkeypatch):
    """--oracle cuda wiring, without a GPU: every probe and the native verification ask CUDA."""
    import json

    from onnx_precision.cli import main

    providers: list[str] = []
    _fake_gpu(monkeypatch, providers)
    model, data = shipped("l2_normalize")
    assert main(["convert", model, "-o", str(tmp_path / "l2.onnx"), "--inputs", data, "--oracle",
                 "cuda"]) == 0
    report = json.load(open(str(tmp_path / "l2.report.json")))
    native = "native:CUDAExecutionProvider"
    assert [report["outputs"][k]["oracle"] for k in ("before", "after", "verified", "native")] == \
        [native, native, "emulate", native]
    assert [p["node"] for p in report["pinned"]] == list(EXPECTED["l2_normalize"])
    # one session per plan probed natively (the caller's, the headroom-pinned, then the search's),
    # and one for the native verification
    assert set(providers) == {"CUDAExecutionProvider"} and len(providers) >= 3


def test_convert_fails_when_the_native_run_fails(tmp_path, monkeypatch, capsys):
    """A GPU run of the written model that disagrees must not exit 0: the native result counts."""
    import json

    import onnx_precision.oracle as oracle_lib
    from onnx_precision.cli import main

    _fake_gpu(monkeypatch, [])
    real_native = oracle_lib.run_native

    def broken_gpu(ctx, feeds, provider):
        run = real_native(ctx, feeds, provider)
        return oracle_lib.OracleRun(run.oracle, tuple({k: np.zeros_like(v) for k, v in out.items()}
                                                      for out in run.outputs))

    monkeypatch.setattr(oracle_lib.verify, "run_native", broken_gpu)
    model, data = shipped("l2_normalize")
    assert main(["convert", model, "-o", str(tmp_path / "l2.onnx"), "--inputs", data, "--oracle",
                 "cuda"]) == 1
    report = json.load(open(str(tmp_path / "l2.report.json")))
    assert report["status"] == "failed"
    assert report["message"] == "the written model fails on native:CUDAExecutionProvider (passes emulated)"
    assert report["outputs"]["verified"]["passed"] is True and report["outputs"]["native"]["passed"] is False


def test_report_flags_in_all_fp16_mode_warn(tmp_path, capsys):
    from onnx_precision.cli import main

    model, data = shipped("benign_mlp")
    out = str(tmp_path / "b.onnx")
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--report",
                 str(tmp_path / "r.json")]) == 0
    assert "warning: --report/--report-md apply to --mode static and auto" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["b.onnx"]
    assert main(["convert", model, "-o", out, "--mode", "all-fp16", "--oracle", "cuda"]) == 0
    assert "warning: --oracle cuda applies to --mode static and auto (which verify); not run" in \
        capsys.readouterr().err


def test_range_pins_also_carry_their_rule_reasons(tmp_path):
    result, _, _ = choose("l2_normalize", tmp_path)
    sources = {r.source for r in result.plan.decisions["sumsq"].reasons}
    assert sources == {"range", "rule"}


def test_absorbed_fp32_infinity_is_not_an_error(tmp_path):
    """log(mask) is -inf where the mask is 0; Softmax turns it into exact zeros: a working model."""
    from conftest import parse

    model = parse("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 8] scores, float[2, 8] mask) => (float[2, 8] probs) {
      log_mask = Log(mask)
      masked = Add(scores, log_mask)
      probs = Softmax<axis = -1>(masked)
    }
    """)
    path = str(tmp_path / "masked.onnx")
    onnx.save(model, path)
    loaded = load_model(path)
    mask = np.ones((2, 8), np.float32)
    mask[:, 5:] = 0
    feeds = ({"scores": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8), "mask": mask},)
    result = auto.choose_plan(loaded, all_fp16(loaded), Samples(feeds, False, "test"), Judging())
    assert result.status == auto.PASSED and result.after.passed


@pytest.mark.parametrize("name", ["two_culprits", "if_branch", "layernorm_eps"])
def test_a_search_on_baked_sessions_finds_what_the_switch_graph_finds(name, tmp_path, monkeypatch):
    from onnx_precision.oracle import Emulator

    below_17 = name == "layernorm_eps"  # as it is, nothing to search: written as one LayerNormalization
    switched, loaded, _ = choose(name, tmp_path, below_17, headroom=0)  # the search does all the work
    assert switched.search is not None
    switchable = EmulationSession(loaded, capture_intermediates=False).switchable
    assert Emulator(loaded).switchable == switchable  # what the search may pin, without the graph
    # As where a run costs more than a build (a long context): one baked session per plan.
    monkeypatch.setattr(Emulator, "_rebuilding_pays", lambda self: True)
    baked, _, _ = choose(name, tmp_path, below_17, headroom=0)
    assert baked.plan.fp32_nodes == switched.plan.fp32_nodes and baked.plan.fp32_nodes
    assert baked.after == switched.after and baked.probes_run == switched.probes_run
    phases = {p.name: p for p in baked.phases}
    assert phases["switch graph"].sessions == 0
    assert phases["search"].sessions == phases["search"].probes > 0  # each probe a plan of its own


def test_quiet_prints_the_verdict_line_of_every_ending(tmp_path, capsys, monkeypatch):
    """-q keeps one line on stdout: passed, written unverified (all-fp16), or the default-load failure
    that exits 3 (which used to print nothing at all)."""
    from onnx_precision.cli import main
    from onnx_precision.oracle import default_load

    model, data = shipped("l2_normalize")
    out = str(tmp_path / "a.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "--mode", "all-fp16", "-q"]) == 0
    assert capsys.readouterr().out == (f"{model} -> {out}: written, not verified (--mode all-fp16 runs "
                                       "nothing)\n")
    monkeypatch.setattr(default_load, "_outcome",
                        lambda child: child.kill() or "onnxruntime crashes (SIGSEGV) loading it")
    out = str(tmp_path / "b.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data, "-q"]) == 3
    line = capsys.readouterr().out
    assert line.startswith(f"{model} -> {out}: ort-load-failed (the written model passes, but with default "
                           f"session options onnxruntime crashes (SIGSEGV) loading it")
    assert line.count("\n") == 1


def test_a_held_out_sample_that_fails_the_plan_fails_the_run_and_is_named(tmp_path, capsys):
    """x*x/1000: the search's sample (|x| <= 100) fits FP16 all through; the second held-out one
    (|x| = 300) squares to 90000 and overflows: verified on it, the run fails naming that sample."""
    import json

    from onnx import TensorProto, helper

    from onnx_precision.cli import main

    thousand = onnx.numpy_helper.from_array(np.array(1000, np.float32), "k")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                               helper.make_node("Div", ["sq", "k"], ["y"], name="scale")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], [thousand])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    np.savez(tmp_path / "search.npz", x=np.linspace(-100, 100, 8, dtype=np.float32))
    held_out = tmp_path / "held_out"
    held_out.mkdir()
    np.savez(held_out / "a.npz", x=np.linspace(-50, 50, 8, dtype=np.float32))
    np.savez(held_out / "b.npz", x=np.linspace(-300, 300, 8, dtype=np.float32))
    argv = ["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", str(tmp_path / "search.npz"),
            "--headroom", "0", "--validation-inputs", str(held_out)]
    assert main(argv) == 1
    report = json.load(open(tmp_path / "o.report.json"))
    assert report["status"] == "failed" and report["pinned"] == []
    assert report["message"] == (f"the written model fails held-out sample 1, output 'y' 2 new NaN/Inf "
                                 f"({held_out})")
    assert report["outputs"]["verified"]["passed"] and not report["outputs"]["validation"]["passed"]
    assert "validation: FAIL" in capsys.readouterr().out


def test_a_profile_longer_than_the_samples_pins_the_sums_it_would_grow_past_the_headroom(tmp_path, capsys):
    """sum(x*x) over L=64 values ~N(0, 10): 6 400 on the samples, safe; at --trt-max-shapes x:[1,1024] it
    can grow 16-fold to 1e5, over 65504/2: pinned, with the factor in its reason."""
    import json

    from onnx import TensorProto, helper

    from onnx_precision.cli import main

    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
                               helper.make_node("ReduceSum", ["sq"], ["s"], name="sum", keepdims=1),
                               helper.make_node("Sqrt", ["s"], ["y"], name="root")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")
    onnx.save(model, path)
    np.savez(data, x=(np.random.default_rng(0).standard_normal((1, 64)) * 10).astype(np.float32))
    argv = ["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, "-q"]
    assert main(argv) == 0
    assert json.load(open(tmp_path / "o.report.json"))["pinned"] == []
    assert main(argv + ["--trt-max-shapes", "x:[1,1024]"]) == 0
    pinned = {p["node"]: p for p in json.load(open(tmp_path / "o.report.json"))["pinned"]}
    assert set(pinned) == {"sum", "root"}  # the sum, and the node that reads it in FP16
    why = pinned["sum"]["reasons"][0]
    assert why["source"] == "headroom" and "summing over 64 elements" in why["detail"]
    assert "make it 1024 (16x)" in why["detail"] and why["evidence"]["factor"] == "16"
