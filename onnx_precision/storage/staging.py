"""Staging folders: where a run writes its outputs before moving them into place, and how a later run
tells one whose run is gone.

A run's staging folder, ``.onnx-precision-XXXXXXXX.staging`` beside its targets, is held under an
exclusive ``flock`` from the moment it is made until it is removed. The kernel releases that lock
when the process ends, however it ends (SIGKILL, the OOM killer, a SIGUSR1 it does not handle), so a
folder of that name whose lock can be taken belongs to no live run: :func:`remove_stale` removes
those, and a run calls it before it makes its own folder. The lock, not a recorded pid, is what says
"alive": a pid is reused, and a container sharing the folder sees other pids. A folder on a
filesystem that cannot lock (some network mounts) is never removed, as none was before; nor is a
folder of another user, or one not named as this module names them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import tempfile

from .. import cancel

log = logging.getLogger(__name__)

PREFIX = ".onnx-precision-"
SUFFIX = ".staging"
_NAME = re.compile(r"\.onnx-precision-[a-z0-9_]{8}\.staging")  # as tempfile.mkdtemp names them
_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW  # a link by that name is never followed


class StagingFolder:
    """A new staging folder in ``directory``, locked (see the module docstring) until :meth:`remove`;
    a forced end of the run removes it too (:func:`onnx_precision.cancel.add_staging`)."""

    def __init__(self, directory: str) -> None:
        remove_stale(directory)
        self.path, self._lock = _made_locked(directory)
        cancel.add_staging(self.path)

    def remove(self) -> None:
        """Remove the folder and all in it; then release its lock (a sweep finds nothing to take)."""
        shutil.rmtree(self.path, ignore_errors=True)
        cancel.drop_staging(self.path)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _made_locked(directory: str) -> tuple[str, int | None]:
    """A new staging folder and the descriptor holding its lock (None: the filesystem cannot lock).
    Another run's sweep may take the folder between its making and its locking: then it is made
    again."""
    while True:
        path = tempfile.mkdtemp(prefix=PREFIX, suffix=SUFFIX, dir=directory)
        try:
            fd = os.open(path, _OPEN)
        except FileNotFoundError:  # swept already
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a sweep holds it, and removes it
            os.close(fd)
            continue
        except OSError:  # no locks here: the folder is never taken for stale either
            os.close(fd)
            return path, None
        if _same(fd, path):
            return path, fd
        os.close(fd)  # swept between its opening and its locking


def remove_stale(directory: str) -> tuple[str, ...]:
    """Remove the staging folders in ``directory`` whose run is gone (their lock is free); returns
    their names."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:  # not listable: the caller's own making of a folder says what is wrong
        return ()
    for entry in entries:
        if not (_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            fd = os.open(entry.path, _OPEN)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same(fd, entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
        except OSError:  # held by a live run, or a filesystem that cannot lock
            pass
        finally:
            os.close(fd)
    if removed:
        log.info("%s: removed %s, left by a run that was killed", directory, ", ".join(removed))
    return tuple(removed)


def _same(fd: int, path: str) -> bool:
    """Whether ``path`` is still the folder open as ``fd``."""
    try:
        at_path = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)
