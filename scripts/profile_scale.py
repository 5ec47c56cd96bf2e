"""Where ``convert``/``analyze`` spend time and memory on the scale models (issue 12).

    python scripts/profile_scale.py --models lnstack300,lnstack1200 --command auto        # cProfile
    python scripts/profile_scale.py --models lnstack --command analyze --top 30
    python scripts/profile_scale.py --models gpt2 --command auto --memory                  # RSS per step
    python scripts/profile_scale.py --models lnstack1200,gpt2 --switch-build               # session builds

Models come from ``scripts/scale_models.py`` (built into ``--dir`` when missing; ``lnstackN`` is a
stack of N LayerNorm blocks, 11N+1 nodes). Each run is one child process running the CLI command
(``auto``: ``convert`` in the default mode; ``all-fp16``; ``analyze``; ``check`` of the auto
output) from a working directory that is neither the model's nor the output's.

- Default (cProfile): prints the phases (from the report, or analyze's own), then the top
  ``--top`` functions by cumulative time and by own time, and the time in onnxruntime session
  builds (``InferenceSession._create_inference_session``) against a plain build of the same model.
  ``--timeout`` stops the command by SIGALRM and still prints the profile so far (a C call, such as
  a session build, finishes first). ``--save FILE`` keeps the raw pstats.
- ``--switch-build``: the onnxruntime session of the model against that of its switch graph
  (groups of 16 or none, every intermediate exposed or none), each built in a fresh process:
  build seconds, the RSS the session holds, the first all-FP32 run (onnxruntime initialises If
  subgraphs then), a second one fetching the graph outputs only, then one fetching every
  intermediate as well (``run+int``).
- ``--memory``: no profiler; instead the key steps (load, typing, switch-graph build, session
  builds, reference/layerwise runs, rewrite, save, verify) are wrapped, and for each call it prints
  the seconds, the RSS at entry and exit and the peak RSS reached inside (sampled every 20 ms),
  so the step that sets the peak and what it holds is visible. A command whose RSS passes
  ``--max-rss-gb`` is stopped there, with the steps under way marked "killed here".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import scale_models  # a sibling: the script's folder is first on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import cProfile, json, os, pstats, signal, sys, threading, time
mode, top, timeout, save, max_rss = (sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4],
                                     float(sys.argv[5]))
argv = sys.argv[6:]

def rss(key="VmRSS"):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

class Timeout(BaseException):
    pass

def alarm(signum, frame):
    raise Timeout()

import logging
phases = {}
class Phases(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("analyze ") and ": " in message:
            for p in message.rsplit(": ", 1)[1].split(", "):
                phases[p.split()[0]] = float(p.split()[1].rstrip("s"))
analysis_log = logging.getLogger("onnx_precision.analysis")
analysis_log.setLevel(logging.DEBUG)
analysis_log.addHandler(Phases())
analysis_log.propagate = False

import importlib, pkgutil
import onnxruntime as ort
import onnx_precision
for info in pkgutil.walk_packages(onnx_precision.__path__, "onnx_precision."):
    if not info.name.endswith("__main__"):  # that one runs the CLI on import
        importlib.import_module(info.name)
from onnx_precision.cli import main

steps = []
if mode == "memory":
    peak = [0]
    started = time.perf_counter()
    open_steps = []  # (depth, label, start, rss before) of the calls under way

    def sampler():
        while True:
            now = rss()
            peak[0] = max(peak[0], now)
            if now > max_rss:  # the machine is shared: stop here and show the steps under way
                done = list(steps) + [(d, label + " (killed here)", time.perf_counter() - t, b, now, now)
                                      for d, label, t, b in reversed(open_steps)]
                print(json.dumps({"status": f"killed at RSS {now / 2**30:.1f} GB (--max-rss-gb)",
                                  "seconds": time.perf_counter() - started, "phases": phases,
                                  "peak": rss("VmHWM"), "steps": done}), flush=True)
                os._exit(3)
            time.sleep(0.02)
    threading.Thread(target=sampler, daemon=True).start()
    depth = [0]

    def wrap(label, fn):
        def wrapped(*a, **k):
            start, before = time.perf_counter(), rss()
            outer = peak[0]
            peak[0] = before
            open_steps.append((depth[0], label, start, before))
            depth[0] += 1
            try:
                return fn(*a, **k)
            finally:
                depth[0] -= 1
                open_steps.pop()
                inner = max(peak[0], rss())
                steps.append((depth[0], label, time.perf_counter() - start, before, rss(), inner))
                peak[0] = max(outer, inner)
        wrapped.__wrapped__ = fn
        return wrapped

    targets = [
        ("context", "load_model"), ("typing_rules", "tensor_types"), ("typing_rules", "model_typing"),
        ("policy", "resolve_plan"), ("policy", "forced_fp32"), ("oracle", "as_fp32"),
        ("oracle", "build_switch_model"), ("oracle", "emulate_model"), ("oracle", "make_session"),
        ("oracle", "reference_stats"), ("oracle", "layerwise"), ("oracle", "inspect_plan"),
        ("policy", "headroom_pins"), ("policy", "flagged"), ("rules", "run_rules"),
        ("rewriter", "rewrite"), ("storage", "save_model"), ("oracle", "verify_output"),
        ("oracle", "run_emulated"), ("data", "load_samples"), ("helper_sessions", "probe"),
        ("analysis", "build_rows"), ("report", "write_reports"),
    ]
    modules = {name: mod for name, mod in sys.modules.items() if name.startswith("onnx_precision")}
    for mod_name, fn_name in targets:
        owner = modules.get("onnx_precision." + mod_name)
        fn = getattr(owner, fn_name, None) if owner else None
        if fn is None:
            continue
        w = wrap(f"{mod_name}.{fn_name}", fn)
        for mod in modules.values():  # also the names imported with "from .x import f"
            if getattr(mod, fn_name, None) is fn:
                setattr(mod, fn_name, w)
    init = ort.InferenceSession._create_inference_session
    ort.InferenceSession._create_inference_session = wrap("ort session build", init)
    for cls, meth in (("EmulationSession", "run"),):
        c = getattr(modules["onnx_precision.oracle"], cls)
        setattr(c, meth, wrap(f"oracle.{cls}.{meth}", getattr(c, meth)))

signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, timeout)
profiler = cProfile.Profile() if mode == "profile" else None
start = time.perf_counter()
status = "ok"
if profiler:
    profiler.enable()
try:
    rc = main(argv)
    status = f"exit {rc}"
except Timeout:
    status = f"stopped by --timeout after {time.perf_counter() - start:.0f} s"
except Exception as e:  # a crash is a result too: the steps and the profile up to it are printed
    import traceback
    traceback.print_exc()
    status = f"traceback: {type(e).__name__}: {str(e)[:200]}"
if profiler:
    profiler.disable()
signal.setitimer(signal.ITIMER_REAL, 0)
seconds = time.perf_counter() - start
print(json.dumps({"status": status, "seconds": seconds, "phases": phases, "peak": rss("VmHWM"),
                  "steps": steps}))
if profiler:
    if save != "-":
        profiler.dump_stats(save)
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
"""

