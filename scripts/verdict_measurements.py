"""The measurements behind the default verdict: all-FP16 rounding noise against FP16 breakage.

    python scripts/verdict_measurements.py [--ocr-models DIR]

Emulates every example all-FP16 and prints, per output, the statistics the ``rms`` check judges
(relative RMS error of the whole output and of its worst slice) beside max |err|, p99, cosine
and new NaN/Inf, and the verdicts of ``rms`` (the default) and ``max`` (the criterion before it).

* noise (must pass): models/deep_cnn, the clean 12-layer encoder, ``models.breakages.NOISE``, and
  with ``--ocr-models`` the PP-OCRv4 detector and recogniser and the PP-OCR direction classifier
  (real trained weights; the directory of ``*_det_infer.onnx``, ``*_rec_infer.onnx`` and
  ``*_cls_infer.onnx``, e.g. ``rapidocr_onnxruntime/models`` from the rapidocr-onnxruntime wheel)
  on synthetic text images;
* breakage (must fail): the examples that break in FP16, the encoder with outlier layers, and
  ``models.breakages.BREAKAGES`` (one row, token or element of a large output).

The figures are quoted in onnx_precision/verdict.py; rerun this after changing the check.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Iterator

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models
from models import breakages
from onnx_precision.context import ModelContext
from onnx_precision.graph import name_nodes
from onnx_precision.judge import Tolerance, compare_array
from onnx_precision.oracle import EmulationSession

BROKEN = ["l2_normalize", "nafnet_boxfilter", "layernorm_eps", "softmax_nomax", "log_underflow",
          "two_culprits", "if_branch", "dynamic_batch"]
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def text_image(height: int, width: int, seed: int, lines: int) -> np.ndarray:
    """A light page with ``lines`` lines of dark glyph-like strokes, normalised as PP-OCR expects."""
    gen = np.random.default_rng(seed)
    img = np.full((height, width, 3), 235.0) + gen.normal(0.0, 6.0, (height, width, 3))
    for line in range(lines):
        top = int(height * (line + 0.5) / (lines + 0.5))
        glyph = int(gen.integers(max(6, height // 20), max(8, height // 10)))
        x = int(gen.integers(4, width // 6))
        while x < width - glyph:
            w = int(glyph * gen.uniform(0.5, 1.0))
            for _ in range(int(gen.integers(2, 5))):
                stroke = max(1, glyph // 7)
                if gen.random() < 0.5:
                    y = top + int(gen.integers(0, glyph))
                    img[y:y + stroke, x:x + w] = 30.0
                else:
                    at = x + int(gen.integers(0, w))
                    img[top:top + glyph, at:at + stroke] = 30.0
            x += w + int(gen.integers(1, 4)) + (glyph if gen.random() < 0.12 else 0)
    img = np.clip(img, 0.0, 255.0) / 255.0
    return ((img - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)


def ocr_cases(directory: str) -> Iterator[tuple[str, onnx.ModelProto, list[dict[str, np.ndarray]]]]:
    def load(pattern: str) -> onnx.ModelProto:
        model = onnx.load(glob.glob(os.path.join(directory, pattern))[0])
        name_nodes(model)
        return model

    yield "PP-OCRv4 det", load("*det_infer.onnx"), (
        [{"x": text_image(256, 256, s, 4)} for s in range(3)] + [{"x": text_image(512, 512, 100 + s, 8)}
                                                                 for s in range(3)]
        + [{"x": text_image(480, 640, 200 + s, 10)} for s in range(3)])
    yield "PP-OCRv4 rec", load("*rec_infer.onnx"), (
        [{"x": text_image(48, 320, 10 + s, 1)} for s in range(3)] + [{"x": text_image(48, 640, 300 + s, 1)}
                                                                     for s in range(6)])
    yield "PP-OCR cls", load("*cls_infer.onnx"), [
        {"x": np.concatenate([text_image(48, 192, 20 + s, 1) for s in range(8)])}]


def example_cases(names, builders) -> Iterator[tuple[str, onnx.ModelProto, list[dict[str, np.ndarray]]]]:
    for name in names:
        example = builders[name]()
        yield name, example.model, list(example.feeds)


def report(label: str, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    ctx = ModelContext.of(model)
    session = EmulationSession(ctx, capture_intermediates=False)
    plan = ctx.all_low_plan()
    for i, feed in enumerate(feeds):
        ref, cand = session.run(None, feed), session.run(plan, feed)
        for name in session.outputs:
            m = compare_array(name, ref[name], cand[name], Tolerance())
            old = compare_array(name, ref[name], cand[name], Tolerance(error_stat="max"))
            where = f"{label}[{i}]" if len(feeds) > 1 else label
            print(f"{where:34.34} {name[:14]:14} {m.rel_rms_err:9.4g} {m.worst_slice_rel_rms:9.4g} "
                  f"{m.max_abs_err:9.3g} {m.p99_abs_err:9.2g} {m.cosine:9.6f} {m.new_nonfinite:6d}  "
                  f"{'pass' if m.passed else 'FAIL':5} {'pass' if old.passed else 'FAIL':5}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ocr-models", metavar="DIR", help="directory of the PP-OCR det/rec/cls .onnx files")
    args = parser.parse_args(argv)
    header = (f"{'case':34} {'output':14} {'rel RMS':>9} {'slice':>9} {'max|err|':>9} {'p99':>9} "
              f"{'cosine':>9} {'NaN/Inf':>6}  rms   max")
    noise = list(example_cases(["deep_cnn"], models.BUILDERS))
    noise.append(("transformer (clean)", models.transformer(outlier_layers=()).model,
                  list(models.transformer(outlier_layers=()).feeds)))
    noise += example_cases(breakages.NOISE, breakages.NOISE)
    if args.ocr_models:
        noise += ocr_cases(args.ocr_models)
    broken = list(example_cases(BROKEN, models.BUILDERS))
    broken.append(("transformer (outliers)", models.transformer().model, list(models.transformer().feeds)))
    broken += example_cases(breakages.BREAKAGES, breakages.BREAKAGES)
    for title, cases in (("rounding noise: must pass", noise), ("breakage: must fail", broken)):
        print(f"\n{title}\n{header}")
        for label, model, feeds in cases:
            report(label, model, feeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
