"""What the fake NVML library reports for one node, read the way a real tool reads it, and
the GPUs a container's environment says it was given.

pynvml runs in a subprocess with the node's state file and the fake ``libnvidia-ml.so.1``
first on the loader path: the library is loaded once per process, so reading several nodes
(or leaving this test process free of it) needs a process per read. Suites compare what a pod
sees against this, never against the topology YAML, so the whole chain is under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import FakegpuError

# Runs inside the subprocess: prints one JSON object per GPU.
_READER = r"""
import json, pynvml
pynvml.nvmlInit()
try:
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        def text(v):
            return v.decode() if isinstance(v, bytes) else str(v)
        out.append({
            "index": i,
            "uuid": text(pynvml.nvmlDeviceGetUUID(h)),
            "name": text(pynvml.nvmlDeviceGetName(h)),
            "minor": int(pynvml.nvmlDeviceGetMinorNumber(h)),
            "pci_bus_id": text(pynvml.nvmlDeviceGetPciInfo(h).busId),
        })
    print(json.dumps(out))
finally:
    pynvml.nvmlShutdown()
"""


class NvmlReadError(FakegpuError):
    """pynvml could not read the node's GPUs through the fake library."""


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    uuid: str
    name: str
    minor: int
    pci_bus_id: str


def nvml_env(state: Path) -> dict[str, str]:
    """This process's environment plus what makes pynvml load the fake library for ``state``."""
    from fakegpu.nvml.env import env

    return {**os.environ, **env(state)}


def read_node_gpus(state: Path, *, timeout: float = 60.0) -> list[NvmlGpu]:
    """Every GPU NVML reports for the node whose state file is ``state``."""
    if not Path(state).is_file():
        raise NvmlReadError(f"NVML state file {state} does not exist")
    try:
        out = subprocess.run([sys.executable, "-c", _READER], env=nvml_env(state),
                             capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise NvmlReadError(f"reading GPUs of {state} through pynvml took over "
                            f"{timeout:.0f}s") from err
    if out.returncode != 0:
        raise NvmlReadError(f"reading GPUs of {state} through pynvml failed "
                            f"(exit {out.returncode}): {out.stderr.strip()[-800:]}")
    try:
        rows = json.loads(out.stdout)
        return [NvmlGpu(**row) for row in rows]
    except (ValueError, TypeError) as err:
        raise NvmlReadError(f"unexpected pynvml reader output for {state}: "
                            f"{out.stdout[:300]!r}") from err


VISIBLE_ENV = "NVIDIA_VISIBLE_DEVICES"  # the GPUs a prepared container is given, by UUID


def visible_gpus(env: Mapping[str, str]) -> list[str]:
    """The GPU (or MIG device) UUIDs of ``env``'s NVIDIA_VISIBLE_DEVICES, in order; the
    variable must be there (a prepared container always gets it)."""
    assert VISIBLE_ENV in env, f"no {VISIBLE_ENV} in the pod's env: {dict(env)}"
    return [u for u in env[VISIBLE_ENV].split(",") if u]
