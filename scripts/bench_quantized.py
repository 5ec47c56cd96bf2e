"""Benchmark: the 16-bit remainder of a quantized model, ours against NVIDIA ModelOpt (issue 25).

Everything is built here with onnx.helper (no downloads):

* ``static``: a BERT-style encoder (token and position embeddings, LAYERS layers of 4-head attention
  and a GELU MLP, LayerNorm decomposed as TorchScript exports it, opset 17), quantized by
  onnxruntime's ``quantize_static`` (QDQ, per-channel INT8, 8 calibration feeds). Per tool: seconds,
  peak memory of its process, the rel RMS err of the written model against the FP32 original on
  held-out feeds (onnxruntime CPU, optimisations off: Q/DQ as the spec's float fake-quantisation),
  the 16-bit share of the non-quantized estimated FLOPs, the count of DQ -> Cast, and whether
  ``onnx-precision check`` (emulated FP16, judged against the original) passes it. Tools: ours with
  and without ``--reference-model`` (the FP32 original), ModelOpt's AutoCast on the QDQ model, and
  ModelOpt's ONNX INT8 PTQ of the FP32 model with ``--high_precision_dtype fp16`` (AutoCast inside),
  against ours on the same PTQ written with an FP32 remainder.
* ``dynamic``: an encoder-decoder of a few thousand nodes quantized by ``quantize_dynamic``
  (DynamicQuantizeLinear/MatMulInteger): ours, seconds and peak memory against a plain onnxruntime
  run of the same model, and the verdict on held-out feeds (``--validation-inputs``).

ModelOpt runs from its own virtual environment (``--modelopt-python``, default /tmp/mo-venv: ``python
-m venv /tmp/mo-venv && /tmp/mo-venv/bin/pip install nvidia-modelopt onnx onnxruntime
onnx-graphsurgeon onnxconverter-common polygraphy``), CPU only; without it its rows say so.
Every tool runs in a child process; its peak memory is that child's ru_maxrss (os.wait4).

Run: ``python scripts/bench_quantized.py [static|dynamic|all] [--layers N] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from onnx_precision.flops import estimate_flops  # noqa: E402

FLOAT16 = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
FLOATS = (*FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)
KERNELS = ("Conv", "MatMul", "Gemm")
TOOL = [sys.executable, "-m", "onnx_precision"]


# ---------------------------------------------------------------------------------------------- models
class Builder:
    """Nodes and initializers of a transformer built layer by layer, names unique by counter."""

    def __init__(self, d: int, heads: int, ffn: int, t: int, seed: int) -> None:
        self.d, self.heads, self.ffn, self.t = d, heads, ffn, t
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def init(self, stem: str, a: np.ndarray) -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        w = self.init("w", (self.rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32))
        b = self.init("b", (0.02 * self.rng.standard_normal(n_out)).astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str) -> str:
        # decomposed as TorchScript exports it at opset 17 (ReduceMean takes axes as an attribute)
        mean = self.op("ReduceMean", [x], axes=[-1])
        centred = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centred, self.init("two", np.array(2, np.float32))])],
                      axes=[-1])
        std = self.op("Sqrt", [self.op("Add", [var, self.init("eps", np.array(1e-12, np.float32))])])
        normed = self.op("Div", [centred, std])
        gamma = self.init("g", (1 + 0.1 * self.rng.standard_normal(self.d)).astype(np.float32))
        beta = self.init("be", (0.1 * self.rng.standard_normal(self.d)).astype(np.float32))
        return self.op("Add", [self.op("Mul", [normed, gamma]), beta])

    def heads_of(self, x: str, t: int, perm: list[int]) -> str:
        shape = self.init("shape", np.array([1, t, self.heads, self.d // self.heads], np.int64))
        return self.op("Transpose", [self.op("Reshape", [x, shape])], perm=perm)

    def attention(self, x: str, memory: str, t_kv: int, mask: str | None = None) -> str:
        q = self.heads_of(self.linear(x, self.d, self.d), self.t, [0, 2, 1, 3])
        k = self.heads_of(self.linear(memory, self.d, self.d), t_kv, [0, 2, 3, 1])
        v = self.heads_of(self.linear(memory, self.d, self.d), t_kv, [0, 2, 1, 3])
        scale = self.init("scale", np.array(1 / np.sqrt(self.d // self.heads), np.float32))
        scores = self.op("Mul", [self.op("MatMul", [q, k]), scale])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        ctx = self.op("Transpose", [self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])],
                      perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.init("shape", np.array([1, self.t, self.d], np.int64))])
        return self.layer_norm(self.op("Add", [x, self.linear(ctx, self.d, self.d)]))

    def mlp(self, x: str) -> str:
        h = self.linear(x, self.d, self.ffn)
        erf = self.op("Erf", [self.op("Div", [h, self.init("sqrt2", np.array(np.sqrt(2), np.float32))])])
        one_plus = self.op("Add", [erf, self.init("one", np.array(1, np.float32))])
        gelu = self.op("Mul", [self.op("Mul", [h, one_plus]), self.init("half", np.array(0.5, np.float32))])
        return self.layer_norm(self.op("Add", [x, self.linear(gelu, self.ffn, self.d)]))

    def embed(self, ids: str, vocab: int) -> str:
        table = self.init("emb", (0.5 * self.rng.standard_normal((vocab, self.d))).astype(np.float32))
        pos = self.init("pos", (0.1 * self.rng.standard_normal((1, self.t, self.d))).astype(np.float32))
        return self.layer_norm(self.op("Add", [self.op("Gather", [table, ids]), pos]))

    def model(self, inputs: list[str], outputs: list[tuple[str, int]], name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(i, TensorProto.INT64, [1, self.t]) for i in inputs],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, self.t, n]) for o, n in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


VOCAB = 1000


def encoder(layers: int, d: int = 256, t: int = 64) -> onnx.ModelProto:
    """A BERT-style encoder: embeddings, ``layers`` x (attention, MLP), a 16-way token classifier."""
    b = Builder(d, 4, 4 * d, t, seed=0)
    x = b.embed("input_ids", VOCAB)
    for _ in range(layers):
        x = b.mlp(b.attention(x, x, t))
    b.linear(x, d, 16)
    b.nodes[-1].output[0] = "logits"
    return b.model(["input_ids"], [("logits", 16)], "bert_like")


def encoder_decoder(layers: int, d: int = 256, t: int = 32) -> onnx.ModelProto:
    """A translation-style encoder-decoder: ``layers`` encoder layers, ``layers`` decoder layers
    (causal self-attention, cross-attention, MLP), a vocabulary head."""
    b = Builder(d, 4, 4 * d, t, seed=1)
    memory = b.embed("src_ids", VOCAB)
    for _ in range(layers):
        memory = b.mlp(b.attention(memory, memory, t))
    causal = b.init("causal", np.triu(np.full((t, t), -1e4, np.float32), 1)[None, None])
    x = b.embed("tgt_ids", VOCAB)
    for _ in range(layers):
        x = b.mlp(b.attention(b.attention(x, x, t, causal), memory, t))
    b.linear(x, d, VOCAB)
    b.nodes[-1].output[0] = "logits"
    return b.model(["src_ids", "tgt_ids"], [("logits", VOCAB)], "enc_dec")


def feeds(model: onnx.ModelProto, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{i.name: rng.integers(0, VOCAB, (1, i.type.tensor_type.shape.dim[1].dim_value)).astype(np.int64)
             for i in model.graph.input} for _ in range(n)]


def save_feeds(folder: str, samples: list[dict[str, np.ndarray]]) -> str:
    os.makedirs(folder, exist_ok=True)
    for k, s in enumerate(samples):
        np.savez(os.path.join(folder, f"s{k}.npz"), **s)  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle
    return folder


def quantize_qdq(fp32: str, out: str, calibration: list[dict[str, np.ndarray]]) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    pending = iter(calibration)

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(pending, None)

    quantize_static(fp32, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


# ---------------------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Run:
    seconds: float
    peak_mb: float
    rc: int
    tail: str


# Runs argv and reports its peak resident memory. A child's ru_maxrss starts at the RSS of the
# process it was forked from (Linux carries the old mm's high-water mark across exec), so the tool is
# forked from this small launcher, not from the benchmark holding models and sessions.
LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(f"PEAK_KB {usage.ru_maxrss}", flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_child(argv: list[str], timeout: float = 3600.0) -> Run:
    """Run ``argv``, timing it; its peak resident memory is the child's ru_maxrss (with its own
    children's, which the kernel folds into it as it reaps them)."""
    # the tool of the tree this script lives in, whatever the environment has installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    text = done.stdout.decode(errors="replace")
    peak = [line for line in text.splitlines() if line.startswith("PEAK_KB ")]
    return Run(seconds, int(peak[-1].split()[1]) / 1024 if peak else float("nan"), done.returncode,
               text[-3000:])


