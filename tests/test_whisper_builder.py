"""scripts/whisper_models.py beyond the real Whisper tiny.en it builds for the benchmark: the reader of
CTranslate2's model.bin it uses (scripts/ctranslate2_file.py) reads a file laid out as CTranslate2's
``ModelSpec._serialize`` writes one, and the decoder built from it computes with its self-attention
cache what it computes over the whole prefix without one (positions from the cache's length, the causal
mask)."""

from __future__ import annotations

import os
import struct
import sys

import numpy as np
import onnxruntime as ort
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import whisper_models as wm  # noqa: E402
from ctranslate2_file import read_ct2  # noqa: E402

WIDTH, HEADS, MELS, FFN, VOCAB, FRAMES, TEXT_CTX = 8, 2, 4, 16, 24, 12, 16
DTYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.float16): 4}


def _tiny_whisper(seed: int = 3) -> dict[str, np.ndarray]:
    """A WhisperSpec's variables for 1 encoder and 2 decoder layers of width 8, FP16 as faster-whisper's
    files hold them (the spec's flags int8/int16 scalars)."""
    gen = np.random.default_rng(seed)

    def w(*dims: int) -> np.ndarray:
        return gen.normal(0.0, 1.0 / np.sqrt(dims[-1]), dims).astype(np.float16)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}/gamma": gen.uniform(0.8, 1.2, WIDTH).astype(np.float16),
                f"{prefix}/beta": w(WIDTH)}

    def linear(prefix: str, rows: int, cols: int) -> dict[str, np.ndarray]:
        return {f"{prefix}/weight": w(rows, cols), f"{prefix}/bias": w(rows)}

    def block(prefix: str, cross: bool) -> dict[str, np.ndarray]:
        out = {**norm(f"{prefix}/self_attention/layer_norm"), **norm(f"{prefix}/ffn/layer_norm"),
               **linear(f"{prefix}/self_attention/linear_0", 3 * WIDTH, WIDTH),
               **linear(f"{prefix}/self_attention/linear_1", WIDTH, WIDTH),
               **linear(f"{prefix}/ffn/linear_0", FFN, WIDTH), **linear(f"{prefix}/ffn/linear_1", WIDTH, FFN)}
        if cross:
            out.update({**norm(f"{prefix}/attention/layer_norm"),
                        **linear(f"{prefix}/attention/linear_0", WIDTH, WIDTH),
                        **linear(f"{prefix}/attention/linear_1", 2 * WIDTH, WIDTH),
                        **linear(f"{prefix}/attention/linear_2", WIDTH, WIDTH)})
        for fused in ("self_attention/linear_0", "attention/linear_1"):  # no key bias: stored as zeros
            key = slice(WIDTH, 2 * WIDTH) if fused.startswith("self") else slice(0, WIDTH)
            if f"{prefix}/{fused}/bias" in out:
                out[f"{prefix}/{fused}/bias"][key] = 0
        return out

    arrays = {
        "decoder/activation": np.int8(3), "decoder/alibi": np.int8(0), "decoder/num_heads": np.int16(HEADS),
        "decoder/pre_norm": np.int8(1), "decoder/scale_embeddings": np.int8(0),
        "decoder/start_from_zero_embedding": np.int8(0), "decoder/embeddings/weight": w(VOCAB, WIDTH),
        "decoder/position_encodings/encodings": w(TEXT_CTX, WIDTH), **norm("decoder/layer_norm"),
        "encoder/num_heads": np.int16(HEADS), **norm("encoder/layer_norm"),
        "encoder/conv1/weight": w(WIDTH, MELS, 3), "encoder/conv1/bias": w(WIDTH),
        "encoder/conv2/weight": w(WIDTH, WIDTH, 3), "encoder/conv2/bias": w(WIDTH),
        "encoder/position_encodings/encodings": wm.sinusoids(FRAMES // 2, WIDTH).astype(np.float16),
        **block("encoder/layer_0", cross=False)}
    for i in range(2):
        arrays.update(block(f"decoder/layer_{i}", cross=True))
    return {name: np.asarray(a) for name, a in sorted(arrays.items())}


def _ct2_bytes(arrays: dict[str, np.ndarray], aliases: dict[str, str], version: int = 6) -> bytes:
    """The file CTranslate2's ``ModelSpec._serialize`` writes (binary version 6)."""
    def string(text: str) -> bytes:
        return struct.pack("<H", len(text) + 1) + text.encode() + b"\0"

    out = struct.pack("<I", version) + string("WhisperSpec") + struct.pack("<II", 3, len(arrays))
    for name, a in arrays.items():
        out += string(name) + struct.pack("<B", a.ndim) + struct.pack(f"<{a.ndim}I", *a.shape)
        out += struct.pack("<BI", DTYPE_IDS[a.dtype], a.nbytes) + a.tobytes()
    out += struct.pack("<I", len(aliases))
    return out + b"".join(string(alias) + string(target) for alias, target in aliases.items())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[str, dict[str, np.ndarray]]:
    arrays = _tiny_whisper()
    path = str(tmp_path_factory.mktemp("ct2") / "model.bin")
    with open(path, "wb") as f:
        f.write(_ct2_bytes(arrays, {"decoder/projection/weight": "decoder/embeddings/weight"}))
    return path, arrays


def test_reader_reads_every_variable_and_alias_as_ctranslate2_writes_them(tiny):
    path, arrays = tiny
    ct2 = read_ct2(path)
    assert (ct2.spec, ct2.revision) == ("WhisperSpec", 3)
    assert sorted(ct2.arrays) == sorted([*arrays, "decoder/projection/weight"])
    for name, a in arrays.items():
        assert ct2.arrays[name].dtype == a.dtype and np.array_equal(ct2.arrays[name], a), name
    assert ct2.arrays["decoder/projection/weight"] is ct2.arrays["decoder/embeddings/weight"]
    dims = wm.WhisperDims.of(ct2.arrays)
    assert dims == wm.WhisperDims(mels=MELS, width=WIDTH, heads=HEADS, encoder_layers=1, decoder_layers=2,
                                  vocab=VOCAB, audio_ctx=FRAMES // 2, text_ctx=TEXT_CTX)
    weights = wm.whisper_weights(ct2)
    assert weights["decoder/embeddings/weight"].dtype == np.float32
    assert "decoder/num_heads" not in weights


def test_reader_refuses_a_cut_file_and_an_unknown_version_in_one_line(tiny, tmp_path):
    path, arrays = tiny
    data = open(path, "rb").read()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:1000])
    with pytest.raises(SystemExit) as cut_short:
        read_ct2(str(cut))
    assert str(cut_short.value) == f"{cut}: ends at byte 1000, inside a record"
    newer = tmp_path / "v7.bin"
    newer.write_bytes(_ct2_bytes(arrays, {}, version=7))
    with pytest.raises(SystemExit) as unknown:
        read_ct2(str(newer))
    assert str(unknown.value) == f"{newer}: CTranslate2 binary version 7; versions 2-6 are read"


