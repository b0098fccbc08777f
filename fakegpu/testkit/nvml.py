"""Fake GPUs for code that calls NVML in-process: one node's state rendered into a directory,
the library loaded into this process, faults injected and cleared. No cluster.

``open_node`` does the work; the pytest fixture ``fakegpu_nvml`` wraps it (state in tmp_path,
environment set for the test). Usable without pytest: set ``FakeNvml.env`` in ``os.environ``
yourself before ``nvmlInit``.

Why a preload: the dynamic loader reads LD_LIBRARY_PATH once, at process start, so setting it
in a running process (a fixture) cannot make pynvml's ``CDLL("libnvidia-ml.so.1")`` find the
fake library. Loading the library by its path first does: dlopen by a bare soname returns an
object already loaded under that soname. ``preload`` checks that this happened.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import FakegpuError, InvalidInput, MissingPrerequisite
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import faults, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import FaultKind, Topology
from fakegpu.topology.packaged import resolve_topology

NVML_ERROR_UNINITIALIZED = 1
# More nvmlInit calls than a test leaves open; the bound only guards against a library that
# never answers UNINITIALIZED.
_MAX_SHUTDOWNS = 1024


def preload() -> ctypes.CDLL:
    """Load the fake libnvidia-ml.so.1 into this process, so that a later dlopen of the bare
    soname (pynvml, any ctypes caller) gets it; MissingPrerequisite when it cannot."""
    path = nvml_env.library_path()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    by_name = ctypes.CDLL(nvml_env.LIBNAME)
    if by_name._handle != lib._handle:
        raise MissingPrerequisite(f"{nvml_env.LIBNAME} in this process is not fakegpu's "
                                  f"({path}): another NVML library was loaded first")
    return lib


@dataclass(frozen=True)
class FakeNvml:
    """One fake node's NVML, as this process and its children see it."""

    topology: Topology
    node: str
    state_path: Path
    library: Path

    @property
    def state_dir(self) -> Path:
        return self.state_path.parent

    @property
    def env(self) -> dict[str, str]:
        """The variables that point NVML at this node: set them in this process before
        ``nvmlInit``, and pass them to subprocesses (which then need no preload)."""
        return nvml_env.env(self.state_path)

    @property
    def gpu_count(self) -> int:
        return len(self.topology.node(self.node).gpus)

    def inject(self, fault: FaultKind | str, gpu: int, value: int | None = None) -> None:
        """The fault as ``fakegpu fault inject`` makes it (``xid`` and ``nvlink-down`` take a
        value): clients see it at their next call."""
        faults.inject(self.state_path, gpu, fault, value)

    def clear(self, gpu: int | None = None, fault: FaultKind | str | None = None,
              value: int | None = None) -> None:
        """Clear ``fault`` (None: every fault) of ``gpu`` (None: every GPU)."""
        for index in range(self.gpu_count) if gpu is None else (gpu,):
            faults.clear(self.state_path, index, fault, value)


def open_node(topology: str | Path, node: str | None, directory: Path) -> FakeNvml:
    """Render ``node`` of ``topology`` (a path or a fixture's name; None: its only node) into
    ``directory`` and load the library into this process."""
    topo = load_topology(resolve_topology(topology))
    names = [n.name for n in topo.nodes]
    if node is None:
        if len(names) != 1:
            raise InvalidInput(f"{topo.source}: give node=, one of {', '.join(names)}")
        node = names[0]
    elif node not in names:
        raise InvalidInput(f"{topo.source}: no node {node!r} (its nodes: {', '.join(names)})")
    directory.mkdir(parents=True, exist_ok=True)
    path = state.render(topo, node, directory / f"{node}.state")
    preload()
    return FakeNvml(topology=topo, node=node, state_path=path,
                    library=nvml_env.library_path())


def shutdown_all() -> int:
    """Undo every ``nvmlInit`` a test left open in this process, so that the next one reads
    its own state (the library reads FAKEGPU_NVML_STATE at init); the count undone."""
    try:
        lib = ctypes.CDLL(str(nvml_env.library_path()))
    except (OSError, FakegpuError):
        return 0
    for undone in range(_MAX_SHUTDOWNS):
        if lib.nvmlShutdown() == NVML_ERROR_UNINITIALIZED:
            return undone
    return _MAX_SHUTDOWNS
