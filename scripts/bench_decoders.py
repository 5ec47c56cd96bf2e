"""Decoders judged over a whole generation (issue 32): per decoder, what a plain onnxruntime generation
costs, where naive FP16 breaks, and what an auto conversion over K steps costs and writes.

    python scripts/bench_decoders.py     # tiny_llama, growing_state, SmolLM2-135M, Whisper tiny.en; K = 64
    python scripts/bench_decoders.py --steps 32 --only smollm2_135m

The decoders: models/decoders' ``tiny_llama`` and ``growing_state`` (committed), SmolLM2-135M-Instruct
as scripts/decoder_models.py writes it under ``--dir`` (it needs ``pip install gguf``), and Whisper
tiny.en's decoder with its spoken prefill as scripts/whisper_models.py writes it there (it needs
espeak-ng to speak the sample once); a real decoder whose script cannot run is left out, saying so.

Each measurement runs in a fresh interpreter that reports its own peak RSS (VmHWM: see
scripts/bench_convert.py for why not ru_maxrss), so no run's memory is counted in another's:

* ``plain``: an onnxruntime CPU session with default options, built, then the prefill and K greedy
  steps (:func:`decoder_models.greedy`), as a user's generation runs: seconds from the session's
  build to the last step, and the steps alone.
* ``naive``: every node FP16 in the project's emulation (``load_model``, ``Emulator``), as
  :class:`~onnx_precision.generation.GenerationRunner` runs a generation: the FP32 reference, then the
  all-FP16 plan teacher-forced by the reference's tokens, compared step by step with the default
  tolerance (the first failing step and why), its tokens' top-1 agreement with the reference's, the
  first divergence of its free-running generation, and :func:`~onnx_precision.generation.hold_bound`
  of the reference (where an FP16 value would first pass 65 504, or a position stop being exact, if
  every node were FP16). Seconds from loading the model to the end of the three generations (the
  details give the reference's and the FP16 one's); ``ref = plain`` says whether the emulation's FP32
  generation chose the plain one's tokens.
* ``convert``: ``onnx-precision convert`` in auto mode (the library's :func:`~onnx_precision.convert.convert`)
  of the model with its prefill sample alone, judged over K steps (``--steps``): the steps the written
  model was verified over (K, or the step it fails at), the plan's 16-bit share of estimated FLOPs, its
  bound (the summary's line), its tokens against FP32's, the CLI's exit code and its terminal summary
  (printed whole under the table), seconds from the call to the files written and peak MB (the written
  model goes to a temporary folder).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.abspath(os.path.dirname(__file__)))
sys.path.insert(0, ROOT)

from models.decoders.generate import model_path, prefill_path  # noqa: E402

TEST_DECODERS = ("tiny_llama", "growing_state")
SMOLLM2, WHISPER = "smollm2_135m", "whisper_tiny_en"
RESULT = "result: "


@dataclass(frozen=True)
class Decoder:
    name: str
    model: str
    prefill: str


@dataclass(frozen=True)
class Plain:
    """A plain onnxruntime generation: seconds from the session's build, of the steps alone, peak MB."""

    seconds: float
    steps_seconds: float
    peak_mb: float
    tokens: list[int]


@dataclass(frozen=True)
class Naive:
    """All-FP16 in the emulation over the generation (see the module docstring): seconds in all, of the
    FP32 reference generation and of the teacher-forced FP16 one; the reference's tokens."""

    seconds: float
    reference_seconds: float
    fp16_seconds: float
    peak_mb: float
    reference_tokens: list[int]
    first_failing_step: int | None
    failure: str
    top1_agreement: float
    free_divergence: int | None
    bound: str


@dataclass(frozen=True)
class Conversion:
    """``convert`` (auto) of the decoder over K steps."""

    steps_verified: int
    low_share: float
    bound: str
    seconds: float
    peak_mb: float
    status: str = "passed"
    tokens: str = ""  # the summary's tokens line (a decoder's)
    phases: str = ""  # seconds per phase
    exit_code: int = 0  # the CLI's: 0 passed, 3 passed but onnxruntime's default load failed, 1 failed
    summary: str = ""  # the terminal summary the CLI prints, whole


def conversion(decoder: Decoder, steps: int) -> Conversion | None:
    """The auto conversion of ``decoder`` judged over ``steps`` steps, in a fresh interpreter; None where
    it failed to run (its error is printed)."""
    found = run_child("convert", decoder, steps)
    if "error" in found:
        print(f"{decoder.name}: convert: {found['error']}")
        return None
    return Conversion(**found)


# --- the children ---------------------------------------------------------------------------------------

def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _sample(prefill: str) -> dict[str, np.ndarray]:
    with np.load(prefill) as data:
        return {k: data[k] for k in data.files}


