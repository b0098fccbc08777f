"""Debian packages fakegpu installs on the host when a build or a provider needs them.

One place for it, so every caller gets the same checks (root, apt-get present), the same
non-interactive environment and the same one-line error when apt fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

from rich.console import Console

from fakegpu.errors import MissingPrerequisite

_updated = False


def installed(package: str) -> bool:
    res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                         capture_output=True, text=True, check=False)
    return res.returncode == 0 and is_installed_status(res.stdout)


def is_installed_status(status: str) -> bool:
    """dpkg's ``want ok state`` triple says installed only when its state word is exactly that.

    A package once known to dpkg and then removed reads ``unknown ok not-installed`` (or
    ``deinstall ok config-files``): the state word, not a suffix, decides.
    """
    words = status.split()
    return len(words) == 3 and words[1] == "ok" and words[2] == "installed"


def ensure(packages: Iterable[str], *, why: str, console: Console | None = None) -> None:
    """Install whichever of ``packages`` are missing, printing apt's own progress."""
    global _updated
    missing = [p for p in packages if not (shutil.which("dpkg-query") and installed(p))]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise MissingPrerequisite(
            f"{why} needs the packages {' '.join(missing)}: install them (apt-get as root)")
    console = console or Console(stderr=True)
    console.print(f"installing {' '.join(missing)} with apt-get ({why})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [] if _updated else [["apt-get", "update", "-q"]]
    steps.append(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing])
    for argv in steps:
        res = subprocess.run(argv, env=env, check=False)  # apt prints its own progress
        if res.returncode != 0:
            raise MissingPrerequisite(f"`{' '.join(argv)}` exited {res.returncode} ({why})")
    _updated = True
