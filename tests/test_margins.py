"""Thin margins: a pass near its bound or on one sample says so; the tolerance lists what it applied;
nodes that peak near FP16's normal minimum (the underflow headroom) are named."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import parse

from onnx_precision import report as rep
from onnx_precision.check import check
from onnx_precision.cli import main
from onnx_precision.data import SampleSpec
from onnx_precision.judge import Tolerance, compare_array, compare_samples, thin_pass_note

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REMEDY = "more samples: --inputs DIR with several .npz"


def noisy(rel_rms: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A reference and a candidate whose relative RMS error is exactly ``rel_rms`` (no slices: one row)."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(1000).astype(np.float64)
    noise = rng.standard_normal(1000)
    cand = ref + noise * rel_rms * np.linalg.norm(ref) / np.linalg.norm(noise)
    return ref.astype(np.float32), cand.astype(np.float32)


def test_a_pass_within_10_percent_of_its_bound_says_so():
    ref, cand = noisy(0.0451)
    m = compare_array("y", ref, cand, Tolerance())
    assert m.passed and m.passed_by == "rel RMS err <= 0.05, every slice <= 0.2"
    assert m.room == pytest.approx(0.098, abs=1e-3) and m.room_clause == "rel RMS err 0.0451 against 0.05"
    two = compare_samples([{"y": ref}, {"y": noisy(0.01, 1)[0]}], [{"y": cand}, {"y": noisy(0.01, 1)[1]}],
                          Tolerance(), "emulate")
    assert two.metrics("y").room_clause == "rel RMS err 0.0451 against 0.05"  # the sample nearest its bound
    assert thin_pass_note([two], REMEDY) == (
        "output 'y' passes within 10% of a bound (rel RMS err 0.0451 against 0.05): other inputs may fail; "
        "more samples: --inputs DIR with several .npz")
    one = compare_samples([{"y": ref}], [{"y": cand}], Tolerance(), "emulate")
    assert thin_pass_note([one], REMEDY) == (
        "output 'y' passes within 10% of a bound (rel RMS err 0.0451 against 0.05), judged on 1 sample: "
        "other inputs may fail; more samples: --inputs DIR with several .npz")


def test_a_wide_pass_on_several_samples_says_nothing():
    ref, cand = noisy(0.04)  # 20% of the bound left
    two = compare_samples([{"y": ref}] * 2, [{"y": cand}] * 2, Tolerance(), "emulate")
    assert two.passed and thin_pass_note([two], REMEDY) == ""
    one = compare_samples([{"y": ref}], [{"y": cand}], Tolerance(), "emulate")
    assert thin_pass_note([one], REMEDY) == (
        "the pass was judged on 1 sample: other inputs may fail; " + REMEDY)


def test_the_clause_applied_decides_the_room():
    ref, cand = noisy(0.0451)
    # "max" judges the max |err| (0.138 against 1.04) and the cosine, here nearer its bound
    m = compare_array("y", ref, cand, Tolerance(error_stat="max", atol=1.0, min_cosine=0.998))
    assert m.passed and m.room_clause == "cosine 0.998993 against 0.998"
    assert m.room == pytest.approx(1 - (1 - m.cosine) / 0.002) == pytest.approx(0.497, abs=1e-3)
    # every element within atol passes an rms output whatever its relative error: atol decides
    small = compare_array("y", ref * 1e-3, cand * 1e-3, Tolerance(atol=0.0002))
    assert small.passed_by == "all |err| <= atol 0.0002" and small.room_clause.startswith("max abs err")
    # a top-k check applies on top: 97 of 100 rows agreeing against 0.97 leaves nothing
    logits = np.tile(np.arange(10.0, dtype=np.float32), (100, 1))
    swapped = logits.copy()
    swapped[:3, 9], swapped[:3, 0] = 0.0, 9.0
    t = compare_array("y", logits, swapped, Tolerance(max_rel_rms=10, max_slice_rel_rms=10, top_k=1,
                                                      min_top_k_agreement=0.97))
    assert t.passed and t.room == 0.0 and t.room_clause == "top-1 agreement 0.97 against 0.97"


def test_an_output_passing_at_cosine_below_min_cosine_lists_no_min_cosine():
    """The rms verdict never reads min_cosine: the report says so by not listing it."""
    ref, cand = noisy(0.048)
    m = compare_array("y", ref, cand, Tolerance())
    assert m.passed and m.cosine < 0.999
    data = Tolerance().to_json()
    assert data == {"error_stat": "rms", "atol": 0.001, "max_rel_rms": 0.05, "max_slice_rel_rms": 0.2,
                    "allow_fp32_nonfinite": False, "per_output": {}}
    assert "min_cosine" in Tolerance(error_stat="max").to_json()
    per = Tolerance().with_output("b", error_stat="max", min_cosine=0.99)
    assert per.to_json()["per_output"]["b"] == {"error_stat": "max", "atol": 0.001, "rtol": 0.01,
                                                "min_cosine": 0.99, "allow_fp32_nonfinite": False}
    assert per.describe().endswith("; b: error_stat=max, rtol=0.01, min_cosine=0.99")
    assert Tolerance.from_json(json.loads(json.dumps(per.to_json()))).for_output("b").min_cosine == 0.99


def test_convert_and_check_say_a_pass_rests_on_one_sample(tmp_path, capsys):
    model = os.path.join(ROOT, "models", "l2_normalize.onnx")
    data = os.path.join(ROOT, "models", "l2_normalize.npz")
    out = str(tmp_path / "l2.onnx")
    assert main(["convert", model, "-o", out, "--inputs", data]) == 0
    note = ("the pass was judged on 1 sample: other inputs may fail; more samples: --inputs DIR with several "
            ".npz, or --validation-inputs DATA")
    assert f"note: {note}" in capsys.readouterr().out.splitlines()
    report = json.load(open(str(tmp_path / "l2.report.json")))
    assert note in report["notes"] and "min_cosine" not in report["tolerance"]
    assert f"- {note}" in open(str(tmp_path / "l2.report.md")).read().splitlines()
    assert report["outputs"]["verified"]["outputs"][0]["room_clause"].startswith("rel RMS err 0.000445")
    # check judges by the same words; a bound set just above the error makes the pass thin
    strict = Tolerance(atol=0.0, max_rel_rms=0.00047)
    result = check(model, out, SampleSpec(inputs=data), strict)
    assert result.passed and result.note == (
        "output 'y' passes within 10% of a bound (rel RMS err 0.0004456 against 0.00047), judged on 1 "
        "sample: other inputs may fail; " + REMEDY)
    assert result.lines()[-1] == f"note: {result.note}"


def test_a_report_read_back_keeps_the_tolerance_it_listed():
    from test_report import make_report

    report = make_report(tolerance=Tolerance(max_rel_rms=0.1))
    back = rep.from_json(json.loads(rep.dumps(report)))
    assert back.tolerance == Tolerance(max_rel_rms=0.1)
    assert "- tolerance: rms: rel RMS err <= 0.1, every slice <= 0.2 (or all |err| <= atol 0.001)" in \
        rep.to_markdown(back).splitlines()


QUIET = """
<ir_version: 8, opset_import: ["" : 17]>
quiet (float[1, 64] x) => (float[1, 64] y) {
  three = Constant<value = float {3.0}>()
  big = Constant<value = float {100000.0}>()
  scaled = Mul(x, three)
  squashed = Tanh(scaled)
  y = Mul(squashed, big)
}
"""


def test_nodes_peaking_near_the_normal_minimum_are_named_with_their_margin(tmp_path, capsys, save):
    """A quiet input (~1e-6): its first nodes peak 4.4 binades below FP16's normal minimum, where
    steps of 6e-8 leave a few bits; the run passes, says so, and keeps them FP16 (a warning only)."""
    x = np.random.default_rng(0).uniform(0.5, 1.0, (1, 64)).astype(np.float32) * 1e-6
    data = str(tmp_path / "quiet.npz")
    np.savez(data, x=x)
    out = str(tmp_path / "quiet16.onnx")
    assert main(["convert", save(parse(QUIET)), "-o", out, "--inputs", data]) == 0
    printed = capsys.readouterr().out.splitlines()
    report = json.load(open(str(tmp_path / "quiet16.report.json")))
    peaks = {n: report["node_stats"][n]["max_abs"] for n in ("node_of_squashed", "node_of_scaled")}
    assert peaks["node_of_squashed"] < peaks["node_of_scaled"] == pytest.approx(3 * float(x.max()))
    named = ", ".join(f"{n} (peaks at {p:.2g}, {-np.log2(p / 2**-14):.1f} binade(s) below)"
                      for n, p in peaks.items())
    assert named.startswith("node_of_squashed (peaks at 3e-06, 4.3")
    note = (f"2 16-bit node(s) peak within the headroom (2x) of the FP16 normal minimum 6.1e-05, where an "
            f"input 2x quieter loses their precision: {named}; kept 16-bit, as they pass here; --keep-fp32 "
            f"NODE keeps one FP32")
    assert f"note: {note}" in printed
    assert "verified: pass (rel RMS err <= 0.05" in printed[7]  # FP16 passes here, but has no bits to spare
    assert note in report["notes"] and f"- {note}" in open(str(tmp_path / "quiet16.report.md")).read()
    assert [p["node"] for p in report["pinned"]] == ["node_of_y"]  # its 1e5 weight overflows FP16, no more
    # off with the headroom
    assert main(["convert", save(parse(QUIET)), "-o", out, "--inputs", data, "--headroom", "0", "-q"]) == 0
    notes = json.load(open(str(tmp_path / "quiet16.report.json")))["notes"]
    assert not any("normal minimum" in n for n in notes)


def test_a_model_of_ordinary_magnitudes_is_not_named(tmp_path):
    out = str(tmp_path / "l2.onnx")
    model, data = (os.path.join(ROOT, "models", f"l2_normalize.{ext}") for ext in ("onnx", "npz"))
    assert main(["convert", model, "-o", out, "--inputs", data, "-q"]) == 0
    report = json.load(open(str(tmp_path / "l2.report.json")))
    assert not any("normal minimum" in n for n in report["notes"])
    assert [p["node"] for p in report["pinned"]] == ["sumsq", "norm"]
