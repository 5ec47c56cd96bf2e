"""Decoders and streaming models, for the generation's tests (:mod:`onnx_precision.generation`).

Each is run over many steps, its outputs fed back as inputs, and each is a directory of
``models/decoders/`` as onnxruntime-genai lays a model out: ``model.onnx``, its first step's feed
``prefill.npz`` and, for the Llama, ``genai_config.json``. ``python -m models.decoders`` writes them
(byte-identically on every run), ``--check`` compares the committed files with the builders.

* :func:`tiny_llama`: a Llama-architecture decoder with a KV cache under Hugging Face optimum's names
  (``past_key_values.N.key`` in, ``present.N.key`` out), 2 layers of width 16: RMSNorm, rotary
  positions, a causal mask with float32's minimum as its sentinel, SwiGLU. FP16 holds it over a
  whole generation. Its graph is :func:`llama_decoder`'s, which also builds real Llamas from their
  weights (grouped-query attention, tied embeddings: scripts/decoder_models.py's SmolLM2-135M).
* :func:`growing_state`: a token decoder with a recurrent state ``h`` -> ``hN`` that only grows (a
  running sum of positive increments, as a linear-attention normaliser is): its prefill passes in
  FP16, and FP16's state passes 65 504 around the 30th decode step while FP32's is fine.
* :func:`streaming_state`: a streaming model with Silero VAD's names (``input`` chunk and ``state``
  in, ``output`` and ``stateN`` out), two tanh recurrent layers; the sample is 8 chunks of 64.

Node names are part of the contract: the tests pin the state's nodes by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from models import Example, const, make_model, node, rng, tensor

INT64 = TensorProto.INT64
FLOAT32_MIN = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class LlamaShape:
    """The sizes and constants of a Llama decoder: ``kv_heads`` below ``heads`` is grouped-query
    attention (each key/value head serves ``heads // kv_heads`` query heads, as transformers'
    ``repeat_kv`` lays them out); ``tied``: the output projection is the token embedding's transpose."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int = 0  # 0: as many as ``heads``
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    tied: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads


# name, shape -> the FP32 weight the builder asks for: ``embed_tokens`` [vocab, hidden], ``lm_head``
# [hidden, vocab] (not asked when tied), ``norm_w``, ``layers.N.input_norm_w``, ``layers.N.post_norm_w``
# [hidden], ``layers.N.{q,k,v,o,gate,up,down}_proj`` [in, out]; asked in the order the graph uses them
Weights = Callable[[str, tuple[int, ...]], np.ndarray]


