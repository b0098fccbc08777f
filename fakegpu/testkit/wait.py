"""The test kit's polling loop: fakegpu's one wait helper (``fakegpu.wait``), under the name
suites know. A check is retried until it returns a value, with a single timeout, poll interval
and transient-error policy, and a timeout error that says what was awaited and the last state
seen (so a failing e2e test explains itself).
"""

from __future__ import annotations

from fakegpu.wait import NotYet, WaitTimeout, until_true, wait_for

__all__ = ["NotYet", "WaitTimeout", "until_true", "wait_for"]
