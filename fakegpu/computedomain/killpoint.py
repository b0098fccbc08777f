"""A test hook of the ComputeDomain processes: the process SIGKILLs itself when it reaches the
step that ``$FAKEGPU_CD_KILL_AT`` names, as a kill -9 from outside would land there (the
kill -9 tests of tests/computedomain). Unset in every real run: then a step costs one lookup."""

from __future__ import annotations

import os
import signal

ENV = "FAKEGPU_CD_KILL_AT"


def reached(step: str) -> None:
    if os.environ.get(ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
