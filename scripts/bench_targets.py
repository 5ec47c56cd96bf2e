"""Issue 24's benchmark: every example converted for each target, and what the FP16-accumulation
emulation costs.

    python scripts/bench_targets.py [--models NAME ...] [--targets TARGET ...] [--reps N] [--keep DIR]

Each example of ``models/`` (its committed .onnx and data) is converted once per target by
``onnx-precision convert MODEL -o OUT --inputs DATA --target TARGET -q`` in a child process. One line per
run, read from ``OUT.report.json``: status; the FP16 share of estimated FLOPs
(``fp16_share.flops_by_precision``); the nodes pinned FP32 and the means rewritten (plan reasons starting
'rewritten:'); the size bound the run states (its 'FP16-safe up to ...' note, the sizes only); the
sessions built, probes run (``cost``) and the wall seconds around the child.

Below the table, the emulation's cost on the largest example: its all-FP16 model (written by the generic
run) emulated as each target computes it (``oracle.written.emulate_model``), the onnxruntime session built
and run on the example's data, the median of ``--reps`` repetitions, against generic's: with every sum
checked (a model measured by no run: held-out samples) and with the sums the data proves in range
unchecked (a convert run's search and verification, and ``check --target``: the run's basis' ``Measured``,
``--headroom`` 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import models  # noqa: E402
from models.generate import data_path, model_path  # noqa: E402
from onnx_precision.context import load_model  # noqa: E402
from onnx_precision.convert.choose import DEFAULT_HEADROOM  # noqa: E402
from onnx_precision.oracle.accumulated import AccumulationBounds  # noqa: E402
from onnx_precision.oracle.sessions import make_session  # noqa: E402
from onnx_precision.oracle.written import emulate_model  # noqa: E402
from onnx_precision.target import KINDS, UNMEASURED, Measured, Target, target_named  # noqa: E402
from onnx_precision.target.accumulation import proven_sums  # noqa: E402

CHILD_TIMEOUT = 600  # seconds; a safety net only
COLUMNS = [("model", -18), ("target", -15), ("status", -14), ("FP16", 6), ("pins", 4), ("rewr", 4),
           ("size bound", -22), ("sess", 4), ("probes", 6), ("wall s", 6)]


def line(cells: list[str]) -> str:
    padded = (f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for (_, w), c in zip(COLUMNS, cells))
    return "| " + " | ".join(padded) + " |"


def convert(name: str, target: str, workdir: str) -> list[str]:
    out = os.path.join(workdir, f"{name}.{target}.onnx")
    report_path = out[:-len(".onnx")] + ".report.json"
    if os.path.exists(report_path):
        os.remove(report_path)
    data = data_path(name)
    cmd = [sys.executable, "-m", "onnx_precision", "convert", model_path(name), "-o", out, "-q", "--inputs",
           data, "--target", target]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    wall = time.perf_counter() - start
    if not os.path.exists(report_path):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [name, target, f"error {proc.returncode}", "-", "-", "-", last[:22], "-", "-", f"{wall:.1f}"]
    with open(report_path) as f:
        report = json.load(f)
    nodes = report["plan"]["nodes"].values()
    pins = sum(1 for n in nodes if n["precision"] == "fp32")
    rewritten = sum(1 for n in nodes if any(r["detail"].startswith("rewritten:") for r in n["reasons"]))
    bound = next((m.group(1) for n in report.get("notes") or ()
                  if (m := re.match(r"FP16-safe up to (\S+ = \S+)", n))), "-")
    share = (report.get("fp16_share") or {}).get("flops_by_precision", {}).get("fp16", 0.0)
    cost = report["cost"]
    return [name, target, report["status"], f"{100 * share:.1f}", str(pins), str(rewritten), bound,
            str(cost["sessions_built"]), str(cost["probes_run"]), f"{wall:.1f}"]


def feed_of(name: str) -> dict[str, np.ndarray]:
    with np.load(data_path(name)) as npz:
        return {k: npz[k] for k in npz.files}


def proven(name: str, target: Target) -> tuple[Measured, int]:
    """The sums of ``name``'s FP32 model its data proves in range on ``target``, as convert measures, and
    how many."""
    bounds = AccumulationBounds(load_model(model_path(name), target=target)).measure([feed_of(name)])
    nodes = proven_sums(bounds, target.low, DEFAULT_HEADROOM)
    return Measured(nodes), len(nodes)


def emulation_seconds(name: str, fp16_model: str, target: Target, reps: int,
                      measured: Measured = UNMEASURED) -> float:
    """Median seconds to build the emulated session of ``fp16_model`` on ``target`` (its sums ``measured``
    proves unchecked) and run the data."""
    model = onnx.load(fp16_model)
    feed = feed_of(name)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        emulated = emulate_model(model, os.path.dirname(fp16_model), target, measured=measured)
        make_session(emulated, os.path.dirname(fp16_model)).run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", metavar="NAME", choices=sorted(models.BUILDERS))
    parser.add_argument("--targets", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the emulation timing")
    parser.add_argument("--keep", metavar="DIR", help="write the converted models and reports here")
    args = parser.parse_args(argv)
    names = [n for n in models.BUILDERS if os.path.exists(data_path(n)) and os.path.isfile(data_path(n))
             and (args.models is None or n in args.models)]
    workdir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="bench-targets-")
    os.makedirs(workdir, exist_ok=True)
    print(f"outputs in {workdir}")
    print(line([title for title, _ in COLUMNS]))
    print("|" + "|".join("-" * (abs(w) + 2) for _, w in COLUMNS) + "|")
    for name in names:
        for target in args.targets:
            print(line(convert(name, target, workdir)), flush=True)
    largest = max(names, key=lambda n: os.path.getsize(model_path(n)))
    written = os.path.join(workdir, f"{largest}.generic.onnx")
    if "generic" not in args.targets or not os.path.exists(written):
        return 0
    base = emulation_seconds(largest, written, target_named("generic"), args.reps)
    print(f"\nemulation of {largest}'s generic FP16 model (session built and run, median of {args.reps}):")
    print(f"  {'generic':<16} {base:.3f} s  1.00x")
    for kind in args.targets:
        target = target_named(kind)
        if "fp16" not in target.accumulation.values():
            continue
        every = emulation_seconds(largest, written, target, args.reps)
        sure, count = proven(largest, target)
        seconds = emulation_seconds(largest, written, target, args.reps, sure)
        print(f"  {kind:<16} {every:.3f} s  {every / base:.2f}x generic, every sum checked; "
              f"{seconds:.3f} s  {seconds / base:.2f}x with the {count} sum(s) the data proves "
              f"in range unchecked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