def child_plain(decoder: Decoder, steps: int) -> Plain:
    import onnxruntime as ort
    from decoder_models import greedy

    from onnx_precision.generation import infer_generation

    generation = infer_generation(onnx.load(decoder.model, load_external_data=False))
    assert generation is not None, decoder.model
    feedback = {f.output: f.input for f in generation.feedback}
    sample = _sample(decoder.prefill)
    start = time.perf_counter()
    session = ort.InferenceSession(decoder.model, providers=["CPUExecutionProvider"])
    built = time.perf_counter()
    tokens = list(greedy(session, sample, steps, feedback))
    end = time.perf_counter()
    return Plain(end - start, end - built, _peak_mb(), tokens)


def child_naive(decoder: Decoder, steps: int) -> Naive:
    from onnx_precision.context import load_model
    from onnx_precision.generation import (
        GenerationOptions,
        GenerationRunner,
        hold_bound,
        infer_generation,
        split_step_name,
        token_agreement,
    )
    from onnx_precision.judge import Tolerance, compare_outputs
    from onnx_precision.oracle import Emulator

    sample = _sample(decoder.prefill)
    start = time.perf_counter()
    ctx = load_model(decoder.model)
    generation = infer_generation(ctx.model, GenerationOptions(steps=steps), model_path=decoder.model)
    assert generation is not None, decoder.model
    runner = GenerationRunner(Emulator(ctx), generation)
    loaded = time.perf_counter()
    reference = runner.reference(sample)
    referenced = time.perf_counter()
    plan = ctx.all_low_plan()
    forced = runner.generate(plan, sample)
    fp16_seconds = time.perf_counter() - referenced
    assert reference.tokens is not None
    tol = runner.tolerance(Tolerance())
    comparison = compare_outputs(reference.outputs, forced.outputs, tol, runner.oracle)
    failing = next((m for m in comparison.outputs if not m.passed), None)
    at = split_step_name(failing.name) if failing is not None else None
    free = runner.free_running(plan, sample)
    seconds = time.perf_counter() - start
    return Naive(seconds, referenced - loaded, fp16_seconds, _peak_mb(), reference.tokens[0].tolist(),
                 at[1] if at else None,
                 "" if comparison.passed else comparison.failure(), token_agreement(reference, forced).share,
                 token_agreement(reference, free).first_divergence,
                 hold_bound(reference, position_input=generation.position_ids).describe())


def child_convert(decoder: Decoder, steps: int) -> Conversion:
    import tempfile

    from onnx_precision.convert import ConvertOptions, convert
    from onnx_precision.data import SampleSpec
    from onnx_precision.options import GenerationOptions
    from onnx_precision.report import summary_lines

    options = ConvertOptions(samples=SampleSpec(inputs=decoder.prefill),
                             generation=GenerationOptions(steps=steps))
    with tempfile.TemporaryDirectory(prefix="bench-decoders-") as folder:
        start = time.perf_counter()
        result = convert(decoder.model, os.path.join(folder, "model.onnx"), options)
        seconds = time.perf_counter() - start
    report = result.report
    assert report is not None, decoder.model
    verdict = report.generation
    failing = verdict.get("failing_step")
    lines = report.generation_lines
    bound = next((line[len("generation: "):] for line in lines[1:] if line.startswith("generation: ")), "")
    tokens = next((line[len("tokens: "):] for line in lines if line.startswith("tokens: ")), "")
    phases = ", ".join(f"{p.name} {p.seconds:.1f}" for p in report.phases)
    verified = failing if isinstance(failing, int) else steps
    return Conversion(verified, report.low_flop_share(), bound, seconds, _peak_mb(), report.status, tokens,
                      phases, result.exit_code, "\n".join(summary_lines(report)))


CHILDREN: dict[str, Callable[[Decoder, int], Plain | Naive | Conversion]] = {
    "plain": child_plain, "naive": child_naive, "convert": child_convert}


def run_child(kind: str, decoder: Decoder, steps: int) -> dict:
    """``kind``'s measurement of ``decoder`` in a fresh interpreter: its result's fields, or its error."""
    command = [sys.executable, os.path.abspath(__file__), "--child", kind, "--steps", str(steps),
               json.dumps(asdict(decoder))]
    child = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in child.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    return {"error": (child.stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]}


# --- the table ------------------------------------------------------------------------------------------

