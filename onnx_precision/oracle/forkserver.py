"""A process that forks the default-load children with onnxruntime already imported.

Each default load (:mod:`.default_load`) runs in a child process, where a crash of onnxruntime cannot
take the run with it. A fresh ``python -c`` child spent 0.26-0.32 s of CPU importing numpy and
onnxruntime before loading anything; a run starts one or more per written model. Instead, a process
starts one :class:`Server` when it first needs a child (:func:`start`): a Python process that imports
onnxruntime once, then forks a child per request, which runs the request's ``python -c CODE ARG...``
as python would: its arguments, the caller's working directory and environment, stdin read from the
descriptor the caller gives, stdout and stderr piped back, its exit status (a signal's as
:class:`subprocess.Popen` gives it).

Forking is safe because the server is single-threaded when it forks: onnxruntime's telemetry (a
thread and an SQLite database opened at import) and OpenBLAS's threads are off in it (:data:`QUIET`);
if what it imports starts a thread all the same, it starts over importing nothing, and each child
imports what its code needs, as a fresh child would.

The server runs in its own session: a terminal's Ctrl-C reaches the caller, which kills its children
(:meth:`Forked.kill`). The server kills a child only while it has not reaped it, so the pid is never
another process's; the server ends when the caller's end of its socket closes, when the caller exits
however it dies, and the caller waits for it at exit (its CPU time, and its children's, is then the
caller's, as a plain child's is).

A request is a 4-byte length and a JSON object on a Unix socket, with five descriptors: the child's
stdin, stdout and stderr, a read end the child gets as its last argument (the lifeline of
:mod:`.default_load`), and a status pipe on which the server writes the child's pid, then its exit
status and its peak resident memory in KiB (``wait4``'s ``ru_maxrss``) once reaped, each on a line,
and closes it.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import importlib
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

CLOSE_S = 10  # the server ends at once when its socket closes; a server that does not is killed
PRELOAD = ("onnxruntime",)  # imported once by the server (numpy with it)
QUIET = {"ORT_DISABLE_TELEMETRY": "1", "OPENBLAS_NUM_THREADS": "1"}  # the server's environment, added
# The server runs this file as python -c runs code: the working directory first on sys.path, as each
# child's code expects, not this file's folder.
_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
_HEADER = struct.Struct("!I")
_DESCRIPTORS = 5  # stdin, stdout, stderr, lifeline, status


class Forked:
    """A child the server forked, as much of :class:`subprocess.Popen` as :mod:`.default_load` uses:
    :attr:`pid`, :attr:`returncode`, :meth:`communicate` and :meth:`kill`."""

    def __init__(self, server: Server, request: int, stdout: int, stderr: int, status: int) -> None:
        self._server, self._request = server, request
        self._stdout, self._stderr, self._status = stdout, stderr, status
        self._read: dict[int, bytearray] = {stdout: bytearray(), stderr: bytearray(), status: bytearray()}
        self._open = set(self._read)
        self._killed = False
        self.returncode: int | None = None
        self.peak_rss = 0  # bytes, once reaped: the child's peak resident memory

    @property
    def pid(self) -> int:
        """Its pid, once the server has forked it."""
        while b"\n" not in self._read[self._status] and self._status in self._open:
            self._take(self._status)
        if b"\n" not in self._read[self._status]:
            raise ChildProcessError("the default-load fork server ended before it forked the child")
        return int(self._read[self._status].split(b"\n")[0])

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Its stdout and stderr, once it has ended and the server has reaped it (:attr:`returncode`
        set); :class:`subprocess.TimeoutExpired` after ``timeout`` seconds, and it may be called again."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in self._open:
                selector.register(fd, selectors.EVENT_READ)
            while self._open:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"default-load child {self._request}", timeout or 0)
                for key, _ in selector.select(left):
                    if not self._take(key.fd):
                        selector.unregister(key.fd)
        lines = self._read[self._status].split()
        if len(lines) == 3:
            self.returncode, self.peak_rss = int(lines[1]), int(lines[2]) * 1024
        elif not self._killed:  # a child killed may have ended by its lifeline: how is not asked
            raise ChildProcessError("the default-load fork server ended before its child did")
        return self._text(self._stdout), self._text(self._stderr)

    def kill(self) -> None:
        """SIGKILL it, unless it has ended."""
        if self.returncode is None:
            self._killed = True
            self._server.kill(self._request)

    def _take(self, fd: int) -> bool:
        """Read what ``fd`` holds; False (and the pipe closed) at its end."""
        data = os.read(fd, 1 << 16)
        if data:
            self._read[fd] += data
            return True
        os.close(fd)
        self._open.discard(fd)
        return False

    def _text(self, fd: int) -> str:
        return self._read[fd].decode(errors="replace")


class Server:
    """The fork server of this process (:func:`start` makes it) or of a test (``preload`` given)."""

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, __file__, str(theirs.fileno()), *preload],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env={**os.environ, **QUIET}, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.socket = ours
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._requests = 0

    def start(self, command: Sequence[str], stdin: int, lifeline: int) -> Forked:
        """Fork a child running ``command`` (``python -c CODE ARG...``) with ``stdin`` as its standard
        input and the read end ``lifeline`` appended to its arguments. Both descriptors stay the
        caller's to close."""
        stdout, stdout_w = os.pipe()
        stderr, stderr_w = os.pipe()
        status, status_w = os.pipe()
        try:
            with self._lock:
                self._requests += 1
                request = self._requests
                self._send({"request": request, "argv": list(command), "cwd": _cwd(),
                            "env": dict(os.environ)}, (stdin, stdout_w, stderr_w, lifeline, status_w))
        except BaseException:
            for fd in (stdout, stderr, status):
                os.close(fd)
            raise
        finally:
            for fd in (stdout_w, stderr_w, status_w):
                os.close(fd)
        return Forked(self, request, stdout, stderr, status)

    def kill(self, request: int) -> None:
        # a server that is gone cannot kill; the caller's lifeline still ends the child
        with contextlib.suppress(OSError), self._lock:
            self._send({"kill": request}, ())

    def close(self) -> None:
        """End the server (a running child ends by its lifeline) and wait for it."""
        self.socket.close()
        try:
            self.process.wait(timeout=CLOSE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    @property
    def running(self) -> bool:
        return self.owner == os.getpid() and self.socket.fileno() >= 0 and self.process.poll() is None

    def _send(self, message: dict[str, Any], fds: Sequence[int]) -> None:
        body = json.dumps(message).encode()
        data = _HEADER.pack(len(body)) + body
        try:
            sent = socket.send_fds(self.socket, [data], list(fds)) if fds else 0
            self.socket.sendall(data[sent:])
        except BaseException:  # an interrupt may have cut a message short: the next would be misread
            self.socket.close()
            raise


_SERVER: Server | None = None
_STARTING = threading.Lock()


def start(command: Sequence[str], stdin: int, lifeline: int) -> Forked:
    """:meth:`Server.start` on this process's server, started first if it has none running (a forked
    process starts its own)."""
    global _SERVER
    with _STARTING:
        if _SERVER is None or not _SERVER.running:
            if _SERVER is None:
                atexit.register(_close)
            else:  # ended, or its parent's (this process was forked): this process's end goes
                _SERVER.socket.close()
            _SERVER = Server()
        server = _SERVER
    return server.start(command, stdin, lifeline)


def _close() -> None:
    if _SERVER is not None and _SERVER.owner == os.getpid():
        _SERVER.close()


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed: the child stays in the server's
        return None


# --- the server -------------------------------------------------------------------------------------

def _serve(fd: int, preload: Sequence[str]) -> None:
    for name in preload:
        importlib.import_module(name)
    if preload and _threads() > 1:  # a fork would copy one thread and the locks the others hold
        os.execv(sys.executable, [sys.executable, "-c", _BOOT, __file__, str(fd)])
    server = socket.socket(fileno=fd)
    wake, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # its byte on ``wake`` ends the select
    running: dict[int, tuple[int, int]] = {}  # request -> (pid, status pipe), until reaped
    while True:
        ready = select.select([server.fileno(), wake], [], [])[0]
        if wake in ready:
            os.read(wake, 1 << 10)
            _reap(running)
        if server.fileno() in ready:
            message, fds = _receive(server)
            if message is None:
                return
            if "kill" in message:
                if message["kill"] in running:
                    os.kill(running[message["kill"]][0], signal.SIGKILL)
                continue
            pid = os.fork()
            if pid == 0:
                _child(message, fds)
            for descriptor in fds[:4]:
                os.close(descriptor)
            running[message["request"]] = (pid, fds[4])
            with contextlib.suppress(OSError):  # a caller that stopped listening
                os.write(fds[4], b"%d\n" % pid)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: not known
        return 1


def _receive(server: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next request and its descriptors; None at the socket's end."""
    head, fds, _, _ = socket.recv_fds(server, _HEADER.size, _DESCRIPTORS)
    if not head:
        return None, []
    head += _exactly(server, _HEADER.size - len(head))
    (size,) = _HEADER.unpack(head)
    return json.loads(_exactly(server, size)), fds


def _exactly(server: socket.socket, size: int) -> bytes:
    """``size`` bytes (a signal may cut a read short)."""
    data = b""
    while len(data) < size:
        chunk = server.recv(size - len(data))
        if not chunk:
            raise EOFError("the request was cut short")
        data += chunk
    return data


def _reap(running: dict[int, tuple[int, int]]) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request = next(r for r, (p, _) in running.items() if p == pid)
        _, pipe = running.pop(request)
        with contextlib.suppress(OSError):
            os.write(pipe, b"%d %d\n" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss))
        os.close(pipe)


def _child(message: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: become ``python -c`` running the request, and exit as it would."""
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        lifeline = fds[3]
        os.closerange(3, lifeline)  # the server's socket and pipes, other children's status pipes
        os.closerange(lifeline + 1, os.sysconf("SC_OPEN_MAX"))
        if message["cwd"] is not None:
            os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        argv = message["argv"]
        sys.argv = ["-c", *argv[3:], str(lifeline)]
        status = _run(argv[2])
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _run(code: str) -> int:
    """Run ``code`` as ``python -c`` does; its exit status: 0, SystemExit's, or 1 after a traceback."""
    try:
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
        status = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            status = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:  # its traceback from the code's frame on, as python's
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return status


if __name__ == "__main__":
    _serve(int(sys.argv[2]), sys.argv[3:])