# One switch-graph variant (or the plain model) built and run in a fresh process: the cost of the
# session build, the memory the session holds, and one all-FP32 run with and without intermediates.
SWITCH = r"""
import json, sys, time
import numpy as np
import onnx
from onnx_precision import context, graph, oracle, policy, typing_rules

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

model_path, data, group, capture = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
feed = dict(np.load(data))
loaded = context.load_model(model_path)
out = {}
if group == 0:  # the model itself, with the oracle's session options
    start, before = time.perf_counter(), rss()
    session = oracle.make_session(loaded.model, loaded.base_dir)
    out.update(build=time.perf_counter() - start, held=rss() - before, nodes=len(loaded.model.graph.node))
    names = [o.name for o in loaded.model.graph.output]
    start = time.perf_counter()
    session.run(names, feed)  # the first run allocates: timed apart
    out["first_run"] = time.perf_counter() - start
    start = time.perf_counter()
    session.run(names, feed)
    out["run"] = time.perf_counter() - start
else:
    types, typing = loaded.types, loaded.typing
    forced = policy.forced_fp32(loaded)
    start = time.perf_counter()
    source = oracle.EmulationSource(loaded.model, typing, loaded.base_dir, types, forced)
    sm = oracle.build_switch_model(source, capture == "all", group)
    out["switch_graph"] = time.perf_counter() - start
    graphs = list(graph.graphs(sm.model.graph))
    out.update(nodes=sum(len(g.node) for g in graphs), subgraphs=len(graphs) - 1,
               ifs=sum(n.op_type == "If" for g in graphs for n in g.node), mb=sm.model.ByteSize() / 1e6,
               outputs=len(sm.model.graph.output))
    start, before = time.perf_counter(), rss()
    session = oracle.make_session(sm.model, loaded.base_dir)
    out.update(build=time.perf_counter() - start, held=rss() - before)
    full = dict(feed)
    full[sm.switch_input] = sm.switch_vector([])
    start = time.perf_counter()
    session.run(list(sm.outputs), full)  # the first run initialises every subgraph: timed apart
    out["first_run"] = time.perf_counter() - start
    for label, names in (("run", list(sm.outputs)), ("run_all", list(sm.outputs + sm.intermediates))):
        start = time.perf_counter()
        session.run(names, full)
        out[label] = time.perf_counter() - start
print(json.dumps(out))
"""

