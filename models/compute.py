"""Models whose compute sits where a FLOP estimate reading only the main graph's shapes misses it, and a
Softmax whose FP16 output loses its whole signal under the absolute tolerance (issue 33, items 1-2).

Each is shaped like the real model it stands for, small enough for a test:

* :func:`stft_in_if`: Silero VAD's front end. The whole network sits in an If on the sample rate; each
  branch pads the audio by amounts it computes from constants (a Concat, Reshape, Slice, Transpose chain, as
  the exporter writes ``F.pad``) and runs the STFT as a Conv whose basis is a main-graph initializer read
  from the branch (outer scope);
* :func:`crnn`: a captcha reader's CNN and bidirectional recurrent layer (LSTM, GRU or RNN) over the
  image's columns, then a per-step classifier;
* :func:`quantized_lstm`: the same recurrent layer as onnxruntime's dynamically quantized LSTM
  (com.microsoft DynamicQuantizeLSTM, int8 weights laid out [directions, input, 4 x hidden]);
* :func:`wide_softmax`: a vocabulary-wide Softmax (a decoder's 151 936-wide one): under a target that sums
  its denominator in FP16, more than 65 504 terms overflow it and every probability becomes 0.

The hand formulas the estimates are checked against are in ``scripts/bench_flops.py`` and the tests.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import IR_VERSION, OPSET, Example, const, node, rng, tensor

I64 = np.int64


def _model(name: str, graph: onnx.GraphProto, opsets: dict[str, int] | None = None) -> onnx.ModelProto:
    imports = [helper.make_opsetid(domain, version) for domain, version in (opsets or {"": OPSET}).items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="onnx-precision-examples")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _constant(name: str, value, dtype=I64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=const(name, value, dtype))


def _unshaped(name: str) -> onnx.ValueInfoProto:
    """A spectrum [batch, bins, frames] of no declared size (the two branches' differ)."""
    return tensor(name, ["batch", "bins", "frames"])


def _stft_branch(tag: str, kernel: int, basis: str) -> onnx.GraphProto:
    """Pad ``x`` [1, samples] by kernel / 4 on each side of its last axis (pads computed in the branch),
    then the STFT: a Conv of the padded audio [1, 1, L] with ``basis`` [bins, 1, kernel], stride
    kernel / 2; out: the magnitude-like square of it."""
    p = f"{tag}_"
    quarter = kernel // 4
    nodes = [
        _constant(p + "zeros", [0, 0]),
        _constant(p + "amount", [quarter, quarter]),
        node("Concat", [p + "amount", p + "zeros"], [p + "pairs"], p + "concat", axis=0),
        _constant(p + "two_by_two", [2, 2]),
        node("Reshape", [p + "pairs", p + "two_by_two"], [p + "grid"], p + "reshape"),
        _constant(p + "start", [-1]), _constant(p + "end", [-(2**62)]), _constant(p + "axis", [0]),
        _constant(p + "step", [-1]),
        node("Slice", [p + "grid", p + "start", p + "end", p + "axis", p + "step"], [p + "flipped"],
             p + "slice"),
        node("Transpose", [p + "flipped"], [p + "by_side"], p + "transpose", perm=[1, 0]),
        _constant(p + "flat", [-1]),
        node("Reshape", [p + "by_side", p + "flat"], [p + "pads"], p + "pads"),
        node("Pad", ["x", p + "pads"], [p + "padded"], p + "pad", mode="reflect"),
        _constant(p + "channel", [1]),
        node("Unsqueeze", [p + "padded", p + "channel"], [p + "audio"], p + "unsqueeze"),
        node("Conv", [p + "audio", basis], [p + "spectrum"], p + "stft", strides=[kernel // 2]),
        node("Mul", [p + "spectrum", p + "spectrum"], [p + "power"], p + "power"),
    ]
    return helper.make_graph(nodes, f"{tag}_branch", [], [_unshaped(p + "power")])


def stft_in_if(samples: int = 4096) -> Example:
    """Silero VAD's front end: If sr == 16000, the 16 kHz STFT (a 258 x 1 x 256 basis, stride 128), else
    the 8 kHz one (130 x 1 x 128, stride 64); both bases are main-graph initializers."""
    r = rng(33)
    inits = [const("basis_16k", r.standard_normal((258, 1, 256)) * 0.05),
             const("basis_8k", r.standard_normal((130, 1, 128)) * 0.05),
             const("sr_16k", 16000, I64)]
    nodes = [node("Equal", ["sr", "sr_16k"], ["is_16k"], "is_16k"),
             helper.make_node("If", ["is_16k"], ["y"], name="by_rate",
                              then_branch=_stft_branch("k16", 256, "basis_16k"),
                              else_branch=_stft_branch("k8", 128, "basis_8k"))]
    inputs = [tensor("x", ["batch", "samples"]), tensor("sr", [], TensorProto.INT64)]
    graph = helper.make_graph(nodes, "stft_in_if", inputs, [_unshaped("y")], inits)
    feed: dict[str, np.ndarray] = {"x": r.uniform(-1, 1, (1, samples)).astype(np.float32),
                                   "sr": np.array(16000, I64)}
    return Example("stft_in_if", _model("stft_in_if", graph), (feed,), stft_in_if.__doc__ or "")


# gates per recurrent op, and the shapes of its weights [directions, gates x hidden, input] as ONNX lays them
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _features() -> list[onnx.NodeProto]:
    """x [1, 1, 8, width] -> Conv 3x3 (channels) -> Relu -> mean over the rows -> the sequence
    [width, 1, channels] (a step per image column)."""
    return [node("Conv", ["x", "conv_w", "conv_b"], ["conv"], "conv", pads=[1, 1, 1, 1]),
            node("Relu", ["conv"], ["relu"], "relu"),
            node("ReduceMean", ["relu"], ["columns"], "rows_mean", axes=[2], keepdims=0),
            node("Transpose", ["columns"], ["sequence"], "to_steps", perm=[2, 0, 1])]


def _classifier() -> list[onnx.NodeProto]:
    """Y [steps, 2, 1, hidden] -> [steps, 2 x hidden] -> MatMul -> logits [steps, classes]."""
    return [node("Reshape", ["states", "steps_by_both"], ["both"], "join_directions"),
            node("MatMul", ["both", "head_w"], ["logits"], "head")]


def _crnn_inits(r: np.random.Generator, channels: int, hidden: int, classes: int) -> list[onnx.TensorProto]:
    return [const("conv_w", r.standard_normal((channels, 1, 3, 3)) * 0.3),
            const("conv_b", np.zeros(channels)), const("steps_by_both", [-1, 2 * hidden], I64),
            const("head_w", r.standard_normal((2 * hidden, classes)) * 0.1)]


def crnn(kind: str = "LSTM", width: int = 64, channels: int = 32, hidden: int = 64, classes: int = 37,
         ) -> Example:
    """A captcha reader: a CNN over a [1, 1, 8, width] image, a bidirectional ``kind`` (LSTM, GRU, RNN) of
    ``hidden`` units over its ``width`` columns, a classifier per column."""
    r = rng(34)
    gates = GATES[kind]
    inits = _crnn_inits(r, channels, hidden, classes) + [
        const("rnn_w", r.standard_normal((2, gates * hidden, channels)) * 0.1),
        const("rnn_r", r.standard_normal((2, gates * hidden, hidden)) * 0.1),
        const("rnn_b", np.zeros((2, 2 * gates * hidden)))]
    recurrent = node(kind, ["sequence", "rnn_w", "rnn_r", "rnn_b"], ["states"], "rnn",
                     hidden_size=hidden, direction="bidirectional")
    nodes = _features() + [recurrent] + _classifier()
    graph = helper.make_graph(nodes, f"crnn_{kind.lower()}", [tensor("x", [1, 1, 8, width])],
                              [tensor("logits", [width, classes])], inits)
    feed = {"x": r.uniform(0, 1, (1, 1, 8, width)).astype(np.float32)}
    return Example(f"crnn_{kind.lower()}", _model(graph.name, graph), (feed,), crnn.__doc__ or "")


def quantized_lstm(width: int = 64, channels: int = 32, hidden: int = 64, classes: int = 37) -> Example:
    """:func:`crnn`'s LSTM dynamically quantized: com.microsoft DynamicQuantizeLSTM with int8 weights
    W [2, channels, 4 x hidden] and R [2, hidden, 4 x hidden], a scale and zero point per direction."""
    r = rng(35)
    i8 = TensorProto.INT8
    w = r.integers(-127, 128, (2, channels, 4 * hidden)).astype(np.int8)
    rr = r.integers(-127, 128, (2, hidden, 4 * hidden)).astype(np.int8)
    inits = _crnn_inits(r, channels, hidden, classes) + [
        helper.make_tensor("rnn_w", i8, w.shape, w.tobytes(), raw=True),
        helper.make_tensor("rnn_r", i8, rr.shape, rr.tobytes(), raw=True),
        const("rnn_b", np.zeros((2, 8 * hidden))),
        const("w_scale", [0.001, 0.001]), const("w_zero", [0, 0], np.int8),
        const("r_scale", [0.001, 0.001]), const("r_zero", [0, 0], np.int8)]
    recurrent = helper.make_node(
        "DynamicQuantizeLSTM", ["sequence", "rnn_w", "rnn_r", "rnn_b", "", "", "", "", "w_scale", "w_zero",
                                "r_scale", "r_zero"], ["states"], name="rnn", domain="com.microsoft",
        hidden_size=hidden, direction="bidirectional")
    nodes = _features() + [recurrent] + _classifier()
    graph = helper.make_graph(nodes, "quantized_lstm", [tensor("x", [1, 1, 8, width])],
                              [tensor("logits", [width, classes])], inits)
    feed = {"x": r.uniform(0, 1, (1, 1, 8, width)).astype(np.float32)}
    model = _model(graph.name, graph, {"": OPSET, "com.microsoft": 1})
    return Example("quantized_lstm", model, (feed,), quantized_lstm.__doc__ or "")


def wide_softmax(width: int = 100_000, seed: int = 36) -> Example:
    """A decoder's last step: logits [1, width] -> Softmax, the logits close together (a flat
    distribution: spread 0.05). Its probabilities are about 1 / width each (1e-5 at 100 000, under the
    default atol 0.001), and its denominator Σexp(x - max), about 0.8 x width, overflows FP16 past 65 504
    where the target sums it in FP16: every probability becomes 0. (A Softmax subtracts its maximum
    first, so only width overflows it, not the logits' size.)"""
    logits = rng(seed).normal(0.0, 0.05, (1, width)).astype(np.float32)
    graph = helper.make_graph([node("Softmax", ["logits"], ["probs"], "softmax", axis=-1)], "wide_softmax",
                              [tensor("logits", [1, width])], [tensor("probs", [1, width])])
    return Example("wide_softmax", _model("wide_softmax", graph), ({"logits": logits},),
                   wide_softmax.__doc__ or "")
