"""The oldest Python the package claims (pyproject's ``requires-python``) is the one it runs on and the
one its tools check it for (issue 31, item 6).

It claimed 3.9 while ``oracle/emulator.py`` builds ``tuple[Lows | None, ...]`` at import (a TypeError
before 3.10) and mypy checked for 3.11, so nothing said so. The floor is 3.11: onnxruntime's current
wheels (1.24 on) and numpy's (2.3 on) need it. Ruff's ``target-version`` and mypy's ``python_version``
are that floor, so they flag what it cannot run (ruff: syntax newer than it, as ``type X = ...`` on
3.11, in every file tests/test_architecture.py has it check; mypy 2.4 checks for 3.10 at the oldest), and
the package imports under an interpreter of that version (this one when the suite runs on it, as CI's
does).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import onnx_precision

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def floor() -> tuple[int, int]:
    """(major, minor) of pyproject's ``requires-python = ">=X.Y"``."""
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)", CONFIG["project"]["requires-python"].strip())
    assert found, CONFIG["project"]["requires-python"]
    return int(found.group(1)), int(found.group(2))


def test_ruff_and_mypy_check_for_the_floor():
    major, minor = floor()
    assert (major, minor) >= (3, 11)  # onnxruntime 1.32 and numpy 2.4 ship wheels for 3.11 and later
    assert CONFIG["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    assert CONFIG["tool"]["mypy"]["python_version"] == f"{major}.{minor}"


def _run(python: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_package_imports_on_the_floor():
    wanted = ".".join(map(str, floor()))
    if sys.version_info[:2] == floor():
        assert onnx_precision.__version__  # imported by this interpreter, the floor's
        return
    python = shutil.which(f"python{wanted}")
    # a pyenv shim is on PATH for every version it knows, and fails where that one is not selected
    if python is None or _run(python, "import sys; print(sys.version_info[:2])").stdout.strip() != str(
            floor()):
        pytest.skip(f"the suite runs on {sys.version.split()[0]} and no python{wanted} runs here")
    run = _run(python, "import onnx_precision.cli")
    missing = re.search(r"No module named '([^'.]+)", run.stderr)
    if run.returncode and missing and missing.group(1) != "onnx_precision":
        pytest.skip(f"python{wanted} has no {missing.group(1)} installed: the package's import is not tried")
    assert run.returncode == 0, run.stderr
