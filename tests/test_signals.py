"""Issue 30, items 3 and 7: a signal stops a run promptly, inside onnxruntime too, and leaves nothing;
a run killed outright leaves a staging folder the next run into that folder removes (never a live
run's); a default-load child dies with its parent, however the parent dies.

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
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import STOP_SIGNALS, main
from onnx_precision.context import load_model
from onnx_precision.oracle.runners import WrittenPlanRunner
from onnx_precision.plan import NodeDecision, Precision, PrecisionPlan
from onnx_precision.storage import Outputs

SAFETY_S = 300

# CLI runs, one after another in one process, each into its own output (the arguments after the
# model), each of which, running the Loop model in onnxruntime (a session fed its input 'loop_seed'),
# says "in onnxruntime" once its main thread is inside onnxruntime's C++ run: its innermost Python
# frame onnxruntime's run(), and 50 ms of CPU spent there (those Python lines take microseconds). A
# line printed just before the call would not do: a busy machine may hold the child between the two,
# and then Python's handler sees the signal (SIGTERM passed so before the change). Each run then says
# what main() returned (a forced end, os._exit, would say nothing), and marks its start on stderr, so
# that each run's last line there can be told apart. The process exits with the last run's code.
_RUN = "-- next run --"
_CLI = f"RUN = {_RUN!r}\n" + """
import sys, threading, time
import onnxruntime as ort
run = ort.InferenceSession.run
entering = threading.Event()
def inside(main=threading.main_thread()):
    clock = time.pthread_getcpuclockid(main.ident)
    while True:
        entering.wait()
        entering.clear()
        since = None
        while since is None or time.clock_gettime(clock) - since < 0.05:
            time.sleep(0.01)
            if sys._current_frames()[main.ident].f_code is run.__code__:
                since = time.clock_gettime(clock) if since is None else since
        print("in onnxruntime", flush=True)
threading.Thread(target=inside, daemon=True).start()
def said(self, *args, **kwargs):
    if any(i.name == "loop_seed" for i in self.get_inputs()):
        entering.set()
    return run(self, *args, **kwargs)
ort.InferenceSession.run = said
from onnx_precision.cli import main
for out in sys.argv[2:]:
    print(RUN, file=sys.stderr, flush=True)
    code = main(["convert", sys.argv[1], "-o", out])
    print(f"main() returned {code}", flush=True)
