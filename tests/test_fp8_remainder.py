"""The 16-bit remainder of an FP8 (E4M3FN) Q/DQ ViT block (issue 33 item 6): judged against its unquantized
original, the note read "+13.4% over the quantization error" (+26% on the issue's block) as if FP16 lost
that much. It does not: the remainder draws the quantization noise anew (rounding to 16 bits moves some
quantizers' inputs across a rounding boundary), which one sample reads as gained or lost, while over the
samples together the error does not move. The note gives that pooled figure, what the remainder costs, and
with two or more samples it is what the verdict reads: judged sample by sample, the redraw failed one sample's
bound on 16 samples and the search made 41 FP32 pins (64 samples: 99) for a pooled error no better.
scripts/bench_fp8_remainder.py measures where the per-sample figure comes from, and what each rule pins."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main

D, HEADS, TOKENS, FFN = 64, 4, 32, 128


def vit_block(layers: int = 2, seed: int = 0) -> onnx.ModelProto:
    """A ViT block in FP32, opset 19: per layer LayerNorm -> Q, K, V projections -> 4-head attention ->
    output projection -> residual, LayerNorm -> MLP (GELU of Erf) -> residual; a LayerNorm, a head and
    Softmax."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, value, dtype=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(op_type: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, n_in: int, n_out: int, name: str) -> str:
        mm = op("MatMul", [x, init(f"{name}_w", rng.standard_normal((n_in, n_out)) / np.sqrt(n_in))], name)
        return op("Add", [mm, init(f"{name}_b", 0.02 * rng.standard_normal(n_out))], f"{name}_add")

    def norm(x: str, name: str) -> str:
        return op("LayerNormalization", [x, init(f"{name}_g", 1 + 0.1 * rng.standard_normal(D)),
                                         init(f"{name}_b", 0.1 * rng.standard_normal(D))], name, axis=-1)

    init("heads", [1, TOKENS, HEADS, D // HEADS], np.int64)
    init("tokens", [1, TOKENS, D], np.int64)
    init("inv_sqrt", 1 / np.sqrt(D // HEADS))
    init("half", 0.5)
    init("one", 1.0)
    init("rsqrt2", 1 / np.sqrt(2))
    x = "x"
    for i in range(layers):
        ln = norm(x, f"ln{i}")
        q, k, v = (op("Transpose", [op("Reshape", [linear(ln, D, D, f"{p}{i}"), "heads"], f"{p}{i}_heads")],
                      f"{p}{i}_t", perm=perm)
                   for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])))
        probs = op("Softmax", [op("Mul", [op("MatMul", [q, k], f"scores{i}"), "inv_sqrt"], f"scaled{i}")],
                   f"probs{i}", axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, v], f"ctx{i}")], f"ctx{i}_t",
                                perm=[0, 2, 1, 3]), "tokens"], f"ctx{i}_flat")
        x = op("Add", [x, linear(ctx, D, D, f"o{i}")], f"res{i}a")
        h = linear(norm(x, f"ln2{i}"), D, FFN, f"fc1{i}")
        erf = op("Erf", [op("Mul", [h, "rsqrt2"], f"gs{i}")], f"ge{i}")
        gelu = op("Mul", [op("Mul", [h, "half"], f"gh{i}"), op("Add", [erf, "one"], f"g1{i}")], f"gelu{i}")
        x = op("Add", [x, linear(gelu, FFN, D, f"fc2{i}")], f"res{i}b")
    head = init("head_w", 4 * rng.standard_normal((D, 16)) / np.sqrt(D))
    op("Softmax", [op("MatMul", [norm(x, "lnf"), head], "head")], "y", axis=-1)
    graph = helper.make_graph(nodes, "vit",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def samples(count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, TOKENS, D)).astype(np.float32)} for _ in range(count)]


def _amax(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], names: list[str]) -> dict[str, float]:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [session.run(names, feed) for feed in feeds]
    return {n: max(float(np.abs(run[k]).max()) for run in runs) for k, n in enumerate(names)}


