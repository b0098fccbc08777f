"""Coordination of test processes that share clusters (pytest-xdist workers; usable without pytest).

All state lives in one directory every process sees (the xdist controller makes it and hands it
to its workers), as small files guarded by ``flock`` locks, so a worker that dies releases its
locks with its file descriptors:

- ``<cluster>.json``: the cluster's bring-up outcome (up / skip / error / down), written once by
  the worker that brought it up, under ``<cluster>.bringup.lock``; the others read it;
- ``worker-<id>.rank``: how far a worker is in the session's topology order (tests are sorted
  by topology, so a worker never goes back): a cluster every worker is past can go down;
- ``<cluster>.rw.lock`` + ``<cluster>.gate.lock``: a readers-writer lock per cluster. Parallel
  tests hold it shared, a serial test exclusively. The gate gives a waiting writer priority
  (``flock`` alone would let a steady stream of shared holders starve it).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fakegpu.fsutil import atomic_write

# A worker that has not written its rank yet has started no test (it may still collect).
NOT_STARTED = -1
FINISHED = 1 << 30  # a worker whose session ended is past every topology


@dataclass(frozen=True)
class SharedOutcome:
    """What one worker's bring-up gave, for the others (the cluster itself they ask the
    provider for: ``Clusters.status``)."""

    state: str  # "up" | "skip" | "error" | "down"
    message: str | None = None  # the skip reason or the error
    reused: bool = False  # --fakegpu-keep-cluster found it running
    by: str = ""  # the worker that brought it up


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class Coordination:
    """One process's view of the shared directory: ``worker`` of ``count`` workers."""

    def __init__(self, directory: Path, worker: str, count: int) -> None:
        self.dir = directory
        self.worker = worker
        self.count = count
        directory.mkdir(parents=True, exist_ok=True)

    # -- bring-up --

    @contextmanager
    def bringup(self, cluster: str) -> Iterator[None]:
        """Held while a cluster's outcome is read, made or changed: one bring-up at a time."""
        with _flock(self.dir / f"{cluster}.bringup.lock", fcntl.LOCK_EX):
            yield

    def outcome(self, cluster: str) -> SharedOutcome | None:
        path = self.dir / f"{cluster}.json"
        if not path.is_file():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return SharedOutcome(**data)

    def record(self, cluster: str, outcome: SharedOutcome) -> None:
        atomic_write(self.dir / f"{cluster}.json", json.dumps(asdict(outcome)))

    def clusters(self) -> dict[str, SharedOutcome]:
        """Every cluster some worker recorded, by name."""
        found = {}
        for path in sorted(self.dir.glob("*.json")):
            outcome = self.outcome(path.stem)
            if outcome is not None:
                found[path.stem] = outcome
        return found

    # -- progress through the topologies --

    def set_rank(self, rank: int) -> None:
        atomic_write(self.dir / f"worker-{self.worker}.rank", str(rank))

    def ranks(self) -> list[int]:
        """Every worker's rank (NOT_STARTED for one that wrote none yet)."""
        ranks = []
        for index in range(self.count):
            path = self.dir / f"worker-gw{index}.rank"
            ranks.append(int(path.read_text()) if path.is_file() else NOT_STARTED)
        return ranks

    def all_past(self, rank: int) -> bool:
        """No worker will run a test of this rank's topology again."""
        return all(r > rank for r in self.ranks())

    # -- exclusive tests --

    @contextmanager
    def shared(self, cluster: str) -> Iterator[None]:
        """Held by a parallel test: any number at once, never beside a serial one."""
        with _flock(self.dir / f"{cluster}.gate.lock", fcntl.LOCK_EX):
            pass  # a serial test waiting at the gate goes first
        with _flock(self.dir / f"{cluster}.rw.lock", fcntl.LOCK_SH):
            yield

    @contextmanager
    def exclusive(self, cluster: str) -> Iterator[None]:
        """Held by a serial test: alone on the cluster, across every worker."""
        with _flock(self.dir / f"{cluster}.gate.lock", fcntl.LOCK_EX), \
                _flock(self.dir / f"{cluster}.rw.lock", fcntl.LOCK_EX):
            yield
