"""Example models, one per FP16 failure pattern, each with sample data that triggers it.

Every builder returns an :class:`Example`: the FP32 model (built with onnx.helper, opset 17, IR 8
so the installed onnxruntime accepts it) and deterministic feeds. ``python -m models``
(models/generate.py) writes the small ones to ``models/<name>.onnx`` + ``models/<name>.npz`` (or a
directory of .npz when an example has several feeds); the transformer is built on the fly by tests
and benchmarks. ``build(name)`` returns any example by name, the transformer included.

The node names are part of the contract: tests of the analysis and the search assert them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # onnx >= 1.20 writes a newer IR than onnxruntime accepts
FLOAT = TensorProto.FLOAT


@dataclass(frozen=True)
class Example:
    """A model and the feeds that show its problem (several feeds: a directory of .npz)."""

    name: str
    model: onnx.ModelProto
    feeds: tuple[dict[str, np.ndarray], ...]
    description: str


def make_model(name: str, nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], initializers: Sequence[onnx.TensorProto] = ()
               ) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnx-precision-examples")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def tensor(name: str, shape: Sequence, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=name, **attrs)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- one builder per pattern -------------------------------------------------------------------

def l2_normalize() -> Example:
    """y = x / sqrt(sum(x^2)): the sum of squares (about 1.2e5) overflows FP16's 65504."""
    nodes = [
        node("Mul", ["x", "x"], ["sq"], "square"),
        node("ReduceSum", ["sq", "axes"], ["sumsq"], "sumsq", keepdims=1),
        node("Sqrt", ["sumsq"], ["norm"], "norm"),
        node("Div", ["x", "norm"], ["y"], "normalize"),
    ]
    model = make_model("l2_normalize", nodes, [tensor("x", [1, 64])], [tensor("y", [1, 64])],
                       [const("axes", [-1], np.int64)])
    x = rng(1).uniform(30.0, 55.0, size=(1, 64)).astype(np.float32)
    return Example("l2_normalize", model, ({"x": x},), l2_normalize.__doc__ or "")


def nafnet_boxfilter(size: int = 256, kernel: int = 8) -> Example:
    """NAFNet's local average pool as an integral image: two CumSum over a 256x256 map (the
    second reaches about 9.8e4, past 65504), then the box sums as differences of its corners."""
    k = kernel
    end = size
    nodes = [
        node("CumSum", ["x", "axis_h"], ["integral_h"], "cumsum_h"),
        node("CumSum", ["integral_h", "axis_w"], ["integral"], "cumsum_w"),
        # corners of every k x k window: s[i+k, j+k] - s[i, j+k] - s[i+k, j] + s[i, j]
        node("Slice", ["integral", "lo_lo", "hi_hi", "axes_hw"], ["s_br"], "corner_br"),
        node("Slice", ["integral", "zero_lo", "mid_hi", "axes_hw"], ["s_tr"], "corner_tr"),
        node("Slice", ["integral", "lo_zero", "hi_mid", "axes_hw"], ["s_bl"], "corner_bl"),
        node("Slice", ["integral", "zero_zero", "mid_mid", "axes_hw"], ["s_tl"], "corner_tl"),
        node("Sub", ["s_br", "s_tr"], ["d1"], "box_sub_top"),
        node("Sub", ["d1", "s_bl"], ["d2"], "box_sub_left"),
        node("Add", ["d2", "s_tl"], ["box"], "box_add_corner"),
        node("Div", ["box", "area"], ["y"], "box_mean"),
    ]
    out = size - k
    i64 = np.int64
    inits = [
        const("axis_h", 2, i64), const("axis_w", 3, i64), const("axes_hw", [2, 3], i64),
        const("lo_lo", [k, k], i64), const("hi_hi", [end, end], i64),
        const("zero_lo", [0, k], i64), const("mid_hi", [out, end], i64),
        const("lo_zero", [k, 0], i64), const("hi_mid", [end, out], i64),
        const("zero_zero", [0, 0], i64), const("mid_mid", [out, out], i64),
        const("area", float(k * k)),
    ]
    model = make_model("nafnet_boxfilter", nodes, [tensor("x", [1, 1, size, size])],
                       [tensor("y", [1, 1, out, out])], inits)
    x = rng(2).uniform(1.0, 2.0, size=(1, 1, size, size)).astype(np.float32)
    return Example("nafnet_boxfilter", model, ({"x": x},), nafnet_boxfilter.__doc__ or "")


