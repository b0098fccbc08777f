"""What every benchmark records beside its numbers: the machine, the date and the load.

The benchmarks run on shared, busy machines; a figure without the load average it was taken
under cannot be compared with another.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tree() -> str:
    """The commit measured, "+changes" when the working tree differs from it (a shared tree:
    others' uncommitted work is then part of what was measured)."""
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def machine() -> dict[str, object]:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": _cpu_model(),
            "memory_gib": round(mem_kib / 1024 / 1024, 1), "kernel": platform.release(),
            "python": platform.python_version(), "tree": tree(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
