"""This node's NVLink fabric as NVML reports it: may the node join a domain, in which clique?

A node joins an IMEX domain when every GPU's fabric registration is COMPLETED in one clique
(the same cluster UUID and clique ID) and healthy. The answer is the clique ID NVIDIA's driver
publishes (``<clusterUuid>.<cliqueId>``) or a one-line reason naming the GPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import pynvml

from fakegpu.plugin.discovery import nvml_session

_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
_COMPLETED = 3
# healthMask's degraded-bandwidth field (NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_*)
_DEGRADED_SHIFT, _DEGRADED_WIDTH, _DEGRADED_TRUE = 0, 0x3, 1


@dataclass(frozen=True)
class GpuFabric:
    index: int
    uuid: str
    state: int
    clique: str  # "<clusterUuid>.<cliqueId>", "" unless completed in a multi-node fabric
    degraded: bool


@dataclass(frozen=True)
class NodeFabric:
    gpus: tuple[GpuFabric, ...]

    @property
    def clique(self) -> str:
        """The node's clique, "" when it cannot join (see ``problem``)."""
        return "" if self.problem else self.gpus[0].clique

    @property
    def problem(self) -> str:
        if not self.gpus:
            return "the node has no GPUs"
        for g in self.gpus:
            if g.state != _COMPLETED:
                return (f"GPU {g.index} ({g.uuid}) fabric state is "
                        f"{_STATES.get(g.state, str(g.state))}, not completed")
            if not g.clique:
                return (f"GPU {g.index} ({g.uuid}) is in no multi-node NVLink fabric "
                        "(all-zero cluster UUID)")
            if g.degraded:
                return f"GPU {g.index} ({g.uuid}) fabric health is degraded"
        cliques = sorted({g.clique for g in self.gpus})
        if len(cliques) > 1:
            return f"the node's GPUs are in different cliques ({', '.join(cliques)})"
        return ""


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _gpu(index: int, handle: Any) -> GpuFabric:
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    info.version = pynvml.nvmlGpuFabricInfo_v2
    try:
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    except pynvml.NVMLError:
        return GpuFabric(index, str(uuid), 0, "", False)
    cluster = bytes(info.clusterUuid)
    state = int(info.state)
    clique = (f"{_uuid(cluster)}.{int(info.cliqueId)}"
              if state == _COMPLETED and any(cluster) else "")
    degraded = ((int(info.healthMask) >> _DEGRADED_SHIFT) & _DEGRADED_WIDTH) == _DEGRADED_TRUE
    return GpuFabric(index, str(uuid), state, clique, degraded)


def read() -> NodeFabric:
    """Every GPU's fabric, through NVML. Raises MissingPrerequisite without NVML."""
    with nvml_session():
        return NodeFabric(tuple(_gpu(i, pynvml.nvmlDeviceGetHandleByIndex(i))
                                for i in range(pynvml.nvmlDeviceGetCount())))
