"""The search keeps FP16 compute, respects budgets, and shows the trade-off it explored."""

from __future__ import annotations

import json
import math
import os

import pytest

import models
from models import generate
from onnx_precision.cli import main
from onnx_precision.cli.progress import ProgressLine
from onnx_precision.errors import PlanError
from onnx_precision.plan import PrecisionPlan
from onnx_precision.search import PinSearch
from onnx_precision.tradeoff import PlanPoint, pareto_front
from onnx_precision.tradeoff_picture import Picture, front_svg


def _run(search: PinSearch, passes) -> list[frozenset]:
    probed = []
    while (pinned := search.select()) is not None:
        probed.append(pinned)
        search.step(passes(pinned))
    return probed


def test_the_shrink_drops_the_expensive_pin_when_a_cheap_one_suffices():
    """Either pin fixes the output; by count they tie, by compute the Conv must stay FP16."""
    def passes(pinned):
        return "conv" in pinned or "scale" in pinned

    by_count = PinSearch(["conv", "scale"], start_failed="fails")
    _run(by_count, passes)
    assert by_count.outcome().pinned == ("conv",)
    by_cost = PinSearch(["conv", "scale"], start_failed="fails", cost={"conv": 1e9, "scale": 1e3})
    _run(by_cost, passes)
    assert by_cost.outcome().pinned == ("scale",)
    assert not by_cost.outcome().exhausted


def test_a_probe_budget_keeps_the_cheapest_passing_set_and_says_so():
    nodes = [f"n{i}" for i in range(16)]
    cost = {n: float(i + 1) for i, n in enumerate(nodes)}

    def passes(pinned):
        return {"n3", "n9"} <= pinned

    # start, then widening by 1, 2, 4, 8 (fail) and 16 (pass), then one bisection step (12: pass)
    search = PinSearch([], nodes, start_failed="fails", cost=cost, max_probes=7)
    probed = _run(search, passes)
    outcome = search.outcome()
    assert len(probed) + 1 == 7 == outcome.probes_run  # the start probe counts
    assert outcome.exhausted == "the probe budget (7) ran out"
    assert set(outcome.pinned) == set(nodes[:12])
    assert outcome.passed and {"n3", "n9"} <= set(outcome.pinned)
    passing = [p.pinned for p in outcome.probes if p.passed]
    assert frozenset(outcome.pinned) == min(passing, key=lambda s: sum(cost[n] for n in s))
    untested = [v for v in outcome.evidence if v.probe == -1]
    assert untested and all("not tested" in v.detail for v in untested)


def test_stop_ends_the_search_and_nothing_passed_is_a_failure():
    search = PinSearch(["a"], ["b", "c"], start_failed="fails")
    search.step(False, "still fails")  # the candidates probe; widening would come next
    search.stop("the time budget (1 s) ran out")
    outcome = search.outcome()
    assert search.select() is None and not outcome.passed and outcome.exhausted.startswith("the time budget")


def _point(i, share, error, passed=True):
    return PlanPoint(i, (f"p{i}",), share, passed, {"y": error})


def test_the_pareto_front_keeps_only_undominated_points():
    points = [_point(0, 1.0, math.inf, False), _point(1, 0.9, 0.5), _point(2, 0.8, 0.6), _point(3, 0.7, 0.01),
              _point(4, 0.9, 0.4), _point(5, 0.5, 0.01)]
    assert [p.index for p in pareto_front(points)] == [4, 3]


def test_the_picture_is_deterministic_and_marks_every_point():
    points = (_point(0, 1.0, math.inf, False), _point(1, 0.9, 0.5), _point(2, 0.7, 0.001))
    svg = front_svg(Picture(points, "rel RMS err"))
    assert svg == front_svg(Picture(tuple(reversed(points)), "rel RMS err"))
    assert svg.startswith("<svg") and svg.count("<g><title>point ") == 3 and "<polyline" in svg
    assert "point 2: 70.0% FP16, error 0.001" in svg


def test_progress_never_moves_its_estimate_backwards():
    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    stream = Tty()
    line = ProgressLine(stream)
    line("search", 1, 9, None)
    line("search", 2, 3, 0.5)
    assert "probe 2 of about 10, best 16-bit share 50.0%" in stream.text


@pytest.mark.parametrize("name", ["if_branch", "log_underflow"])
def test_convert_reports_the_tradeoff_and_a_point_replays(tmp_path, name):
    out = str(tmp_path / "o.onnx")
    data = generate.data_path(name)
    assert main(["convert", generate.model_path(name), "-o", out, "--inputs", data, "-q"]) == 0
    report = json.load(open(tmp_path / "o.report.json"))
    points = report["tradeoff"]["points"]
    assert len(points) >= 3 and report["tradeoff"]["front"]
    md = open(tmp_path / "o.report.md").read()
    assert "## Trade-off" in md and "![trade-off](o.report.tradeoff.svg)" in md
    assert os.path.exists(tmp_path / "o.report.tradeoff.svg")
    passing = [p for p in points if p["passed"]]
    chosen = min(passing, key=lambda p: len(p["pinned"]))
    plan = PrecisionPlan.load(f"{tmp_path / 'o.report.json'}@{chosen['point']}")
    assert set(plan.fp32_nodes) == set(chosen["pinned"])
    replay = str(tmp_path / "replay.onnx")
    assert main(["convert", generate.model_path(name), "-o", replay, "--mode", "static", "--headroom", "0",
                 "--plan", f"{tmp_path / 'o.report.json'}@{chosen['point']}",
                 "--inputs", generate.data_path(name), "-q"]) == 0


def test_an_unknown_point_is_one_line(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"tradeoff": {"points": [{"point": 0, "pinned": []}]}}))
    with pytest.raises(PlanError, match=r"has no trade-off point 7 \(points: 0\)"):
        PrecisionPlan.load(f"{path}@7")


def test_a_probe_budget_on_the_command_line(tmp_path, capsys):
    out = str(tmp_path / "o.onnx")
    code = main(["convert", generate.model_path("log_underflow"), "-o", out, "--inputs",
                 generate.data_path("log_underflow"), "--max-probes", "2"])
    printed = capsys.readouterr().out
    assert "the probe budget (2) ran out" in printed
    assert code in (0, 1)
    assert ("kept the cheapest passing plan probed" in printed) == (code != 1)
    assert models.BUILDERS["log_underflow"]  # the example is one of the committed ones


@pytest.mark.parametrize("command", ["convert", "check", "analyze"])
def test_a_tolerance_for_an_output_the_model_lacks_is_refused(tmp_path, capsys, command):
    model = generate.model_path("l2_normalize")
    argv = {"convert": ["convert", model, "-o", str(tmp_path / "o.onnx")],
            "check": ["check", model, model], "analyze": ["analyze", model]}[command]
    assert main(argv + ["--max-rel-rms", "yy:0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"onnx-precision: error: {model}: a tolerance names output 'yy', which the model does not "
                   f"have (outputs: y)")
    assert os.listdir(tmp_path) == []
