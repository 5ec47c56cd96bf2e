"""Issue 30, item 7: a run killed outright leaves a staging folder the next run into that folder
removes (never a live run's); a default-load child dies with its parent, however the parent dies.

Each test starts its own child (so that ``pytest -n 2`` starts none it does not use) and waits on
events: a line the child prints, its exit. SAFETY_S is no measure of speed, only what ends a test
whose child hangs.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.storage import Outputs

SAFETY_S = 300

# A run, its output staged, whose default load never ends (the load replaced by a sleep): it prints
# the pid of the default-load child.
_KILLED = """
import sys, time
from onnx_precision.oracle import default_load
from onnx_precision.storage import Outputs
assert hasattr(default_load, "_LOAD"), "no load to replace"
default_load._LOAD = "import time\\ntime.sleep(600)\\n"
with Outputs() as outputs:
    outputs.reserve(sys.argv[2])
    load = default_load.DefaultLoad(sys.argv[1])
    print(load._child.process.pid, flush=True)
    time.sleep(600)
"""


def _mlp(directory: str) -> str:
    """y = relu(x @ w): a run of a second or less."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [onnx.numpy_helper.from_array(np.full((4, 4), 0.25, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "mlp.onnx")
    onnx.save(model, path)
    return path


@pytest.fixture
def start():
    """start(code, *args) -> a child running ``python -c code *args``, killed after the test."""
    started: list[subprocess.Popen] = []

    def _start(code: str, *args: str) -> subprocess.Popen:
        started.append(subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
        return started[-1]
    yield _start
    for child in started:
        child.kill()
        child.communicate()


@pytest.fixture
def out(tmp_path):
    """The output folder of the test's run."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def _line(child: subprocess.Popen) -> str:
    """The first line ``child`` prints on stdout, or, if it ends first, what it said on stderr."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout.fileno()], [], [], SAFETY_S)
    assert ready, f"the child printed nothing in {SAFETY_S} s"
    return child.stdout.readline() or child.communicate()[1]


def _staging(directory) -> list[str]:
    return sorted(f for f in os.listdir(directory) if f.startswith(".onnx-precision-"))


def test_a_run_killed_outright_takes_its_default_load_and_the_next_run_its_staging_folder(
        start, tmp_path, out, capsys):
    """SIGKILL (the OOM killer, SIGUSR1 alike): nothing of the run can act, yet its default-load
    child ends, and the next run into its folder removes its staging folder, which no run removes
    while its own run lives (before: the child slept on, the folder stayed)."""
    mlp = _mlp(str(tmp_path))
    child = start(_KILLED, mlp, str(out / "o.onnx"))
    line = _line(child)
    assert line.strip().isdigit(), line
    pidfd = os.pidfd_open(int(line))  # opened while the load surely lives: its pid is not reused yet
    try:
        live = _staging(out)
        assert len(live) == 1
        with Outputs() as outputs:  # another run into the same folder, while the first runs
            outputs.reserve(str(out / "other.onnx"))
            assert len(_staging(out)) == 2
        assert _staging(out) == live
        child.kill()
        child.communicate(timeout=SAFETY_S)
        ended, _, _ = select.select([pidfd], [], [], SAFETY_S)
        assert ended, f"the default-load child outlived its parent by {SAFETY_S} s"
    finally:
        with contextlib.suppress(OSError):  # a child that outlived it
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
    assert _staging(out) == live
    assert main(["convert", mlp, "-o", str(out / "o.onnx"), "--mode", "all-fp16"]) == 0
    assert _staging(out) == []
    assert f"{out}: removed {live[0]}, left by a run that was killed" in capsys.readouterr().err
