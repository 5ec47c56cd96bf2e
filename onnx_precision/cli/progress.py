"""Progress on stderr while a conversion runs: every phase as it starts, and the search's probes."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressLine:
    """Progress on stderr. On a terminal: one self-overwriting line. Elsewhere (CI logs) nothing,
    unless ``lines`` (``-v``): then one line per phase and one every ``every`` probes.

    Call it as ``progress(phase, probes_done, probes_left, best)``: a phase starting calls it with
    0 and 0; ``best`` is the largest FP16 share of FLOPs of a passing plan so far, or None. The
    total estimate never goes down: a search that needs fewer probes ends early instead."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None, lines: bool = False,
                 every: int = 10) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else enabled
        self.lines = lines and not tty
        self.every = every
        self._width = 0
        self._total = 0
        self._phase = ""

    def __call__(self, phase: str, done: int, left: int, best: float | None = None) -> None:
        self._total = max(self._total, done + left)
        share = f", best FP16 share {100 * best:.1f}%" if best is not None else ""
        total = self._total
        if done == 0 and left == 0:
            text = f"{phase}..."
        else:
            filled = int(20 * done / total) if total else 20
            text = f"{phase}: [{'#' * filled}{'.' * (20 - filled)}] probe {done} of about {total}{share}"
        if self.lines:
            if phase != self._phase or (done and done % self.every == 0):
                self.stream.write(f"progress: {text}\n" if done or left else f"progress: {phase}\n")
                self.stream.flush()
            self._phase = phase
            return
        if not self.enabled:
            return
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
