"""The memory a run has and what it used: the machine's and its cgroups' limits, what is available, the
peak of a process, and whether a child that died of SIGKILL was killed for memory.

A child process the kernel kills for memory (its OOM killer, at the machine's memory or at a cgroup's
limit) dies of SIGKILL, as one killed by hand does: the signal alone does not say which. The kernel
counts its OOM kills, machine-wide (``oom_kill`` of ``/proc/vmstat``) and per memory cgroup
(``oom_kill`` of cgroup v1's ``memory.oom_control``, of cgroup v2's ``memory.events``). :class:`OomWatch`
reads them when a child starts and again when it has died: a child dead of SIGKILL that this process did
not kill, while a count went up, was killed for memory, and the cgroup whose count went up is the limit
it met (none: the machine's memory). Measured under a cgroup v1 limit (tests/test_memory_budget.py):
the limit's ``oom_kill`` goes from 0 to 1 when the loading child is killed; ``memory.failcnt`` counts
every time usage touched the limit, also when reclaiming page cache sufficed, so it is not read.

What is available (:func:`available_bytes`) is ``MemAvailable`` of ``/proc/meminfo``, or less where a
memory cgroup of this process has a lower limit: its limit less what it holds that cannot be reclaimed
(its usage less its file pages). Pages of memory-mapped weight files are file pages: the kernel drops
them under pressure and reads them again, so they are not held.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

NO_LIMIT = 1 << 62  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def measurable() -> bool:
    """Whether this platform shows a process's memory as this module reads it (Linux's ``/proc``): where
    not (macOS, Windows), what is available and what a run held read as 0, and no figure is said."""
    return _read("/proc/self/status") is not None


@dataclass(frozen=True)
class Cgroup:
    """A memory cgroup a process is in (its own or an ancestor): its folder and version."""

    path: str
    version: int  # 1 or 2

    @property
    def limit(self) -> int | None:
        """Its memory limit in bytes; None when it has none."""
        text = _read(os.path.join(self.path, "memory.limit_in_bytes" if self.version == 1 else "memory.max"))
        if text is None or text.strip() == "max":
            return None
        value = int(text)
        return None if value >= NO_LIMIT else value

    @property
    def held(self) -> int | None:
        """What it holds that reclaim cannot free (usage less file pages), in bytes; None unknown."""
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        usage = _read(os.path.join(self.path, name))
        if usage is None:
            return None
        stat = _fields(os.path.join(self.path, "memory.stat"))
        prefix = "total_" if self.version == 1 else ""
        files = stat.get(f"{prefix}active_file", 0) + stat.get(f"{prefix}inactive_file", 0)
        return max(0, int(usage) - files)

    @property
    def oom_kills(self) -> int:
        """How many processes the OOM killer has killed at this cgroup's limit (0 when not told)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        return _fields(os.path.join(self.path, name)).get("oom_kill", 0)


def cgroups(pid: int | str = "self") -> tuple[Cgroup, ...]:
    """The memory cgroups of process ``pid``, its own first, then each ancestor up to the hierarchy's
    root; () where there are none, or they cannot be read."""
    own = _read(f"/proc/{pid}/cgroup")
    mounts = _read("/proc/self/mountinfo")
    if own is None or mounts is None:
        return ()
    found: list[Cgroup] = []
    for root, mount, version in _memory_mounts(mounts):
        for line in own.splitlines():
            _, controllers, path = line.split(":", 2)
            if (version == 1 and "memory" in controllers.split(",")) or (version == 2 and controllers == ""):
                found.extend(_chain(root, mount, path, version))
    return tuple(found)


def _memory_mounts(mountinfo: str) -> list[tuple[str, str, int]]:
    """(root within the hierarchy, mount point, version) of each memory cgroup hierarchy mounted."""
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if after[0] == "cgroup" and "memory" in after[-1].split(","):
            mounts.append((fields[3], fields[4], 1))
        elif after[0] == "cgroup2":
            mounts.append((fields[3], fields[4], 2))
    return mounts


