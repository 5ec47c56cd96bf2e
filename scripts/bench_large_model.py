"""A model over protobuf's 2 GB, converted with its weights streamed: peak memory, time and output checked.

    python scripts/bench_large_model.py              # the 2.2 GB model (10 GB of free disk in --dir)
    python scripts/bench_large_model.py --scale 16   # the same at 1/16, as tests/test_large_model.py runs it

The model is a chain of LAYERS MatMuls whose WIDTH x WIDTH float32 weights (64 MiB each, 2.06 GiB in
all) numpy writes straight into an external data file, one at a time, so the writer never holds the
model. Each conversion runs in a fresh interpreter that first converts a two-layer copy of the model
(imports, onnxruntime's set-up), then resets its peak RSS (``/proc/self/clear_refs``) and converts the
model: what the conversion *held* is its peak RSS over its RSS just before.

- ``all-fp16``, ``convert(src, out, ConvertOptions(mode="all-fp16"))``, holds under half the model: a
  converter that held the weights (1x), their FP16 copy (0.5x) or the output serialised in memory
  would not. Its output keeps its weights external, holds the exact FP16 rounding of the source
  weights, passes onnx's checker (by path, data file included) and runs in onnxruntime within cosine
  0.999 of the FP32 chain.
- ``auto``, ``onnx-precision convert`` (the default mode), runs the model (the FP32 reference, the
  emulated probes, the verification of the written file), so it holds the source weights once,
  memory-mapped by onnxruntime; a second copy anywhere (rounded weights precomputed, an FP32 copy of
  the written FP16 weights, onnxruntime's prepacked weights) would pass 1.3x the model. Its report says
  passed, verified by emulation, every MatMul FP16, every weight external.

``--scale N`` (a power of 4) divides the width by sqrt(N), so the model's bytes by N, and divides by N
every byte threshold of the package that stands for protobuf's limit or for memory (:data:`SCALED`);
the child then refuses to serialise a ModelProto or GraphProto over the scaled limit, as protobuf
refuses one over 2 GB. So the same paths run as at full size: the model over the limit as read and
its FP16 output under it, every weight streamed in 4 chunks, the written model too large for the
default load to overlap the verification, and no proto serialised past the limit; at 1/N of the
bytes. Tensor-level thresholds (what stays inline, what is aligned, the fast cast's minimum) are not
scaled: up to N = 16 every tensor is on the same side of them as at full size.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS = 33
WIDTH = 4096
MODEL_BYTES = LAYERS * WIDTH * WIDTH * 4
NEEDED_FREE = 10 * 1024**3  # the model, both outputs, and room to spare
PROTOBUF_LIMIT = 2**31 - 1
MODES = ("all-fp16", "auto")
BOUNDS = {"all-fp16": 0.5, "auto": 1.3}  # what a conversion may hold, as a share of the model's bytes

# (module, constant): the package's byte thresholds that stand for protobuf's 2 GB or for memory
SCALED = (("onnx_precision.storage.saving", "PROTO_LIMIT"),
          ("onnx_precision.oracle.switch_builder", "PROTO_LIMIT"),
          ("onnx_precision.convert.verification", "OVERLAPPED_LOAD_BYTES"),
          ("onnx_precision.oracle.emulator", "MIN_CAPTURE_BYTES"),
          ("onnx_precision.storage.external_data", "CHUNK_BYTES"))

assert MODEL_BYTES > PROTOBUF_LIMIT


def width_at(scale: int) -> int:
    root = math.isqrt(scale)
    if root * root != scale or WIDTH % root:
        raise ValueError(f"--scale {scale}: not a power of 4 up to {WIDTH**2}")
    return WIDTH // root


def model_bytes(scale: int) -> int:
    return LAYERS * width_at(scale) ** 2 * 4


def base_matrix(width: int) -> np.ndarray:
    # Deviations of 1/sqrt(width): each layer keeps the activations' scale. No magnitude under 1e-4:
    # FP16 would flush it to zero, and the plan would keep the node FP32.
    values = np.random.default_rng(7).standard_normal((width, width), dtype=np.float32)
    values /= np.float32(math.sqrt(width))
    return np.copysign(np.abs(values) + np.float32(1e-4), values)


def weight(base: np.ndarray, i: int) -> np.ndarray:
    # A rolled copy of one random matrix: distinct weights without generating 2 GB of randoms.
    return np.roll(base, i, axis=1)


def write_model(directory: str, width: int, layers: int = LAYERS) -> str:
    """The MatMul chain, its weights streamed into ``weights.bin``; returns the model path."""
    base = base_matrix(width)
    initializers = []
    with open(os.path.join(directory, "weights.bin"), "wb") as f:
        for i in range(layers):
            offset = f.tell()
            weight(base, i).tofile(f)
            t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[width, width],
                                 data_location=TensorProto.EXTERNAL)
            for key, value in (("location", "weights.bin"), ("offset", str(offset)),
                               ("length", str(width * width * 4))):
                t.external_data.add(key=key, value=value)
            initializers.append(t)
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"],
                              ["y" if i == layers - 1 else f"h{i}"], name=f"mm{i}") for i in range(layers)]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "big.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def differences(scale: int) -> list[str]:
    """Where the model at 1/``scale`` is on another side of one of the package's thresholds than at full
    size, the scaled thresholds divided by ``scale`` (none up to 16)."""
    from onnx_precision.convert import verification
    from onnx_precision.oracle import emulator
    from onnx_precision.storage import external_data, fast_cast, saving

    def sides(s: int) -> dict[str, object]:
        model, chunk, weight_bytes = model_bytes(s), external_data.CHUNK_BYTES // s, width_at(s) ** 2 * 4
        return {"over protobuf's limit as read": model > saving.PROTO_LIMIT // s,
                "over it as written (FP16)": model // 2 > saving.PROTO_LIMIT // s,
                "too large to load while the verification runs":
                    model // 2 >= verification.OVERLAPPED_LOAD_BYTES // s,
                "a capture budget of a quarter of the weights": model // 4 > emulator.MIN_CAPTURE_BYTES // s,
                "chunks per weight": -(-weight_bytes // chunk),
                "a chunk cast by the fast cast": chunk // 4 >= fast_cast.MIN_FAST_ELEMENTS,
                "a written FP16 weight aligned": weight_bytes // 2 > saving.ALIGN_THRESHOLD}

    full, scaled = sides(1), sides(scale)
    return [f"{what}: {full[what]} at full size, {scaled[what]} at 1/{scale}"
            for what in full if full[what] != scaled[what]]


# --- the child: one conversion, its peak RSS its own ---------------------------------------------------

def scale_limits(scale: int) -> None:
    """Divide :data:`SCALED` by ``scale``, and refuse to serialise a ModelProto or GraphProto over
    protobuf's limit divided by it (protobuf itself refuses one over 2 GB)."""
    for module, name in SCALED:
        imported = importlib.import_module(module)
        setattr(imported, name, getattr(imported, name) // scale)
    limit = PROTOBUF_LIMIT // scale
    for cls in (onnx.ModelProto, onnx.GraphProto):
        def guarded(self, *args, _serialize=cls.SerializeToString, **kwargs):
            size = self.ByteSize()
            if size > limit:
                raise ValueError(f"{type(self).__name__} of {size} bytes: over protobuf's 2 GB "
                                 f"at 1/{scale} ({limit} bytes)")
            return _serialize(self, *args, **kwargs)

        cls.SerializeToString = guarded


def _converter(mode: str) -> Callable[[str, str], None]:
    if mode == "all-fp16":
        from onnx_precision.convert import ConvertOptions, convert

        def all_fp16(src: str, out: str) -> None:
            convert(src, out, ConvertOptions(mode="all-fp16"))

        return all_fp16

    from onnx_precision.cli import main

    def auto(src: str, out: str) -> None:
        code = main(["convert", src, "-o", out, "--report", out + ".json", "-q"])
        if code != 0:
            raise SystemExit(f"convert exited {code}")

    return auto


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return 1024 * next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def child(mode: str, src: str, out: str, scale: int) -> None:
    """Convert a two-layer copy of the model, reset the peak RSS, convert ``src``; print the figures
    as one JSON line (peak and held null where /proc/self/clear_refs is not there: not Linux)."""
    if scale != 1:
        scale_limits(scale)
    convert = _converter(mode)
    with tempfile.TemporaryDirectory() as warm:
        convert(write_model(warm, 16, layers=2), os.path.join(warm, "out.onnx"))
    gc.collect()
    measured = os.path.exists("/proc/self/clear_refs")
    before = 0
    if measured:
        ctypes.CDLL(None).malloc_trim(0)  # the heap the warm-up freed: not RSS the conversion can reuse
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        before = _status_bytes("VmRSS")
    start = time.perf_counter()
    convert(src, out)
    seconds = time.perf_counter() - start
    peak = _status_bytes("VmHWM") if measured else None
    print(json.dumps({"seconds": seconds, "peak": peak, "held": None if peak is None else peak - before}))


# --- the parent ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One conversion in its own interpreter."""
    seconds: float
    peak: int | None  # bytes: the child's peak RSS during the conversion (None: not measured)
    held: int | None  # bytes: that peak over the child's RSS just before the conversion


def convert_in_child(mode: str, src: str, out: str, scale: int = 1) -> Run:
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import bench_large_model; "
            f"bench_large_model.child({mode!r}, {src!r}, {out!r}, {scale})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} conversion exited {done.returncode}:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Run(figures["seconds"], figures["peak"], figures["held"])


def memory_problems(mode: str, run: Run, scale: int) -> list[str]:
    """What ``run`` held past its bound (none when not measured)."""
    limit = BOUNDS[mode] * model_bytes(scale)
    if run.held is None or run.held < limit:
        return []
    return [f"{mode}: held {run.held} bytes, {run.held / model_bytes(scale):.2f}x the model "
            f"(bound {BOUNDS[mode]}x): the weights were held"]


def _weight_of(model: onnx.ModelProto, node_name: str) -> onnx.TensorProto:
    node = next(n for n in model.graph.node if n.name == node_name)
    return next(t for t in model.graph.initializer if t.name == node.input[1])


def _external_array(tensor: onnx.TensorProto, directory: str) -> np.ndarray:
    info = {e.key: e.value for e in tensor.external_data}
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return np.memmap(os.path.join(directory, info["location"]), dtype=dtype, mode="r",
                     offset=int(info.get("offset", 0)), shape=tuple(tensor.dims))


def _layout_problems(out: str) -> list[str]:
    problems = []
    if os.path.getsize(out) >= 1024 * 1024:
        problems.append(f"{out}: {os.path.getsize(out)} bytes: weights are in the proto")
    model = onnx.load(out, load_external_data=False)
    for t in model.graph.initializer:
        if t.data_type != TensorProto.FLOAT16 or t.data_location != TensorProto.EXTERNAL:
            problems.append(f"weight {t.name}: type {t.data_type}, location {t.data_location}, "
                            f"not external FP16")
    return problems


def output_problems(src: str, out: str, width: int) -> list[str]:
    """What is wrong with the all-fp16 output ``out`` of ``src``: its layout, its weights' bits, onnx's
    checker, onnxruntime's outputs."""
    import onnxruntime as ort

    problems = _layout_problems(out)
    model = onnx.load(out, load_external_data=False)
    source = onnx.load(src, load_external_data=False)
    for i in (0, 1, LAYERS // 2, LAYERS - 1):
        t = _weight_of(model, f"mm{i}")
        location = {e.key: e.value for e in t.external_data}.get("location")
        if location != os.path.basename(out) + ".data":
            problems.append(f"weight of mm{i} in '{location}'")
        expected = _external_array(_weight_of(source, f"mm{i}"), os.path.dirname(src)).astype(np.float16)
        got = _external_array(t, os.path.dirname(out))
        if not np.array_equal(got.view(np.uint16), expected.view(np.uint16)):
            problems.append(f"weight of mm{i}: not the FP16 rounding of the source's")
    onnx.checker.check_model(out)  # by path: external data files are checked too

    options = ort.SessionOptions()
    # Without graph optimisations onnxruntime maps the weights instead of repacking them (0.02 s, not 9 s).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(out, options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal((1, width)).astype(np.float32)
    dtype = np.float16 if feed.type == "tensor(float16)" else np.float32
    y = session.run(None, {feed.name: x.astype(dtype)})[0]
    del session
    base = base_matrix(width)
    reference = x
    for i in range(LAYERS):
        reference = reference @ weight(base, i)
    cosine = float(np.dot(y.ravel().astype(np.float64), reference.ravel()) /
                   (np.linalg.norm(y.astype(np.float64)) * np.linalg.norm(reference)))
    if not (np.isfinite(y).all() and cosine > 0.999):
        problems.append(f"onnxruntime's output: cosine {cosine} to the FP32 chain's")
    return problems


def report_problems(out: str) -> list[str]:
    """What is wrong with the auto output ``out`` and its report ``out.json``."""
    with open(out + ".json", encoding="utf-8") as f:
        report = json.load(f)
    verified = report["outputs"]["verified"]
    problems = _layout_problems(out)
    if report["status"] != "passed":
        problems.append(f"status {report['status']}")
    if verified["oracle"] != "emulate" or not verified["passed"] or verified["outputs"][0]["cosine"] <= 0.999:
        problems.append(f"verification: {verified}")
    if report["fp16_share"]["fp16_nodes"] != LAYERS:  # the weights are kept away from FP16's limits
        problems.append(f"{report['fp16_share']['fp16_nodes']} of {LAYERS} MatMuls FP16")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="1/scale of the bytes (a power of 4; default 1)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the model and outputs go")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)} (default: both)")
    args = parser.parse_args()
    width = width_at(args.scale)
    free = shutil.disk_usage(args.dir).free
    if free < NEEDED_FREE // args.scale:
        print(f"{args.dir}: {free / 1024**3:.1f} GB free, {NEEDED_FREE / args.scale / 1024**3:.1f} GB needed")
        return 2
    directory = tempfile.mkdtemp(prefix="large_model_", dir=args.dir)
    problems = differences(args.scale)
    try:
        start = time.perf_counter()
        src = write_model(directory, width)
        print(f"model: {LAYERS} x {width}x{width} float32, {model_bytes(args.scale) / 2**30:.3f} GiB, "
              f"written in {time.perf_counter() - start:.1f} s")
        for mode in args.modes.split(","):
            out = os.path.join(directory, f"{mode}.onnx")
            run = convert_in_child(mode, src, out, args.scale)
            memory = "" if run.peak is None or run.held is None else (
                f", peak RSS {run.peak / 2**20:.0f} MiB, held {run.held / 2**20:.0f} MiB = "
                f"{run.held / model_bytes(args.scale):.2f}x the model (bound {BOUNDS[mode]}x)")
            print(f"{mode}: {run.seconds:.1f} s{memory}")
            problems += memory_problems(mode, run, args.scale)
            problems += output_problems(src, out, width) if mode == "all-fp16" else report_problems(out)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for problem in problems:
        print("FAILED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
