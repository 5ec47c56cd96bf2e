"""Benchmark ``analyze`` with data against two plain onnxruntime runs of the same model.

    python scripts/bench_analyze.py                       # the 12-layer test transformer, then a wider one
    python scripts/bench_analyze.py --seq 128 --d-model 256 --ff 1024

For each configuration it builds the transformer of ``models.transformer`` (12 decomposed-LayerNorm
encoder layers, two outlier layers), writes it and its sample to a temporary directory, and runs
each measurement in a fresh child process so peak memory (max RSS) is not shared:

* ``plain``: one onnxruntime CPU session (default options) built and run twice on the sample;
  the time covers session creation and both runs, like a user's two ``polygraphy run``s minus
  process start-up. ``plain (runs only)`` is the two runs without the session creation.
* ``analyze``: :func:`onnx_precision.analysis.analyze` with the sample (load, typing, the one
  emulation session, reference + layerwise + all-FP16 output runs, rules, rows).

Prints one table; the target is analyze within 4x of plain. Times are the best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIGS = [dict(seq=32, d_model=64, ff=256), dict(seq=256, d_model=256, ff=1024)]


def child_plain(model: str, data: str) -> dict:
    import numpy as np
    import onnxruntime as ort

    feed = dict(np.load(data))
    start = time.perf_counter()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    built = time.perf_counter()
    for _ in range(2):
        session.run(None, feed)
    end = time.perf_counter()
    return {"seconds": end - start, "runs_seconds": end - built}


def child_analyze(model: str, data: str) -> dict:
    from onnx_precision.analysis import analyze
    from onnx_precision.data import SampleSpec

    start = time.perf_counter()
    result = analyze(model, SampleSpec(inputs=data))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "phases": dict(result.seconds), "problems": [r.node for r in result.problems],
            "sessions": result.sessions_built, "probes": result.probes_run}


def run_child(kind: str, model: str, data: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, model, data], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_example(directory: str, layers: int, seq: int, d_model: int, ff: int) -> tuple[str, str, int, int]:
    import onnx

    import models
    from models.generate import npz_bytes

    example = models.transformer(layers=layers, d_model=d_model, seq=seq, ff=ff)
    model, data = os.path.join(directory, "transformer.onnx"), os.path.join(directory, "transformer.npz")
    onnx.save(example.model, model)
    with open(data, "wb") as f:
        f.write(npz_bytes(example.feeds[0]))
    return model, data, len(example.model.graph.node), os.path.getsize(model)


def best(kind: str, model: str, data: str, repeat: int) -> dict:
    runs = [run_child(kind, model, data) for _ in range(repeat)]
    fastest = min(runs, key=lambda r: r["seconds"])
    fastest["max_rss_mb"] = max(r["max_rss_mb"] for r in runs)
    return fastest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("KIND", "MODEL", "DATA"), help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--ff", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        kind, model, data = args.child
        result = child_plain(model, data) if kind == "plain" else child_analyze(model, data)
        result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return 0
    configs = CONFIGS
    if args.seq or args.d_model or args.ff:
        configs = [dict(seq=args.seq or 32, d_model=args.d_model or 64, ff=args.ff or 256)]
    print(f"{'model':34} {'nodes':>5} {'MB':>6} {'plain s':>8} {'runs s':>7} {'analyze s':>9} "
          f"{'ratio':>6} {'plain RSS':>9} {'analyze RSS':>11} {'mem ratio':>9}  culprits found")
    for cfg in configs:
        with tempfile.TemporaryDirectory() as tmp:
            model, data, nodes, size = write_example(tmp, args.layers, **cfg)
            plain = best("plain", model, data, args.repeat)
            ours = best("analyze", model, data, args.repeat)
        name = f"transformer L{args.layers} seq{cfg['seq']} d{cfg['d_model']} ff{cfg['ff']}"
        print(f"{name:34} {nodes:5d} {size / 2**20:6.1f} {plain['seconds']:8.3f} "
              f"{plain['runs_seconds']:7.3f} {ours['seconds']:9.3f} "
              f"{ours['seconds'] / plain['seconds']:6.2f} "
              f"{plain['max_rss_mb']:7.0f}MB {ours['max_rss_mb']:9.0f}MB "
              f"{ours['max_rss_mb'] / plain['max_rss_mb']:9.2f}  {', '.join(ours['problems'])}")
        phases = ", ".join(f"{k} {v:.3f}s" for k, v in ours["phases"].items())
        print(f"{'':34} analyze phases: {phases}; sessions {ours['sessions']}, runs {ours['probes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
