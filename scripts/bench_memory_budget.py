"""Issue 34's runs: a conversion with the defaults, with no memory limit and under a cgroup's limit.

    python scripts/bench_memory_budget.py llama-1b --limit-gb 3          # both runs, then the figures
    python scripts/bench_memory_budget.py llama-7b --runs free -- --memory-budget 8G
    python scripts/bench_memory_budget.py llama-7b --runs limited --limit-gb 8 --tag fp16 -- --mode all-fp16

Each run is ``onnx-precision convert MODEL -o OUT --inputs sample.npz --report OUT.report.json`` (and
what follows ``--``) in a fresh interpreter, on the models of ``scripts/llama_models.py`` (built when
missing, under ``--dir``). A limited run is put, before it starts, into a memory cgroup made for it
beneath this process's own (cgroup v1: ``memory.limit_in_bytes``; it needs a writable memory
controller) and removed after. The figures, per run: exit status, wall seconds, the process's own peak
(``VmHWM``: resident pages, the mapped weights' included), the peak of the anonymous memory of the
process and its descendants together (``RssAnon``, sampled every 0.2 s: what the kernel cannot reclaim),
and under a limit the cgroup's ``memory.max_usage_in_bytes`` (page cache included, so at most the limit)
and its OOM kills. Each run starts with the model's files out of the page cache (``posix_fadvise``
DONTNEED): a cgroup v1 is charged for the page cache its processes fault in, so weights another run left
cached would be read by the limited run for free. Then whether the runs wrote the same plan and the same
verdict (the reports' nodes' precisions, status and message), and each run's own memory note and
default-load warning from its report.

Measured on this 2-core, 24 GB machine (shared; load average 3-7, so times move by 2x between runs):

- ``llama-1b`` (4.75 GB of FP32 weights, 1460 nodes): no limit, exit 0 in 124 s (a quiet hour; 288 s at
  load 7), the CLI process held at most 0.97 GB, its default-load child 5.07 GB. Under 3 GB: exit 0 in
  126 s (239 s at load 7), the same plan (1454 FP16, 6 FP32) and verdict (passed); the process held
  0.97 GB, its cgroup peaked at its limit (page cache), the default-load child was killed by the kernel
  at 2.83 GB and the run says that load was not checked, with the figures.
- ``llama-7b`` (27.0 GB), under 8 GB with ``--memory-budget 8G``: exit 0, passed, 928 s at load 7 (519 s
  in a quieter hour; the runtimes table took 473 s of it): the process held at most 2.30 GB; 1806 of 1812
  nodes FP16, > 99.9999% of the estimated FLOPs, as ``--mode all-fp16`` (129 s, 1748 nodes FP16, all
  the FLOPs) but verified.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama_models  # noqa: E402  (a sibling)

# The child: the CLI in-process, then its own VmHWM beside its exit status.
CHILD = r"""
import json, sys
from onnx_precision.cli import main
result_path, argv = sys.argv[1], sys.argv[2:]
try:
    rc = main(argv)
except BaseException:
    import traceback
    traceback.print_exc()
    rc = 99
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
with open(result_path, "w") as f:
    json.dump({"rc": rc, "vmhwm": hwm}, f)
sys.exit(rc)
"""


@dataclass(frozen=True)
class Run:
    name: str
    rc: int
    seconds: float
    vmhwm: int  # the process's own peak resident memory
    anon_peak: int  # the peak of the anonymous memory of the process and its descendants
    cgroup_peak: int  # the cgroup's max_usage_in_bytes (0: not limited)
    oom_kills: int
    report: dict
    phases: dict[str, tuple[int, int]]  # progress phase -> peak anonymous memory (the process, the rest)


def _status(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":")), 0)
    except OSError:
        return 0


def _tree(root: int) -> list[int]:
    """``root`` and its descendants now."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, frontier = [root], [root]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found += children
        frontier += children
    return found


def _own_memory_cgroup() -> str:
    with open("/proc/self/cgroup") as f:
        path = next(line.split(":", 2)[2].strip() for line in f if ":memory:" in line)
    return os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))


