"""The one polling loop of fakegpu: cluster bring-up, the test kit and the suites wait with it.

A check is retried until it returns a value, with one timeout, one poll interval and one
retry rule: :class:`NotYet` and the exceptions the caller declares transient are retried, any
other exception propagates at once (retrying a real error only hides it). A ``guard`` runs
after every unsuccessful round and may end the wait early by raising (a component that died
will never become ready). A timeout names what was awaited and the last state seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from fakegpu.errors import FakegpuError

T = TypeVar("T")


class NotYet(Exception):
    """Raised by a check to say "not yet", with the state it saw (kept for the timeout message)."""


class WaitTimeout(FakegpuError):
    """A wait ran out of time; the message names what was awaited and the last state seen."""

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error  # the last transient exception, if that was the state


def wait_for(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float,
    interval: float = 1.0,
    transient: tuple[type[BaseException], ...] = (),
    is_transient: Callable[[BaseException], bool] | None = None,
    guard: Callable[[], None] | None = None,
) -> T:
    """Call ``check`` until it returns without raising :class:`NotYet`; return its value.

    ``transient`` exceptions (optionally narrowed by ``is_transient``) are retried like NotYet;
    any other exception propagates. ``guard`` is called after each round that did not succeed.
    """
    deadline = time.monotonic() + timeout
    last = "no check completed"
    last_error: BaseException | None = None
    while True:
        try:
            return check()
        except NotYet as state:
            last = str(state) or "not yet"
        except transient as err:
            if is_transient is not None and not is_transient(err):
                raise
            last = f"{type(err).__name__}: {err}"
            last_error = err
        if guard is not None:
            guard()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last}",
                last_error)
        time.sleep(min(interval, remaining))


def until_true(check: Callable[[], bool], state: str = "not yet") -> Callable[[], None]:
    """A check for :func:`wait_for` from a predicate: False means "not yet"."""

    def once() -> None:
        if not check():
            raise NotYet(state)

    return once