PLAIN = r"""
import sys, time
import numpy as np
import onnxruntime as ort
model, data = sys.argv[1:3]
feed = dict(np.load(data))
start = time.perf_counter()
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
built = time.perf_counter()
session.run(None, feed)
print(f"{built - start:.3f} {time.perf_counter() - built:.3f}")
"""


def gb(n: float) -> str:
    return f"{n / 2**30:.2f}"


def short(line: str) -> str:
    """pstats lines with the site-packages / repository prefixes cut."""
    for prefix in (os.path.dirname(HERE) + "/", sys.prefix + "/lib/python3.11/site-packages/"):
        line = line.replace(prefix, "")
    return line


def profile_one(name: str, args) -> None:
    model, sample = scale_models.paths(args.dir, name)
    out_dir = os.path.join(args.dir, "out", name)
    cwd = os.path.join(args.dir, "cwd")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(cwd, exist_ok=True)
    output = os.path.join(out_dir, "profile_auto.onnx")
    if args.command == "auto":
        argv = ["convert", model, "-o", output, "--inputs", sample]
    elif args.command == "all-fp16":
        argv = ["convert", model, "-o", os.path.join(out_dir, "profile_allfp16.onnx"), "--inputs", sample,
                "--mode", "all-fp16"]
    elif args.command == "analyze":
        argv = ["analyze", model, "--inputs", sample]
    else:
        argv = ["check", model, output, "--inputs", sample]
    plain = subprocess.run([sys.executable, "-c", PLAIN, model, sample], capture_output=True, text=True,
                           check=True, cwd=cwd).stdout.split()
    mode = "memory" if args.memory else "profile"
    with tempfile.NamedTemporaryFile("w", suffix=".out", delete=False) as log:
        child = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.top), str(args.timeout),
                                args.save or "-", str(args.max_rss_gb * 2**30), *argv], stdout=log,
                               stderr=subprocess.PIPE, text=True, cwd=cwd, check=False)
    with open(log.name) as f:
        text = f.read()
    os.unlink(log.name)
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith('{"status"')), None)
    if at is None:  # the command's own output comes first, then this line
        print(f"{name}: the child failed: {child.stderr.strip()[-500:]}")
        return
    head, profile = lines[at], "\n".join(lines[at + 1:])
    result = json.loads(head)
    nodes = _node_count(model)
    phases = result["phases"]
    print(f"== {name} ({nodes} nodes) {args.command}: {result['status']}, {result['seconds']:.1f} s, "
          f"peak {gb(result['peak'])} GB; plain build {plain[0]} s, run {plain[1]} s")
    if args.command == "auto":
        phases = _report_phases(output[:-len(".onnx")] + ".report.json")
    if phases:
        print("phases (s): " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in phases.items()))
    if args.memory:
        print(f"{'step':<44} {'s':>7} {'RSS in':>7} {'RSS out':>7} {'peak':>7}  (GB)")
        for depth, label, seconds, before, after, peak in result["steps"]:
            print(f"{'  ' * depth + label:<44} {seconds:>7.2f} {gb(before):>7} {gb(after):>7} {gb(peak):>7}")
    else:
        builds = [line for line in profile.splitlines() if "_create_inference_session" in line]
        if builds:
            print("onnxruntime session builds: " + short(builds[0].strip()))
        print(short(profile))