def layernorm_nodes(prefix: str, x: str, out: str, gamma: str, beta: str, eps: str) -> list[onnx.NodeProto]:
    """LayerNorm as exporters decompose it: (x - mean) / sqrt(mean((x - mean)^2) + eps) * g + b."""
    p = prefix
    return [
        node("ReduceMean", [x], [f"{p}_mean"], f"{p}_mean", axes=[-1], keepdims=1),
        node("Sub", [x, f"{p}_mean"], [f"{p}_d"], f"{p}_sub"),
        node("Pow", [f"{p}_d", "two"], [f"{p}_sq"], f"{p}_sq"),
        node("ReduceMean", [f"{p}_sq"], [f"{p}_var"], f"{p}_var", axes=[-1], keepdims=1),
        node("Add", [f"{p}_var", eps], [f"{p}_vareps"], f"{p}_add_eps"),
        node("Sqrt", [f"{p}_vareps"], [f"{p}_std"], f"{p}_sqrt"),
        node("Div", [f"{p}_d", f"{p}_std"], [f"{p}_norm"], f"{p}_div"),
        node("Mul", [f"{p}_norm", gamma], [f"{p}_scaled"], f"{p}_scale"),
        node("Add", [f"{p}_scaled", beta], [out], f"{p}_shift"),
    ]


def layernorm_eps() -> Example:
    """Decomposed LayerNorm with eps 1e-12 (BERT's) on rows of near-constant values: the squared
    deviations (about 1e-9) flush to zero in FP16, eps itself is 0 in FP16, so the row is divided
    by sqrt(0) and becomes +-inf where FP32 gives values near +-1."""
    width = 64
    nodes = layernorm_nodes("ln", "x", "y", "gamma", "beta", "eps")
    gen = rng(3)
    inits = [const("two", 2.0), const("eps", 1e-12),
             const("gamma", gen.uniform(0.5, 1.5, width)), const("beta", gen.uniform(-0.1, 0.1, width))]
    model = make_model("layernorm_eps", nodes, [tensor("x", [4, width])], [tensor("y", [4, width])], inits)
    ordinary = gen.normal(0.0, 1.0, size=(2, width))
    near_constant = gen.uniform(-3e-5, 3e-5, size=(2, width))  # e.g. padding positions
    x = np.concatenate([ordinary, near_constant]).astype(np.float32)
    return Example("layernorm_eps", model, ({"x": x},), layernorm_eps.__doc__ or "")


def softmax_nomax() -> Example:
    """Softmax written as exp(x) / sum(exp(x)) without subtracting the max: exp of logits up to
    13 reaches 4.4e5, past 65504, and inf / inf is NaN."""
    nodes = [
        node("Exp", ["logits"], ["e"], "exp"),
        node("ReduceSum", ["e", "axes"], ["sum_e"], "sum_exp", keepdims=1),
        node("Div", ["e", "sum_e"], ["probs"], "normalize"),
    ]
    model = make_model("softmax_nomax", nodes, [tensor("logits", [2, 32])], [tensor("probs", [2, 32])],
                       [const("axes", [-1], np.int64)])
    logits = rng(4).uniform(0.0, 13.0, size=(2, 32)).astype(np.float32)
    return Example("softmax_nomax", model, ({"logits": logits},), softmax_nomax.__doc__ or "")


def log_underflow() -> Example:
    """log(softmax(x)) over logits spanning 30: probabilities near 1e-12 flush to zero in FP16
    and their Log is -inf where FP32 gives about -27."""
    nodes = [
        node("Softmax", ["logits"], ["p"], "probs", axis=-1),
        node("Log", ["p"], ["log_p"], "log_probs"),
    ]
    model = make_model("log_underflow", nodes, [tensor("logits", [2, 16])], [tensor("log_p", [2, 16])])
    logits = rng(5).uniform(-25.0, 5.0, size=(2, 16)).astype(np.float32)
    return Example("log_underflow", model, ({"logits": logits},), log_underflow.__doc__ or "")


