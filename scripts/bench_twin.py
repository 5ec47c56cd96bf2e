"""Measurements behind the twin graph and the search's session choice (issue 12), each in a fresh process.

    python scripts/bench_twin.py order                      # chain of 40 tensors: default vs priority order
    python scripts/bench_twin.py ops                        # onnxruntime ops over 33M floats
    python scripts/bench_twin.py twin --model lnstack       # twin graph: nodes, build times, one run
    python scripts/bench_twin.py twin --model llama-1k --profile   # ... and seconds per op type
    python scripts/bench_twin.py phases --model llama-1k    # peak RSS per phase of convert (auto)
    python scripts/bench_twin.py phases --model llama-1k --switch  # the same, searching on the switch graph
    python scripts/bench_twin.py kept --model llama-1k      # RSS an output holds after its session is gone

Models are those of ``scripts/scale_models.py`` under ``--dir`` (build them with
``scripts/bench_scale.py`` or ``scripts/scale_models.py`` first). Peak RSS is the process's VmHWM;
``phases`` samples VmRSS every 20 ms and keeps the largest per phase of the report's clock.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = "/tmp/onnx-precision-scale"


def status_gb(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 2**20


def chain(mode: str, order: str) -> None:
    """40 Relu+Add pairs on 2048x2048 tensors; 'twin' adds a renamed copy and a Sub+ReduceMax per
    pair, its nodes either after the first copy ('twin') or interleaved with it ('interleaved')."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, layers = 2048, 40
    nodes: dict[str, list] = {"": [], "_c": []}
    for suffix in nodes:
        prev = "x"
        for i in range(layers):
            nodes[suffix] += [helper.make_node("Relu", [prev], [f"r{i}{suffix}"]),
                              helper.make_node("Add", [f"r{i}{suffix}", "one"], [f"t{i}{suffix}"])]
            prev = f"t{i}{suffix}"
    compare = [[helper.make_node("Sub", [f"t{i}_c", f"t{i}"], [f"d{i}"]),
                helper.make_node("ReduceMax", [f"d{i}"], [f"e{i}"], keepdims=0)] for i in range(layers)]
    outputs = [helper.make_tensor_value_info(f"t{layers - 1}", TensorProto.FLOAT, None)]
    if mode == "single":
        graph_nodes = nodes[""]
    elif mode == "twin":
        graph_nodes = nodes[""] + nodes["_c"] + [x for pair in compare for x in pair]
    else:
        graph_nodes = [x for i in range(layers)
                       for x in nodes[""][2 * i:2 * i + 2] + nodes["_c"][2 * i:2 * i + 2] + compare[i]]
    if mode != "single":
        outputs += [helper.make_tensor_value_info(f"e{i}", TensorProto.FLOAT, []) for i in range(layers)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph(graph_nodes, "chain", [x], outputs,
                              [numpy_helper.from_array(np.array(1, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.execution_order = getattr(ort.ExecutionOrder, order)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((n, n), np.float32)})
    print(f"{mode:12} {order:15} peak {status_gb('VmHWM'):.2f} GB")


def ops() -> None:
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    size = 1 << 25
    x = np.random.default_rng(0).normal(size=size).astype(np.float32)
    x[::7] = 0
    consts = [numpy_helper.from_array(np.array(v, np.float32), k)
              for k, v in (("zero", 0.0), ("inf", np.inf), ("big", np.finfo(np.float32).max))]
    node = helper.make_node
    cases = {
        "Abs, ReduceMax": [node("Abs", ["x"], ["a"]), node("ReduceMax", ["a"], ["y"], keepdims=1)],
        "ReduceSum": [node("ReduceSum", ["x"], ["y"], keepdims=1)],
        "Mul 0, ReduceSum": [node("Mul", ["x", "zero"], ["m"]), node("ReduceSum", ["m"], ["y"], keepdims=1)],
        "least nonzero by Where": [
            node("Abs", ["x"], ["a"]), node("Greater", ["a", "zero"], ["p"]),
            node("Where", ["p", "a", "inf"], ["w"]), node("ReduceMin", ["w"], ["y"], keepdims=1)],
        "least nonzero by arithmetic": [
            node("Abs", ["x"], ["a"]), node("Equal", ["a", "zero"], ["p"]),
            node("Cast", ["p"], ["f"], to=TensorProto.FLOAT), node("Mul", ["f", "big"], ["b"]),
            node("Add", ["a", "b"], ["w"]), node("ReduceMin", ["w"], ["y"], keepdims=1)],
    }
    for name, nodes in cases.items():
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3  # not every case uses every constant
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, {"x": x})
        start = time.perf_counter()
        for _ in range(3):
            session.run(None, {"x": x})
        print(f"{name:30} {(time.perf_counter() - start) / 3 * 1e3:7.1f} ms over {size} floats")


def load(model_dir: str):
    from onnx_precision.context import load_model
    from onnx_precision.data import SampleSpec, load_samples
    ctx = load_model(os.path.join(model_dir, "model.onnx"))
    return ctx, load_samples(ctx.model, SampleSpec(os.path.join(model_dir, "sample.npz")))


def twin(model_dir: str, profile: bool) -> None:
    from onnx_precision import policy
    from onnx_precision.oracle import Emulator
    from onnx_precision.oracle import emulator as plans
    ctx, samples = load(model_dir)
    plan = policy.resolve(ctx, ctx.all_low_plan())
    ctx.typing  # noqa: B018  (typing is not the twin's cost)
    builds: list[float] = []
    make, options_of = plans.make_session, plans.session_options

    def timed_make(*args, **kwargs):
        start = time.perf_counter()
        session = make(*args, **kwargs)
        builds.append(time.perf_counter() - start)
        return session

    def profiled_options(threads=None, arena=True):
        options = options_of(threads, arena)
        options.enable_profiling = profile
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(), "bench_twin")
        return options

    plans.make_session, plans.session_options = timed_make, profiled_options
    start = time.perf_counter()
    session = Emulator(ctx).twin(plan, samples.feeds[0])
    total = time.perf_counter() - start
    assert session is not None
    start = time.perf_counter()
    session.run(samples.feeds[0])
    run = time.perf_counter() - start
    print(f"twin of the all-FP16 plan: {len(session.twin.model.graph.node)} nodes "
          f"({len(ctx.model.graph.node)} in the model), {len(session.twin.whole)} tensors fetched whole, "
          f"{len(session.twin.summaries)} summarised; built in {total:.1f} s (onnxruntime {builds[0]:.1f} s, "
          f"Python {total - builds[0]:.1f} s); one run {run:.1f} s")
    if profile:
        per_op: dict[str, float] = {}
        with open(session.session.end_profiling()) as f:
            for event in json.load(f):
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    op = event["args"]["op_name"]
                    per_op[op] = per_op.get(op, 0.0) + event["dur"] / 1e6
        for op, seconds in sorted(per_op.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {op:16} {seconds:7.2f} s")


def phases(model_dir: str, switch: bool) -> None:
    from onnx_precision import costs
    from onnx_precision.cli import main
    from onnx_precision.oracle import Emulator
    if switch:
        Emulator._rebuilding_pays = lambda self: False  # type: ignore[method-assign]
    peaks: dict[str, float] = {}
    current = ["load"]

    def poll() -> None:
        while True:
            peaks[current[0]] = max(peaks.get(current[0], 0.0), status_gb("VmRSS"))
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    phase = costs.Clock.phase

    @contextlib.contextmanager
    def named(self, name):
        current[0] = name
        with phase(self, name) as counts:
            yield counts
        current[0] = f"after {name}"

    costs.Clock.phase = named  # type: ignore[method-assign]
    out = os.path.join(tempfile.mkdtemp(), "auto.onnx")
    rc = main(["convert", os.path.join(model_dir, "model.onnx"), "-o", out, "-q",
               "--inputs", os.path.join(model_dir, "sample.npz")])
    search = "switch graph" if switch else "as Emulator.searching() chooses"
    print(f"convert rc {rc}, search {search}; peak RSS {status_gb('VmHWM'):.2f} GB; per phase (GB):")
    print("  " + ", ".join(f"{k} {v:.2f}" for k, v in peaks.items()))


def kept(model_dir: str) -> None:
    import numpy as np

    from onnx_precision.oracle import Emulator
    ctx, samples = load(model_dir)
    for copy in (False, True):
        emulator = Emulator(ctx)
        out = emulator.run(None, samples.feeds[0])
        if copy:
            out = {k: np.array(v, copy=True) for k, v in out.items()}
        emulator._baked.clear()
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        size = sum(v.nbytes for v in out.values()) / 2**30
        held = status_gb("RssAnon")
        del out
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print(f"outputs {'copied' if copy else 'as returned'}: {size:.2f} GB of outputs, anonymous RSS with "
              f"them after the session is gone {held:.2f} GB, without them {status_gb('RssAnon'):.2f} GB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["order", "ops", "twin", "phases", "kept", "_chain"])
    parser.add_argument("--model", default="lnstack")
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--profile", action="store_true", help="twin: seconds per op type in the run")
    parser.add_argument("--switch", action="store_true", help="phases: search on the switch graph")
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model_dir = os.path.join(args.dir, args.model)
    if args.what == "order":
        for mode, order in (("single", "DEFAULT"), ("twin", "DEFAULT"), ("twin", "PRIORITY_BASED"),
                            ("interleaved", "DEFAULT"), ("interleaved", "PRIORITY_BASED")):
            subprocess.run([sys.executable, __file__, "_chain", mode, order], check=True)
    elif args.what == "_chain":
        chain(*args.args)
    elif args.what == "ops":
        ops()
    elif args.what == "twin":
        twin(model_dir, args.profile)
    elif args.what == "phases":
        phases(model_dir, args.switch)
    else:
        kept(model_dir)


if __name__ == "__main__":
    main()