def outputs_of(path: str, samples: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """The model's outputs with onnxruntime's optimisations off (Q/DQ as the spec's fake-quantisation)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # a peer's unused initializers are no finding of this benchmark
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return [[np.asarray(o, np.float64) for o in session.run(None, s)] for s in samples]


def rel_rms(reference: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> float:
    """The worst rel RMS err (RMS of the difference over RMS of the reference) over samples and outputs."""
    return max(float(np.sqrt(np.mean((g - r) ** 2)) / max(np.sqrt(np.mean(r ** 2)), 1e-30))
               for rs, gs in zip(reference, got) for r, g in zip(rs, gs))


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.output, *graph.value_info)}
    types.update({t.name: t.data_type for t in graph.initializer})
    return types


def _dq_fed(model: onnx.ModelProto, value: str, producers: dict[str, onnx.NodeProto]) -> bool:
    """Whether ``value`` is a DequantizeLinear's output, directly or through a Cast."""
    node = producers.get(value)
    if node is not None and node.op_type == "Cast":
        node = producers.get(node.input[0])
    return node is not None and node.op_type == "DequantizeLinear"


@dataclass(frozen=True)
class Written:
    share: float  # 16-bit share of the non-quantized float FLOPs
    dq_cast: int  # DequantizeLinear -> Cast
    dq_cast_kernel: int  # DequantizeLinear -> Cast -> Conv/MatMul/Gemm
    casts: int


def written(path: str, shapes: dict[str, list[int]], given_casts: frozenset[str] = frozenset(),
            dequantization: frozenset[str] = frozenset()) -> Written:
    """What a written model computes in: the estimated FLOPs (onnx_precision.flops) of its float
    nodes outside quantized kernels (a Conv/MatMul/Gemm both of whose inputs are DQ outputs, a Cast
    between allowed, so a peer's DQ -> Cast -> MatMul counts as quantized as ours does; integer ops
    compute in no float type and count 0; ``dequantization``, by name: the Cast and Muls onnxruntime
    fuses into each MatMulInteger, :func:`fused_dequantization`), 16-bit where the node's output (a Q's
    input) is FP16/BF16. The Casts a conversion added are not counted: they are the conversion's, not
    the model's compute; those of the given model (``given_casts``, by name) are, as ours counts them:
    they compute what they did before, in the type written."""
    model = onnx.load(path)
    flops = estimate_flops(model, shapes)
    types = _types(model)
    producers = {o: n for n in model.graph.node for o in n.output}
    low = total = 0.0
    for node in model.graph.node:
        if (node.op_type == "Cast" and node.name not in given_casts) or flops.get(node.name, 0.0) <= 0:
            continue
        if node.name in dequantization:
            continue
        if node.op_type in KERNELS and len(node.input) > 1 and all(_dq_fed(model, v, producers)
                                                                    for v in node.input[:2]):
            continue
        value = node.input[0] if node.op_type == "QuantizeLinear" else node.output[0]
        kind = types.get(value, TensorProto.FLOAT)
        if kind not in FLOATS:
            continue
        total += flops[node.name]
        low += flops[node.name] if kind in FLOAT16 else 0.0
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for v in n.input:
            consumers.setdefault(v, []).append(n)
    dq_casts = [n for n in model.graph.node if n.op_type == "Cast" and (producers.get(n.input[0]) is not None)
                and producers[n.input[0]].op_type == "DequantizeLinear"]
    into_kernel = [c for c in dq_casts if any(k.op_type in KERNELS for k in consumers.get(c.output[0], []))]
    return Written(low / total if total else 0.0, len(dq_casts), len(into_kernel),
                   sum(n.op_type == "Cast" for n in model.graph.node))


def fused_dequantization(model: onnx.ModelProto) -> frozenset[str]:
    """The Cast, scale Mul and Mul after each MatMulInteger that onnxruntime fuses with it into
    MatMulIntegerToFloat (onnxruntime/core/optimizer/matmul_integer_to_float.cc): a Mul with a Cast
    parent whose parent is a MatMulInteger and a Mul parent, the three read once (matched here apart
    from onnx_precision.quantized, as a second opinion)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    reads: dict[str, int] = {}
    for n in model.graph.node:
        for v in n.input:
            reads[v] = reads.get(v, 0) + 1
    found: set[str] = set()
    for mul in (n for n in model.graph.node if n.op_type == "Mul"):
        parents = [producers.get(v) for v in mul.input]
        cast = next((p for p in parents if p is not None and p.op_type == "Cast"), None)
        scale = next((p for p in parents if p is not None and p.op_type == "Mul"), None)
        if cast is None or scale is None:
            continue
        kernel = producers.get(cast.input[0])
        if kernel is not None and kernel.op_type == "MatMulInteger" and all(
                reads.get(n.output[0]) == 1 for n in (kernel, cast, scale)):
            found.update((cast.name, scale.name, mul.name))
    return frozenset(found)


def ort_kernels(path: str, work: str) -> str:
    """What onnxruntime's CPU provider runs ``path``'s integer matmuls with after its fusions (its
    optimized model): 'fused 112+113, unfused 0' (MatMulIntegerToFloat + DynamicQuantizeMatMul,
    MatMulInteger left alone)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = os.path.join(work, "optimized.onnx")
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath, load_external_data=False)
    ops = [n.op_type for n in optimized.graph.node]
    return (f"fused {ops.count('MatMulIntegerToFloat')}+{ops.count('DynamicQuantizeMatMul')}, "
            f"unfused {ops.count('MatMulInteger')}")