sys.exit(code)
"""

# A run, its outputs staged and a plan written into the temporary directory it is given (the model's
# weights external: as a native or reference oracle's probe writes its plan), that swallows the
# interrupt its signal raises: only the watcher thread can end it (after a grace period cut short here:
# the test is of what happens, not of how long).
_STUBBORN = """
import sys, tempfile, threading
from onnx_precision import cancel, cli
cancel.GRACE_S = 0.1
from onnx_precision.context import load_model
from onnx_precision.oracle.runners import WrittenPlanRunner
from onnx_precision.plan import NodeDecision, Precision, PrecisionPlan
from onnx_precision.storage import Outputs
def held(argv):
    with Outputs() as outputs:
        outputs.reserve(argv[0])
        tempfile.tempdir = argv[2]
        runner = WrittenPlanRunner(load_model(argv[1]), "reference", lambda written: lambda feed: {})
        runner.run(PrecisionPlan({"mm": NodeDecision(Precision.FP16)}), {})
        print("staged", flush=True)
        while True:
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
cli._main = held
sys.exit(cli.main(sys.argv[1:]))
"""

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

SIGNALLED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def _loop_model(directory: str) -> str:
    """spun = loop_seed + 1, 2**62 times: a run that ends only when something stops it."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "one"], ["acc_next"], name="add"),
         helper.make_node("Identity", ["cond"], ["cond_next"], name="again")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_next", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_next", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "loop_seed"], ["spun"], name="spin", body=body)], "g",
        [helper.make_tensor_value_info("loop_seed", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("spun", TensorProto.FLOAT, [1])],
        [helper.make_tensor("trips", TensorProto.INT64, [], [2**62])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "loop.onnx")
    onnx.save(model, path)
    return path


def _mlp(directory: str, external: bool = False) -> str:
    """y = relu(x @ w): a run of a second or less; its weight in mlp.data where ``external``."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [onnx.numpy_helper.from_array(np.full((4, 4), 0.25, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(directory, "mlp.onnx")
    if external:
        onnx.save(model, path, save_as_external_data=True, location="mlp.data", size_threshold=0)
    else:
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
    """The next line ``child`` prints on stdout, or, if it ends first, what it said on stderr. Read a
    byte at a time from the pipe: a buffered read could take the line after it too, which select()
    would then wait for in vain."""
    assert child.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([child.stdout.fileno()], [], [], SAFETY_S)
        assert ready, f"the child printed nothing in {SAFETY_S} s"
        byte = os.read(child.stdout.fileno(), 1)
        if not byte:
            return line.decode() or child.communicate()[1]
        line += byte
    return line.decode()


def _staging(directory) -> list[str]:
    return sorted(f for f in os.listdir(directory) if f.startswith(".onnx-precision-"))


@pytest.mark.slow  # 1.7 s in a full run on 2 busy cores
def test_a_signal_stops_a_run_inside_onnxruntime_as_ctrl_c_does(start, tmp_path):
    """Inside a Loop of 2**62 trips, each signal ends the run with its shell exit code, its line, and
    no staging folder (before: SIGINT and SIGTERM went on at full CPU, SIGHUP and SIGQUIT left the
    staged folder). One child runs a conversion per signal, one after another (each the same path,
    with the handlers main() puts back between them): a child each cost 1.3 s of CPU."""
    outs = [tmp_path / name for name in SIGNALLED]
    for out in outs:
        out.mkdir()
    child = start(_CLI, _loop_model(str(tmp_path)), *(str(out / "o.onnx") for out in outs))
    for name, out in zip(SIGNALLED, outs):
        assert _line(child) == "in onnxruntime\n", name
        assert _staging(out)  # the run is under way
        signum = getattr(signal, name)
        child.send_signal(signum)
        # onnxruntime ended the run and main() returned: no forced end
        assert _line(child) == f"main() returned {128 + signum}\n", name
        assert os.listdir(out) == [], name
    printed, err = child.communicate(timeout=SAFETY_S)
    # the last run's code, as the process's exit code
    assert (printed, child.returncode) == ("", 128 + getattr(signal, SIGNALLED[-1]))
    last = [run.strip().splitlines()[-1] for run in err.split(f"{_RUN}\n")[1:]]  # each run's last line
    said = [{"SIGINT": "interrupted", "SIGTERM": "terminated"}.get(name, f"terminated ({name})")
            for name in SIGNALLED]
    assert last == [f"onnx-precision: {s}" for s in said]


def test_a_run_that_does_not_unwind_is_ended_and_its_staging_folders_removed(start, tmp_path, out):
    """The run swallows the interrupt (as code stuck in something nothing can stop never returns):
    the watcher thread ends it, with the same code, line and clean-up: its outputs' staging folder, and
    the folder its plan runner wrote a plan into (before: left in the temporary directory,
    onnx-precision-plan-XXXXXXXX, a TemporaryDirectory that os._exit never cleaned up)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    child = start(_STUBBORN, str(out / "o.onnx"), _mlp(str(tmp_path), external=True), str(temporary))
    assert _line(child) == "staged\n"
    assert _staging(out)
    (plans,) = os.listdir(temporary)
    assert os.listdir(temporary / plans) == ["plan.onnx", "plan.onnx.data"]
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=SAFETY_S)
    assert (child.returncode, err.strip().splitlines()[-1]) == (143, "onnx-precision: terminated")
    assert os.listdir(out) == []
    assert os.listdir(temporary) == []


def test_a_plan_folder_goes_with_its_runner_and_one_a_killed_run_left_with_the_next(tmp_path, monkeypatch):
    """A plan runner's folder is a staging folder of the temporary directory: the runner's end removes it
    (a run a signal unwinds drops its runner on the way; at the interpreter's exit at the latest), and one
    left by a run killed outright (its lock free) goes when the next runner makes its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / ".onnx-precision-killed00.staging"  # as a killed run leaves it: unlocked
    left.mkdir()
    (left / "plan.onnx").write_bytes(b"")
    runner = WrittenPlanRunner(load_model(_mlp(str(tmp_path), external=True)), "reference",
                               lambda written: lambda feed: {})
    runner.run(PrecisionPlan({"mm": NodeDecision(Precision.FP16)}), {})
    (plans,) = _staging(tmp_path)
    assert plans != left.name
    del runner
    assert _staging(tmp_path) == []


@pytest.mark.slow  # 1.1 s in a full run on 2 busy cores
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


def test_every_onnxruntime_run_of_a_conversion_can_be_stopped(tmp_path, monkeypatch):
    """Each run is handed RunOptions a signal can terminate (a bare session.run could not be), and the
    CLI puts back the signal handlers and wakeup fd it found."""
    runs = []
    plain = ort.InferenceSession.run

    def run(self, names, feed, options=None):
        runs.append(options)
        return plain(self, names, feed, options)
    monkeypatch.setattr(ort.InferenceSession, "run", run)
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)  # as found
    assert main(["convert", _mlp(str(tmp_path)), "-o", str(tmp_path / "o.onnx")]) == 0
    assert runs and all(isinstance(o, ort.RunOptions) for o in runs)
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == handlers
    assert signal.set_wakeup_fd(wakeup) == wakeup
