"""Progress on the terminal while a search runs."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressLine:
    """Search progress on stderr: one self-overwriting line when stderr is a terminal, nothing
    otherwise (CI logs stay clean). Call it as ``progress(phase, probes_done, probes_left, best)``
    (``best``: the largest FP16 share of FLOPs of a passing plan so far, or None). The total
    estimate never goes down: a search that finds it needs fewer probes ends early instead."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)()) if enabled is None else enabled
        self._width = 0
        self._total = 0

    def __call__(self, phase: str, done: int, left: int, best: float | None = None) -> None:
        self._total = max(self._total, done + left)
        if not self.enabled:
            return
        total = self._total
        filled = int(20 * done / total) if total else 20
        share = f", best FP16 share {100 * best:.1f}%" if best is not None else ""
        text = f"{phase}: [{'#' * filled}{'.' * (20 - filled)}] probe {done} of about {total}{share}"
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