def shapes_of(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}


def checked(qdq: str, out: str, data: str, original: str) -> str:
    """``onnx-precision check``'s verdict on ``out`` (emulated FP16, judged against the original)."""
    run = run_child([*TOOL, "check", qdq, out, "--inputs", data, "--reference-model", original, "-q"])
    return {0: "pass", 1: "FAIL"}.get(run.rc, f"rc {run.rc}")


def row(tool: str, run: Run | None, out: str, shapes: dict, ref: list, held: list, verdict: str = "-",
        note: str = "") -> None:
    if run is None or run.rc not in (0, 1) or not os.path.exists(out):
        reason = note or ("" if run is None else f"rc {run.rc}: {run.tail.strip().splitlines()[-1:]}")
        secs = "-" if run is None else f"{run.seconds:.1f}"
        print(f"{tool:<34} {secs:>7} {'-':>8} {'-':>9} {'-':>7} {'-':>8} {'-':>6}  {reason}", flush=True)
        return
    w = written(out, shapes)
    err = rel_rms(ref, outputs_of(out, held))
    print(f"{tool:<34} {run.seconds:7.1f} {run.peak_mb:8.0f} {err:9.4f} {100 * w.share:6.1f}% "
          f"{w.dq_cast:>4}/{w.dq_cast_kernel:<3} {verdict:>6}  {note}", flush=True)


