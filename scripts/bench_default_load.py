"""CPU and wall time of one default-load check (:mod:`onnx_precision.oracle.default_load`).

    python scripts/bench_default_load.py [--loads 20] [--model models/deep_cnn.onnx]

Each auto or static conversion loads its written model at onnxruntime's default options in a child
process (crash isolation). This prints, for ``--loads`` loads of the model from its file and as many
of it handed over in memory (its bytes on the child's stdin):
  * the first load of the process (what starting the machinery costs, paid once per process),
  * the mean per load after it, CPU seconds of this process and every process it started (reaped
    children from getrusage, live ones, such as a server that stays, from /proc), and wall seconds.
CPU time is what counts on a shared machine: other processes' time slices are not in it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from typing import Callable

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_precision.context import ModelContext  # noqa: E402
from onnx_precision.oracle.default_load import DefaultLoad, default_load_problem  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _live_children_cpu() -> float:
    """CPU seconds of this process's live children and everything they reaped (Linux /proc)."""
    total = 0.0
    me = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # ppid; then utime, stime, cutime, cstime are fields 11-14
            total += sum(int(x) for x in fields[11:15]) / TICK
    return total


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + _live_children_cpu()


def measure(load: Callable[[], str], loads: int) -> tuple[float, float, float, float]:
    """(first load's CPU, its wall, the mean CPU and wall of the ``loads`` after it)."""
    c0, w0 = cpu_seconds(), time.perf_counter()
    assert load() == "", "the model does not load at default options"
    c1, w1 = cpu_seconds(), time.perf_counter()
    for _ in range(loads):
        assert load() == ""
    c2, w2 = cpu_seconds(), time.perf_counter()
    return c1 - c0, w1 - w0, (c2 - c1) / loads, (w2 - w1) / loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "models",
                                                        "deep_cnn.onnx"))
    args = parser.parse_args()
    ctx = ModelContext.of(onnx.load(args.model))
    print(f"{os.path.basename(args.model)}: {len(ctx.nodes)} nodes; {args.loads} loads each after the first")
    print(f"{'load':<12}{'first CPU s':>12}{'first wall s':>14}{'CPU s/load':>12}{'wall s/load':>13}")
    for label, load in (("from file", lambda: default_load_problem(args.model)),
                        ("in memory", lambda: DefaultLoad(ctx).problem())):
        first_cpu, first_wall, cpu, wall = measure(load, args.loads)
        print(f"{label:<12}{first_cpu:>12.3f}{first_wall:>14.3f}{cpu:>12.3f}{wall:>13.3f}")


if __name__ == "__main__":
    main()
