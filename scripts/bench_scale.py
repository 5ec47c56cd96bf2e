"""Issue 12's scale benchmark: time and peak memory of each command against a plain onnxruntime run.

    python scripts/bench_scale.py                                   # cnn gpt2 lnstack llama
    python scripts/bench_scale.py --models cnn,gpt2 --commands plain,auto --timeout 600
    python scripts/bench_scale.py --models lnstack1200 --json /tmp/scale.json

For each model of ``scripts/scale_models.py`` (built into ``--dir`` when missing, in a child
process) it runs each command in a fresh child process and reports wall time and peak RSS, each
also as a ratio to the ``plain`` run of the same model:

- ``plain``: builds a default ``onnxruntime.InferenceSession`` of the model file and runs it twice
  on the sample (what a user's FP32 deployment costs; its build/run split is printed too);
- ``all-fp16``: ``onnx-precision convert --mode all-fp16``;
- ``auto``: ``onnx-precision convert`` (the default mode), with the phases of its report
  (``OUT.report.json``: cost.phases, seconds per phase);
- ``analyze``: ``onnx-precision analyze`` (its phases load/plan/session/runs/rules, taken from the
  library's debug log line);
- ``check``: ``onnx-precision check`` of the auto output (of the all-fp16 output when auto wrote
  nothing; the table says which).

Every command gets ``--inputs sample.npz`` and runs with its working directory set to
``DIR/cwd``, which is neither the model's directory nor the output's (``DIR/out/MODEL``): the
issue reports a crash that depends on the working directory.

Peak RSS is the child's own ``VmHWM`` (Linux): the child reports it at exit, and the parent also
polls ``/proc/<pid>/status`` every 0.1 s, so a command killed for ``--timeout`` or for memory
still has a peak (a lower bound then). ``ru_maxrss`` is not used (see scripts/bench_convert.py:
it inherits the parent's RSS across exec). The machine is shared: a child is killed when its RSS
passes ``--max-rss-gb`` or the system's MemAvailable drops under ``--min-available-gb``, and the
``llama`` models are skipped unless ``--min-free-gb`` is available before they start. The model
and its data file are read once before each command, so every command finds them in the page
cache (the first read of 4.75 GB from disk would otherwise be charged to whichever runs first).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

import scale_models  # a sibling: the script's folder is first on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))

COMMANDS = ("plain", "all-fp16", "auto", "analyze", "check")
BIG = ("llama", "llama-1k")
TRACEBACK = 99  # the child's exit status when the command raised (the CLI itself would print a traceback)

# The child: runs one command, then writes its own VmHWM (and what else it knows) to a JSON file.
CHILD = r"""
import json, logging, sys, time
result_path, kind, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {}

def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

def finish(rc):
    result["rc"] = rc
    result["peak_kib"] = peak_kib()
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()

if kind == "plain":
    import numpy as np
    import onnxruntime as ort
    model, data = argv
    feed = dict(np.load(data))
    start = time.perf_counter()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    built = time.perf_counter()
    for _ in range(2):
        session.run(None, feed)
    result["phases"] = {"build": built - start, "runs": time.perf_counter() - built}
    finish(0)
else:
    class Phases(logging.Handler):
        # analyze() logs "analyze MODEL: load 0.12s, plan 0.05s, session 0.34s, ..." at debug level.
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("analyze ") and ": " in message:
                parts = message.rsplit(": ", 1)[1].split(", ")
                result["phases"] = {p.split()[0]: float(p.split()[1].rstrip("s")) for p in parts}
    analysis_log = logging.getLogger("onnx_precision.analysis")
    analysis_log.setLevel(logging.DEBUG)
    analysis_log.addHandler(Phases())
    analysis_log.propagate = False
    from onnx_precision.cli import main
    try:
        rc = main(argv)
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 99  # TRACEBACK
    finish(rc)
