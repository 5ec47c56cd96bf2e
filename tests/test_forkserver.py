"""The fork server of the default loads (onnx_precision.oracle.forkserver): a child it forks is the
``python -c`` child it stands for (arguments, stdin, output, exit status, a crash's signal, the
caller's working directory and environment), forked from a single-threaded server that has imported
onnxruntime; a child can be killed and waited for with a timeout; server and child end when their
caller dies. SAFETY_S only ends a test whose child hangs.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys

import pytest

from onnx_precision.oracle import forkserver

SAFETY_S = 300


def _run(code: str, *args: str, data: bytes = b"", server: forkserver.Server | None = None,
         ) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of ``python -c code *args`` forked by ``server`` (this process's
    when None), ``data`` on its stdin."""
    stdin, feed = os.pipe()
    lifeline, keep = os.pipe()
    try:
        start = server.start if server is not None else forkserver.start
        child = start([sys.executable, "-c", code, *args], stdin, lifeline)
    finally:
        os.close(stdin)
        os.close(lifeline)
    with open(feed, "wb") as pipe:
        pipe.write(data)
    try:
        out, err = child.communicate(timeout=SAFETY_S)
    finally:
        os.close(keep)
    return child.returncode, out, err


def test_a_forked_child_runs_its_code_as_python_dash_c_would():
    code, out, err = _run("import sys; print(sys.argv[:3], sys.stdin.read()); print('said', file=sys.stderr)",
                          "a", "b c", data=b"the model")
    assert (code, out, err) == (0, "['-c', 'a', 'b c'] the model\n", "said\n")
    assert _run("import sys; sys.exit(3)") == (3, "", "")
    assert _run("import sys; sys.exit('no')") == (1, "", "no\n")
    assert _run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")[0] == -signal.SIGSEGV
    code, out, err = _run("raise ValueError('bad')")
    assert code == 1 and err.startswith("Traceback (most recent call last):\n  File \"<string>\", line 1")
    assert err.endswith("ValueError: bad\n")


def test_its_last_argument_is_the_lifeline_its_other_descriptors_are_the_standard_three():
    code, out, _ = _run("import os, sys; print(sys.argv[-1], sorted(os.listdir('/proc/self/fd')))")
    lifeline, fds = out.split(" ", 1)
    assert code == 0 and fds.strip() == str(sorted(["0", "1", "2", "3", lifeline]))  # 3: the listing


def test_a_child_has_the_callers_working_directory_and_environment_of_the_moment(tmp_path, monkeypatch):
    _run("pass")  # the server started before these change
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONNX_PRECISION_TEST", "x y")
    monkeypatch.delenv("HOME", raising=False)
    code, out, _ = _run("import os; print(os.getcwd(), os.environ.get('HOME'), "
                        "os.environ['ONNX_PRECISION_TEST'], os.environ.get('ORT_DISABLE_TELEMETRY'))")
    assert (code, out) == (0, f"{tmp_path} None x y None\n")


def test_the_server_has_imported_onnxruntime_and_is_single_threaded_when_it_forks():
    code, out, _ = _run("import os, sys; print('onnxruntime' in sys.modules, "
                        "len(os.listdir(f'/proc/{os.getppid()}/task')))")
    assert (code, out) == (0, "True 1\n")


def test_a_server_that_imports_a_thread_starts_over_importing_nothing(tmp_path, monkeypatch):
    (tmp_path / "threaded_at_import.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = forkserver.Server(preload=("threaded_at_import",))
    try:
        code, out, _ = _run("import os, sys; print('threaded_at_import' in sys.modules, "
                            "'onnxruntime' in sys.modules, len(os.listdir(f'/proc/{os.getppid()}/task')))",
                            server=server)
    finally:
        server.close()
    assert (code, out) == (0, "False False 1\n")


def test_a_child_is_killed_and_waited_for_with_a_timeout():
    stdin, lifeline = os.open(os.devnull, os.O_RDONLY), os.pipe()
    child = forkserver.start([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                             stdin, lifeline[0])
    os.close(stdin)
    os.close(lifeline[0])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.communicate(timeout=0.2)
        assert child.returncode is None and child.pid > 0
        child.kill()
        assert child.communicate(timeout=SAFETY_S) == ("up\n", "")
        assert child.returncode == -signal.SIGKILL
        child.kill()  # ended: nothing to do
    finally:
        os.close(lifeline[1])


# A child that ends when its lifeline (its last argument) reads its end, as a default load does.
_WATCHING = """
import os, sys, threading, time
threading.Thread(target=lambda: (os.read(int(sys.argv[-1]), 1), os._exit(1)), daemon=True).start()
time.sleep(600)
"""
# A caller that starts such a child (its code the caller's argument), prints the server's pid and the
# child's, and waits to be killed.
_CALLER = """
import os, sys, time
from onnx_precision.oracle import forkserver
lifeline, keep = os.pipe()
child = forkserver.start([sys.executable, "-c", sys.argv[1]], os.open(os.devnull, os.O_RDONLY), lifeline)
print(forkserver._SERVER.process.pid, child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # 1.2 s in a full run on 2 busy cores
def test_server_and_child_end_when_their_caller_is_killed():
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, _WATCHING], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    pidfds = []
    try:
        assert caller.stdout is not None
        ready, _, _ = select.select([caller.stdout], [], [], SAFETY_S)
        line = caller.stdout.readline() if ready else ""
        assert line, caller.communicate()[1] if caller.poll() is not None else "no line"
        pidfds = [os.pidfd_open(int(pid)) for pid in line.split()]  # both surely live: pids not reused
        assert caller.poll() is None and all(not select.select([p], [], [], 0)[0] for p in pidfds)
        caller.kill()
        caller.communicate(timeout=SAFETY_S)
        for pidfd in pidfds:
            ended, _, _ = select.select([pidfd], [], [], SAFETY_S)
            assert ended, f"outlived the caller by {SAFETY_S} s"
    finally:
        caller.kill()
        for pidfd in pidfds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
