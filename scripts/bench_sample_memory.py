"""What a run holds for each byte of its samples: the figure behind data.files.SAMPLE_MEMORY_FACTOR.

    python scripts/bench_sample_memory.py 0 64 128            # MiB of samples, one .npz of one feed each
    python scripts/bench_sample_memory.py 128 --feeds 8       # the same bytes as a directory of 8 feeds

The model is a two-node MLP (y = relu(x @ w), x [N, 4]: each node's output as large as its input), the
samples uniform floats (nothing deflates them away). Each of ``convert -q`` (auto), ``check -q`` of what
it wrote and ``analyze`` runs in a fresh interpreter, which prints its own peak (``VmHWM`` of
/proc/self/status) as it ends; 0 MiB is the run alone (an empty feed).

Measured on this 2-core machine (peaks of convert, check, analyze): 0 MiB 91, 89, 90 MiB; one feed of
64 MiB 741, 715, 721 MiB; of 128 MiB 1383, 1316, 1322 MiB (about 10x the samples over the run's own, 11x
in all); 64 MiB as 4 feeds 510, 551, 448 MiB; 128 MiB as 8 feeds 806, 819, 640 MiB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

_CHILD = """
import sys
from onnx_precision.cli import main
code = main(sys.argv[1:])
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1]
print("PEAK", code, peak, file=sys.stderr)
"""


def _mlp(directory: str) -> str:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [onnx.numpy_helper.from_array(np.full((4, 4), 0.25, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "m.onnx")
    onnx.save(model, path)
    return path


def _peak(argv: list[str]) -> tuple[int, int]:
    """(exit status, peak bytes) of the CLI run ``argv`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True)
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("PEAK ")), None)
    if line is None:
        raise SystemExit(f"{argv[0]} gave no peak: {done.stderr[-2000:]}")
    _, code, kib = line.split()
    return int(code), int(kib) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mib", type=int, nargs="+", help="MiB of samples per measurement")
    parser.add_argument("--feeds", type=int, default=1, help="split them into this many .npz (default 1)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as work:
        model = _mlp(work)
        for mib in args.mib:
            data = os.path.join(work, f"samples{mib}")
            os.mkdir(data)
            rows = (mib << 20) // args.feeds // 16
            for i in range(args.feeds):
                np.savez(os.path.join(data, f"{i}.npz"), x=rng.random((rows, 4), dtype=np.float32))
            out = os.path.join(work, f"o{mib}.onnx")
            for argv in (["convert", model, "-o", out, "--inputs", data, "-q"],
                         ["check", model, out, "--inputs", data, "-q"], ["analyze", model, "--inputs", data]):
                code, peak = _peak(argv)
                ratio = f"{peak / (mib << 20):.1f}x the samples" if mib else "the run alone"
                print(f"{argv[0]:8s} {mib:5d} MiB in {args.feeds} feed(s): exit {code}, "
                      f"peak {peak >> 20} MiB ({ratio})", flush=True)


if __name__ == "__main__":
    main()