def benign_mlp() -> Example:
    """A small MLP with modest weights and inputs: nothing in it is at risk in FP16."""
    gen = rng(6)
    nodes = [
        node("Gemm", ["x", "w1", "b1"], ["h"], "fc1"),
        node("Relu", ["h"], ["a"], "relu"),
        node("Gemm", ["a", "w2", "b2"], ["z"], "fc2"),
        node("Sigmoid", ["z"], ["y"], "sigmoid"),
    ]
    inits = [const("w1", gen.normal(0, 0.25, (16, 32))), const("b1", gen.normal(0, 0.1, 32)),
             const("w2", gen.normal(0, 0.25, (32, 8))), const("b2", gen.normal(0, 0.1, 8))]
    model = make_model("benign_mlp", nodes, [tensor("x", [4, 16])], [tensor("y", [4, 8])], inits)
    x = gen.uniform(-1.0, 1.0, size=(4, 16)).astype(np.float32)
    return Example("benign_mlp", model, ({"x": x},), benign_mlp.__doc__ or "")


def fp32_nan() -> Example:
    """Sqrt of a negative number: the FP32 model itself produces NaN, which is not FP16's fault."""
    nodes = [
        node("Mul", ["x", "scale"], ["xs"], "scale"),
        node("Sqrt", ["xs"], ["r"], "sqrt"),
        node("Add", ["r", "one"], ["y"], "shift"),
    ]
    model = make_model("fp32_nan", nodes, [tensor("x", [1, 16])], [tensor("y", [1, 16])],
                       [const("scale", 2.0), const("one", 1.0)])
    x = rng(7).uniform(-1.0, 4.0, size=(1, 16)).astype(np.float32)
    x[0, 3] = -0.5  # at least one negative whatever the generator does
    return Example("fp32_nan", model, ({"x": x},), fp32_nan.__doc__ or "")


def two_culprits() -> Example:
    """Two independent failures: an L2-normalize whose sum of squares overflows (branch a) and a
    softmax without max subtraction whose Exp overflows (branch b); fixing one leaves the other."""
    nodes = [
        node("Mul", ["x", "x"], ["sq"], "a_square"),
        node("ReduceSum", ["sq", "axes"], ["sumsq"], "a_sumsq", keepdims=1),
        node("Sqrt", ["sumsq"], ["norm"], "a_norm"),
        node("Div", ["x", "norm"], ["y_a"], "a_normalize"),
        node("Exp", ["z"], ["e"], "b_exp"),
        node("ReduceSum", ["e", "axes"], ["sum_e"], "b_sum_exp", keepdims=1),
        node("Div", ["e", "sum_e"], ["y_b"], "b_normalize"),
    ]
    model = make_model("two_culprits", nodes, [tensor("x", [1, 64]), tensor("z", [1, 16])],
                       [tensor("y_a", [1, 64]), tensor("y_b", [1, 16])], [const("axes", [-1], np.int64)])
    gen = rng(8)
    x = gen.uniform(30.0, 55.0, size=(1, 64)).astype(np.float32)
    z = gen.uniform(0.0, 13.0, size=(1, 16)).astype(np.float32)
    return Example("two_culprits", model, ({"x": x, "z": z},), two_culprits.__doc__ or "")


def if_branch() -> Example:
    """An If whose then-branch is an L2-normalize with an overflowing sum of squares and whose
    else-branch is a plain scale; the sample takes the then-branch."""
    then_graph = helper.make_graph(
        [node("Mul", ["x", "x"], ["t_sq"], "then_square"),
         node("ReduceSum", ["t_sq", "axes"], ["t_sumsq"], "then_sumsq", keepdims=1),
         node("Sqrt", ["t_sumsq"], ["t_norm"], "then_norm"),
         node("Div", ["x", "t_norm"], ["t_y"], "then_normalize")],
        "then_branch", [], [tensor("t_y", [1, 64])])
    else_graph = helper.make_graph(
        [node("Mul", ["x", "half"], ["e_y"], "else_scale")],
        "else_branch", [], [tensor("e_y", [1, 64])])
    nodes = [
        node("If", ["cond"], ["branch_out"], "branch", then_branch=then_graph, else_branch=else_graph),
        node("Add", ["branch_out", "bias"], ["y"], "add_bias"),
    ]
    model = make_model("if_branch", nodes, [tensor("x", [1, 64]), tensor("cond", [], TensorProto.BOOL)],
                       [tensor("y", [1, 64])],
                       [const("axes", [-1], np.int64), const("half", 0.5), const("bias", 0.25)])
    x = rng(9).uniform(30.0, 55.0, size=(1, 64)).astype(np.float32)
    return Example("if_branch", model, ({"x": x, "cond": np.array(True)},), if_branch.__doc__ or "")


