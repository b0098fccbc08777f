"""A small ``nvidia-smi`` (C, on NVML) for pods and nodes of fake GPUs.

``path()`` gives the executable: a wheel carries it built (setup.py), a checkout builds it on
first use (like the NVML library) from ``csrc/nvidia-smi.c`` and the fake NVML's sources,
linked **statically**: it runs in any container, a busybox one without a C library included,
and shows what fakegpu's NVML shows for ``FAKEGPU_NVML_STATE`` and ``FAKEGPU_NVML_VISIBLE``
(the claim's view).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from fakegpu.errors import MissingPrerequisite

NAME = "nvidia-smi"
# In a plugin's environment: mount NVML, this tool and the claim's view into prepared containers
# (fakegpu.plugin.nvmlmounts); set by a provider whose plugin paths are the node's.
CDI_ENV = "FAKEGPU_CDI_NVML"
HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "nvidia-smi.c"
CFLAGS = ["-std=gnu11", "-O2", "-g0", "-Wall", "-Wextra", "-Werror"]


def build(out_dir: Path) -> Path:
    """Compile ``out_dir/nvidia-smi`` (replaced atomically) and return its path."""
    return build_static(SOURCE, NAME, out_dir)


def build_static(source: Path, name: str, out_dir: Path, defines: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` with the fake NVML's sources into the static ``out_dir/name``
    (replaced atomically); ``defines`` are extra ``-D`` flags for ``source``. The bandwidth
    program (fakegpu.bandwidth.program) is built the same way."""
    from fakegpu.nvml import build as nvml_build

    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise MissingPrerequisite(f"cannot build {name}: C compiler {cc!r} not found")
    try:
        header = nvml_build.find_header()
    except nvml_build.BuildError as err:
        raise MissingPrerequisite(f"cannot build {name}: {err}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = [*CFLAGS, "-pthread", f"-I{header.parent}", f"-I{nvml_build.CSRC}"]
    with tempfile.TemporaryDirectory(prefix=f"fakegpu-{name}-") as tmp:
        objects = []
        for src in (*nvml_build.sources(), source):
            obj = Path(tmp) / f"{src.stem}.o"
            # The library's own sources define the unversioned names too (its build flag).
            extra = (["-DNVML_NO_UNVERSIONED_FUNC_DEFS"] if src != source
                     else [f"-D{d}" for d in defines])
            _cc(name, [cc, *flags, *extra, "-c", str(src), "-o", str(obj)])
            objects.append(str(obj))
        staged = out_dir / f".{name}.{os.getpid()}.tmp"
        _cc(name, [cc, "-static", "-pthread", "-o", str(staged), *objects])
    final = out_dir / name
    os.replace(staged, final)
    return final


def _cc(name: str, cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MissingPrerequisite(f"cannot build {name}: {proc.stderr.strip()[-500:]}")


def _sources() -> list[Path]:
    from fakegpu.nvml import build as nvml_build

    csrc = nvml_build.CSRC
    return [SOURCE, *csrc.glob("*.c"), *csrc.glob("*.h")]


def _stale(binary: Path) -> bool:
    if not binary.is_file():
        return True
    built = binary.stat().st_mtime
    return any(src.stat().st_mtime > built for src in _sources())


def path() -> Path:
    """The executable, built if missing or older than its source."""
    return cached_program(HERE, NAME, _stale, build)


def cached_program(here: Path, name: str, stale: Callable[[Path], bool],
                   build_into: Callable[[Path], object]) -> Path:
    """A static program of a package (``here``), built into its ``bin`` (or the user cache
    when the package is read-only) if missing or ``stale``; one build at a time per user. An
    installed wheel carries it built (setup.py): only a source checkout rebuilds it."""
    from fakegpu import paths

    shipped = here / "bin" / name
    if paths.source_checkout() is None and shipped.is_file():
        return shipped
    out = here / "bin" if os.access(here, os.W_OK) else paths.cache_dir() / name
    binary = out / name
    if not stale(binary):
        return binary
    out.mkdir(parents=True, exist_ok=True)
    lock = Path(tempfile.gettempdir()) / f"fakegpu-{name}-build-{os.getuid()}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if stale(binary):
            build_into(out)
    return binary
