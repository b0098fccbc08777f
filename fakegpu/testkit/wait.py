"""One polling loop shared by every wait in the test kit.

Waits are the only place a suite deals with time: a check is retried until it returns a value,
with a single timeout, poll interval and transient-error policy, and a timeout error that says
what was awaited and the last state seen (so a failing e2e test explains itself).
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


def wait_for(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float,
    interval: float = 1.0,
    transient: tuple[type[BaseException], ...] = (),
    is_transient: Callable[[BaseException], bool] | None = None,
) -> T:
    """Call ``check`` until it returns without raising :class:`NotYet`; return its value.

    ``transient`` exceptions (optionally narrowed by ``is_transient``) are retried like NotYet;
    any other exception propagates at once, because retrying a real error only hides it.
    """
    deadline = time.monotonic() + timeout
    last = "no check completed"
    while True:
        try:
            return check()
        except NotYet as state:
            last = str(state) or "not yet"
        except transient as err:
            if is_transient is not None and not is_transient(err):
                raise
            last = f"{type(err).__name__}: {err}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last}")
        time.sleep(min(interval, remaining))
