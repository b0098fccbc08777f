"""The controller's work queue: keys (ComputeDomain UIDs) waiting to be reconciled.

client-go's rate-limited work queue, reduced to what one worker needs: a key is held once
however often it is added (ten events about one domain make one reconcile), keys come out in
the order they fall due, and a key whose reconcile failed comes back after a backoff that
doubles with each failure in a row, so an apiserver that refuses for a while is not hammered.
A key added while it is being reconciled is simply due again: its newest state is looked at
once more.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

BASE_S = 0.25  # the first retry of a failed key
CAP_S = 60.0  # the longest a failing key waits


class WorkQueue:
    def __init__(self, base_s: float = BASE_S, cap_s: float = CAP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._base, self._cap, self._clock = base_s, cap_s, clock
        self._due: dict[str, float] = {}  # key -> when it may be handed out
        self._failures: dict[str, int] = {}  # key -> failures in a row
        self._cond = threading.Condition()

    def add(self, key: str, delay_s: float = 0.0) -> None:
        """Hand ``key`` out after ``delay_s``; a key already waiting keeps the earlier time."""
        with self._cond:
            due = self._clock() + delay_s
            if due < self._due.get(key, math.inf):
                self._due[key] = due
                self._cond.notify()

    def retry(self, key: str) -> float:
        """Add ``key`` again after its backoff (base, doubling per failure in a row, capped);
        returns that delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = backoff_s(failures, self._base, self._cap)
        self.add(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """``key`` was reconciled: its next failure starts the backoff afresh."""
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout_s: float) -> str | None:
        """The key that falls due first, once it is due; None when none is due within
        ``timeout_s``."""
        with self._cond:
            deadline = self._clock() + timeout_s
            while True:
                now = self._clock()
                wake = deadline
                if self._due:
                    key, due = min(self._due.items(), key=lambda kv: kv[1])
                    if due <= now:
                        del self._due[key]
                        return key
                    wake = min(due, deadline)
                if now >= deadline:
                    return None
                self._cond.wait(wake - now)

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)


def backoff_s(failures: int, base_s: float = BASE_S, cap_s: float = CAP_S) -> float:
    """The wait after ``failures`` failures in a row: base, doubling, capped."""
    return float(min(base_s * 2 ** min(failures, 32), cap_s))
