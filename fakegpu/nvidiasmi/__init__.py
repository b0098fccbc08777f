"""A small ``nvidia-smi`` (C, on NVML) for pods and nodes of fake GPUs.

``path()`` gives the executable, built on first use (like the NVML library) from
``csrc/nvidia-smi.c`` against NVIDIA's nvml.h and fakegpu's ``libnvidia-ml.so.1``; it loads
whatever ``libnvidia-ml.so.1`` the loader finds at run time, as NVIDIA's does, so it shows
exactly the GPUs that library shows.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fakegpu.errors import MissingPrerequisite

NAME = "nvidia-smi"
HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "nvidia-smi.c"
CFLAGS = ["-std=gnu11", "-O2", "-g0", "-Wall", "-Wextra", "-Werror"]


def build(out_dir: Path) -> Path:
    """Compile ``out_dir/nvidia-smi`` (replaced atomically) and return its path."""
    from fakegpu.nvml import env
    from fakegpu.nvml.build import BuildError, find_header

    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise MissingPrerequisite(f"cannot build {NAME}: C compiler {cc!r} not found")
    try:
        header = find_header()
    except BuildError as err:
        raise MissingPrerequisite(f"cannot build {NAME}: {err}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = out_dir / f".{NAME}.{os.getpid()}.tmp"
    proc = subprocess.run([cc, *CFLAGS, f"-I{header.parent}", str(SOURCE), "-o", str(staged),
                           f"-L{env.libdir()}", "-l:libnvidia-ml.so.1"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        staged.unlink(missing_ok=True)
        raise MissingPrerequisite(f"cannot build {NAME}: {proc.stderr.strip()[-500:]}")
    final = out_dir / NAME
    os.replace(staged, final)
    return final


def _stale(binary: Path) -> bool:
    return not binary.is_file() or binary.stat().st_mtime < SOURCE.stat().st_mtime


def path() -> Path:
    """The executable, built if missing or older than its source."""
    from fakegpu import paths

    out = HERE / "bin" if os.access(HERE, os.W_OK) else paths.cache_dir() / "nvidia-smi"
    binary = out / NAME
    if not _stale(binary):
        return binary
    out.mkdir(parents=True, exist_ok=True)
    lock = Path(tempfile.gettempdir()) / f"fakegpu-nvidia-smi-build-{os.getuid()}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if _stale(binary):
            build(out)
    return binary
