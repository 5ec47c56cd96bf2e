"""models.decoders.llama_decoder beyond the tiny Llama (scripts/decoder_models.py builds SmolLM2-135M
with it): grouped-query attention computes what the same heads repeated compute, and a tied output
projection what the embedding's transpose as its own weight computes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort

from models.decoders import LlamaShape, llama_decoder, llama_prefill

SHAPE = LlamaShape(layers=2, hidden=16, heads=4, ffn=24, vocab=32, kv_heads=2, rope_theta=500.0, rms_eps=1e-5)


def _weights(shape: LlamaShape, seed: int = 7) -> dict[str, np.ndarray]:
    """Random weights of every name the builder asks for (keys and values of ``shape.kv`` heads)."""
    gen = np.random.default_rng(seed)
    dim, h, f = shape.head_dim, shape.hidden, shape.ffn
    out = {"embed_tokens": gen.normal(0.0, 1.0, (shape.vocab, h)),
           "lm_head": gen.normal(0.0, 0.5, (h, shape.vocab)), "norm_w": gen.uniform(0.8, 1.2, h)}
    for i in range(shape.layers):
        sizes = {"q_proj": (h, h), "k_proj": (h, shape.kv * dim), "v_proj": (h, shape.kv * dim),
                 "o_proj": (h, h), "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}
        out.update({f"layers.{i}.{name}": gen.normal(0.0, 1.0 / np.sqrt(n_in), (n_in, n_out))
                    for name, (n_in, n_out) in sizes.items()})
        out.update({f"layers.{i}.{norm}": gen.uniform(0.8, 1.2, h)
                    for norm in ("input_norm_w", "post_norm_w")})
    return out


def _generate(shape: LlamaShape, weights: dict[str, np.ndarray], steps: int = 3
              ) -> list[dict[str, np.ndarray]]:
    """Each step's outputs of a greedy generation from a 5-token prompt."""
    asked: list[str] = []

    def weight(name: str, dims: tuple[int, ...]) -> np.ndarray:
        asked.append(name)
        assert weights[name].shape == dims, name
        return weights[name]

    model = llama_decoder("llama", shape, weight)
    assert ("lm_head" in asked) != shape.tied
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feed = llama_prefill(shape, np.array([[3, 1, 4, 1, 5]]))
    outs = []
    for _ in range(steps + 1):
        out = dict(zip(names, session.run(names, feed)))
        outs.append(out)
        feed["input_ids"] = out["logits"][:, -1:].argmax(-1).astype(np.int64)
        feed["attention_mask"] = np.ones((1, feed["attention_mask"].shape[1] + 1), np.int64)
        feed["position_ids"] = feed["position_ids"][:, -1:] + 1
        feed.update({n.replace("present", "past_key_values"): v for n, v in out.items() if n != "logits"})
    return outs


def test_grouped_query_attention_is_each_key_value_head_repeated_over_its_group():
    weights = _weights(SHAPE)
    grouped = _generate(SHAPE, weights)
    # the same model with every key/value head repeated for each query head of its group (transformers'
    # repeat_kv: query head j reads key/value head j // group)
    dim, group = SHAPE.head_dim, SHAPE.heads // SHAPE.kv
    repeated = dict(weights)
    for i in range(SHAPE.layers):
        for proj in ("k_proj", "v_proj"):
            w = weights[f"layers.{i}.{proj}"].reshape(SHAPE.hidden, SHAPE.kv, dim)
            repeated[f"layers.{i}.{proj}"] = np.repeat(w, group, axis=1).reshape(SHAPE.hidden, SHAPE.hidden)
    plain = _generate(replace(SHAPE, kv_heads=0), repeated)
    assert grouped[0]["present.0.key"].shape == (1, 2, 5, 4)
    assert plain[0]["present.0.key"].shape == (1, 4, 5, 4)
    for g, p in zip(grouped, plain):
        np.testing.assert_allclose(g["logits"], p["logits"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g["present.1.value"], p["present.1.value"][:, ::group], rtol=1e-5,
                                   atol=1e-5)
    assert grouped[-1]["present.0.key"].shape == (1, 2, 8, 4)


def test_a_tied_output_projection_is_the_embeddings_transpose():
    weights = _weights(SHAPE)
    weights["lm_head"] = weights["embed_tokens"].T
    untied = _generate(SHAPE, weights)
    del weights["lm_head"]
    tied = _generate(replace(SHAPE, tied=True), weights)
    for t, u in zip(tied, untied):
        np.testing.assert_allclose(t["logits"], u["logits"], rtol=1e-6, atol=1e-6)
