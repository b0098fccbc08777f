"""The locks every instance of the driver on a node shares (seamless upgrade: two at once).

- ``commit`` (exclusive flock on ``<state-dir>/plugin.lock``, the file earlier versions
  locked too): held only while a claim's record and CDI spec are renamed into place or
  removed, microseconds, never across an fsync or an apiserver call.
- ``staging`` (shared flock on ``<state-dir>/staging.lock``): held while a call writes its
  temp files; ``cleanup`` takes it exclusively, so a starting instance removes only temp files
  that a killed writer left, never those of a live instance staging right now.

flock excludes open file descriptions, not processes, so threads of one process are first
serialised by a ``threading.Lock`` and then share one descriptor for the exclusive lock;
cross-process waits poll (the other instance holds the lock for microseconds).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

COMMIT = "plugin.lock"
STAGING = "staging.lock"


class LockTimeout(OSError):
    """Another holder kept the state lock longer than the timeout."""


def _flock(fd: int, how: int, deadline: float, path: Path) -> None:
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"timed out waiting for the state lock {path}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.02)


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


class StateLock:
    def __init__(self, state_dir: Path, timeout_s: float = 60.0) -> None:
        self._dir = Path(state_dir)
        self._timeout = timeout_s
        self._threads = threading.Lock()
        self._commit_fd: int | None = None

    @contextmanager
    def commit(self) -> Iterator[None]:
        deadline = time.monotonic() + self._timeout
        if not self._threads.acquire(timeout=self._timeout):
            raise LockTimeout(f"timed out waiting for the state lock {self._dir / COMMIT}")
        try:
            if self._commit_fd is None:
                self._commit_fd = _open(self._dir / COMMIT)
            _flock(self._commit_fd, fcntl.LOCK_EX, deadline, self._dir / COMMIT)
            try:
                yield
            finally:
                fcntl.flock(self._commit_fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    @contextmanager
    def staging(self) -> Iterator[None]:
        """Shared among all writers of every instance; a descriptor per holder (see above)."""
        path = self._dir / STAGING
        fd = _open(path)
        try:
            _flock(fd, fcntl.LOCK_SH, time.monotonic() + self._timeout, path)
            yield
        finally:
            os.close(fd)  # releases the lock

    @contextmanager
    def cleanup(self) -> Iterator[None]:
        """Exclusive on both: no instance is staging or committing (startup housekeeping)."""
        path = self._dir / STAGING
        fd = _open(path)
        try:
            _flock(fd, fcntl.LOCK_EX, time.monotonic() + self._timeout, path)
            with self.commit():
                yield
        finally:
            os.close(fd)
