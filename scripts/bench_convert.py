"""Conversion time and peak memory on a synthetic transformer with ~2.5 GB of external weights.

    python scripts/bench_convert.py [--layers 13] [--width 2048] [--dir /tmp] [--keep]

Builds a pre-LayerNorm transformer (attention + MLP blocks, FP32, weights in an external data
file written chunk by chunk), then runs each of these in a fresh child process, timing it and
reading its peak RSS from the child's own ``VmHWM`` (see ``REPORT_PEAK`` for why not ru_maxrss):

- ``onnx-precision``: ``onnx_precision.convert.convert(..., ConvertOptions(mode="all-fp16"))``
  (before convert() exists: load_model + rewriter.rewrite + save_model, labelled so);
- ``onnx load+save``: ``onnx.load`` then ``onnx.save`` with external data: the floor any tool
  that holds the model in memory pays;
- ``onnxconverter-common``: ``convert_float_to_float16_model_path`` then ``onnx.save`` with
  external data.

The data file is read once before timing so every run sees a warm page cache. Targets for
onnx-precision: peak RSS <= 1.5x the model's size, time <= 2x onnx load+save.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

SEQ = 16


class WeightWriter:
    """Appends float32 weights to one data file and returns external TensorProtos for them."""

    def __init__(self, path: str, location: str):
        self.file = open(path, "wb")
        self.location = location
        # Weights are windows of one random pool: distinct values without 2.5 GB of RNG calls. Like
        # trained weights, a few values (about 20 in the pool) are tiny enough to flush to zero in
        # FP16; that must not keep their MatMuls in FP32.
        self.pool = np.random.default_rng(0).standard_normal(1 << 24, dtype=np.float32) * np.float32(0.02)
        self.cursor = 0
        self.tensors: list[onnx.TensorProto] = []

    def add(self, name: str, shape: tuple[int, ...], value: float | None = None) -> str:
        count = int(np.prod(shape))
        offset = self.file.tell()
        written = 0
        while written < count:
            n = min(count - written, self.pool.size)
            if value is None:
                start = self.cursor % (self.pool.size - n + 1)
                self.pool[start:start + n].tofile(self.file)
                self.cursor += 7919
            else:
                np.full(n, value, dtype=np.float32).tofile(self.file)
            written += n
        t = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape),
                             data_location=TensorProto.EXTERNAL)
        for key, val in (("location", self.location), ("offset", str(offset)), ("length", str(count * 4))):
            t.external_data.add(key=key, value=val)
        self.tensors.append(t)
        return name

    def close(self) -> None:
        self.file.close()


def block(nodes: list, w: WeightWriter, x: str, i: int, width: int) -> str:
    """One pre-LN transformer block (single-head attention, sigmoid-GELU MLP); returns its output."""
    p = f"l{i}_"
    ffn = 4 * width

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [p + name], name=p + name, **attrs))
        return p + name

    def linear(inp: str, name: str, n_in: int, n_out: int) -> str:
        mm = node("MatMul", [inp, w.add(p + name + "_w", (n_in, n_out))], name + "_mm")
        return node("Add", [mm, w.add(p + name + "_b", (n_out,))], name)

    ln1 = node("LayerNormalization",
               [x, w.add(p + "ln1_g", (width,), 1.0), w.add(p + "ln1_b", (width,), 0.0)], "ln1", axis=-1)
    q, k, v = (linear(ln1, name, width, width) for name in ("q", "k", "v"))
    kt = node("Transpose", [k], "kt", perm=[1, 0])
    scores = node("MatMul", [q, kt], "scores")
    scaled = node("Mul", [scores, w.add(p + "scale", (), 1.0 / np.sqrt(width))], "scaled")
    attn = node("Softmax", [scaled], "attn", axis=-1)
    ctx = node("MatMul", [attn, v], "ctx")
    h = node("Add", [x, linear(ctx, "o", width, width)], "res1")
    ln2 = node("LayerNormalization",
               [h, w.add(p + "ln2_g", (width,), 1.0), w.add(p + "ln2_b", (width,), 0.0)], "ln2", axis=-1)
    up = linear(ln2, "up", width, ffn)
    gate = node("Sigmoid", [node("Mul", [up, w.add(p + "gelu_k", (), 1.702)], "gelu_in")], "gelu_gate")
    act = node("Mul", [up, gate], "gelu")
    return node("Add", [h, linear(act, "down", ffn, width)], "res2")


def build(directory: str, layers: int, width: int) -> tuple[str, int]:
    """Write the model and its data file; return the model path and the weights' size in bytes."""
    location = "transformer.onnx.data"
    w = WeightWriter(os.path.join(directory, location), location)
    nodes: list = []
    x = "x"
    for i in range(layers):
        x = block(nodes, w, x, i, width)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    w.close()
    graph = helper.make_graph(nodes, "transformer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SEQ, width])],
                              w.tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "transformer.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path, os.path.getsize(os.path.join(directory, location))


OURS = """
try:
    from onnx_precision.convert import ConvertOptions, convert
except ImportError:
    convert = None
if convert is not None:
    convert(src, out, ConvertOptions(mode="all-fp16"))
else:
    print("label: onnx-precision (rewrite+save)")
    from onnx_precision import model_io, rewriter
    from onnx_precision.plan import Precision, Reason, uniform_plan
    loaded = model_io.load_model(src)
    names = [r.name for r in model_io.walk_nodes(loaded.model.graph)]
    plan = uniform_plan(names, Precision.FP16, Reason("default", "all-fp16"))
    result = rewriter.rewrite(loaded.model, plan, loaded.base_dir)
    model_io.save_model(result.model, out, source_dir=loaded.base_dir, input_paths=(src,))
"""

ONNX_LOAD_SAVE = """
import os, onnx
model = onnx.load(src)
onnx.save(model, out, save_as_external_data=True, location=os.path.basename(out) + ".data")
"""

CONVERTER_COMMON = """
import os, onnx
from onnxconverter_common.float16 import convert_float_to_float16_model_path
model = convert_float_to_float16_model_path(src, keep_io_types=True)
onnx.save(model, out, save_as_external_data=True, location=os.path.basename(out) + ".data")
"""


@dataclass(frozen=True)
class Run:
    label: str
    seconds: float
    peak_bytes: int
    output_bytes: int
    error: str


# Each child reports its own peak RSS (VmHWM, Linux). ru_maxrss from wait4 or RUSAGE_CHILDREN is
# not used: Linux carries the parent's RSS at fork into the child's ru_maxrss across exec, so a
# child of a 2 GB parent "peaks" at 2 GB however little it uses.
REPORT_PEAK = """
import atexit
def _report_peak():
    with open("/proc/self/status") as f:
        print("peak_kib:", next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")))
atexit.register(_report_peak)
"""


def run_child(label: str, code: str, src: str, out: str) -> Run:
    """Run ``code`` in a fresh interpreter, timing it; the child prints its own peak RSS."""
    script = REPORT_PEAK + f"src, out = {src!r}, {out!r}\n" + textwrap.dedent(code)
    start = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    peak = 0
    for line in child.stdout.splitlines():
        if line.startswith("label: "):
            label = line[len("label: "):]
        elif line.startswith("peak_kib: "):
            peak = 1024 * int(line.split()[1])
    output = sum(os.path.getsize(p) for p in (out, out + ".data") if os.path.exists(p))
    error = "" if child.returncode == 0 else (child.stderr.strip().splitlines() or ["failed"])[-1]
    return Run(label, seconds, peak, output, error)


def warm_cache(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 26):
            pass


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=13)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--dir", default=None, help="where to build the model (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the model and outputs")
    parser.add_argument("--only", action="append", choices=["ours", "onnx", "occ"],
                        help="run only these (repeatable; default all)")
    args = parser.parse_args(argv)

    directory = tempfile.mkdtemp(prefix="bench_convert_", dir=args.dir)
    try:
        t0 = time.perf_counter()
        src, model_bytes = build(directory, args.layers, args.width)
        print(f"synthetic transformer: {args.layers} layers, width {args.width}, "
              f"{gib(model_bytes)} GiB of FP32 weights in external data "
              f"(built in {time.perf_counter() - t0:.1f} s)")
        candidates = [("ours", "onnx-precision", OURS), ("onnx", "onnx load+save", ONNX_LOAD_SAVE),
                      ("occ", "onnxconverter-common", CONVERTER_COMMON)]
        runs: dict[str, Run] = {}
        for key, label, code in candidates:
            if args.only and key not in args.only:
                continue
            warm_cache(os.path.join(directory, "transformer.onnx.data"))
            out = os.path.join(directory, f"out_{key}.onnx")
            runs[key] = run_child(label, code, src, out)
            if not args.keep:
                for p in (out, out + ".data"):
                    if os.path.exists(p):
                        os.unlink(p)
        print(f"{'tool':<36} {'time s':>8} {'peak RSS GiB':>13} {'RSS/model':>10} {'output GiB':>11}")
        for run in runs.values():
            print(f"{run.label:<36} {run.seconds:>8.1f} {gib(run.peak_bytes):>13} "
                  f"{run.peak_bytes / model_bytes:>9.2f}x {gib(run.output_bytes):>11}"
                  + (f"  FAILED: {run.error}" if run.error else ""))
        ours, base = runs.get("ours"), runs.get("onnx")
        if ours and base and not ours.error and not base.error:
            rss_ok = ours.peak_bytes <= 1.5 * model_bytes
            time_ok = ours.seconds <= 2 * base.seconds
            print(f"target peak RSS <= 1.5x model: {ours.peak_bytes / model_bytes:.2f}x "
                  f"{'met' if rss_ok else 'MISSED'}; target time <= 2x onnx load+save: "
                  f"{ours.seconds / base.seconds:.2f}x {'met' if time_ok else 'MISSED'}")
        return 0 if all(not r.error for r in runs.values()) else 1
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