def evict(path: str) -> None:
    """Drop ``path``'s pages from the page cache (those no process maps)."""
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def run(name: str, argv: list[str], prefix: str, limit: int | None) -> Run:
    """Run the CLI with ``argv`` (under a cgroup limit of ``limit`` bytes when given)."""
    folder = ""
    if limit is not None:
        folder = os.path.join(_own_memory_cgroup(), f"onnx-precision-bench-{os.getpid()}")
        os.mkdir(folder)
        with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))

    def enter() -> None:  # in the child, before it runs anything
        if folder:
            with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    result = prefix + ".result.json"
    with open(prefix + ".log", "w") as log:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", CHILD, result, *argv], stdout=log, stderr=log,
                                 preexec_fn=enter)
        anon = 0
        phases: dict[str, tuple[int, int]] = {}
        while child.poll() is None:
            own = _status(child.pid, "RssAnon")
            rest = sum(_status(pid, "RssAnon") for pid in _tree(child.pid)[1:])
            anon = max(anon, own + rest)
            phase = _phase(prefix + ".log")
            before = phases.get(phase, (0, 0))
            phases[phase] = (max(before[0], own), max(before[1], rest))
            time.sleep(0.2)
        seconds = time.perf_counter() - started
    cgroup_peak = oom_kills = 0
    if folder:
        with open(os.path.join(folder, "memory.max_usage_in_bytes")) as f:
            cgroup_peak = int(f.read())
        with open(os.path.join(folder, "memory.oom_control")) as f:
            oom_kills = next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")), 0)
        for _ in range(100):
            try:
                os.rmdir(folder)
                break
            except OSError:  # a process of it still exiting
                time.sleep(0.1)
    done = json.load(open(result)) if os.path.exists(result) else {"rc": child.returncode, "vmhwm": 0}
    report_path = prefix + ".onnx.report.json"
    report = json.load(open(report_path)) if os.path.exists(report_path) else {}
    return Run(name, done["rc"], seconds, done["vmhwm"], anon, cgroup_peak, oom_kills, report, phases)


def _phase(log: str) -> str:
    """The phase the CLI's last progress line names ("progress: verify (60 s elapsed)")."""
    with open(log, errors="replace") as f:
        lines = [line for line in f if line.startswith("progress: ")]
    return lines[-1].split()[-4] if lines else "load"


def _plan(report: dict) -> dict[str, str]:
    """Each node's precision in the report's plan."""
    return {name: node["precision"] for name, node in report.get("plan", {}).get("nodes", {}).items()}


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(llama_models.SPECS))
    parser.add_argument("--dir", default=llama_models.DEFAULT_DIR)
    parser.add_argument("--limit-gb", type=float, default=3.0)
    parser.add_argument("--runs", default="free,limited", help="free, limited or both (comma-separated)")
    parser.add_argument("--tag", default="", help="added to the output files' names (OUT/MODEL-RUN-TAG.onnx)")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # more convert options
    args = parser.parse_args(argv[:len(argv) - len(extra) - (1 if extra else 0)])
    model = llama_models.build(args.dir, args.model)
    sample = os.path.join(os.path.dirname(model), "sample.npz")
    out = os.path.join(args.dir, "out")
    os.makedirs(out, exist_ok=True)
    runs = []
    for kind in args.runs.split(","):
        prefix = os.path.join(out, f"{args.model}-{kind}" + (f"-{args.tag}" if args.tag else ""))
        convert = ["convert", model, "-o", prefix + ".onnx", "--inputs", sample, "--report",
                   prefix + ".onnx.report.json", *extra]
        limit = int(args.limit_gb * 1e9) if kind == "limited" else None
        for path in (model, model + ".data"):
            evict(path)
        runs.append(run(kind, convert, prefix, limit))
        done = runs[-1]
        print(f"{args.model} {kind}{f' (limit {_gb(limit)})' if limit else ''}: exit {done.rc}, "
              f"{done.seconds:.0f} s, VmHWM {_gb(done.vmhwm)}, anonymous peak (with children) "
              f"{_gb(done.anon_peak)}" + (f", cgroup peak {_gb(done.cgroup_peak)}, OOM kills {done.oom_kills}"
                                           if limit else "") + f"; status {done.report.get('status')!r}",
              flush=True)
        print("  anonymous peak per phase (process + children): " + ", ".join(
            f"{phase} {_gb(own)} + {_gb(rest)}" for phase, (own, rest) in done.phases.items()))
        for line in [n for n in done.report.get("notes", ()) if n.startswith("memory: ")] + [
                w for w in done.report.get("warnings", ()) if "not checked" in w]:
            print(f"  its report: {line}")
    if len(runs) == 2:
        a, b = runs
        same_plan = bool(a.report) and _plan(a.report) == _plan(b.report)
        same_verdict = a.report.get("status") == b.report.get("status") and \
            a.report.get("message") == b.report.get("message")
        print(f"same plan: {same_plan}; same verdict: {same_verdict}; time {b.seconds / a.seconds:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