def _node_count(model: str) -> int:
    import onnx

    return len(onnx.load(model, load_external_data=False).graph.node)


def _report_phases(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        report = json.load(f)
    phases: dict = {}
    for p in report.get("cost", {}).get("phases", []):
        phases[p["name"]] = phases.get(p["name"], 0.0) + p["seconds"]
    phases["probes"] = report.get("cost", {}).get("probes_run")
    return phases


def switch_variants(name: str, args) -> None:
    """The switch graph's session against the model's own, each built in a fresh process."""
    model, sample = scale_models.paths(args.dir, name)
    print(f"== {name}: onnxruntime session of the model and of its switch graph (oracle options: "
          f"ORT_DISABLE_ALL, no prepacking; 'held' = RSS the session keeps)")
    print(f"{'variant':<30} {'graph s':>7} {'nodes':>7} {'Ifs':>6} {'subgr':>6} {'outputs':>7} {'MB':>7} "
          f"{'build s':>7} {'held GB':>7} {'1st run':>7} {'run s':>7} {'run+int s':>9}")
    variants = [("model itself", 0, "none"), ("switch, groups 16, capture", 16, "all"),
                ("switch, groups 16, no capture", 16, "none"), ("switch, no groups, capture", 1, "all"),
                ("switch, no groups, no capture", 1, "none")]
    for label, group, capture in variants:
        child = subprocess.run([sys.executable, "-c", SWITCH, model, sample, str(group), capture],
                               capture_output=True, text=True, check=False, cwd=os.path.join(args.dir, "cwd"))
        if child.returncode != 0:
            print(f"{label:<30} failed: {child.stderr.strip()[-300:]}")
            continue
        r = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{label:<30} {r.get('switch_graph', 0):>7.2f} {r['nodes']:>7} {r.get('ifs', 0):>6} "
              f"{r.get('subgraphs', 0):>6} {r.get('outputs', 0):>7} {r.get('mb', 0):>7.1f} "
              f"{r['build']:>7.2f} "
              f"{gb(r['held']):>7} {r['first_run']:>7.3f} {r['run']:>7.3f} {r.get('run_all', 0):>9.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="lnstack300,lnstack1200",
                        help="comma-separated models of scripts/scale_models.py "
                             "(default lnstack300,lnstack1200)")
    parser.add_argument("--command", default="auto", choices=["auto", "all-fp16", "analyze", "check"])
    parser.add_argument("--dir", default=scale_models.DEFAULT_DIR)
    parser.add_argument("--top", type=int, default=25, help="functions listed per sort (default 25)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="stop the command after this many seconds and print the profile so far")
    parser.add_argument("--memory", action="store_true", help="RSS per step instead of cProfile")
    parser.add_argument("--max-rss-gb", type=float, default=14.0,
                        help="--memory: stop the command when its RSS passes this and print the steps under "
                             "way (default 14: the machine is shared)")
    parser.add_argument("--save", help="write the raw pstats here (one model only)")
    parser.add_argument("--switch-build", action="store_true",
                        help="compare session builds: the model against its switch graph (groups or not, "
                             "intermediates exposed or not)")
    args = parser.parse_args(argv)
    os.makedirs(os.path.join(args.dir, "cwd"), exist_ok=True)
    for name in [m for m in args.models.split(",") if m]:
        subprocess.run([sys.executable, os.path.join(HERE, "scale_models.py"), "--dir", args.dir, name],
                       check=True, capture_output=True)
        if args.switch_build:
            switch_variants(name, args)
        else:
            profile_one(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
