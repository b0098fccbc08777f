"""Debian packages fakegpu installs on the host when a build or a provider needs them.

One place for it, so every caller gets the same checks (root, apt-get present), the same
non-interactive environment and the same one-line error when apt fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

from filelock import FileLock
from rich.console import Console

from fakegpu import paths
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


def _missing(packages: Iterable[str]) -> list[str]:
    return [p for p in packages if not (shutil.which("dpkg-query") and installed(p))]


def ensure(packages: Iterable[str], *, why: str, console: Console | None = None) -> None:
    """Install whichever of ``packages`` are missing, printing apt's own progress.

    One apt-get at a time across processes: two xdist workers bringing up two kind clusters
    on a fresh machine both wanted docker.io, and the second failed on dpkg's lock. The
    second waits for the first, then finds the packages there."""
    packages = list(packages)
    if not _missing(packages):
        return
    lock = paths.cache_dir() / "apt.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        _install(_missing(packages), why, console)


def _install(missing: list[str], why: str, console: Console | None) -> None:
    global _updated
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