HEADER = (f"{'tool':<34} {'seconds':>7} {'peak MB':>8} {'rel RMS':>9} {'16-bit':>7} {'DQ>Cast':>8} "
          f"{'check':>6}  note\n{'':<34} {'':>7} {'':>8} {'vs FP32':>9} {'remain':>7} {'(>kern)':>8}")


def ours(qdq: str, out: str, data: str, extra: list[str]) -> tuple[Run, dict]:
    run = run_child([*TOOL, "convert", qdq, "-o", out, "--inputs", data, *extra])
    report_path = out[:-len(".onnx")] + ".report.json"
    report = json.load(open(report_path)) if os.path.exists(report_path) else {}
    return run, report


def ours_note(report: dict) -> str:
    if not report:
        return "no report"
    cost, share = report.get("cost", {}), report.get("fp16_share") or {}
    phases = ", ".join(f"{p['name']} {p['seconds']:.1f}s" for p in cost.get("phases", []))
    return (f"{report.get('status')}; report: {100 * (share.get('flops') or 0):.1f}% of "
            f"{share.get('flops_of')}; "
            f"{len(report.get('pinned', []))} pins, {cost.get('probes_run')} probes, "
            f"{cost.get('sessions_built')} sessions ({phases})")


def modelopt(python: str, argv: list[str]) -> Run | None:
    if not os.path.exists(python):
        return None
    return run_child([python, *argv])


