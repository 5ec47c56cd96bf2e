"""Issue 33 item 3's benchmark: where each example's written plan holds, runtime by runtime.

    python scripts/bench_runtimes.py [--models NAME ...] [--target TARGET] [--keep DIR]

Each example of ``models/`` (its committed .onnx and data) is converted once, for ``--target`` (generic by
default), by ``onnx-precision convert MODEL -o OUT --inputs DATA -q`` in a child process. From its
``OUT.report.json``: the status, and its ``runtimes`` table (the written model emulated on every runtime of
the registry, :mod:`onnx_precision.runtimes`): one line per runtime, its verdict, its worst output, and
where it fails the first node where its error appears. Then what the table cost against the whole run:
the ``runtimes`` phase's seconds and sessions (``cost.phases``) and the child's wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import models  # noqa: E402
from models.generate import data_path, model_path  # noqa: E402
from onnx_precision.target import KINDS  # noqa: E402

CHILD_TIMEOUT = 600  # seconds; a safety net only


def convert(name: str, target: str, workdir: str) -> tuple[dict | None, float, str]:
    """The report of ``name`` converted for ``target`` (None where the run wrote none), the wall seconds,
    and the child's last line of stderr."""
    out = os.path.join(workdir, f"{name}.{target}.onnx")
    report_path = out[:-len(".onnx")] + ".report.json"
    if os.path.exists(report_path):
        os.remove(report_path)
    cmd = [sys.executable, "-m", "onnx_precision", "convert", model_path(name), "-o", out, "-q", "--inputs",
           data_path(name), "--target", target]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    wall = time.perf_counter() - start
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if not os.path.exists(report_path):
        return None, wall, last
    with open(report_path) as f:
        return json.load(f), wall, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", metavar="NAME", choices=sorted(models.BUILDERS))
    parser.add_argument("--target", choices=list(KINDS), default="generic", help="the run's target")
    parser.add_argument("--keep", metavar="DIR", help="write the converted models and reports here")
    args = parser.parse_args(argv)
    names = [n for n in models.BUILDERS if os.path.isfile(data_path(n))
             and (args.models is None or n in args.models)]
    workdir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="bench-runtimes-")
    os.makedirs(workdir, exist_ok=True)
    print(f"outputs in {workdir}; each example converted with --target {args.target}")
    holds_everywhere, tables = 0, 0
    for name in names:
        report, wall, last = convert(name, args.target, workdir)
        if report is None:
            print(f"\n{name}: no report ({last})")
            continue
        table = report.get("runtimes")
        phase = next((p for p in report["cost"]["phases"] if p["name"] == "runtimes"), None)
        cost = (f"runtimes {phase['seconds']:.2f} s, {phase['sessions']} session(s) of {wall:.2f} s wall"
                if phase else f"{wall:.2f} s wall")
        print(f"\n{name}: {report['status']}; {cost}")
        if not table:
            print("  (no table: no model was written and verified)")
            continue
        tables += 1
        holds_everywhere += all(v["passed"] for v in table)
        for v in table:
            first = v["first_failure"]
            where = "" if first is None else (
                f"; first: node '{first['node']}' ({first['op']})"
                + (f", {first['new_nonfinite']} NaN/Inf" if first["new_nonfinite"] else
                   f", max rel err {first['max_rel_err']:.3g}"))
            judged = " (as the run judged it)" if v["as_run"] else ""
            print(f"  {v['runtime']:<16} {'pass' if v['passed'] else 'FAIL':<4}{judged}  {v['worst']}{where}")
    print(f"\n{holds_everywhere} of the {tables} example(s) written hold on every runtime")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