def test_cached_decoding_computes_what_the_whole_prefix_computes(tiny):
    path, _ = tiny
    ct2 = read_ct2(path)
    dims, weights = wm.WhisperDims.of(ct2.arrays), wm.whisper_weights(ct2)
    encoder = ort.InferenceSession(wm.whisper_encoder(dims, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    features = np.random.default_rng(5).normal(0.0, 1.0, (1, MELS, FRAMES)).astype(np.float32)
    names = [o.name for o in encoder.get_outputs()]
    cross = dict(zip(names, encoder.run(names, {"input_features": features})))
    assert cross["last_hidden_state"].shape == (1, FRAMES // 2, WIDTH)
    assert cross["present.1.encoder.value"].shape == (1, HEADS, FRAMES // 2, WIDTH // HEADS)
    decoder = ort.InferenceSession(wm.whisper_decoder(dims, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in decoder.get_outputs()]
    feed = wm.whisper_prefill(dims, [5, 7], cross)
    tokens = [5, 7]
    for _ in range(4):  # the prefill and 3 steps, each fed the caches the step before wrote
        out = dict(zip(names, decoder.run(names, feed)))
        whole = decoder.run(["logits"], wm.whisper_prefill(dims, tokens, cross))[0]
        np.testing.assert_allclose(out["logits"][0, -1], whole[0, -1], rtol=1e-5, atol=1e-5)
        tokens.append(int(out["logits"][0, -1].argmax()))
        feed["input_ids"] = np.array([[tokens[-1]]], np.int64)
        feed.update({past: out[present] for present, past in wm.self_feedback(dims).items()})
    assert feed["past_key_values.0.decoder.key"].shape == (1, HEADS, 5, WIDTH // HEADS)
