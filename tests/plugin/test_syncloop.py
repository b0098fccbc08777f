"""kubeletplugin.syncloop: the loop behind slice publishing, claim conditions and attaches."""

from __future__ import annotations

import logging
import threading

import pytest

from fakegpu.kubeletplugin.syncloop import SyncLoop


class Counting(SyncLoop):
    def __init__(self, failures: int, interval_s: float) -> None:
        super().__init__(name="test-loop", what="count", interval_s=interval_s)
        self.calls = 0
        self.failures = failures
        self.called = threading.Semaphore(0)

    def sync(self) -> int:
        self.calls += 1
        self.called.release()
        if self.calls <= self.failures:
            raise RuntimeError(f"failure {self.calls}")
        return self.calls


def test_a_failed_sync_is_logged_and_tried_again_after_a_second(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = Counting(failures=1, interval_s=600)
    with caplog.at_level(logging.WARNING, logger="fakegpu.kubeletplugin.syncloop"):
        loop.start()
        try:
            # The interval is 600 s: only the backoff's 1 s retry gets the second call.
            assert loop.synced.wait(10), "no successful sync after a failure"
        finally:
            loop.stop()
    assert loop.calls == 2
    assert "cannot count (retry in 1s): failure 1" in caplog.text


def test_wake_syncs_at_once_and_stop_ends_the_thread() -> None:
    loop = Counting(failures=0, interval_s=600)
    loop.start()
    try:
        assert loop.called.acquire(timeout=10)
        loop.wake()
        assert loop.called.acquire(timeout=10), "wake did not sync before the 600 s interval"
    finally:
        loop.stop()
    assert not loop._thread.is_alive()
    assert loop.calls == 2
