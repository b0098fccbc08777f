"""Where the library and the state files live, and the environment that points NVML at them.

Read at call time, never at import time. ``libdir()`` builds the library when it is missing
(or older than its sources in a source checkout): into the package's lib/ when writable, else
into the user cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from fakegpu import paths
from fakegpu.errors import InvalidInput, MissingPrerequisite, printable
from fakegpu.topology.model import Topology

from . import state, sysfs

LIBNAME = "libnvidia-ml.so.1"
STATE_ENV = "FAKEGPU_NVML_STATE"
PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_LIB = PACKAGE_DIR / "lib"


def _sources() -> list[Path]:
    csrc = PACKAGE_DIR / "csrc"
    return [*csrc.glob("*.c"), *csrc.glob("*.h"), *csrc.glob("*.map"),
            PACKAGE_DIR / "gen_stubs.py", PACKAGE_DIR / "build.py"]


def _stale(lib: Path) -> bool:
    if not lib.is_file():
        return True
    # only a source checkout rebuilds stale libraries; an installed package keeps its own
    if paths.source_checkout() is None:
        return False
    built = lib.stat().st_mtime
    return any(src.stat().st_mtime > built for src in _sources() if src.exists())


def _build_into(target: Path) -> Path:
    from . import build  # stdlib-only module, imported lazily

    target.mkdir(parents=True, exist_ok=True)
    lock_path = Path(tempfile.gettempdir()) / f"fakegpu-nvml-build-{os.getuid()}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lib = target / LIBNAME
        if _stale(lib):
            try:
                build.build_library(target)
            except build.BuildError as err:
                raise MissingPrerequisite(f"cannot build {LIBNAME}: {err}") from None
    return target


def libdir() -> Path:
    """The directory holding libnvidia-ml.so.1, building the library if needed."""
    if not _stale(PACKAGE_LIB / LIBNAME):
        return PACKAGE_LIB
    if os.access(PACKAGE_DIR, os.W_OK):
        try:
            return _build_into(PACKAGE_LIB)
        except PermissionError:
            pass
    digest = hashlib.sha256()
    for src in sorted(_sources()):
        if src.exists():
            digest.update(src.read_bytes())
    return _build_into(paths.cache_dir() / "nvml" / digest.hexdigest()[:16])


def library_path() -> Path:
    return libdir() / LIBNAME


def runtime_dir() -> Path:
    """Base for state files: $XDG_RUNTIME_DIR/fakegpu or /tmp/fakegpu-<uid>."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return Path(xdg) / "fakegpu"
    return Path("/tmp") / f"fakegpu-{os.getuid()}"


def state_dir(topology: Topology) -> Path:
    """One directory per topology file and content: its name, plus a hash of its resolved path
    and of its bytes. Two projects' ``dgx-h100.yaml`` get two states, and an edited file a
    fresh one (rendered on first use, no --fresh needed); the same file keeps its state, and
    with it the faults and MIG instances made at run time."""
    where = topology.path or topology.source
    what = topology.digest or topology.name
    tag = hashlib.sha256(f"{where}\0{topology.name}\0{what}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topology.name)
    return runtime_dir() / "nvml" / f"{safe}-{tag}"


def state_path(topology: Topology, node: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
    return state_dir(topology) / f"{safe}.state"


def ensure_state(topology: Topology, node: str, path: str | Path | None = None,
                 *, fresh: bool = False) -> Path:
    """The node's state file, rendered if it does not exist yet (or ``fresh``)."""
    target = Path(path) if path is not None else state_path(topology, node)
    try:
        if fresh or not target.exists() or not _current_layout(target):
            state.render(topology, node, target)
        elif not sysfs.path_for(target).exists():  # a state from before the view existed
            sysfs.render(topology.node(node), sysfs.path_for(target))
    except OSError as err:
        # /proc/nope/x, /sys/x, a name over NAME_MAX: the path is the problem, not us.
        raise InvalidInput(f"cannot write the NVML state file {printable(str(target))}: "
                           f"{err.strerror or err}") from None
    return target


def _current_layout(path: Path) -> bool:
    """Was the file rendered with this version's layout? One from before an upgrade is
    re-rendered rather than refused by the library (LIB_RM_VERSION_MISMATCH)."""
    try:
        return bool(state.read_header(path).layout_version == state.LAYOUT_VERSION)
    except (OSError, InvalidInput):
        return False


def is_state_file(path: str | Path) -> bool:
    """Whether ``path`` is a regular file; a path the system refuses (a name over NAME_MAX,
    a file as a directory) is bad input, not an error of ours."""
    try:
        return Path(path).is_file()
    except OSError as err:
        raise InvalidInput(f"bad NVML state file path {printable(str(path))}: "
                           f"{err.strerror or err}") from None


def env(state_path: str | Path) -> dict[str, str]:
    """The variables a process needs to see the node: library first on the loader path."""
    path = Path(state_path).resolve()
    if not is_state_file(path):
        raise InvalidInput(f"no NVML state file at {printable(str(path))}")
    lib = str(libdir())
    old = os.environ.get("LD_LIBRARY_PATH", "")
    parts = [lib, *(p for p in old.split(":") if p and p != lib)]
    found = {"LD_LIBRARY_PATH": ":".join(parts), STATE_ENV: str(path)}
    view = sysfs.path_for(path)
    if view.is_dir():  # where the node's devices sit (sysfs.py); a node without a tree has none
        found[sysfs.SYSFS_ENV] = str(view)
    return found
