"""GPUs inside containers as NVIDIA's driver gives them (issue 13): a prepared claim's CDI
spec mounts fakegpu's NVML and ``nvidia-smi`` into the container, with a read-only view of
exactly the claim's devices.

- the node's NVML state file, read-only, at ``STATE`` (``FAKEGPU_NVML_STATE``), with
  ``FAKEGPU_NVML_VISIBLE=none`` claim-wide and ``FAKEGPU_NVML_VISIBLE_<device>=<UUID>`` in each
  device's edits: NVML in the container shows the union of the devices it was given
  (``fakegpu/nvml/csrc/visible.c``): a container naming one request of a claim sees that
  request's devices, one given two claims sees both, as with NVIDIA's per-device CDI edits;
- ``nvidia-smi`` (``fakegpu.nvidiasmi``: static, so any image runs it) at ``SMI``;
- the fake ``libnvidia-ml.so.1`` at ``LIBRARY``, where glibc images' loaders find it, for
  pynvml and other NVML clients in the container.

The provider opts in with ``ENABLE_ENV=1`` in the plugin's environment. On the embedded
provider the plugin is a host process: its paths are the node's. A plugin in a pod (kind, the
chart's ``nvmlInContainers``) names the node's paths instead: ``NODE_STATE_DIR_ENV`` (where its
state directory volume lies on the node) and ``NODE_SMI_ENV`` / ``NODE_LIBRARY_ENV`` (the tools
the kind provider copies onto each node).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.nvidiasmi import CDI_ENV as ENABLE_ENV

STATE = "/run/fakegpu/nvml.state"
SMI = "/usr/bin/nvidia-smi"
LIBRARY = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
_RO = ["ro", "nosuid", "nodev", "bind"]
VISIBLE_ENV = "FAKEGPU_NVML_VISIBLE"  # csrc/visible.h
NODE_STATE_DIR_ENV = "FAKEGPU_NVML_NODE_STATE_DIR"
NODE_SMI_ENV = "FAKEGPU_NVML_NODE_SMI"
NODE_LIBRARY_ENV = "FAKEGPU_NVML_NODE_LIBRARY"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NvmlMounts:
    state: Path
    smi: Path
    library: Path


def from_env(environ: dict[str, str] | None = None) -> NvmlMounts | None:
    """The host paths to mount, when the provider opted in and the node has fake NVML; None
    otherwise (a failed build of nvidia-smi is logged once and leaves the specs as before)."""
    env = dict(os.environ if environ is None else environ)
    if env.get(ENABLE_ENV) != "1":
        return None
    from fakegpu.nvml.env import STATE_ENV

    state = env.get(STATE_ENV)
    if not state:
        return None
    node_dir, smi, lib = (env.get(k) for k in (NODE_STATE_DIR_ENV, NODE_SMI_ENV,
                                                 NODE_LIBRARY_ENV))
    if node_dir and smi and lib:  # a plugin in a pod: the node's paths, not its own
        return NvmlMounts(state=Path(node_dir) / Path(state).name, smi=Path(smi),
                          library=Path(lib))
    try:
        from fakegpu import nvidiasmi
        from fakegpu.nvml.env import library_path

        return NvmlMounts(state=Path(state), smi=nvidiasmi.path(), library=library_path())
    except Exception as err:  # the claim still runs, only without the tools inside
        log.error("NVML in containers disabled: %s", err)
        return None


@functools.cache
def configured() -> NvmlMounts | None:
    """``from_env()`` of this process, decided once (the environment does not change)."""
    return from_env()


def container_edits(mounts: NvmlMounts) -> dict[str, Any]:
    """The claim-wide CDI edits: the state, an empty view (the devices' own edits add to
    it: ``device_env``) and the read-only mounts."""
    return {
        "env": [f"FAKEGPU_NVML_STATE={STATE}", f"{VISIBLE_ENV}=none"],
        "mounts": [{"hostPath": str(host), "containerPath": inside, "options": list(_RO)}
                   for host, inside in ((mounts.state, STATE), (mounts.smi, SMI),
                                        (mounts.library, LIBRARY))],
    }


def device_env(env_name: str, uuid: str) -> str:
    """The device's part of the view (``env_name``: the device's name as an env suffix)."""
    return f"{VISIBLE_ENV}_{env_name}={uuid}"


def merge(edits: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``edits`` (a spec's containerEdits) with ``extra``'s env and mounts appended."""
    out = dict(edits)
    for key in ("env", "mounts"):
        if extra.get(key):
            out[key] = [*(edits.get(key) or ()), *extra[key]]
    return out
