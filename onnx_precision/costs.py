"""What a run cost: seconds, onnxruntime sessions built and probes run, per phase."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol


class Counted(Protocol):
    """Anything that counts the sessions it built (an EmulationSession)."""

    @property
    def sessions_built(self) -> int: ...


@dataclass(frozen=True)
class PhaseCost:
    """Where the time went: one phase of a run (reference, layerwise, search, write, verify)."""

    name: str
    seconds: float
    sessions: int = 0  # onnxruntime sessions built in this phase
    probes: int = 0  # runs of a session over all samples in this phase


class PhaseTotals:
    """Totals over the ``phases`` of a result (mixed into the dataclasses that carry phases)."""

    phases: tuple[PhaseCost, ...]

    @property
    def sessions_built(self) -> int:
        return sum(p.sessions for p in self.phases)

    @property
    def probes_run(self) -> int:
        return sum(p.probes for p in self.phases)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)


class PhaseCounts:
    def __init__(self) -> None:
        self.sessions_built: int | None = None
        self.probes = 0

    def count(self, session: Counted, probes: int = 0) -> None:
        """Note the session's build counter at the end of the phase and the plans it probed."""
        self.sessions_built = session.sessions_built
        self.probes = probes


class Clock:
    """Seconds, sessions built and probes per phase, for the report."""

    def __init__(self, announce: Callable[[str, int, int, float | None], None] | None = None) -> None:
        self._phases: list[PhaseCost] = []
        self._sessions_seen = 0
        self._announce = announce  # told of each phase as it starts (progress)

    @contextmanager
    def phase(self, name: str) -> Iterator[PhaseCounts]:
        if self._announce is not None:
            self._announce(name, 0, 0, None)
        counts = PhaseCounts()
        started = time.perf_counter()
        try:
            yield counts
        finally:
            built = 0
            if counts.sessions_built is not None:
                built = counts.sessions_built - self._sessions_seen
                self._sessions_seen = counts.sessions_built
            self._phases.append(PhaseCost(name, time.perf_counter() - started, built, counts.probes))

    def phases(self) -> tuple[PhaseCost, ...]:
        return tuple(self._phases)
