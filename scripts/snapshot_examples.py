"""Convert every example in every mode and write the models, plans and TensorRT flags to a folder.

    python scripts/snapshot_examples.py OUT_DIR

Run it before and after a refactor and compare the folders (``diff -r``): a refactor that keeps
behaviour gives byte-identical files. Reports are left out (they hold timings).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models  # noqa: E402
from models import generate  # noqa: E402
from onnx_precision.cli import main  # noqa: E402

MODES = ("all-fp16", "static", "auto")


def snapshot(out_dir: str) -> list[str]:
    """Convert each example in each mode into ``out_dir``; returns the commands that did not exit 0 or 1."""
    os.makedirs(out_dir, exist_ok=True)
    os.chdir(out_dir)  # outputs named relative to it, so the TensorRT flags files compare equal
    odd = []
    for name in sorted(models.BUILDERS):
        for mode in MODES:
            stem = f"{name}.{mode}"
            argv = ["convert", generate.model_path(name), "-o", f"{stem}.onnx", "--mode", mode, "-q",
                    "--inputs", generate.data_path(name), "--save-plan", f"{stem}.plan.json",
                    "--trt-flags", f"{stem}.trt.txt"]
            if mode != "all-fp16":
                argv += ["--report", f"{stem}.report.json", "--report-md", f"{stem}.report.md"]
            code = main(argv)
            if code not in (0, 1):
                odd.append(f"exit {code}: {' '.join(argv)}")
            for suffix in (".report.json", ".report.md"):
                if os.path.exists(stem + suffix):
                    os.remove(stem + suffix)
    return odd


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    target = os.path.abspath(sys.argv[1])
    problems = snapshot(target)
    print("\n".join(problems) or f"wrote {len(os.listdir(target))} files to {target}")
