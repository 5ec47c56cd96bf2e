"""Stopping a run from outside, promptly, whatever it is doing.

Python runs a signal handler in the main thread only, between bytecodes; a main thread inside
``InferenceSession.run`` (the GIL released) is in neither, and a Loop of 2**62 trips, or the FP32
reference run of a large model, would keep computing after Ctrl-C. So every onnxruntime run of the
package goes through :func:`run`, which registers its ``RunOptions`` while it runs, and
:func:`stop` (from any thread) sets ``terminate`` on each run in flight and on each run started after
it: onnxruntime ends a run at its next node, and a Loop's body checks the flag at each of its nodes too
(a 2**62-trip Loop, alone or in an If branch, raised 0.6-3.6 ms after the flag was set; onnxruntime
1.32, 2 busy cores). A single kernel, and building a session, run to their end.

:class:`SignalStop` is how the command line stops: while it is active, each of its signals is written
by Python's C-level handler to a pipe (``signal.set_wakeup_fd``) that a watcher thread reads, at once,
whatever the main thread is doing; the watcher calls :func:`stop`. Once the main thread is back in
Python (at its first call after onnxruntime returns, inside :func:`run`), the signal's Python handler
raises, and the run unwinds as from Ctrl-C: every staging folder is removed on the way
(:mod:`.storage.saving`); a second signal does not interrupt that. If the run has not ended
:data:`GRACE_S` seconds after the signal (the main thread in something nothing can stop: building a
session, one long kernel, code that swallowed the exception), the watcher ends the process itself: it
removes the staging folders registered here (:func:`add_staging`), says the same last line and exits
with the same code. A child process the run started dies with it (see :mod:`.oracle.default_load`).

A library caller that does not use :class:`SignalStop` is unaffected: nothing calls :func:`stop`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

GRACE_S = 2.0  # how long a stopped run may take to unwind before the watcher ends the process

_lock = threading.Lock()
_in_flight: set[Any] = set()  # the RunOptions of the onnxruntime runs under way
_stopped = threading.Event()  # stop() was called: every run, also one started later, is terminated
_folders: set[str] = set()  # staging folders a forced end removes


def run(session: Any, names: Sequence[str] | None, feed: Mapping[str, Any]) -> list[np.ndarray]:
    """``session.run(names, feed)``, as a run :func:`stop` can end (it then raises onnxruntime's
    error; under :class:`SignalStop` the signal's exception is raised over it)."""
    import onnxruntime as ort  # here: the staging registry is imported where onnxruntime is not

    options = ort.RunOptions()
    with _lock:  # stop() sets the flag before it takes the lock: one of the two sees the other
        _in_flight.add(options)
        options.terminate = _stopped.is_set()
    try:
        return list(session.run(names, feed, options))
    finally:
        with _lock:
            _in_flight.discard(options)


def stop() -> None:
    """Terminate every onnxruntime run under way, and every one started from now on."""
    _stopped.set()
    with _lock:
        for options in _in_flight:
            options.terminate = True


def add_staging(folder: str) -> None:
    """A forced end of the run (see :class:`SignalStop`) removes ``folder`` until :func:`drop_staging`."""
    with _lock:
        _folders.add(folder)


def drop_staging(folder: str) -> None:
    with _lock:
        _folders.discard(folder)


class SignalStop:
    """A context in which ``signals`` stop the run: the main thread gets ``raised(signum)`` (once: a
    second signal does not interrupt the clean-up), the onnxruntime runs are terminated
    (:func:`stop`), and the process is ended :data:`GRACE_S` seconds later if the run has not ended.
    :meth:`end` says how the run ended (``ending(signum)`` prints the last line and returns the exit
    code) and is called once, by the main thread or by the watcher. Outside the main thread (where
    Python sets no handler) it does nothing; on leaving it the handlers and wakeup fd are put back."""

    def __init__(self, signals: Sequence[int], raised: Callable[[int], BaseException],
                 ending: Callable[[int], int]) -> None:
        self.signals = tuple(signals)
        self.raised = raised
        self.ending = ending
        self._raising = False
        self._ended = threading.Event()
        self._end_lock = threading.Lock()
        self._code: int | None = None
        self._previous: dict[int, Any] = {}
        self._previous_fd = -1
        self._write_fd: int | None = None
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is not threading.main_thread():
            return self
        read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # the C handler must never block on it
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._watcher = threading.Thread(target=self._watch, args=(read_fd,), daemon=True,
                                         name="onnx-precision-signals")
        self._watcher.start()
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._ended.set()  # the run is over: the watcher no longer ends the process
        if self._watcher is None:
            return
        for signum, previous in self._previous.items():  # None: set outside Python; the default then
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        signal.set_wakeup_fd(self._previous_fd)
        if self._write_fd is not None:
            os.close(self._write_fd)  # the watcher reads the end of the pipe and returns
        self._watcher.join()
        _stopped.clear()

    def end(self, signum: int) -> int:
        """The exit code of a run ``signum`` stopped, its last line said (once, whoever asks first)."""
        with self._end_lock:
            if self._code is None:
                self._code = self.ending(signum)
            self._ended.set()
            return self._code

    def _handle(self, signum: int, frame: object) -> None:
        if not (self._raising or self._ended.is_set()):  # once, and not once the run has ended
            self._raising = True
            raise self.raised(signum)

    def _watch(self, read_fd: int) -> None:
        with open(read_fd, "rb", buffering=0) as pipe:
            while data := pipe.read(64):
                caught = [s for s in data if s in self.signals]
                if caught:
                    stop()
                    if not self._ended.wait(GRACE_S):
                        self._force(caught[0])

    def _force(self, signum: int) -> None:
        """End the process as the main thread would have: staging folders removed, last line, code."""
        code = self.end(signum)
        with _lock:
            folders = tuple(_folders)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