"""


@dataclass
class Run:
    command: str
    status: str  # "ok", "exit N", "timeout", "killed (memory)"
    seconds: float
    peak_bytes: int
    phases: dict = field(default_factory=dict)
    note: str = ""
    error: str = ""


@dataclass
class ModelRuns:
    name: str
    description: str
    nodes: int
    file_bytes: int
    runs: list[Run] = field(default_factory=list)
    skipped: str = ""


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return 1024 * int(line.split()[1])
    return 0


def proc_status(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return 1024 * int(line.split()[1])
    except OSError:
        pass
    return 0


def run_child(command: str, kind: str, argv: list[str], cwd: str, log_prefix: str, timeout: float,
              min_available: int, max_rss: int) -> Run:
    """Run one command in a fresh interpreter; time it, watch its memory, kill it past the limits."""
    result_path = log_prefix + ".result.json"
    if os.path.exists(result_path):
        os.unlink(result_path)
    with open(log_prefix + ".stdout", "w") as out, open(log_prefix + ".stderr", "w") as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", CHILD, result_path, kind, *argv], cwd=cwd, stdout=out,
                                 stderr=err, start_new_session=True)
        peak, status = 0, ""
        while child.poll() is None:
            peak = max(peak, proc_status(child.pid, "VmHWM"))
            if time.perf_counter() - start > timeout:
                status = "timeout"
            elif mem_available() < min_available:
                status = "killed (memory)"
            elif proc_status(child.pid, "VmRSS") > max_rss:
                status = f"killed (RSS>{max_rss / 2**30:.0f}GB)"
            if status:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                break
            time.sleep(0.1)
        seconds = time.perf_counter() - start
    report: dict = {}
    if os.path.exists(result_path):
        with open(result_path) as f:
            report = json.load(f)
    peak = max(peak, 1024 * report.get("peak_kib", 0))
    rc = report.get("rc", child.returncode)
    if not status:
        status = "ok" if rc == 0 else "traceback" if rc == TRACEBACK else f"exit {rc}"
    error = ""
    if status != "ok":
        with open(log_prefix + ".stderr") as f:
            lines = [line.strip() for line in f if line.strip()]
        error = lines[-1][:300] if lines else ""
    return Run(command, status, seconds, peak, report.get("phases", {}), error=error)


def warm_cache(model: str) -> None:
    """Read the model and its data file once, so that every command finds them in the page cache."""
    for path in (model, model + ".data"):
        if os.path.exists(path):
            with open(path, "rb") as f:
                while f.read(1 << 26):
                    pass


def model_facts(model: str) -> tuple[int, int]:
    import onnx

    proto = onnx.load(model, load_external_data=False)
    size = sum(os.path.getsize(p) for p in (model, model + ".data") if os.path.exists(p))
    return len(proto.graph.node), size


def report_phases(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        report = json.load(f)
    phases: dict[str, float] = {}
    for p in report.get("cost", {}).get("phases", []):
        phases[p["name"]] = phases.get(p["name"], 0.0) + p["seconds"]
    probes = report.get("cost", {}).get("probes_run")
    if probes is not None:
        phases["probes"] = probes
    return phases


def remove_outputs(prefix: str) -> None:
    for suffix in (".onnx", ".onnx.data", ".report.json", ".report.md"):
        if os.path.exists(prefix + suffix):
            os.unlink(prefix + suffix)


def bench_model(name: str, args, commands: list[str]) -> ModelRuns:
    spec = scale_models.spec(name)
    if name in BIG or name.startswith("llama"):
        free = mem_available()
        if free < args.min_free_gb * 2**30:
            return ModelRuns(name, spec.description, 0, 0,
                             skipped=f"skipped: {free / 2**30:.1f} GB available, "
                                     f"--min-free-gb {args.min_free_gb}")
    build = subprocess.run([sys.executable, os.path.join(HERE, "scale_models.py"), "--dir", args.dir, name],
                           capture_output=True, text=True, check=False)
    if build.returncode != 0:
        return ModelRuns(name, spec.description, 0, 0, skipped="build failed: " + build.stderr.strip()[-300:])
    print(build.stdout.strip(), flush=True)
    model, sample = scale_models.paths(args.dir, name)
    nodes, size = model_facts(model)
    result = ModelRuns(name, spec.description, nodes, size)
    out_dir = os.path.join(args.dir, "out", name)
    cwd = os.path.join(args.dir, "cwd")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(cwd, exist_ok=True)
    outputs = {c: os.path.join(out_dir, c.replace("-", "")) for c in ("all-fp16", "auto")}
    for prefix in outputs.values():
        remove_outputs(prefix)
    for command in commands:
        note = ""
        if command == "plain":
            kind, argv = "plain", [model, sample]
        elif command in outputs:
            argv = ["convert", model, "-o", outputs[command] + ".onnx", "--inputs", sample]
            kind, argv = "cli", argv + (["--mode", "all-fp16"] if command == "all-fp16" else [])
        elif command == "analyze":
            kind, argv = "cli", ["analyze", model, "--inputs", sample]
        else:
            candidate = next((p for c, p in reversed(list(outputs.items())) if os.path.exists(p + ".onnx")),
                             None)
            if candidate is None:
                result.runs.append(Run(command, "no output to check", 0.0, 0))
                continue
            note = "of " + os.path.basename(candidate) + ".onnx"
            kind, argv = "cli", ["check", model, candidate + ".onnx", "--inputs", sample]
        print(f"  {name} {command} ...", end=" ", flush=True)
        warm_cache(model)
        run = run_child(command, kind, argv, cwd, os.path.join(out_dir, command), args.timeout,
                        int(args.min_available_gb * 2**30), int(args.max_rss_gb * 2**30))
        run.note = note
        if command == "auto":
            run.phases = report_phases(outputs["auto"] + ".report.json")
        print(f"{run.status}, {run.seconds:.1f} s, {run.peak_bytes / 2**30:.2f} GB"
              + (f": {run.error}" if run.error else ""), flush=True)
        result.runs.append(run)
    return result


def fmt_phases(phases: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in phases.items())


def print_table(results: list[ModelRuns]) -> None:
    print()
    print(f"{'model':<12} {'nodes':>6} {'file MB':>8}  {'command':<9} {'status':<18} {'time s':>7} "
          f"{'x plain':>7} {'peak GB':>7} {'x plain':>7}  phases (s)")
    for m in results:
        if m.skipped:
            print(f"{m.name:<12} {m.skipped}")
            continue
        plain = next((r for r in m.runs if r.command == "plain" and r.status == "ok"), None)
        for i, r in enumerate(m.runs):
            head = f"{m.name:<12} {m.nodes:>6} {m.file_bytes / 1e6:>8.1f}" if i == 0 else " " * 28
            t_ratio = f"{r.seconds / plain.seconds:.1f}x" if plain and r.seconds else "-"
            m_ratio = f"{r.peak_bytes / plain.peak_bytes:.1f}x" if plain and r.peak_bytes else "-"
            status = r.status[:18]
            extra = fmt_phases(r.phases) + (f" [{r.note}]" if r.note else "")
            print(f"{head}  {r.command:<9} {status:<18} {r.seconds:>7.1f} {t_ratio:>7} "
                  f"{r.peak_bytes / 2**30:>7.2f} {m_ratio:>7}  {extra}")
        for r in m.runs:
            if r.error:
                print(f"{'':<12} {r.command} {r.status}: {r.error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="cnn,gpt2,lnstack,llama",
                        help="comma-separated: cnn, gpt2, lnstack, lnstackN, llama, llama-1k "
                             "(default cnn,gpt2,lnstack,llama)")
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help=f"comma-separated subset of {COMMANDS}")
    parser.add_argument("--dir", default=scale_models.DEFAULT_DIR,
                        help=f"model cache and outputs (default {scale_models.DEFAULT_DIR})")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command (default 600)")
    parser.add_argument("--min-free-gb", type=float, default=14.0,
                        help="run the llama models only with this much memory available (default 14)")
    parser.add_argument("--min-available-gb", type=float, default=1.5,
                        help="kill a command when the system has less than this available (default 1.5)")
    parser.add_argument("--max-rss-gb", type=float, default=16.0,
                        help="kill a command whose RSS passes this (default 16: the machine is shared)")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    commands = [c for c in args.commands.split(",") if c]
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown commands {unknown}; known: {COMMANDS}")
    if "plain" not in commands:
        print("note: without 'plain' there are no ratios")
    results = []
    for name in [m for m in args.models.split(",") if m]:
        print(f"{name}: {scale_models.spec(name).description}", flush=True)
        results.append(bench_model(name, args, commands))
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(m) for m in results], f, indent=1)
    return 0 if all(r.status == "ok" for m in results for r in m.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