def decoders(directory: str, only: str | None) -> list[Decoder]:
    """The decoders of the table (``only``: the one of that name), the real ones built under
    ``directory`` where their scripts can (what they need missing: left out, saying so)."""
    found = [Decoder(n, model_path(n), prefill_path(n)) for n in TEST_DECODERS]
    if only in (None, SMOLLM2):
        if importlib.util.find_spec("gguf") is None:
            print(f"{SMOLLM2} left out: scripts/decoder_models.py needs the gguf package (pip install gguf)")
        else:
            import decoder_models

            smol = decoder_models.smollm2(directory)
            found.append(Decoder(smol.name, smol.model, smol.prefill))
    if only in (None, WHISPER):
        spoken = os.path.exists(os.path.join(directory, WHISPER, "prefill.npz"))  # built: no espeak-ng needed
        if shutil.which("espeak-ng") is None and not spoken:
            print(f"{WHISPER} left out: scripts/whisper_models.py speaks its sample with espeak-ng "
                  f"(apt-get install espeak-ng)")
        else:
            import whisper_models

            whisper = whisper_models.whisper_tiny_en(directory)
            found.append(Decoder(whisper.name, whisper.model, whisper.prefill))
    return [d for d in found if only in (None, d.name)]


def _size_mb(model: str) -> float:
    folder = os.path.dirname(model)
    proto = onnx.load(model, load_external_data=False)
    files = {model} | {os.path.join(folder, e.value) for t in proto.graph.initializer for e in t.external_data
                       if e.key == "location"}
    return sum(os.path.getsize(f) for f in files) / 1e6


def _step(value: object) -> str:
    return "none" if value is None else str(value)


def row(decoder: Decoder, steps: int) -> Mapping[str, str]:
    nodes = len(onnx.load(decoder.model, load_external_data=False).graph.node)
    plain, naive = run_child("plain", decoder, steps), run_child("naive", decoder, steps)
    converted = conversion(decoder, steps)
    out = {"decoder": decoder.name, "nodes": str(nodes), "MB": f"{_size_mb(decoder.model):.3g}",
           "plain s": plain.get("error") or f"{plain['seconds']:.1f} ({plain['steps_seconds']:.1f} steps)",
           "plain MB": "" if "error" in plain else f"{plain['peak_mb']:.0f}"}
    if "error" in naive:
        out["naive FP16"] = naive["error"]
    else:
        out.update({"naive FP16 fails at step": _step(naive["first_failing_step"]),
                    "naive top-1": f"{naive['top1_agreement']:.0%}",
                    "naive free diverges at": _step(naive["free_divergence"]),
                    "naive s": f"{naive['seconds']:.1f}", "naive MB": f"{naive['peak_mb']:.0f}"})
        if "error" not in plain:  # the emulation's FP32 generation is the plain one's, token for token
            out["ref = plain"] = "yes" if naive["reference_tokens"] == plain["tokens"] else "NO"
    out.update({"convert": f"{converted.status} (exit {converted.exit_code})" if converted else "-",
                "steps verified": str(converted.steps_verified) if converted else "-",
                "16-bit share": f"{converted.low_share:.1%}" if converted else "-",
                "convert s": f"{converted.seconds:.1f}" if converted else "-",
                "convert MB": f"{converted.peak_mb:.0f}" if converted else "-"})
    details = [f"  naive FP16: {naive['failure'] or 'passes'}; emulated FP32 reference generation "
               f"{naive['reference_seconds']:.1f} s, teacher-forced FP16 {naive['fp16_seconds']:.1f} s"
               if "error" not in naive else "",
               f"  FP16 bound (every node FP16, from the FP32 reference): {naive['bound']}"
               if "error" not in naive else "",
               f"  plan: {converted.bound}" if converted else "",
               f"  plan tokens: {converted.tokens}" if converted and converted.tokens else "",
               f"  convert phases (s): {converted.phases}" if converted else "",
               "  summary:\n" + "\n".join("    " + line for line in converted.summary.splitlines())
               if converted else ""]
    out["details"] = "\n".join(d for d in details if d)
    return out


def print_table(rows: list[Mapping[str, str]]) -> None:
    columns = [c for c in rows[0] if c != "details"]
    widths = {c: max(len(c), *(len(r.get(c, "")) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-|-".join("-" * widths[c] for c in columns))
    for r in rows:
        print(" | ".join(r.get(c, "").ljust(widths[c]) for c in columns))
    for r in rows:
        print(f"{r['decoder']}:\n{r['details']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=64, help="decode steps after the prefill (default 64)")
    parser.add_argument("--dir", default=os.path.join(ROOT, "out", "decoders"),
                        help="where scripts/decoder_models.py keeps its downloads and models")
    parser.add_argument("--only", help="one decoder by name")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("decoder", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = CHILDREN[args.child](Decoder(**json.loads(args.decoder)), args.steps)
        print(RESULT + json.dumps(asdict(result)))
        return 0
    start = time.perf_counter()
    rows = [row(d, args.steps) for d in decoders(args.dir, args.only)]
    seconds = time.perf_counter() - start
    print(f"{args.steps} steps after the prefill; {os.cpu_count()} cores; {seconds:.0f} s")
    if rows:
        print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
