"""Convert every example in every mode and target; write the models, plans, TensorRT flags and reports.

    python scripts/snapshot_examples.py OUT_DIR

Run it before and after a refactor and compare the folders (``diff -r``): a refactor that keeps
behaviour gives byte-identical files. Reports are kept with their timings zeroed and the figures of
their memory note blanked (seconds and bytes held are the things two runs never share).
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models  # noqa: E402
from models import generate  # noqa: E402
from onnx_precision.cli import main  # noqa: E402

MODES = ("all-fp16", "static", "auto")
# (file-name tag, extra arguments): the generic target, and TensorRT's newest and oldest releases
# (the op table's layers differ between them), for the measuring modes.
TARGETS = (("", ()), (".trt", ("--target", "tensorrt")),
           (".trt86", ("--target", "tensorrt", "--trt-version", "8.6")))


_GIGABYTES = re.compile(r"\b\d+(\.\d+)? GB\b")


def _zero_seconds(value):
    if isinstance(value, dict):
        return {k: 0 if k == "seconds" else _zero_seconds(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_zero_seconds(v) for v in value]
    if isinstance(value, str) and value.startswith("memory: "):
        return _GIGABYTES.sub("_ GB", value)
    return value


def _normalise_reports(stem: str) -> None:
    """The reports with their seconds zeroed (JSON) or blanked (Markdown)."""
    path = stem + ".report.json"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            report = _zero_seconds(json.load(f))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    path = stem + ".report.md"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"\b\d+(\.\d+)? s\b", "_ s", text)
        text = re.sub(r"^\| ([^|]+) \| [\d.]+ \|", r"| \1 | _ |", text, flags=re.M)
        text = "".join(_GIGABYTES.sub("_ GB", line) if "memory: " in line else line
                       for line in text.splitlines(keepends=True))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def snapshot(out_dir: str) -> list[str]:
    """Convert each example in each mode into ``out_dir``; returns the commands that did not exit 0, 1 or
    3."""
    os.makedirs(out_dir, exist_ok=True)
    os.chdir(out_dir)  # outputs named relative to it, so the TensorRT flags files compare equal
    odd = []
    for name in sorted(models.BUILDERS):
        for mode in MODES:
            for tag, target in TARGETS:
                if tag and mode == "all-fp16":
                    continue  # all-fp16 measures nothing: its target changes no file
                stem = f"{name}.{mode}{tag}"
                argv = ["convert", generate.model_path(name), "-o", f"{stem}.onnx", "--mode", mode, "-q",
                        "--inputs", generate.data_path(name), "--save-plan", f"{stem}.plan.json",
                        "--trt-flags", f"{stem}.trt.txt", *target]
                if mode != "all-fp16":
                    argv += ["--report", f"{stem}.report.json", "--report-md", f"{stem}.report.md"]
                code = main(argv)
                if code not in (0, 1, 3):
                    odd.append(f"exit {code}: {' '.join(argv)}")
                _normalise_reports(stem)
    return odd


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    target = os.path.abspath(sys.argv[1])
    problems = snapshot(target)
    print("\n".join(problems) or f"wrote {len(os.listdir(target))} files to {target}")