def dynamic_batch() -> Example:
    """Row-wise L2-normalize with a symbolic batch dimension; two samples of different batch
    sizes, and only the second one's values are large enough to overflow."""
    nodes = [
        node("Mul", ["x", "x"], ["sq"], "square"),
        node("ReduceSum", ["sq", "axes"], ["sumsq"], "sumsq", keepdims=1),
        node("Sqrt", ["sumsq"], ["norm"], "norm"),
        node("Div", ["x", "norm"], ["y"], "normalize"),
    ]
    model = make_model("dynamic_batch", nodes, [tensor("x", ["batch", 64])], [tensor("y", ["batch", 64])],
                       [const("axes", [-1], np.int64)])
    gen = rng(10)
    small = gen.uniform(-1.0, 1.0, size=(2, 64)).astype(np.float32)
    large = gen.uniform(30.0, 55.0, size=(5, 64)).astype(np.float32)
    return Example("dynamic_batch", model, ({"x": small}, {"x": large}), dynamic_batch.__doc__ or "")


def deep_cnn(blocks: int = 20, channels: int = 16, size: int = 64, gain: float = 64.0, seed: int = 12
             ) -> Example:
    """A 42-layer residual CNN with a high-gain sigmoid head (a dense-prediction map, as text
    detectors make): nothing in it is at risk in FP16, yet its all-FP16 error has a heavy tail.

    Stem conv, ``blocks`` residual blocks (conv-ReLU-conv, add, ReLU) and a 1x1 head conv. Weights
    are He-scaled with BN folded in the way exporters fold it: a per-channel scale (log-normal
    around 1) times the kernel and a per-channel bias; each block's second conv is scaled by 0.3,
    as a small last-BN gamma does. Activations reach about 130, far from 65504. The head is
    ``sigmoid(64 * (conv(h) - 6.2))``: the shift centres the logits on this sample (30% of the
    pixels above 0.5) and the gain makes the map steep at the edges of the blobs. FP16 rounding
    moves the logits by a few 1e-3 relative; at most pixels the sigmoid is saturated and hides it,
    at a few dozen steep ones it shows as errors up to 0.13: relative RMS error 0.009 and p99
    0.006, but max 0.13 (the criterion of versions before the ``rms`` check fails it).
    """
    gen = rng(seed)
    inits: list[onnx.TensorProto] = [const("gain", gain), const("shift", -6.2)]
    nodes: list[onnx.NodeProto] = []

    def conv(name: str, inp: str, out: str, cin: int, cout: int, k: int = 3, relu: bool = True,
             scale: float = 1.0) -> None:
        kernel = gen.normal(0.0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        bn_scale = np.exp(gen.normal(0.0, 0.35, cout)) * scale
        inits.append(const(f"{name}_w", kernel * bn_scale[:, None, None, None]))
        inits.append(const(f"{name}_b", gen.normal(0.0, 0.1, cout) * scale))
        conv_out = f"{name}_pre" if relu else out
        nodes.append(node("Conv", [inp, f"{name}_w", f"{name}_b"], [conv_out], name, pads=[k // 2] * 4))
        if relu:
            nodes.append(node("Relu", [conv_out], [out], f"{name}_relu"))

    conv("stem", "x", "h0", 3, channels)
    h = "h0"
    for i in range(blocks):
        conv(f"b{i}_conv1", h, f"b{i}_a", channels, channels)
        conv(f"b{i}_conv2", f"b{i}_a", f"b{i}_r", channels, channels, relu=False, scale=0.3)
        nodes.append(node("Add", [h, f"b{i}_r"], [f"b{i}_sum"], f"b{i}_add"))
        nodes.append(node("Relu", [f"b{i}_sum"], [f"b{i}_out"], f"b{i}_relu"))
        h = f"b{i}_out"
    conv("head", h, "head_raw", channels, 1, k=1, relu=False)
    nodes += [node("Add", ["head_raw", "shift"], ["head_centred"], "head_shift"),
              node("Mul", ["head_centred", "gain"], ["logits"], "head_gain"),
              node("Sigmoid", ["logits"], ["y"], "sigmoid")]
    model = make_model("deep_cnn", nodes, [tensor("x", [1, 3, size, size])],
                       [tensor("y", [1, 1, size, size])], inits)
    # The sample: a few smooth blobs per channel, normalised, plus a little pixel noise.
    yy, xx = np.mgrid[0:size, 0:size] / size
    x = np.zeros((1, 3, size, size))
    for c in range(3):
        for _ in range(6):
            cx, cy, r = gen.uniform(0.0, 1.0, 3)
            x[0, c] += np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (0.02 + 0.05 * r))
    x = (x - x.mean()) / x.std() + 0.1 * gen.normal(0.0, 1.0, x.shape)
    return Example("deep_cnn", model, ({"x": x.astype(np.float32)},), deep_cnn.__doc__ or "")


# --- the transformer used by benchmarks --------------------------------------------------------

def transformer(layers: int = 12, d_model: int = 64, heads: int = 4, seq: int = 32, ff: int = 256,
                outlier_layers: Sequence[int] = (3, 8), outlier: float = 400.0, seed: int = 11) -> Example:
    """A BERT-style post-LN encoder (decomposed LayerNorm, decomposed Gelu), about 48 nodes a layer.

    In each layer of ``outlier_layers`` the MLP's output bias has one channel at ``outlier``: the
    residual sum entering that layer's second LayerNorm then has squared deviations of about
    1.5e5 (past 65504) in its ``Pow`` node, so all-FP16 output collapses there. LayerNorm then
    brings the value back into range, so each such layer is an independent culprit.
    """
    gen = rng(seed)
    dh = d_model // heads
    inits = [const("two", 2.0), const("eps", 1e-5), const("half", 0.5), const("one", 1.0),
             const("sqrt2", float(np.sqrt(2.0))), const("inv_sqrt_dh", 1.0 / float(np.sqrt(dh))),
             const("heads_shape", [1, seq, heads, dh], np.int64),
             const("model_shape", [1, seq, d_model], np.int64)]
    nodes: list[onnx.NodeProto] = []
    x = "x"

    def weight(name: str, shape: tuple[int, ...], scale: float) -> str:
        inits.append(const(name, gen.normal(0.0, scale, shape)))
        return name

    def linear(p: str, inp: str, out: str, n_in: int, n_out: int, bias: np.ndarray | None = None) -> None:
        w = weight(f"{p}_w", (n_in, n_out), 1.0 / np.sqrt(n_in))
        b = bias if bias is not None else gen.normal(0.0, 0.02, n_out)
        inits.append(const(f"{p}_b", b))
        nodes.append(node("MatMul", [inp, w], [f"{p}_mm"], f"{p}_matmul"))
        nodes.append(node("Add", [f"{p}_mm", f"{p}_b"], [out], f"{p}_bias"))

    def split_heads(p: str, inp: str, perm: list[int]) -> str:
        nodes.append(node("Reshape", [inp, "heads_shape"], [f"{p}_heads"], f"{p}_reshape"))
        nodes.append(node("Transpose", [f"{p}_heads"], [f"{p}_t"], f"{p}_transpose", perm=perm))
        return f"{p}_t"

    for i in range(layers):
        p = f"l{i}"
        for ln in ("ln1", "ln2"):
            inits += [const(f"{p}_{ln}_g", gen.uniform(0.8, 1.2, d_model)),
                      const(f"{p}_{ln}_b", gen.normal(0.0, 0.02, d_model))]
        # attention
        for proj in ("q", "k", "v"):
            linear(f"{p}_{proj}", x, f"{p}_{proj}", d_model, d_model)
        q = split_heads(f"{p}_q", f"{p}_q", [0, 2, 1, 3])
        k = split_heads(f"{p}_k", f"{p}_k", [0, 2, 3, 1])
        v = split_heads(f"{p}_v", f"{p}_v", [0, 2, 1, 3])
        nodes += [
            node("MatMul", [q, k], [f"{p}_scores"], f"{p}_scores"),
            node("Mul", [f"{p}_scores", "inv_sqrt_dh"], [f"{p}_scaled"], f"{p}_scale"),
            node("Softmax", [f"{p}_scaled"], [f"{p}_attn"], f"{p}_softmax", axis=-1),
            node("MatMul", [f"{p}_attn", v], [f"{p}_ctx"], f"{p}_context"),
            node("Transpose", [f"{p}_ctx"], [f"{p}_ctx_t"], f"{p}_merge_transpose", perm=[0, 2, 1, 3]),
            node("Reshape", [f"{p}_ctx_t", "model_shape"], [f"{p}_merged"], f"{p}_merge_reshape"),
        ]
        linear(f"{p}_o", f"{p}_merged", f"{p}_attn_out", d_model, d_model)
        nodes.append(node("Add", [x, f"{p}_attn_out"], [f"{p}_res1"], f"{p}_residual1"))
        nodes += layernorm_nodes(f"{p}_ln1", f"{p}_res1", f"{p}_h1", f"{p}_ln1_g", f"{p}_ln1_b", "eps")
        # MLP with exact (erf) Gelu as exporters write it
        linear(f"{p}_fc1", f"{p}_h1", f"{p}_fc1", d_model, ff)
        nodes += [
            node("Div", [f"{p}_fc1", "sqrt2"], [f"{p}_g_div"], f"{p}_gelu_div"),
            node("Erf", [f"{p}_g_div"], [f"{p}_g_erf"], f"{p}_gelu_erf"),
            node("Add", [f"{p}_g_erf", "one"], [f"{p}_g_add"], f"{p}_gelu_add"),
            node("Mul", [f"{p}_fc1", f"{p}_g_add"], [f"{p}_g_mul"], f"{p}_gelu_mul"),
            node("Mul", [f"{p}_g_mul", "half"], [f"{p}_gelu"], f"{p}_gelu_half"),
        ]
        bias = gen.normal(0.0, 0.02, d_model)
        if i in outlier_layers:
            bias[i % d_model] = outlier
        linear(f"{p}_fc2", f"{p}_gelu", f"{p}_mlp", ff, d_model, bias)
        nodes.append(node("Add", [f"{p}_h1", f"{p}_mlp"], [f"{p}_res2"], f"{p}_residual2"))
        out = "y" if i == layers - 1 else f"{p}_out"
        nodes += layernorm_nodes(f"{p}_ln2", f"{p}_res2", out, f"{p}_ln2_g", f"{p}_ln2_b", "eps")
        x = out
    model = make_model("transformer", nodes, [tensor("x", [1, seq, d_model])],
                       [tensor("y", [1, seq, d_model])], inits)
    feed = {"x": gen.normal(0.0, 1.0, size=(1, seq, d_model)).astype(np.float32)}
    return Example("transformer", model, (feed,), transformer.__doc__ or "")


# Imported here, after the helpers it uses (models.precisions imports them from this module)
from models.precisions import bf16_running_sum, t5_ffn  # noqa: E402

BUILDERS: dict[str, Callable[[], Example]] = {
    "l2_normalize": l2_normalize,
    "nafnet_boxfilter": nafnet_boxfilter,
    "layernorm_eps": layernorm_eps,
    "softmax_nomax": softmax_nomax,
    "log_underflow": log_underflow,
    "benign_mlp": benign_mlp,
    "fp32_nan": fp32_nan,
    "two_culprits": two_culprits,
    "if_branch": if_branch,
    "dynamic_batch": dynamic_batch,
    "deep_cnn": deep_cnn,
    "t5_ffn": t5_ffn,
    "bf16_running_sum": bf16_running_sum,
}
"""The examples written to models/ (the transformer is built on demand: it is large)."""


def build(name: str) -> Example:
    if name == "transformer":
        return transformer()
    return BUILDERS[name]()