def static(work: str, layers: int, mo_python: str) -> None:
    fp32, qdq = os.path.join(work, "enc_fp32.onnx"), os.path.join(work, "enc_qdq.onnx")
    model = encoder(layers)
    onnx.save(model, fp32)
    quantize_qdq(fp32, qdq, feeds(model, 8, seed=10))
    samples, held = feeds(model, 4, seed=20), feeds(model, 4, seed=30)
    data = save_feeds(os.path.join(work, "enc_in"), samples)
    val = save_feeds(os.path.join(work, "enc_val"), held)
    shapes = shapes_of(model)
    ref = outputs_of(fp32, held)
    n_qdq = len(onnx.load(qdq).graph.node)
    print(f"\n## QDQ encoder: {layers} layers, d 256, 4 heads, T 64; {len(model.graph.node)} nodes FP32, "
          f"{n_qdq} after quantize_static (QDQ, per-channel INT8); {len(samples)} samples, "
          f"{len(held)} held out")
    print("quantization error (QDQ in FP32 vs the FP32 original, held out): "
          f"{rel_rms(ref, outputs_of(qdq, held)):.4f}")
    print(HEADER)
    for tool, extra in (("ours", []), ("ours --reference-model", ["--reference-model", fp32])):
        out = os.path.join(work, f"enc_{'ref' if extra else 'plain'}.onnx")
        run, report = ours(qdq, out, data, [*extra, "--validation-inputs", val])
        row(tool, run, out, shapes, ref, held, checked(qdq, out, val, fp32), ours_note(report))

    # AutoCast on the same QDQ model, with our samples as its calibration data
    calib = os.path.join(work, "enc_calib.npz")
    np.savez(calib, **samples[0])  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    out = os.path.join(work, "enc_autocast.onnx")
    autocast = modelopt(mo_python, ["-m", "modelopt.onnx.autocast", "--onnx_path", qdq, "--output_path", out,
                               "--low_precision_type", "fp16", "--calibration_data", calib,
                               "--providers", "cpu", "--keep_io_types"])
    row("modelopt autocast (QDQ model)", autocast, out, shapes, ref, held,
        checked(qdq, out, val, fp32) if autocast is not None and os.path.exists(out) else "-",
        "" if autocast is not None else f"{mo_python} missing")

    # ModelOpt's own INT8 PTQ of the FP32 model: FP16 remainder (AutoCast's convert_to_f16), and the
    # same PTQ with an FP32 remainder that ours then converts
    calib_batch = os.path.join(work, "enc_calib_batch.npz")
    calibration = feeds(model, 8, seed=10)
    batched: dict[str, np.ndarray] = {k: np.concatenate([c[k] for c in calibration]) for k in calibration[0]}
    np.savez(calib_batch, **batched)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    ptq: dict[str, str] = {}
    for dtype in ("fp32", "fp16"):
        out = ptq[dtype] = os.path.join(work, f"enc_mo_ptq_{dtype}.onnx")
        ptq_run = modelopt(mo_python, ["-m", "modelopt.onnx.quantization", "--onnx_path", fp32,
                                       "--quantize_mode", "int8", "--calibration_data_path", calib_batch,
                                       "--calibration_eps", "cpu", "--high_precision_dtype", dtype,
                                       "--output_path", out])
        row(f"modelopt PTQ int8 --hp {dtype}", ptq_run, out, shapes, ref, held,
            checked(ptq["fp32"], out, val, fp32)
            if dtype == "fp16" and ptq_run is not None and os.path.exists(out) and os.path.exists(ptq["fp32"])
            else "-",
            "" if ptq_run is not None else f"{mo_python} missing")
    if os.path.exists(ptq["fp32"]):
        for tool, extra in (("ours on PTQ fp32", []), ("ours on PTQ fp32 --reference-model",
                                                        ["--reference-model", fp32])):
            out = os.path.join(work, f"enc_mo_ours_{'ref' if extra else 'plain'}.onnx")
            run, report = ours(ptq["fp32"], out, data, [*extra, "--validation-inputs", val])
            row(tool, run, out, shapes, ref, held, checked(ptq["fp32"], out, val, fp32), ours_note(report))