def llama_decoder(name: str, shape: LlamaShape, weights: Weights) -> onnx.ModelProto:
    """A Llama decoder as optimum exports one with its KV cache (inputs ``input_ids``,
    ``attention_mask``, ``position_ids``, ``past_key_values.N.key/value`` of ``shape.kv`` heads;
    outputs ``logits``, ``present.N.key/value``), its weights from ``weights``."""
    hidden, heads, dim, kv, vocab = shape.hidden, shape.heads, shape.head_dim, shape.kv, shape.vocab
    grouped = kv != heads
    inits: list[onnx.TensorProto] = [
        const("one", 1.0), const("eps", shape.rms_eps), const("two", 2.0), const("float_min", FLOAT32_MIN),
        const("scale", 1.0 / np.sqrt(dim)), const("zero_i", 0, np.int64), const("one_i", 1, np.int64),
        const("axis_last", [-1], np.int64), const("axis_1", [1], np.int64),
        # the mask [batch, total] as [batch, 1, 1, total] against the scores [batch, heads, seq, total]
        # (grouped: [batch, 1, 1, 1, total] against [batch, kv, group, seq, total])
        const("axes_123", [1, 2, 3], np.int64) if grouped else const("axes_12", [1, 2], np.int64),
        const("heads_shape", [0, 0, heads, dim], np.int64), const("merged_shape", [0, 0, hidden], np.int64),
        const("half_lo", [0], np.int64), const("half_mid", [dim // 2], np.int64),
        const("half_hi", [dim], np.int64),
        const("inv_freq", 1.0 / (shape.rope_theta ** (np.arange(0, dim, 2) / dim))),
        const("embed_tokens", weights("embed_tokens", (vocab, hidden))),
    ]
    if not shape.tied:
        inits.append(const("lm_head", weights("lm_head", (hidden, vocab))))
    inits.append(const("norm_w", weights("norm_w", (hidden,))))
    if grouped:
        # query heads as [batch, kv, group, seq, dim] against keys and values as [batch, kv, 1, seq, dim]:
        # MatMul broadcasts each key/value head over its group, with no copy of the cache
        inits += [const("kv_heads_shape", [0, 0, kv, dim], np.int64),
                  const("groups_shape", [0, kv, heads // kv, -1, dim], np.int64),
                  const("ungrouped_shape", [0, heads, -1, dim], np.int64),
                  const("axis_2", [2], np.int64)]
    nodes = [
        node("Gather", ["embed_tokens", "input_ids"], ["x0"], "embed"),
        # rotary angles from the positions: cos/sin of position * inv_freq, [batch, 1, seq, dim]
        node("Cast", ["position_ids"], ["pos_f"], "rotary_pos_cast", to=TensorProto.FLOAT),
        node("Unsqueeze", ["pos_f", "axis_last"], ["pos_3d"], "rotary_pos_unsqueeze"),
        node("Mul", ["pos_3d", "inv_freq"], ["freqs"], "rotary_freqs"),
        node("Concat", ["freqs", "freqs"], ["angles"], "rotary_angles", axis=-1),
        node("Cos", ["angles"], ["cos_3d"], "rotary_cos"),
        node("Sin", ["angles"], ["sin_3d"], "rotary_sin"),
        node("Unsqueeze", ["cos_3d", "axis_1"], ["cos"], "rotary_cos_unsqueeze"),
        node("Unsqueeze", ["sin_3d", "axis_1"], ["sin"], "rotary_sin_unsqueeze"),
        # the additive mask: a key is seen where it is not padding and not after the query;
        # (1 - allowed) * float32's minimum, as transformers writes it
        node("Shape", ["attention_mask"], ["mask_shape"], "mask_shape"),
        node("Gather", ["mask_shape", "one_i"], ["total_len"], "mask_total_len", axis=0),
        node("Shape", ["input_ids"], ["ids_shape"], "mask_ids_shape"),
        node("Gather", ["ids_shape", "one_i"], ["seq_len"], "mask_seq_len", axis=0),
        node("Sub", ["total_len", "seq_len"], ["past_len"], "mask_past_len"),
        node("Range", ["zero_i", "total_len", "one_i"], ["key_pos"], "mask_key_pos"),
        node("Range", ["past_len", "total_len", "one_i"], ["query_pos"], "mask_query_pos"),
        node("Unsqueeze", ["query_pos", "axis_last"], ["query_col"], "mask_query_col"),
        node("LessOrEqual", ["key_pos", "query_col"], ["causal"], "mask_causal"),
        node("Cast", ["attention_mask"], ["mask_bool"], "mask_cast_bool", to=TensorProto.BOOL),
        node("Unsqueeze", ["mask_bool", "axes_123" if grouped else "axes_12"], ["mask_4d"], "mask_unsqueeze"),
        node("And", ["causal", "mask_4d"], ["allowed"], "mask_and"),
        node("Cast", ["allowed"], ["allowed_f"], "mask_cast_float", to=TensorProto.FLOAT),
        node("Sub", ["one", "allowed_f"], ["inverted"], "mask_invert"),
        node("Mul", ["inverted", "float_min"], ["mask_add"], "mask_sentinel"),
    ]
    inputs = [tensor("input_ids", ["batch", "sequence_length"], INT64),
              tensor("attention_mask", ["batch", "total_sequence_length"], INT64),
              tensor("position_ids", ["batch", "sequence_length"], INT64)]
    outputs = [tensor("logits", ["batch", "sequence_length", vocab])]

    def weight(name: str, n_in: int, n_out: int) -> str:
        inits.append(const(name, weights(name, (n_in, n_out))))
        return name

    def rms_norm(p: str, x: str, w: str, out: str) -> None:
        nodes.extend([
            node("Pow", [x, "two"], [f"{p}_sq"], f"{p}_pow"),
            node("ReduceMean", [f"{p}_sq"], [f"{p}_var"], f"{p}_mean", axes=[-1], keepdims=1),
            node("Add", [f"{p}_var", "eps"], [f"{p}_var_eps"], f"{p}_add_eps"),
            node("Sqrt", [f"{p}_var_eps"], [f"{p}_std"], f"{p}_sqrt"),
            node("Reciprocal", [f"{p}_std"], [f"{p}_inv"], f"{p}_reciprocal"),
            node("Mul", [x, f"{p}_inv"], [f"{p}_normed"], f"{p}_normalize"),
            node("Mul", [f"{p}_normed", w], [out], f"{p}_weight"),
        ])

    def rotate(p: str, x: str, out: str) -> None:
        """x * cos + rotate_half(x) * sin."""
        nodes.extend([
            node("Slice", [x, "half_lo", "half_mid", "axis_last"], [f"{p}_x1"], f"{p}_slice_lo"),
            node("Slice", [x, "half_mid", "half_hi", "axis_last"], [f"{p}_x2"], f"{p}_slice_hi"),
            node("Neg", [f"{p}_x2"], [f"{p}_neg"], f"{p}_neg"),
            node("Concat", [f"{p}_neg", f"{p}_x1"], [f"{p}_rot"], f"{p}_rotate_half", axis=-1),
            node("Mul", [x, "cos"], [f"{p}_xcos"], f"{p}_mul_cos"),
            node("Mul", [f"{p}_rot", "sin"], [f"{p}_rsin"], f"{p}_mul_sin"),
            node("Add", [f"{p}_xcos", f"{p}_rsin"], [out], f"{p}_add"),
        ])

    x = "x0"
    for i in range(shape.layers):
        p = f"layers.{i}"
        inits += [const(f"{p}.input_norm_w", weights(f"{p}.input_norm_w", (hidden,))),
                  const(f"{p}.post_norm_w", weights(f"{p}.post_norm_w", (hidden,)))]
        rms_norm(f"{p}/input_norm", x, f"{p}.input_norm_w", f"{p}_h")
        for proj, proj_heads in (("q", heads), ("k", kv), ("v", kv)):
            nodes.append(node("MatMul", [f"{p}_h", weight(f"{p}.{proj}_proj", hidden, proj_heads * dim)],
                              [f"{p}_{proj}_flat"], f"{p}/attn/{proj}_proj"))
            nodes.append(node("Reshape", [f"{p}_{proj}_flat",
                                          "heads_shape" if proj_heads == heads else "kv_heads_shape"],
                              [f"{p}_{proj}_bshd"], f"{p}/attn/{proj}_reshape"))
            nodes.append(node("Transpose", [f"{p}_{proj}_bshd"], [f"{p}_{proj}_bhsd"],
                              f"{p}/attn/{proj}_transpose", perm=[0, 2, 1, 3]))
        rotate(f"{p}/attn/q_rotary", f"{p}_q_bhsd", f"{p}_q")
        rotate(f"{p}/attn/k_rotary", f"{p}_k_bhsd", f"{p}_k")
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        present_k, present_v = f"present.{i}.key", f"present.{i}.value"
        inputs += [tensor(past_k, ["batch", kv, "past_sequence_length", dim]),
                   tensor(past_v, ["batch", kv, "past_sequence_length", dim])]
        outputs += [tensor(present_k, ["batch", kv, "total_sequence_length", dim]),
                    tensor(present_v, ["batch", kv, "total_sequence_length", dim])]
        nodes += [
            node("Concat", [past_k, f"{p}_k"], [present_k], f"{p}/attn/k_cache", axis=2),
            node("Concat", [past_v, f"{p}_v_bhsd"], [present_v], f"{p}/attn/v_cache", axis=2),
        ]
        query, keys, values, perm = f"{p}_q", present_k, present_v, [0, 1, 3, 2]
        if grouped:
            query, keys, values, perm = f"{p}_q_groups", f"{p}_k_groups", f"{p}_v_groups", [0, 1, 2, 4, 3]
            nodes += [
                node("Reshape", [f"{p}_q", "groups_shape"], [query], f"{p}/attn/q_groups"),
                node("Unsqueeze", [present_k, "axis_2"], [keys], f"{p}/attn/k_groups"),
                node("Unsqueeze", [present_v, "axis_2"], [values], f"{p}/attn/v_groups"),
            ]
        nodes += [
            node("Transpose", [keys], [f"{p}_kt"], f"{p}/attn/k_transpose_t", perm=perm),
            node("MatMul", [query, f"{p}_kt"], [f"{p}_qk"], f"{p}/attn/qk"),
            node("Mul", [f"{p}_qk", "scale"], [f"{p}_qk_scaled"], f"{p}/attn/scale"),
            node("Add", [f"{p}_qk_scaled", "mask_add"], [f"{p}_scores"], f"{p}/attn/add_mask"),
            node("Softmax", [f"{p}_scores"], [f"{p}_probs"], f"{p}/attn/softmax", axis=-1),
            node("MatMul", [f"{p}_probs", values], [f"{p}_ctx_groups" if grouped else f"{p}_ctx"],
                 f"{p}/attn/context"),
        ]
        if grouped:
            nodes.append(node("Reshape", [f"{p}_ctx_groups", "ungrouped_shape"], [f"{p}_ctx"],
                              f"{p}/attn/ctx_ungroup"))
        nodes += [
            node("Transpose", [f"{p}_ctx"], [f"{p}_ctx_bshd"], f"{p}/attn/ctx_transpose", perm=[0, 2, 1, 3]),
            node("Reshape", [f"{p}_ctx_bshd", "merged_shape"], [f"{p}_ctx_flat"], f"{p}/attn/ctx_reshape"),
            node("MatMul", [f"{p}_ctx_flat", weight(f"{p}.o_proj", hidden, hidden)], [f"{p}_attn_out"],
                 f"{p}/attn/o_proj"),
            node("Add", [x, f"{p}_attn_out"], [f"{p}_res1"], f"{p}/Add"),
        ]
        rms_norm(f"{p}/post_norm", f"{p}_res1", f"{p}.post_norm_w", f"{p}_h2")
        nodes += [
            node("MatMul", [f"{p}_h2", weight(f"{p}.gate_proj", hidden, shape.ffn)], [f"{p}_gate"],
                 f"{p}/mlp/gate_proj"),
            node("MatMul", [f"{p}_h2", weight(f"{p}.up_proj", hidden, shape.ffn)], [f"{p}_up"],
                 f"{p}/mlp/up_proj"),
            node("Sigmoid", [f"{p}_gate"], [f"{p}_gate_sig"], f"{p}/mlp/sigmoid"),
            node("Mul", [f"{p}_gate", f"{p}_gate_sig"], [f"{p}_silu"], f"{p}/mlp/silu"),
            node("Mul", [f"{p}_silu", f"{p}_up"], [f"{p}_act"], f"{p}/mlp/gate_up"),
            node("MatMul", [f"{p}_act", weight(f"{p}.down_proj", shape.ffn, hidden)], [f"{p}_mlp"],
                 f"{p}/mlp/down_proj"),
            node("Add", [f"{p}_res1", f"{p}_mlp"], [f"{p}_out"], f"{p}/Add_1"),
        ]
        x = f"{p}_out"
    rms_norm("norm", x, "norm_w", "final")
    if shape.tied:
        nodes.append(node("Transpose", ["embed_tokens"], ["lm_head"], "lm_head_tied", perm=[1, 0]))
    nodes.append(node("MatMul", ["final", "lm_head"], ["logits"], "lm_head"))
    return make_model(name, nodes, inputs, outputs, inits)


def llama_prefill(shape: LlamaShape, input_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The first step's feed of :func:`llama_decoder`: the prompt ``input_ids`` [batch, tokens], all
    attended, and empty pasts."""
    batch, tokens = input_ids.shape
    feed: dict[str, np.ndarray] = {
        "input_ids": input_ids.astype(np.int64),
        "attention_mask": np.ones((batch, tokens), np.int64),
        "position_ids": np.tile(np.arange(tokens, dtype=np.int64), (batch, 1)),
    }
    for i in range(shape.layers):
        for kind in ("key", "value"):
            feed[f"past_key_values.{i}.{kind}"] = np.zeros((batch, shape.kv, 0, shape.head_dim), np.float32)
    return feed


def tiny_llama(layers: int = 2, hidden: int = 16, heads: int = 2, ffn: int = 32, vocab: int = 64,
               prefill: int = 8, seed: int = 40) -> Example:
    """A Llama decoder as optimum exports one with its KV cache (inputs ``input_ids``,
    ``attention_mask``, ``position_ids``, ``past_key_values.N.key/value``; outputs ``logits``,
    ``present.N.key/value``); its prefill feed has ``prefill`` tokens and empty pasts."""
    gen = rng(seed)
    shape = LlamaShape(layers, hidden, heads, ffn, vocab)

    def random(name: str, dims: tuple[int, ...]) -> np.ndarray:
        if name.endswith("norm_w"):
            return gen.uniform(0.8, 1.2, dims)
        if name == "embed_tokens":
            return gen.normal(0.0, 1.0, dims)
        if name == "lm_head":
            return gen.normal(0.0, 2.0 / np.sqrt(hidden), dims)
        return gen.normal(0.0, 1.0 / np.sqrt(dims[0]), dims)

    model = llama_decoder("tiny_llama", shape, random)
    feed = llama_prefill(shape, gen.integers(0, vocab, (1, prefill)))
    return Example("tiny_llama", model, (feed,), tiny_llama.__doc__ or "")


def tiny_llama_genai_config(layers: int = 2, hidden: int = 16, heads: int = 2, vocab: int = 64) -> dict:
    """The ``genai_config.json`` onnxruntime-genai's builder writes beside :func:`tiny_llama`."""
    return {
        "model": {
            "type": "llama", "vocab_size": vocab, "context_length": 128, "bos_token_id": 1,
            "eos_token_id": 2, "pad_token_id": 0,
            "decoder": {
                "filename": "model.onnx", "head_size": hidden // heads, "hidden_size": hidden,
                "num_attention_heads": heads, "num_key_value_heads": heads, "num_hidden_layers": layers,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "num_beams": 1, "max_length": 128, "min_length": 0},
    }


def growing_state(hidden: int = 16, vocab: int = 32, prefill: int = 4, gain: float = 760.0,
                  seed: int = 41) -> Example:
    """A token decoder with a recurrent state that only grows: ``h`` (the running sum of positive
    per-token increments, ``gain * softplus(e W + b)``) is added to each position's embedding at
    1e-4 and read out as ``logits``; ``hN`` is its value after the last position. The prefill's state
    is a few thousand; FP32's passes 65 504 near the 30th decode step, where FP16's becomes inf and
    every logit NaN."""
    gen = rng(seed)
    inits = [
        const("embed", gen.normal(0.0, 1.0, (vocab, hidden))),
        const("inc_w", gen.normal(0.0, 0.5, (hidden, hidden))),
        const("inc_b", gen.normal(0.5, 0.2, hidden)),
        const("gain", gain), const("read_scale", 1e-4), const("seq_axis", 1, np.int64),
        const("last", -1, np.int64), const("axis_1", [1], np.int64),
        const("out_w", gen.normal(0.0, 2.0 / np.sqrt(hidden), (hidden, vocab))),
    ]
    nodes = [
        node("Gather", ["embed", "input_ids"], ["e"], "embed"),
        node("MatMul", ["e", "inc_w"], ["inc_mm"], "state/inc_matmul"),
        node("Add", ["inc_mm", "inc_b"], ["inc_pre"], "state/inc_bias"),
        node("Softplus", ["inc_pre"], ["inc_pos"], "state/inc_softplus"),
        node("Mul", ["inc_pos", "gain"], ["inc"], "state/inc_gain"),
        node("CumSum", ["inc", "seq_axis"], ["running"], "state/cumsum"),
        node("Unsqueeze", ["h", "axis_1"], ["h_3d"], "state/h_unsqueeze"),
        node("Add", ["running", "h_3d"], ["states"], "state/add_past"),
        node("Gather", ["states", "last"], ["hN"], "state/last", axis=1),
        node("Mul", ["states", "read_scale"], ["read"], "readout/scale"),
        node("Add", ["e", "read"], ["mixed"], "readout/add"),
        node("MatMul", ["mixed", "out_w"], ["logits"], "readout/lm_head"),
    ]
    inputs = [tensor("input_ids", ["batch", "sequence_length"], INT64), tensor("h", ["batch", hidden])]
    outputs = [tensor("logits", ["batch", "sequence_length", vocab]), tensor("hN", ["batch", hidden])]
    model = make_model("growing_state", nodes, inputs, outputs, inits)
    feed: dict[str, np.ndarray] = {"input_ids": gen.integers(0, vocab, (1, prefill)).astype(np.int64),
                                   "h": np.zeros((1, hidden), np.float32)}
    return Example("growing_state", model, (feed,), growing_state.__doc__ or "")


# The nodes whose FP16 breaks growing_state: the state, from its running sum to its scaled read-out.
GROWING_STATE_NODES = ("state/h_unsqueeze", "state/cumsum", "state/add_past", "state/last", "readout/scale")


def streaming_state(chunk: int = 64, hidden: int = 16, chunks: int = 8, seed: int = 42) -> Example:
    """A streaming model with Silero VAD v5's names: an ``input`` chunk of ``chunk`` samples and a
    ``state`` [2, batch, hidden] in, a speech probability ``output`` and the next state ``stateN``
    out; two tanh recurrent layers, bounded. The sample is ``chunks`` chunks of a noisy tone."""
    gen = rng(seed)
    inits = [
        const("in_w", gen.normal(0.0, 1.0 / np.sqrt(chunk), (chunk, hidden))),
        const("out_w", gen.normal(0.0, 1.0, (hidden, 1))), const("out_b", 0.1),
        const("idx_0", 0, np.int64), const("idx_1", 1, np.int64), const("axis_0", [0], np.int64),
    ]
    for layer in (0, 1):
        inits += [const(f"rnn{layer}_wh", gen.normal(0.0, 0.9 / np.sqrt(hidden), (hidden, hidden))),
                  const(f"rnn{layer}_wx", gen.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, hidden)))]
    nodes = [
        node("MatMul", ["input", "in_w"], ["feat_mm"], "encoder/matmul"),
        node("Tanh", ["feat_mm"], ["feat"], "encoder/tanh"),
    ]
    below = "feat"
    for layer in (0, 1):
        p = f"rnn{layer}"
        nodes += [
            node("Gather", ["state", f"idx_{layer}"], [f"{p}_h"], f"{p}/state", axis=0),
            node("MatMul", [f"{p}_h", f"{p}_wh"], [f"{p}_hh"], f"{p}/hh"),
            node("MatMul", [below, f"{p}_wx"], [f"{p}_xh"], f"{p}/xh"),
            node("Add", [f"{p}_hh", f"{p}_xh"], [f"{p}_pre"], f"{p}/add"),
            node("Tanh", [f"{p}_pre"], [f"{p}_new"], f"{p}/tanh"),
            node("Unsqueeze", [f"{p}_new", "axis_0"], [f"{p}_new_3d"], f"{p}/unsqueeze"),
        ]
        below = f"{p}_new"
    nodes += [
        node("Concat", ["rnn0_new_3d", "rnn1_new_3d"], ["stateN"], "state_out", axis=0),
        node("MatMul", ["rnn1_new", "out_w"], ["logit_mm"], "decoder/matmul"),
        node("Add", ["logit_mm", "out_b"], ["logit"], "decoder/bias"),
        node("Sigmoid", ["logit"], ["output"], "decoder/sigmoid"),
    ]
    model = make_model("streaming_state", nodes,
                       [tensor("input", ["batch", chunk]), tensor("state", [2, "batch", hidden])],
                       [tensor("output", ["batch", 1]), tensor("stateN", [2, "batch", hidden])], inits)
    t = np.arange(chunk * chunks) / 16000.0
    signal = 0.5 * np.sin(2 * np.pi * 440.0 * t) + 0.05 * gen.normal(0.0, 1.0, t.shape)
    feed: dict[str, np.ndarray] = {"input": signal[None, :].astype(np.float32),
                                   "state": np.zeros((2, 1, hidden), np.float32)}
    return Example("streaming_state", model, (feed,), streaming_state.__doc__ or "")


BUILDERS: dict[str, Callable[[], Example]] = {
    "tiny_llama": tiny_llama,
    "growing_state": growing_state,
    "streaming_state": streaming_state,
}
# Files other than the model and its feed, per model directory
EXTRA_FILES: dict[str, dict[str, Callable[[], bytes]]] = {
    "tiny_llama": {"genai_config.json": lambda: _json(tiny_llama_genai_config())},
}


def _json(value: dict) -> bytes:
    return json.dumps(value, indent=2).encode() + b"\n"
