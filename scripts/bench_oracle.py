"""Cost of the emulation oracle against plain onnxruntime runs of the FP32 model.

    python scripts/bench_oracle.py [--layers 12] [--d-model 256] [--seq 128] [--repeat 10] [--group-size N]

Builds the BERT-style transformer of models/ (decomposed LayerNorm and Gelu, >= 500 nodes), then
prints, as the best of ``--repeat`` runs (the least disturbed by other processes):
  * one plain FP32 run (onnxruntime defaults, i.e. ORT_ENABLE_ALL; and ORT_DISABLE_ALL, the level
    the oracle uses),
  * one probe of the switch-graph session (all-FP32, all-FP16, a half-and-half plan), for a session
    that also exposes every intermediate (fetching only the outputs) and one that does not,
  * one reference run fetching every intermediate and reducing it to TensorStats,
  * the time to build each session, sessions built, probes run, and peak RSS.
Target (issue 4): a probe costs at most 2x one plain FP32 run. ``--group-size`` overrides
oracle.switch_builder.GROUP_SIZE (1: one If per node, no groups) to compare group sizes.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import time
from typing import Callable

import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import transformer  # noqa: E402
from onnx_precision.context import ModelContext  # noqa: E402
from onnx_precision.graph import name_nodes, walk_nodes  # noqa: E402
from onnx_precision.oracle import EmulationSession, reference_stats  # noqa: E402
from onnx_precision.oracle.switch_builder import GROUP_SIZE  # noqa: E402
from onnx_precision.plan import Precision, Reason, uniform_plan  # noqa: E402


def best_seconds(fns: dict, repeat: int) -> dict:
    """Best CPU time (this process, all threads) of each callable over ``repeat`` interleaved rounds.

    Other processes share these cores: CPU time does not count the time slices they take, and
    interleaving gives every configuration the same disturbance; the least disturbed run counts.
    """
    for fn in fns.values():
        fn()  # warm-up
    best = {label: float("inf") for label in fns}
    for _ in range(repeat):
        for label, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[label] = min(best[label], time.process_time() - t0)
    return best


def plain_session(model, level, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1,
                        help="onnxruntime intra-op threads for every session "
                             "(default 1: steadier on a shared machine; 0: all cores)")
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE,
                        help="consecutive nodes per switch group (default %(default)s; 1: none)")
    args = parser.parse_args()

    ex = transformer(layers=args.layers, d_model=args.d_model, seq=args.seq, ff=4 * args.d_model)
    model = ex.model
    name_nodes(model)
    feed = ex.feeds[0]
    names = [r.name for r in walk_nodes(model.graph)]
    print(f"model: transformer, {args.layers} layers, d_model {args.d_model}, seq {args.seq}: "
          f"{len(names)} nodes; onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, "
          f"{args.threads or 'all'} intra-op thread(s), group size {args.group_size}")

    timed: dict[str, Callable[[], object]] = {}
    levels = (("plain FP32 run, ORT_ENABLE_ALL (default)", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
              ("plain FP32 run, ORT_DISABLE_ALL", ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
    for label, level in levels:
        session = plain_session(model, level, args.threads)
        timed[label] = functools.partial(session.run, None, feed)

    all16 = uniform_plan(names, Precision.FP16, Reason("default", "bench"))
    half = all16.with_fp32(names[::2])
    builds = []
    sessions = []
    for capture in (True, False):
        t0 = time.perf_counter()
        emu = EmulationSession(ModelContext.of(model), capture_intermediates=capture, threads=args.threads,
                               group_size=args.group_size)
        tag = "capturing session" if capture else "outputs-only session"
        builds.append((f"build {tag} ({len(emu.switch_model.switches)} switches, "
                       f"{len(emu.switch_model.model.graph.node)} nodes)", time.perf_counter() - t0))
        sessions.append((tag, emu))
        for plan_label, plan in (("all FP32", None), ("all FP16", all16), ("half FP16", half)):
            timed[f"probe, {tag}, {plan_label}"] = functools.partial(emu.run, plan, feed)
        if capture:
            timed[f"reference run + TensorStats of {len(emu.intermediates)} intermediates"] = \
                functools.partial(reference_stats, emu, [feed])
    rows = list(best_seconds(timed, args.repeat).items()) + builds
    base = rows[0][1]
    for tag, emu in sessions:
        print(f"{tag}: sessions_built={emu.sessions_built} probes_run={emu.probes_run}")

    width = max(len(r[0]) for r in rows)
    print(f"{'measurement (builds: wall time)':<{width}}  {'CPU s':>9}  {'x plain':>7}")
    for label, seconds in rows:
        ratio = f"{seconds / base:7.2f}" if not label.startswith("build") else ""
        print(f"{label:<{width}}  {seconds:9.4f}  {ratio}")
    print(f"peak RSS: {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