PLAIN_RUN = """
import sys, numpy as np, onnxruntime as ort, glob
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
for f in sorted(glob.glob(sys.argv[2] + "/*.npz")):
    s.run(None, dict(np.load(f)))
"""


def dynamic(work: str, layers: int) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, quant = os.path.join(work, "ed_fp32.onnx"), os.path.join(work, "ed_dyn.onnx")
    model = encoder_decoder(layers)
    onnx.save(model, fp32)
    quantize_dynamic(fp32, quant, weight_type=QuantType.QInt8)
    samples, held = feeds(model, 4, seed=40), feeds(model, 2, seed=50)
    data = save_feeds(os.path.join(work, "ed_in"), samples)
    val = save_feeds(os.path.join(work, "ed_val"), held)
    q = onnx.load(quant)
    own_casts = frozenset(n.name for n in q.graph.node if n.op_type == "Cast")
    ops: dict[str, int] = {}
    for n in q.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(f"\n## dynamic-quant encoder-decoder: {layers}+{layers} layers, d 256, T 32; "
          f"{len(model.graph.node)} nodes FP32, {len(q.graph.node)} after quantize_dynamic "
          f"({ops.get('MatMulInteger', 0)} MatMulInteger, {ops.get('DynamicQuantizeLinear', 0)} "
          f"DynamicQuantizeLinear), {os.path.getsize(quant) / 2 ** 20:.0f} MB")
    plain = run_child([sys.executable, "-c", PLAIN_RUN, quant, data])
    print(f"plain onnxruntime run of the quantized model ({len(samples)} samples): {plain.seconds:.1f} s, "
          f"peak {plain.peak_mb:.0f} MB (rc {plain.rc})")
    out = os.path.join(work, "ed_out.onnx")
    run, report = ours(quant, out, data, ["--validation-inputs", val])
    print(f"ours: {run.seconds:.1f} s, peak {run.peak_mb:.0f} MB "
          f"({run.peak_mb / plain.peak_mb:.2f}x the plain run), "
          f"rc {run.rc}; {ours_note(report)}")
    if report:
        validation = (report.get("outputs") or {}).get("validation")
        for o in (validation or {}).get("outputs", []):
            print(f"held out (--validation-inputs), {o['name']}: passed {o['passed']}, "
                  f"rel RMS {o['rel_rms_err']:.4f}, cosine {o['cosine']:.5f}")
    if os.path.exists(out):
        ref, got = outputs_of(fp32, held), outputs_of(out, held)
        print(f"independent: written vs FP32 original on the held-out feeds, rel RMS {rel_rms(ref, got):.4f} "
              f"(quantization error {rel_rms(ref, outputs_of(quant, held)):.4f}); "
              f"16-bit share of the non-quantized FLOPs "
              f"{100 * written(out, shapes_of(model), own_casts, fused_dequantization(q)).share:.1f}%")
        print(f"onnxruntime's integer kernels (MatMulIntegerToFloat+DynamicQuantizeMatMul, MatMulInteger): "
              f"given {ort_kernels(quant, work)}; written {ort_kernels(out, work)}")
    if run.rc not in (0, 1):
        print(run.tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("which", nargs="?", default="all", choices=("static", "dynamic", "all"))
    parser.add_argument("--layers", type=int, default=6, help="encoder layers of the QDQ encoder")
    parser.add_argument("--dynamic-layers", type=int, default=14, help="encoder (= decoder) layers")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--modelopt-python", default="/tmp/mo-venv/bin/python")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="bench-quantized-")
    os.makedirs(work, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPU(s); files in {work}")
    if args.which in ("static", "all"):
        static(work, args.layers, args.modelopt_python)
    if args.which in ("dynamic", "all"):
        dynamic(work, args.dynamic_layers)


if __name__ == "__main__":
    main()
