"""Shared test set-up: the repo root on sys.path (for ``models``), a tiny-model helper, the CLI's
progress log kept off the wall clock, and onnxruntime's sessions on one thread each."""

from __future__ import annotations

import math
import os
import sys

import onnx
import onnx.parser
import onnxruntime as ort
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def parse(text: str, ir_version: int = 8) -> onnx.ModelProto:
    """A model from ONNX text, with an IR version onnxruntime accepts."""
    model = onnx.parser.parse_model(text)
    model.ir_version = ir_version
    return model


def unfused(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` importing opset 16 (the examples' ops are the same there), before
    LayerNormalization: its decomposed LayerNorms are written, and emulated, node by node, as an
    exporter below opset 17 leaves them. From 17 the rewriter writes each as one LayerNormalization
    with FP32 statistics, and FP16 breaks none of layernorm_eps's or the transformer's LayerNorms."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for opset in copy.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 16
    return copy


class _OneThread(ort.SessionOptions):
    """Session options whose intra-op threads are one until the caller sets them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.intra_op_num_threads = 1


def pytest_configure(config):
    """Every onnxruntime session the suite builds with options runs its ops on one thread, unless the
    code building it sets a number: pytest-xdist already runs a test per core, and onnxruntime's default
    pool adds a thread per core that spins for work after each op, CPU that a busy machine's other
    processes wait for (tests/test_auto.py, test_oracle.py and test_fp16_accumulation.py: 23 s of CPU
    with it, 15 s without, all passing). The outputs do not depend on it; child processes keep the
    default (tests/conformance_harness.py's sessions set one thread themselves, for scripts/ too)."""
    ort.SessionOptions = _OneThread


QUICK_SAMPLE = 8  # the quick loop runs every 8th case of a battery of many


def battery(cases):
    """``cases`` as parameters, all but every QUICK_SAMPLE-th marked slow: a battery of many cheap cases
    (ONNX's node cases, the fuzz cases: 30 s of CPU or more together) is sampled by the quick loop
    (-m 'not slow') and run whole by the README's command. A case of several arguments is a tuple."""
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)),
                         marks=() if i % QUICK_SAMPLE == 0 else pytest.mark.slow)
            for i, case in enumerate(cases)]


def pytest_terminal_summary(terminalreporter):
    """The ONNX node cases tests/test_conformance.py left out at collection, counted by reason,
    when it was collected (it parametrizes only the cases that can apply)."""
    harness = sys.modules.get("conformance_harness")
    if harness is not None:
        terminalreporter.write_line(harness.selection_summary())


@pytest.fixture
def save(tmp_path):
    """Write a model into the test's temp dir and return its path."""
    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> str:
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path
    return _save


@pytest.fixture(autouse=True)
def _progress_log_off_the_clock(monkeypatch):
    """The CLI's progress on its stderr never starts logging. Off a terminal it logs phases once a run
    has lasted GRACE_S (5 s) of wall time, and on a busy machine a run of 1 s of CPU can: a test reading
    stderr whole (one error line, nothing at all) would then fail on the machine's load, not on what
    the package did (71 tests in 12 files, with the grace period at 0). ProgressLine's own
    tests give it a stream and a clock of their own (tests/test_first_hour.py), which keep it."""
    from onnx_precision.cli import progress

    init = progress.ProgressLine.__init__

    def __init__(self, stream=None, *args, **kwargs):
        if stream is None:
            kwargs.setdefault("grace", math.inf)
        init(self, stream, *args, **kwargs)

    monkeypatch.setattr(progress.ProgressLine, "__init__", __init__)
