"""Examples for choosing between FP16 and BF16: one fails FP16 by range, one fails BF16 by precision.

FP16 has 10 fraction bits and overflows past 65504; BF16 has FP32's range and 7 fraction bits. A node whose
FP16 failure is range (an activation past 65504) runs fine in BF16, so ``--fallback bf16`` keeps it 16-bit;
a node whose failure is precision (a value that needs more significant bits than the type holds) fails
BF16 worse than FP16 and must stay FP32 whatever the 16-bit type. Both are committed to ``models/`` with
the others (``python -m models``); the node names are part of the contract.
"""

from __future__ import annotations

import numpy as np
import onnx

from models import Example, const, make_model, node, rng, tensor


def t5_rms_norm_nodes(prefix: str, x: str, out: str, weight: str) -> list[onnx.NodeProto]:
    """T5's LayerNorm as torch exports it: ``x * 1/sqrt(mean(x^2) + eps) * weight`` (no mean, no bias)."""
    p = prefix
    return [
        node("Pow", [x, "two"], [f"{p}_sq"], f"{p}_pow"),
        node("ReduceMean", [f"{p}_sq"], [f"{p}_var"], f"{p}_var", axes=[-1], keepdims=1),
        node("Add", [f"{p}_var", "eps"], [f"{p}_vareps"], f"{p}_add_eps"),
        node("Sqrt", [f"{p}_vareps"], [f"{p}_rms"], f"{p}_sqrt"),
        node("Reciprocal", [f"{p}_rms"], [f"{p}_inv"], f"{p}_reciprocal"),
        node("Mul", [x, f"{p}_inv"], [f"{p}_norm"], f"{p}_normalize"),
        node("Mul", [f"{p}_norm", weight], [out], f"{p}_scale"),
    ]


def t5_ffn(seq: int = 32, d_model: int = 64, ff: int = 256) -> Example:
    """A T5 feed-forward block and the next T5 LayerNorm, ``rms_norm(x + wo(relu(wi(x))))``: FP16 fails
    it by range only, so BF16 holds every node FP16 cannot.

    T5 checkpoints (T5 v1.1, mT5, the large ones) overflow FP16 in the feed-forward's output projection
    ``wo``; HF's T5LayerNorm computes its variance in FP32 for that reason. Here ``wo``'s weights are
    scaled (std 2400) so that its output reaches 1.19e5, past FP16's 65504 (50 of the 2048 values),
    while ``x`` (N(0, 1)) and ``wi`` (std 1/sqrt(64)) are modest. The norm is T5's as torch exports it
    (eps 1e-6, no mean, no bias: Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul); its squares reach
    1.4e10 and its RMS 3.6e4, and the output is O(1) again (max 4.4).

    All-FP16: the overflowing ``wo`` values and nearly every square are inf, so the variance is inf,
    its reciprocal 0 and the output 0 (NaN where ``wo`` overflowed): relative RMS error 1. The FP16
    plan pins ``wo`` (half of the FLOPs), the residual and the norm up to its normalising Mul, so it
    keeps 50% of the FLOPs in FP16. Each of those failures is range: BF16 keeps FP32's range and
    rounds ``wo`` by at most 2^-8 relative (output error 0.4% RMS), so ``--fallback bf16`` puts
    ``wo``, the residual, the eps Add, the Sqrt and the normalising Mul in BF16: 99.8% of the FLOPs
    in 16 bits. Pow, ReduceMean and Reciprocal stay FP32 on the generic target (onnxruntime's CUDA
    provider has no BF16 kernel for them); they are 0.2% of the FLOPs.
    """
    gen = rng(30)
    inits = [
        const("two", 2.0), const("eps", 1e-6),
        const("wi", gen.normal(0.0, 1.0 / np.sqrt(d_model), (d_model, ff))),
        const("wo", gen.normal(0.0, 2400.0, (ff, d_model))),
        const("ln_weight", gen.uniform(0.8, 1.2, d_model)),
    ]
    nodes = [
        node("MatMul", ["x", "wi"], ["h"], "wi"),
        node("Relu", ["h"], ["h_relu"], "relu"),
        node("MatMul", ["h_relu", "wo"], ["ffn_out"], "wo"),
        node("Add", ["x", "ffn_out"], ["res"], "residual"),
        *t5_rms_norm_nodes("ln", "res", "y", "ln_weight"),
    ]
    model = make_model("t5_ffn", nodes, [tensor("x", [seq, d_model])], [tensor("y", [seq, d_model])], inits)
    x = gen.normal(0.0, 1.0, (seq, d_model)).astype(np.float32)
    return Example("t5_ffn", model, ({"x": x},), t5_ffn.__doc__ or "")


def bf16_running_sum(length: int = 4096, dim: int = 16) -> Example:
    """Sinusoidal position features from a running sum, ``pos = CumSum(mask)``, ``[sin, cos](pos * f)``:
    BF16 fails it by precision, worse than FP16, so its culprits stay FP32 whatever the 16-bit type.

    Positions are counted over a float attention mask of ones [1, 4096] (as models that allow left
    padding count them); the angle is ``pos * inv_freq`` with inv_freq = 10000^(-2i/16), i < 8. No value
    exceeds 4096, so nothing overflows: the failure is the count's precision. FP16 holds integers
    exactly only up to 2048 (spacing 2 up to 4096), BF16 (7 fraction bits) only up to 256 (spacing 16
    from 2048 to 4096). A 16-bit position or angle is off by up to 1 (FP16) or 8 (BF16) radians at
    inv_freq 1, so the fastest features are noise over half the sequence: all-FP16 relative RMS
    error 0.20, all-BF16 0.64.

    With ``--fallback bf16`` and with ``--low-precision bf16`` the CumSum ``positions``, the Unsqueeze
    ``pos_column`` (it carries the positions), the Mul ``angle`` and the Sin and Cos stay FP32 and only
    the Concat is 16-bit. Which of them BF16 was *measured* on depends on the target. On the generic
    one onnxruntime's CUDA provider has no BF16 CumSum kernel, and Sin and Cos admit no bfloat16 in
    their schema before opset 22 (this model is opset 17), so the measured BF16 failures are the
    ``angle`` Mul (relative RMS error 0.64 when it alone is BF16) and ``pos_column``; with ``--target
    tensorrt`` (which has a BF16 CumSum) the CumSum ``positions`` is measured too (0.58).
    """
    half = dim // 2
    inv_freq = 1.0 / 10000.0 ** (np.arange(half) * 2.0 / dim)
    nodes = [
        node("CumSum", ["mask", "axis"], ["pos"], "positions"),
        node("Unsqueeze", ["pos", "last"], ["pos_col"], "pos_column"),
        node("Mul", ["pos_col", "inv_freq"], ["theta"], "angle"),
        node("Sin", ["theta"], ["sin"], "sin"),
        node("Cos", ["theta"], ["cos"], "cos"),
        node("Concat", ["sin", "cos"], ["y"], "features", axis=-1),
    ]
    inits = [const("axis", 1, np.int64), const("last", [-1], np.int64), const("inv_freq", inv_freq)]
    model = make_model("bf16_running_sum", nodes, [tensor("mask", [1, length])],
                       [tensor("y", [1, length, dim])], inits)
    mask = np.ones((1, length), np.float32)
    return Example("bf16_running_sum", model, ({"mask": mask},), bf16_running_sum.__doc__ or "")
