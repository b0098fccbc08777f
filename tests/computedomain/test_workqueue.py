"""The controller's work queue: one entry per key, due order, backoff after failures."""

from __future__ import annotations

from fakegpu.computedomain.workqueue import WorkQueue, backoff_s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_many_times_is_handed_out_once() -> None:
    q = WorkQueue()
    for key in ("a", "b", "a", "a"):
        q.add(key)
    assert len(q) == 2
    assert sorted([q.get(0), q.get(0)]) == ["a", "b"]  # type: ignore[type-var]
    assert q.get(0) is None


def test_a_failed_key_comes_back_after_a_doubling_backoff_until_forgotten() -> None:
    clock = Clock()
    q = WorkQueue(base_s=1.0, cap_s=3.0, clock=clock)
    assert q.retry("d") == 1.0
    assert q.get(0) is None  # not due yet
    clock.now += 1.0
    assert q.get(0) == "d"
    assert q.retry("d") == 2.0
    clock.now += 2.0
    assert q.get(0) == "d"
    assert q.retry("d") == 3.0  # capped
    clock.now += 3.0
    assert q.get(0) == "d"
    q.forget("d")
    assert q.retry("d") == 1.0


def test_an_event_does_not_wait_for_a_backoff_and_keys_come_in_due_order() -> None:
    clock = Clock()
    q = WorkQueue(base_s=10.0, clock=clock)
    q.retry("failed")
    q.add("later", delay_s=5.0)
    q.add("now")
    assert q.get(0) == "now"
    q.add("failed")  # a new event about it: due now, not after its backoff
    assert q.get(0) == "failed"
    clock.now += 5.0
    assert q.get(0) == "later"


def test_backoff_is_capped_for_any_number_of_failures() -> None:
    assert backoff_s(0, 0.25, 60) == 0.25
    assert backoff_s(3, 0.25, 60) == 2.0
    assert backoff_s(10_000, 0.25, 60) == 60
