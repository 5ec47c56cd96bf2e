"""Progress on stderr while a conversion runs: every phase as it starts, the search's probes, and a
heartbeat for logs that kill a job after minutes of silence."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

HEARTBEAT_S = 30.0  # off a terminal, the longest silence
GRACE_S = 5.0  # off a terminal, a run this short prints nothing (a quick error stays one line)


class ProgressLine:
    """Progress on stderr. On a terminal: one self-overwriting line. Elsewhere (CI logs), once the run
    has lasted ``grace`` seconds: one line per phase, one every ``every`` probes (``lines``, i.e.
    ``-v``), and a heartbeat whenever ``heartbeat`` seconds pass without a line, each with the
    elapsed time and the probes done (:meth:`start` runs the heartbeat in a thread; :meth:`tick` is
    one beat, for tests with a ``clock`` of their own). ``enabled`` False (``-q``): nothing.

    Call it as ``progress(phase, probes_done, probes_left, best)``: a phase starting calls it with
    0 and 0; ``best`` is the largest FP16 share of FLOPs of a passing plan so far, or None. Neither
    the total estimate nor the share of it done ever goes down: a search that needs fewer probes
    ends early instead."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None, lines: bool = False,
                 every: int = 10, heartbeat: float = HEARTBEAT_S, grace: float = GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty and enabled is not False  # the self-overwriting line
        self.log = not tty and enabled is not False  # lines in a log
        self.lines = lines
        self.grace = grace
        self.every = every
        self.heartbeat = heartbeat
        self.clock = clock
        self._started = clock()
        self._last_line = self._started
        self._width = 0
        self._total = 0
        self._fraction = 0.0
        self._done = 0
        self._phase = ""
        self._text = ""
        self._written = False
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None

    def __call__(self, phase: str, done: int, left: int, best: float | None = None) -> None:
        with self._lock:
            self._total = max(self._total, done + left)
            self._done = done
            if self._total:
                self._fraction = max(self._fraction, done / self._total)
            share = f", best 16-bit share {100 * best:.1f}%" if best is not None else ""
            total = self._total
            if done == 0 and left == 0:
                text = f"{phase}..."
            else:
                filled = int(20 * self._fraction)
                text = f"{phase}: [{'#' * filled}{'.' * (20 - filled)}] probe {done} of about {total}{share}"
            new_phase = phase != self._phase
            self._phase, self._text = phase, text if done or left else phase
            if self.log:
                if self._awake() and (new_phase or (self.lines and done and done % self.every == 0)):
                    self._write(f"progress: {self._text} ({self._elapsed()})")
                return
            if not self.enabled:
                return
            self.stream.write("\r" + text.ljust(self._width))
            self.stream.flush()
            self._width = len(text)

    def tick(self) -> None:
        """The first line once the grace period is over, then a heartbeat whenever the log has been
        silent for ``heartbeat`` seconds."""
        with self._lock:
            if not (self.log and self._phase and self._awake()):
                return
            if not self._written:
                self._write(f"progress: {self._text} ({self._elapsed()})")
            elif self.clock() - self._last_line >= self.heartbeat:
                probes = f", {self._done} probe(s) done" if self._done else ""
                self._write(f"progress: still {self._phase} ({self._elapsed()}{probes})")

    def _awake(self) -> bool:
        return self.clock() - self._started >= self.grace

    def start(self) -> ProgressLine:
        """Beat in a background thread (off a terminal only) until :meth:`close`."""
        if self.log and self._stop is None:
            self._stop = threading.Event()
            threading.Thread(target=self._beat, args=(self._stop,), daemon=True).start()
        return self

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.tick()

    def _elapsed(self) -> str:
        return f"{self.clock() - self._started:.0f} s elapsed"

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
        self._last_line = self.clock()
        self._written = True

    def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
