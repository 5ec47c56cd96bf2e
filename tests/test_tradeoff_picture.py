"""The trade-off picture and table: a title, a legend, the tolerance, the chosen plan, fitted axes,
non-finite errors in a band; written by every measuring run, the search or none, replacing the last."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import pytest

from models import generate
from onnx_precision import report as rep
from onnx_precision.cli import main
from onnx_precision.judge import Tolerance
from onnx_precision.tradeoff import PlanPoint, front_table, tolerance_line
from onnx_precision.tradeoff_picture import CHOSEN_COLOUR, TOLERANCE_COLOUR, Picture, fit_frame, front_svg

SVG = "{http://www.w3.org/2000/svg}"


def _point(i: int, share: float, error: float, passed: bool = True, pinned: tuple[str, ...] = (),
           ) -> PlanPoint:
    return PlanPoint(i, pinned or (f"p{i}",), share, passed, {"y": error})


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _dot(root: ET.Element, index: int) -> ET.Element:
    """The circle drawn for point ``index`` (its tooltip names it)."""
    circle = next(g.find(f"{SVG}circle") for g in root.iter(f"{SVG}g")
                  if (g.findtext(f"{SVG}title") or "").startswith(f"point {index}:"))
    assert circle is not None
    return circle


def _share_ticks(root: ET.Element) -> list[float]:
    return [float(t[:-1]) for t in _texts(root) if t.endswith("%") and t[:-1].replace(".", "").isdigit()]


POINTS = (_point(0, 1.0, math.inf, False), _point(1, 0.9, 0.5, False), _point(2, 0.7, 0.001),
          _point(3, 0.4, 0.0004), _point(4, 0.8, 2.0, False))


def _picture(points=POINTS, chosen: int | None = 2) -> Picture:
    return Picture(points, "rel RMS err", "m.onnx: FP16 share of compute against error", chosen,
                   tolerance_line(Tolerance()))


def test_the_picture_has_a_title_a_legend_the_tolerance_line_and_the_chosen_plan():
    svg = front_svg(_picture())
    root = _parse(svg)
    texts = _texts(root)
    assert "m.onnx: FP16 share of compute against error" in texts
    assert {"plan passes", "plan fails", "Pareto front", "chosen plan: point 2", "tolerance",
            "rel RMS err <= 0.05", "point number"} <= set(texts)
    assert "chosen: point 2, 70.0% FP16, rel RMS err 0.001" in texts
    green = [e for e in root.iter(f"{SVG}line") if e.get("stroke") == TOLERANCE_COLOUR]
    across = [e for e in green if float(e.get("x2")) - float(e.get("x1")) > 100]  # not the legend's sample
    assert len(across) == 1 and across[0].get("stroke-dasharray")
    ring = [e for e in root.iter(f"{SVG}circle") if e.get("stroke") == CHOSEN_COLOUR and e.get("r") == "8"]
    assert len(ring) == 1
    chosen_dot = _dot(root, 2)
    assert (ring[0].get("cx"), ring[0].get("cy")) == (chosen_dot.get("cx"), chosen_dot.get("cy"))
    labels = [t for t in root.iter(f"{SVG}text") if t.text == "2" and t.get("fill") == CHOSEN_COLOUR]
    assert len(labels) == 1  # the chosen point's number, beside it
    assert svg == front_svg(_picture(tuple(reversed(POINTS))))  # deterministic: no order, time or randomness
    assert "script" not in svg and "@import" not in svg and "href" not in svg


def test_every_point_of_the_front_has_its_number_printed():
    root = _parse(front_svg(_picture()))
    printed = {t.text for t in root.iter(f"{SVG}text")}
    assert {"1", "2", "3"} <= printed  # the front: 90% (0.5), 70% (0.001), 40% (0.0004)


def test_a_nonfinite_error_sits_in_a_labelled_band_inside_the_picture():
    root = _parse(front_svg(_picture()))
    assert "NaN/Inf" in _texts(root)
    band = [r for r in root.iter(f"{SVG}rect") if r.get("x") is not None and float(r.get("width")) > 300]
    top, bottom = float(band[0].get("y")), float(band[0].get("y")) + float(band[0].get("height"))
    broke = _dot(root, 0)
    assert top < float(broke.get("cy")) < bottom and float(broke.get("cy")) > 0
    no_band = _parse(front_svg(_picture(POINTS[1:])))
    assert "NaN/Inf" not in _texts(no_band)


def test_an_exact_plan_sits_in_the_zero_band():
    root = _parse(front_svg(_picture(POINTS + (_point(5, 0.0, 0.0),))))
    assert "0 (exact)" in _texts(root) and "0: exact, no error" in _texts(root)


def test_the_share_axis_is_fitted_to_the_points():
    close = (_point(0, 1.0, 0.3, False), _point(1, 0.978, 0.01), _point(2, 0.99, 0.02))
    ticks = _share_ticks(_parse(front_svg(_picture(close, 1))))
    assert ticks and min(ticks) > 90 and max(ticks) == 100 and 97.5 <= min(ticks) <= 97.8
    frame = fit_frame(close, None)
    assert frame.x(0.978) - frame.x(1.0) < -300  # 2.2% of FP16 spans most of the plot, not ten pixels
    wide = _share_ticks(_parse(front_svg(_picture())))
    assert min(wide) == 40 and max(wide) == 100
    alone = _share_ticks(_parse(front_svg(_picture((_point(0, 1.0, 0.01),), 0))))
    assert max(alone) == 100 and min(alone) >= 99


def test_the_error_axis_covers_the_points_and_the_tolerance():
    frame = fit_frame((_point(0, 1.0, 1e-5),), tolerance_line(Tolerance()))
    assert frame.log_lo < -5 and math.log10(0.05) < frame.log_hi < -1
    close = fit_frame((_point(0, 1.0, 0.0013), _point(1, 0.99, 0.0007)), None)
    assert close.error_ticks() == [(5, -4), (1, -3), (2, -3)]  # within a decade: 1, 2, 5 of it


def test_plans_with_less_fp16_than_the_front_go_to_a_band_at_the_left():
    """A far, dominated plan (70%) must not squeeze a front between 98.7% and 100%."""
    points = (_point(0, 1.0, 0.0013, False), _point(1, 0.997, 0.0008), _point(2, 0.987, 0.0007),
              _point(3, 0.70, 0.00075))
    root = _parse(front_svg(_picture(points, 1)))
    ticks = _share_ticks(root)
    assert min(ticks) >= 98 and "less FP16 than the front," in _texts(root)
    assert float(_dot(root, 3).get("cx")) < float(_dot(root, 2).get("cx")) - 20


def test_with_nothing_measured_the_picture_says_so():
    svg = front_svg(Picture((), "rel RMS err", "m.onnx", None, None, "no plan was measured: the FP32 model "
                            "itself produces NaN/Inf"))
    assert "no plan was measured" in " ".join(_texts(_parse(svg)))


def test_the_table_marks_the_chosen_point_and_lists_the_costliest_pins_first():
    pins = ("p2o.Add.10", "p2o.Add.102", "p2o.Conv.3", "p2o.MatMul.7")
    flops = {"p2o.Add.10": 10.0, "p2o.Add.102": 10.0, "p2o.Conv.3": 1e9, "p2o.MatMul.7": 1e6}
    points = [_point(0, 1.0, math.inf, False), _point(1, 0.5, 0.01, pinned=pins)]
    rows = front_table(points, flops, chosen=1, listed=2)
    row = next(r for r in rows if "(chosen)" in r)
    assert row.startswith("| **1 (chosen)** | 50.0% |")
    assert "`p2o.Conv.3`, `p2o.MatMul.7` (+2) |" in row



def test_a_long_table_lists_the_front_and_the_chosen_point():
    many = [_point(0, 0.9, 0.01)] + [_point(i, 0.5, 0.05 + i / 100) for i in range(1, 20)]
    rows = front_table(many, {}, chosen=3)  # 3 is dominated by 0, but it is the plan written
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| 0", "| **3 (chosen)**"]
    assert len(front_table(many[:12], {}, chosen=3)) == 2 + 12  # few: every plan measured


def _convert(tmp_path, name: str, *extra: str) -> tuple[int, str, dict, str]:
    out = str(tmp_path / "o.onnx")
    code = main(["convert", generate.model_path(name), "-o", out, "--inputs", generate.data_path(name), "-q",
                 *extra])
    svg = open(tmp_path / "o.report.tradeoff.svg", encoding="utf-8").read()
    return code, svg, json.load(open(tmp_path / "o.report.json")), open(tmp_path / "o.report.md").read()


def test_with_no_search_the_picture_shows_the_two_plans_measured(tmp_path):
    """two_culprits: all FP16 overflows; the headroom pins alone make it pass, so nothing is searched."""
    code, svg, report, md = _convert(tmp_path, "two_culprits")
    assert code == 0
    texts = " ".join(_texts(_parse(svg)))
    assert "nothing needed searching" in texts and "2 plans measured" in texts
    tradeoff = report["tradeoff"]
    assert [p["point"] for p in tradeoff["points"]] == [0, 1] and tradeoff["chosen"] == 1
    assert tradeoff["note"].startswith("nothing needed searching: the plan to start from passes with")
    before, start = tradeoff["points"]
    assert before["pinned"] == [] and not before["passed"] and before["errors"]["y_b"] == "inf"
    assert start["passed"] and set(start["pinned"]) == set(report["plan"]["nodes"]) - {
        n for n, d in report["plan"]["nodes"].items() if d["precision"] != "fp32"}
    assert "NaN/Inf" in texts and "chosen plan: point 1" in texts
    assert "Nothing needed searching" in md and "| **1 (chosen)** |" in md
    assert "![trade-off](o.report.tradeoff.svg)" in md


def test_a_search_marks_the_point_it_chose(tmp_path):
    code, svg, report, md = _convert(tmp_path, "if_branch")
    assert code == 0
    tradeoff = report["tradeoff"]
    chosen = next(p for p in tradeoff["points"] if p["point"] == tradeoff["chosen"])
    assert chosen["passed"] and tradeoff["note"] is None
    assert f"chosen plan: point {chosen['point']}" in _texts(_parse(svg))
    assert f"| **{chosen['point']} (chosen)** |" in md and "measured by the search" in svg


def test_a_rerun_replaces_the_picture_of_the_run_before(tmp_path):
    stale = tmp_path / "o.report.tradeoff.svg"
    stale.write_text("<svg>a picture from another run</svg>")
    code, svg, report, _ = _convert(tmp_path, "two_culprits", "--mode", "static")
    assert code == 0 and "another run" not in svg
    assert "--mode static: no search" in " ".join(_texts(_parse(svg)))
    assert report["tradeoff"]["picture"].endswith("o.report.tradeoff.svg")
    code, again, _, _ = _convert(tmp_path, "two_culprits")
    assert "nothing needed searching" in again and again != svg


def test_the_chosen_point_and_the_note_read_back_from_the_report(tmp_path):
    _convert(tmp_path, "two_culprits")
    back = rep.from_json(json.load(open(tmp_path / "o.report.json")))
    assert back.chosen_point == 1 and back.tradeoff_note.startswith("nothing needed searching")
    assert rep.tradeoff_svg(back) == open(tmp_path / "o.report.tradeoff.svg", encoding="utf-8").read()


@pytest.mark.parametrize("stat,bound,label", [("rms", 0.05, "rel RMS err <= 0.05"),
                                              ("max", 0.01, "rtol 0.01 (+ atol 0.001)")])
def test_the_tolerance_line_follows_the_verdict(stat, bound, label):
    line = tolerance_line(Tolerance(error_stat=stat))
    assert (line.bound, line.label) == (bound, label)
    differing = Tolerance().with_output("y", max_rel_rms=0.2)
    assert tolerance_line(differing).label.endswith("(some outputs differ)")
