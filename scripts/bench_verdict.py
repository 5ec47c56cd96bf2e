"""Issue 8's benchmark: the default verdict (``--error-stat rms``) against the old one (``max``).

    python scripts/bench_verdict.py [--ocr-dir DIR] [--no-ocr] [--models NAME ...] [--old-budget 120]

For every example in ``models/`` and for two real trained networks shipped inside the
``rapidocr-onnxruntime`` wheel on PyPI, the PP-OCRv4 text detector (a dense-prediction CNN with a
sigmoid map) and the PP-OCRv4 text recogniser (CNN + CTC head), runs
``onnx-precision convert MODEL -o OUT --inputs DATA`` (auto mode) twice, each in a child process
started from a temporary directory, one conversion at a time:

* ``rms``: the default verdict (no ``--error-stat``);
* ``max``: the old criterion, ``--error-stat max --time-budget 120``, so that a search that grinds
  ends (the table's ``search`` column then says ``time-cap``).

From each run's ``OUT.report.json`` it prints: exit code, status, how the search ended, FP16 share
of estimated FLOPs, FP32 pins, probes, wall seconds (measured around the child) and the tool's own
seconds, and per output the error statistics of the written model (``outputs.verified``, the
written file emulated; ``outputs.after`` when there is none) with that run's verdict.

The OCR models are taken from ``--ocr-dir`` (default /tmp/onnx-precision-ocr); when they are not
there the script runs ``pip download --no-deps rapidocr-onnxruntime==1.4.4`` and unzips the
.onnx files from the wheel into it. Their inputs are synthetic text images drawn deterministically
by ``scripts/verdict_measurements.text_image`` (dark glyph strokes on a light page), normalised
as RapidOCR does for both models (``config.yaml``: mean 0.5, std 0.5, i.e. ``(x/255 - 0.5)/0.5``):
det 1x3x640x640 (two pages), rec 1x3x48x320 (two lines).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import models  # noqa: E402
from models.generate import data_path, model_path  # noqa: E402

WHEEL = "rapidocr-onnxruntime==1.4.4"
OCR_FILES = {"PP-OCRv4 det": "ch_PP-OCRv4_det_infer.onnx", "PP-OCRv4 rec": "ch_PP-OCRv4_rec_infer.onnx"}
CHILD_TIMEOUT = 600  # seconds; a safety net only, the old criterion runs under --time-budget


@dataclass
class Case:
    name: str
    model: str
    data: str


@dataclass
class Run:
    case: Case
    criterion: str
    exit_code: int | None
    wall: float
    report: dict | None
    error: str = ""
    outputs: list[dict] = field(default_factory=list)


# --- the OCR models and their inputs -------------------------------------------------------------

def ensure_ocr_models(directory: str) -> tuple[dict[str, str], str]:
    """{label: path} of the OCR models in ``directory``, fetched from the wheel if missing; or an error."""
    def found() -> dict[str, str]:
        return {label: os.path.join(directory, f) for label, f in OCR_FILES.items()
                if os.path.exists(os.path.join(directory, f))}

    if len(found()) == len(OCR_FILES):
        return found(), ""
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rapidocr-wheel-") as dl:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", dl, "-q"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            return found(), f"`pip download --no-deps {WHEEL}` could not run: {e}"
        wheels = glob.glob(os.path.join(dl, "*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
            return found(), f"`pip download --no-deps {WHEEL}` failed (exit {proc.returncode}): {tail[0]}"
        with zipfile.ZipFile(wheels[0]) as whl:
            for member in whl.namelist():
                base = os.path.basename(member)
                if base.endswith(".onnx"):
                    with whl.open(member) as src, open(os.path.join(directory, base), "wb") as dst:
                        shutil.copyfileobj(src, dst)
    missing = sorted(set(OCR_FILES.values()) - {os.path.basename(p) for p in found().values()})
    return found(), f"the wheel {WHEEL} holds no {', '.join(missing)}" if missing else ""


def ppocr_image(height: int, width: int, seed: int, lines: int) -> np.ndarray:
    """A synthetic text image (verdict_measurements' drawing), normalised as RapidOCR: (x/255-0.5)/0.5."""
    import verdict_measurements as vm

    imagenet = vm.text_image(height, width, seed, lines).astype(np.float64)  # ((x/255 - MEAN)/STD), NCHW
    unit = imagenet * vm.STD[None, :, None, None] + vm.MEAN[None, :, None, None]  # back to x/255
    return ((unit - 0.5) / 0.5).astype(np.float32)


def ocr_cases(paths: dict[str, str], workdir: str) -> list[Case]:
    feeds = {
        "PP-OCRv4 det": [ppocr_image(640, 640, 0, 10), ppocr_image(640, 640, 1, 6)],
        "PP-OCRv4 rec": [ppocr_image(48, 320, 10, 1), ppocr_image(48, 320, 11, 1)],
    }
    cases = []
    for label, path in paths.items():
        data = os.path.join(workdir, "data", label.replace(" ", "_"))
        os.makedirs(data, exist_ok=True)
        for i, x in enumerate(feeds[label]):
            np.savez(os.path.join(data, f"sample{i}.npz"), x=x)
        cases.append(Case(label, path, data))
    return cases


# --- running and reading -------------------------------------------------------------------------

def tool_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "onnx-precision")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "onnx_precision"]


