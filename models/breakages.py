"""FP16 breakages confined to a small part of a large output, and their rounding-noise twins.

The examples in :mod:`models` break a whole output. These break one row, one token or one element
of an output that is otherwise fine, so the whole-output error stays small: the verdict must
still fail them (:mod:`onnx_precision.verdict`). Each is real FP16 behaviour of a small model
(emulated all-FP16), not an edited array. They are built on demand (tests, the measurement
script), not written to ``models/``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models import Example, const, layernorm_nodes, make_model, node, rng, tensor


def rows_l2_normalize(rows: int = 64, width: int = 64, big_row: int | None = 17) -> Example:
    """Row-wise L2-normalize of ``rows`` rows: row ``big_row`` is 40x larger, its sum of squares
    (about 1e5) overflows FP16 and the row becomes 0 (x / inf); the other rows are fine."""
    nodes = [
        node("Mul", ["x", "x"], ["sq"], "square"),
        node("ReduceSum", ["sq", "axes"], ["sumsq"], "sumsq", keepdims=1),
        node("Sqrt", ["sumsq"], ["norm"], "norm"),
        node("Div", ["x", "norm"], ["y"], "normalize"),
    ]
    model = make_model("rows_l2_normalize", nodes, [tensor("x", [rows, width])], [tensor("y", [rows, width])],
                       [const("axes", [-1], np.int64)])
    x = rng(20).normal(0.0, 1.0, (rows, width)).astype(np.float32)
    if big_row is not None:
        x[big_row] *= 40.0
    return Example("rows_l2_normalize", model, ({"x": x},), rows_l2_normalize.__doc__ or "")


def token_attention(offset: float = 4000.0, token: int = 40, head: int = 1, seq: int = 64, dim: int = 32
                    ) -> Example:
    """Attention ``softmax(q k^T + bias) v`` (4 heads) whose position bias adds ``offset`` to every
    logit of one token in one head. The logits then sit near ``offset``, where FP16's spacing is
    offset/1024: 4000 rounds them by up to 1, which saturates that token's attention row; 30000
    by up to 8, which collapses it. Offsets of a few hundred round by 0.1-0.25: rounding noise.
    Outputs: the probabilities ``p`` [1, 4, seq, seq] and the context ``ctx`` [1, 4, seq, dim]."""
    gen = rng(21)
    bias = np.zeros((1, 4, seq, 1), np.float32)
    bias[0, head, token] = offset
    nodes = [
        node("MatMul", ["q", "kt"], ["scores"], "scores"),
        node("Add", ["scores", "bias"], ["biased"], "position_bias"),
        node("Softmax", ["biased"], ["p"], "softmax", axis=-1),
        node("MatMul", ["p", "v"], ["ctx"], "context"),
    ]
    model = make_model("token_attention", nodes,
                       [tensor("q", [1, 4, seq, dim]), tensor("kt", [1, 4, dim, seq]),
                        tensor("v", [1, 4, seq, dim])],
                       [tensor("p", [1, 4, seq, seq]), tensor("ctx", [1, 4, seq, dim])],
                       [const("bias", bias)])
    feed = {"q": gen.normal(0.0, 0.5, (1, 4, seq, dim)).astype(np.float32),
            "kt": gen.normal(0.0, 1.0, (1, 4, dim, seq)).astype(np.float32),
            "v": gen.normal(0.0, 1.0, (1, 4, seq, dim)).astype(np.float32)}
    return Example("token_attention", model, (feed,), token_attention.__doc__ or "")


def layernorm_row_offset(rows: int = 16, width: int = 256, row: int = 5) -> Example:
    """Decomposed LayerNorm (eps 1e-5) over ``rows`` rows; row ``row`` is 1000 + N(0, 0.05), so
    FP16 (spacing 0.5 at 1000) rounds its deviations from the mean to 0 or +-0.5 and the row's
    normalised values are garbage, finite, where FP32 gives values of about +-1."""
    gen = rng(22)
    nodes = layernorm_nodes("ln", "x", "y", "gamma", "beta", "eps")
    inits = [const("two", 2.0), const("eps", 1e-5), const("gamma", gen.uniform(0.5, 1.5, width)),
             const("beta", gen.uniform(-0.1, 0.1, width))]
    model = make_model("layernorm_row_offset", nodes, [tensor("x", [rows, width])],
                       [tensor("y", [rows, width])], inits)
    x = gen.normal(0.0, 1.0, (rows, width))
    x[row] = 1000.0 + gen.normal(0.0, 0.05, width)
    return Example("layernorm_row_offset", model, ({"x": x.astype(np.float32)},),
                   layernorm_row_offset.__doc__ or "")


def one_nan() -> Example:
    """``x / y * 0.5`` over 8x128 elements where one ``y`` is 1e-9, which FP16 flushes to 0, and
    its ``x`` is 0: one NaN (0/0) in 1024 otherwise exact elements."""
    gen = rng(23)
    nodes = [node("Div", ["x", "y"], ["q"], "divide"), node("Mul", ["q", "half"], ["z"], "halve")]
    model = make_model("one_nan", nodes, [tensor("x", [8, 128]), tensor("y", [8, 128])],
                       [tensor("z", [8, 128])], [const("half", 0.5)])
    x = gen.normal(0.0, 1.0, (8, 128)).astype(np.float32)
    y = gen.uniform(0.5, 2.0, (8, 128)).astype(np.float32)
    x[3, 77], y[3, 77] = 0.0, 1e-9
    return Example("one_nan", model, ({"x": x, "y": y},), one_nan.__doc__ or "")


BREAKAGES: dict[str, Callable[[], Example]] = {
    "row_of_64_zeroed": rows_l2_normalize,
    "row_of_1024_zeroed": lambda: rows_l2_normalize(rows=1024, big_row=500),
    "token_attention_saturated": token_attention,
    "token_attention_collapsed": lambda: token_attention(offset=30000.0),
    "layernorm_row_collapsed": layernorm_row_offset,
    "one_nan_in_1024": one_nan,
}
"""Each breaks a small part of its output in all-FP16; the verdict must fail every one."""

NOISE: dict[str, Callable[[], Example]] = {
    "rows_l2_normalize": lambda: rows_l2_normalize(big_row=None),
    "token_attention": lambda: token_attention(offset=0.0),
    "token_attention_logits_300": lambda: token_attention(offset=300.0),
}
"""The same models where all-FP16 is rounding noise only; the verdict must pass every one."""
