"""The shared polling loop: values, NotYet, transient errors, and the timeout message."""

from __future__ import annotations

import pytest

from fakegpu.testkit.wait import NotYet, WaitTimeout, until_true, wait_for


def test_returns_the_first_value_after_not_yet() -> None:
    calls: list[NotYet | int] = [NotYet("a"), NotYet("b"), 42]

    def check() -> int:
        value = calls.pop(0)
        if isinstance(value, NotYet):
            raise value
        return value

    assert wait_for(check, what="x", timeout=10, interval=0.001) == 42


def test_timeout_names_what_and_the_last_state() -> None:
    def never() -> None:
        raise NotYet("phase Pending")

    with pytest.raises(WaitTimeout, match=r"waiting for the pod; last seen: phase Pending"):
        wait_for(never, what="the pod", timeout=0.05, interval=0.01)


def test_transient_errors_are_retried_others_propagate() -> None:
    seen = []

    def flaky() -> str:
        seen.append(1)
        if len(seen) < 3:
            raise ConnectionError("reset")
        return "ok"

    assert wait_for(flaky, what="x", timeout=10, interval=0.001,
                    transient=(ConnectionError,)) == "ok"

    def broken() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_for(broken, what="x", timeout=10, interval=0.001, transient=(ConnectionError,))


def test_is_transient_narrows_the_retry() -> None:
    def refused() -> None:
        raise ConnectionError("permanent")

    with pytest.raises(ConnectionError):
        wait_for(refused, what="x", timeout=10, interval=0.001, transient=(ConnectionError,),
                 is_transient=lambda err: "permanent" not in str(err))


def test_transient_error_at_timeout_is_reported() -> None:
    def down() -> None:
        raise ConnectionError("refused")

    with pytest.raises(WaitTimeout, match="ConnectionError: refused"):
        wait_for(down, what="x", timeout=0.05, interval=0.01, transient=(ConnectionError,))


def test_guard_ends_the_wait_early_and_its_error_propagates() -> None:
    rounds: list[int] = []

    def guard() -> None:
        rounds.append(1)
        if len(rounds) == 3:
            raise RuntimeError("the component died")

    with pytest.raises(RuntimeError, match="the component died"):
        wait_for(lambda: (_ for _ in ()).throw(NotYet("starting")), what="x", timeout=60,
                 interval=0.001, guard=guard)
    assert len(rounds) == 3


def test_until_true_turns_false_into_not_yet() -> None:
    answers = [False, False, True]
    wait_for(until_true(lambda: answers.pop(0)), what="x", timeout=10, interval=0.001)
    assert answers == []
    with pytest.raises(WaitTimeout, match="last seen: not yet"):
        wait_for(until_true(lambda: False), what="x", timeout=0.03, interval=0.01)