def convert(case: Case, criterion: str, old_budget: float, workdir: str) -> Run:
    out = os.path.join(workdir, f"{case.name.replace(' ', '_')}.{criterion}.fp16.onnx")
    cmd = tool_command() + ["convert", case.model, "-o", out, "--inputs", case.data, "-q"]
    if criterion == "max":
        cmd += ["--error-stat", "max", "--time-budget", f"{old_budget:g}"]
    report_path = out[:-len(".onnx")] + ".report.json"
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        code, err = proc.returncode, (proc.stderr or proc.stdout).strip()
    except subprocess.TimeoutExpired:
        code, err = None, f"killed after {CHILD_TIMEOUT} s"
    wall = time.perf_counter() - start
    report = None
    if os.path.exists(report_path):
        with open(report_path) as f:
            report = json.load(f)
    error = "" if report else (err.splitlines()[-1:] or ["no report"])[0]
    run = Run(case, criterion, code, wall, report, error)
    if report:
        outs = report.get("outputs") or {}
        written = outs.get("verified") or outs.get("after")
        run.outputs = list((written or {}).get("outputs") or [])
    return run


def search_end(report: dict | None) -> str:
    """How the search ended: none (no search ran), done, diffuse (recognised as rounding noise, searched
    on its small probe budget), and +cap / time-cap / probe-cap when a budget ran out."""
    if not report:
        return "-"
    if not any(p.get("name") == "search" for p in (report.get("cost") or {}).get("phases") or []):
        return "none"
    text = " ".join([report.get("message") or ""] + list(report.get("notes") or []))
    diffuse = "diffuse" in text
    if "time budget" in text and "ran out" in text:
        return "diffuse+time-cap" if diffuse else "time-cap"
    if "probe budget" in text and "ran out" in text:
        return "diffuse+cap" if diffuse else "probe-cap"
    return "diffuse" if diffuse else "done"


