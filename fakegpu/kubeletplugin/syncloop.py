"""The background loop a kubelet plugin keeps something in sync with: its ResourceSlices, its
claims' device conditions, its devices' attach outcomes.

One ``sync`` call every interval, at once when woken (a device event), until stopped. An
error is logged and tried again after 1 s, doubling up to a cap: the plugin keeps serving the
kubelet while the apiserver is away, and does not hammer it when it comes back."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0


class SyncLoop:
    """A daemon thread that calls ``sync`` (the subclass's) every ``interval_s`` seconds or
    when woken. ``what`` completes "cannot ..." in the log line of a failed call."""

    def __init__(self, *, name: str, what: str, interval_s: float) -> None:
        self._what, self._interval = what, interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.synced = threading.Event()  # set after the first call that did not raise
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Sync now (called from another thread, e.g. on a device event)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def sync(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.sync()
            except Exception as err:  # keep serving the kubelet whatever happens
                log.warning("cannot %s (retry in %.0fs): %s", self._what, backoff, err)
                wait, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
            else:
                self.synced.set()
                wait, backoff = self._interval, 1.0
            self._wake.wait(wait)