def _chain(root: str, mount: str, path: str, version: int) -> list[Cgroup]:
    if not (path == root or path.startswith(root.rstrip("/") + "/")):
        return []
    parts = [p for p in path[len(root):].split("/") if p]
    folders = [os.path.join(mount, *parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [Cgroup(folder, version) for folder in folders if os.path.isdir(folder)]


def machine_oom_kills() -> int:
    """The OOM kills of the whole machine since it booted (every memory cgroup's included)."""
    return _fields("/proc/vmstat").get("oom_kill", 0)


def limit_bytes(pid: int | str = "self") -> tuple[int, Cgroup | None]:
    """The memory process ``pid`` may use: the lowest limit of its cgroups, with that cgroup, or the
    machine's memory (``MemTotal``) and None."""
    limited = [(c.limit, c) for c in cgroups(pid) if c.limit is not None]
    if limited:
        limit, group = min(limited, key=lambda pair: pair[0] or 0)
        return int(limit or 0), group
    return _fields("/proc/meminfo").get("MemTotal", 0) * 1024, None


def available_bytes() -> int:
    """What this process may still take without reclaim failing: the machine's ``MemAvailable``, or a
    cgroup's limit less what it holds where that is lower."""
    available = _fields("/proc/meminfo").get("MemAvailable", 0) * 1024
    for group in cgroups():
        limit = group.limit
        held = None if limit is None else group.held  # memory.stat read only where a limit needs it
        if limit is not None and held is not None:
            available = min(available, max(0, limit - held))
    return available


def peak_rss(pid: int | str = "self") -> int:
    """The peak resident memory of a process (``VmHWM``), in bytes; 0 where it cannot be read."""
    return _fields(f"/proc/{pid}/status").get("VmHWM", 0) * 1024


@dataclass(frozen=True)
class OomKill:
    """A child killed for memory: the cgroup whose limit it met (None: the machine's memory), that limit
    (the machine's memory where None), and the child's own peak resident memory (0: not known)."""

    cgroup: Cgroup | None
    limit: int
    peak: int = 0

    @property
    def where(self) -> str:
        """Which limit, said: ``the 3.00 GB memory limit of cgroup /x`` or ``the machine's 24.0 GB``."""
        if self.cgroup is None:
            return f"the machine's {gigabytes(self.limit)} of memory"
        return f"the {gigabytes(self.limit)} memory limit of its cgroup ({self.cgroup.path})"


class OomWatch:
    """The OOM kill counts that concern process ``pid`` (its cgroups', the machine's), read now;
    :meth:`killed` tells whether one has gone up since."""

    def __init__(self, pid: int | str = "self") -> None:
        self.groups = cgroups(pid) or cgroups()  # a child already gone: this process's, which it shared
        self.counts = tuple(g.oom_kills for g in self.groups)
        self.machine = machine_oom_kills()

    def killed(self, peak: int = 0) -> OomKill | None:
        """The OOM kill since this watch began (with the child's ``peak``), or None when no count went up."""
        for group, before in zip(self.groups, self.counts):
            if group.oom_kills > before:
                limit = group.limit
                if limit is not None:
                    return OomKill(group, limit, peak)
        if machine_oom_kills() > self.machine:
            return OomKill(None, _fields("/proc/meminfo").get("MemTotal", 0) * 1024, peak)
        return None


SAMPLE_S = 0.1  # how often a Watch reads this process's anonymous memory
_watches: set[Watch] = set()  # those started and not stopped
_watches_lock = threading.Lock()


def note_child(peak: int) -> None:
    """Record the peak resident memory of a child this process waited for (a default load), in each
    :class:`Watch` running."""
    with _watches_lock:
        for watch in _watches:
            watch.children = max(watch.children, peak)


def anonymous_bytes(pid: int | str = "self") -> int:
    """A process's anonymous resident memory now (``RssAnon``): what the kernel cannot reclaim from it."""
    return _fields(f"/proc/{pid}/status").get("RssAnon", 0) * 1024


SAID_FROM = 1 / 16  # of its budget: a model this large has its run's memory figures in the summary


@dataclass(frozen=True)
class RunMemory:
    """What a run had and used: ``budget`` (given, else what was available when it started), ``held``
    (the peak of its anonymous memory, sampled every :data:`SAMPLE_S`), ``resident`` (its ``VmHWM``:
    resident pages at their peak, the pages of the weights it maps included, which the kernel reclaims),
    ``children`` (the largest peak of a child it waited for: a default load), and the ``model``'s bytes
    (the file and its external data)."""

    budget: int
    held: int
    resident: int
    children: int
    model: int

    @property
    def text(self) -> str:
        """How the summary says it: ``budget 8.00 GB, held at most 2.10 GB (...); the model 27.0 GB``."""
        child = f"; a default-load child reached {gigabytes(self.children)}" if self.children else ""
        return (f"budget {gigabytes(self.budget)}, held at most {gigabytes(self.held)} (resident "
                f"{gigabytes(self.resident)}, the mapped weights' pages included){child}; the model "
                f"{gigabytes(self.model)}")

    @property
    def over(self) -> bool:
        """Whether the run held more than its budget."""
        return self.held > self.budget

    def worth_saying(self, budget_given: bool) -> bool:
        """Whether the summary states these figures: where memory was a question (a budget given, a run
        over it, or a model of at least :data:`SAID_FROM` of its budget); a model of a few MB run in
        gigabytes has nothing to say of it."""
        return budget_given or self.over or self.model >= self.budget * SAID_FROM


class Watch:
    """Samples this process's anonymous memory while it is entered (a daemon thread, every
    :data:`SAMPLE_S`), and the peaks of the children :func:`note_child` is told of meanwhile."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = available_bytes() if budget is None else budget
        self.peak = anonymous_bytes()
        self.children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="onnx-precision-memory", daemon=True)

    def __enter__(self) -> Watch:
        with _watches_lock:
            _watches.add(self)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with _watches_lock:
            _watches.discard(self)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, anonymous_bytes())

    def figures(self, model_bytes: int) -> RunMemory:
        """The figures of the run so far, ``model_bytes`` its model's."""
        self.peak = max(self.peak, anonymous_bytes())
        return RunMemory(self.budget, self.peak, peak_rss(), self.children, model_bytes)


def files_bytes(paths: Iterable[str]) -> int:
    """The bytes of the files at ``paths`` that exist (a model file and its data files)."""
    return sum(os.path.getsize(p) for p in dict.fromkeys(paths) if os.path.isfile(p))


def gigabytes(n: int) -> str:
    """``n`` bytes as decimal gigabytes, three significant digits (``4.75 GB``, ``24.0 GB``)."""
    value = n / 1e9
    return f"{value:.2f} GB" if value < 10 else f"{value:.1f} GB" if value < 100 else f"{value:.0f} GB"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _fields(path: str) -> dict[str, int]:
    """``name value`` (or ``name: value kB``) lines of a /proc or cgroup file as integers."""
    found: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found