def g(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


# (title, width) of the run's columns, then of each output's
RUN_COLUMNS = [("model", -16), ("crit", -4), ("exit", 4), ("status", -14), ("search", -16), ("fp16%", 6),
               ("pins", 4), ("probes", 6), ("wall s", 7), ("tool s", 6)]
OUTPUT_COLUMNS = [("output", -16), ("rel RMS", 9), ("slice", 9), ("max|err|", 9), ("max rel", 9), ("p50", 9),
                  ("p99", 9), ("p99.9", 9), ("cosine", 9), ("outside", 13), ("NaN", 4), ("verdict", -7)]


def line(columns: list[tuple[str, int]], cells: list[str]) -> str:
    return " ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for (_, w), c in zip(columns, cells))


HEADER = (line(RUN_COLUMNS, [t for t, _ in RUN_COLUMNS]) + "  "
          + line(OUTPUT_COLUMNS, [t for t, _ in OUTPUT_COLUMNS]))


def rows(run: Run) -> list[str]:
    r = run.report or {}
    share = (r.get("fp16_share") or {}).get("flops")
    cost = r.get("cost") or {}
    head = line(RUN_COLUMNS, [
        run.case.name[:16], run.criterion, "kill" if run.exit_code is None else str(run.exit_code),
        (r.get("status") or "no report")[:14], search_end(run.report),
        "-" if share is None else f"{100 * share:.1f}", str(len(r["pinned"])) if r.get("pinned") is not None
        else "-", g(cost.get("probes_run"), "d"), f"{run.wall:.1f}", g(cost.get("seconds"), ".1f")])
    if not run.outputs:
        why = run.error or (r.get("message") or "")
        return [f"{head}  no model written: {why[:100]}".rstrip()]
    lines = []
    for i, o in enumerate(run.outputs):
        outside = ("-" if o.get("outside_bound") is None or o.get("elements") is None
                   else f"{o['outside_bound']}/{o['elements']}")
        cells = [o["name"][:16], g(o.get("rel_rms_err"), ".3g"), g(o.get("worst_slice_rel_rms"), ".3g"),
                 g(o.get("max_abs_err"), ".3g"), g(o.get("max_rel_err"), ".3g"),
                 g(o.get("p50_abs_err"), ".2g"), g(o.get("p99_abs_err"), ".2g"),
                 g(o.get("p999_abs_err"), ".2g"),
                 g(o.get("cosine"), ".6f"), outside, g(o.get("new_nonfinite"), "d"),
                 "pass" if o.get("passed") else "FAIL"]
        lines.append(f"{head if i == 0 else ' ' * len(head)}  {line(OUTPUT_COLUMNS, cells)}".rstrip())
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ocr-dir", default="/tmp/onnx-precision-ocr",
                        help="cache of the PP-OCRv4 .onnx files (downloaded from the wheel if missing)")
    parser.add_argument("--no-ocr", action="store_true", help="the examples only")
    parser.add_argument("--models", nargs="+", metavar="NAME", help="only these examples (default: all)")
    parser.add_argument("--old-budget", type=float, default=120.0,
                        help="--time-budget for the old criterion (default 120 s)")
    args = parser.parse_args(argv)

    names = args.models or sorted(models.BUILDERS)
    unknown = sorted(set(names) - set(models.BUILDERS))
    if unknown:
        parser.error(f"unknown example(s): {', '.join(unknown)}")
    problem = ""
    with tempfile.TemporaryDirectory(prefix="bench-verdict-") as workdir:
        cases = [Case(n, model_path(n), data_path(n)) for n in names]
        if not args.no_ocr:
            paths, problem = ensure_ocr_models(args.ocr_dir)
            cases += ocr_cases(paths, workdir)
            if problem:
                print(f"OCR models unavailable: {problem}; running {', '.join(paths) or 'none of them'}")
        print(f"rms: default verdict; max: --error-stat max --time-budget {args.old_budget:g}")
        print("search: none (no search ran), done (1-minimal), diffuse "
              "(all-FP16 error recognised as rounding noise), +cap / time-cap / probe-cap: the diffuse probe "
              "budget / --time-budget / --max-probes ran out and the cheapest passing plan probed was kept, "
              "not proven minimal")
        print("fp16%: FP16 share of estimated FLOPs; wall s: around the child; tool s: report cost.seconds; "
              "statistics: the written model (outputs.verified), worst over samples")
        print(HEADER)
        for case in cases:
            for criterion in ("rms", "max"):
                for line in rows(convert(case, criterion, args.old_budget, workdir)):
                    print(line, flush=True)
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