def quantized(model: onnx.ModelProto, calibration: list[dict[str, np.ndarray]], fp8: bool = True,
              ) -> onnx.ModelProto:
    """``model`` quantized as NVIDIA ModelOpt's FP8 PTQ does: every MatMul input through E4M3FN Q/DQ with a
    per-tensor scale amax / 448 (activations: amax over ``calibration``; weights: constant FP8 through a DQ),
    the remainder (LayerNorm, Softmax, GELU, residuals) left in float. ``fp8`` False: INT8, amax / 127."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    qmax, elem = (448.0, TensorProto.FLOAT8E4M3FN) if fp8 else (127.0, TensorProto.INT8)
    weights = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    activations = sorted({i for n in out.graph.node if n.op_type == "MatMul"
                          for i in n.input if i not in weights})
    amax = _amax(model, calibration, activations)
    nodes: list[onnx.NodeProto] = []
    inits = [t for t in out.graph.initializer
             if not any(t.name in n.input for n in out.graph.node if n.op_type == "MatMul")]
    done: set[str] = set()  # an activation read by several MatMuls (Q, K and V) is quantized once
    for node in out.graph.node:
        if node.op_type == "MatMul":
            for k, name in enumerate(list(node.input)):
                node.input[k] = f"{name}_dq"
                if name in done:
                    continue
                done.add(name)
                scale, zero = f"{name}_scale", f"{name}_zero"
                inits.append(helper.make_tensor(zero, elem, [], [0]))
                if name in weights:
                    w = weights[name]
                    s = np.float32(np.abs(w).max() / qmax)
                    stored = (helper.make_tensor(f"{name}_q", elem, list(w.shape), (w / s).ravel().tolist())
                              if fp8 else numpy_helper.from_array(np.round(w / s).astype(np.int8),
                                                                  f"{name}_q"))
                    inits += [numpy_helper.from_array(np.array(s), scale), stored]
                else:
                    inits.append(numpy_helper.from_array(np.array(amax[name] / qmax, np.float32), scale))
                    nodes.append(helper.make_node("QuantizeLinear", [name, scale, zero], [f"{name}_q"],
                                                  name=f"{name}_q"))
                nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", scale, zero], [f"{name}_dq"],
                                              name=f"{name}_dq"))
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    onnx.checker.check_model(out, full_check=True)
    return out


POOLED = re.compile(r"^note: y: over the (\d+) samples together \(root mean square\), 16-bit remainder "
                    r"([0-9.e+-]+) against the quantization error ([0-9.e+-]+) \(.*\), within its bound "
                    r"([0-9.e+-]+): what the remainder costs; each sample's quantization error [0-9.e+-]+ to "
                    r"[0-9.e+-]+ and ratio ([0-9.]+) to ([0-9.]+) \(a redraw of the quantization noise: "
                    r"rounding to 16 bits moves some quantizers' inputs across a rounding boundary\)$")
WORST = re.compile(r"^note: y: sample (\d+), where the remainder adds the most: .* \(.*, ratio ([0-9.]+)\), "
                   r"within its ceiling ([0-9.e+-]+) \(2 x its bound\)$")


def _converted(tmp_path, capsys, feeds: list[dict[str, np.ndarray]]) -> tuple[list[str], dict]:
    """The FP8 block (calibrated on the first 8 of ``feeds``) converted with the defaults on ``feeds``
    against its original: what it prints, and its report's quantization gate."""
    original = vit_block()
    path, source, out = (str(tmp_path / f) for f in ("fp8.onnx", "original.onnx", "o.onnx"))
    onnx.save(quantized(original, feeds[:8]), path)
    onnx.save(original, source)
    (tmp_path / "samples").mkdir()
    for k, feed in enumerate(feeds):
        np.savez(tmp_path / "samples" / f"s{k:02d}.npz", x=feed["x"])
    data = str(tmp_path / "samples")
    assert main(["convert", path, "-o", out, "--inputs", data, "--reference-model", source]) == 0
    gate = json.load(open(tmp_path / "o.report.json"))["quantization_gate"]
    return capsys.readouterr().out.splitlines(), gate


@pytest.mark.slow  # 0.9 s in a full run on 2 busy cores
def test_the_fp8_remainder_costs_what_the_samples_together_say_and_the_note_says_so(tmp_path, capsys):
    printed, gate = _converted(tmp_path, capsys, samples(8))
    assert "FP32 pins: none" in printed  # every Q, DQ and remainder node 16-bit
    # before eb728d5: only the deciding sample's figure, "+13.4% over the quantization error, ratio 1.134"
    (pooled,) = [tuple(map(float, m.groups())) for m in map(POOLED.match, printed) if m]
    count, remainder, quantization, bound, low, high = pooled
    assert count == 8 and remainder / quantization == pytest.approx(0.967, abs=0.005)  # under it, here
    assert bound == pytest.approx(1.3 * quantization, rel=1e-3)
    (worst,) = [m.groups() for m in map(WORST.match, printed) if m]
    ratio = float(worst[1])
    assert high == pytest.approx(ratio, abs=0.01) and ratio == pytest.approx(1.185, abs=0.005)
    assert low == pytest.approx(0.787, abs=0.005)
    q = np.array(gate["quantization_error"]["y"])
    assert gate["pooled"]["y"]["quantization_error"] == pytest.approx(float(np.sqrt(np.mean(q * q))))
    assert gate["pooled"]["y"]["ratio"] == pytest.approx(remainder / quantization, rel=1e-3)
    assert float(worst[2]) == pytest.approx(2.6 * q[int(worst[0])], rel=1e-3)


@pytest.mark.slow  # 2.5 s of CPU: 16 samples
def test_the_redraw_that_one_sample_reads_as_cost_pins_nothing_where_the_samples_together_do_not_move(
        tmp_path, capsys):
    # Sample 11 of these 16 reads the all-16-bit remainder as +59.2% over its quantization error (ratio
    # 1.592, over the 1.3 of its own bound): judged sample by sample, the search made 41 FP32 pins (the
    # first LayerNorm, Q/DQ in front of the attention's MatMuls, ...) to pull every sample under its bound,
    # for a pooled error 6.1% under the quantization error. Over the 16 samples together the all-16-bit
    # remainder is 4.1% under it and passes; sample 11 is within its ceiling, 2 x its own bound.
    printed, gate = _converted(tmp_path, capsys, samples(16))
    assert "FP32 pins: none" in printed
    (pooled,) = [tuple(map(float, m.groups())) for m in map(POOLED.match, printed) if m]
    count, remainder, quantization, bound, low, high = pooled
    assert count == 16 and remainder / quantization == pytest.approx(0.959, abs=0.005) and remainder < bound
    (worst,) = [m.groups() for m in map(WORST.match, printed) if m]
    assert int(worst[0]) == 11 and float(worst[1]) == pytest.approx(1.592, abs=0.005) == high
    assert (gate["judged"], gate["ceiling"], gate["outputs"]["y"]["sample"]) == ("together", 2.0, 11)
    assert gate["pooled"]["y"]["passed"] and gate["outputs"]["y"]["passed"]
