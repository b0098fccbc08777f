"""Enumerate the node's GPUs and MIG devices through pynvml into plain dataclasses.

pynvml loads whatever ``libnvidia-ml.so.1`` the loader finds (LD_LIBRARY_PATH first): the
fake one in tests, the real one on a GPU host. Optional queries (fabric, NVLink P2P, MIG) are
best effort: a library that answers NOT_SUPPORTED yields an empty value, never a failure.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from fakegpu.errors import MissingPrerequisite

log = logging.getLogger(__name__)
T = TypeVar("T")

# nvmlDeviceArchitecture_t -> the names NVIDIA's DRA driver publishes.
_ARCH = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
         8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 11: "Rubin"}
# nvmlBrandType_t -> brand strings as NVIDIA's tooling spells them.
_BRAND = {0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
          7: "NvidiaVApps", 8: "NvidiaVPC", 9: "NvidiaVCS", 10: "NvidiaVWS",
          11: "NvidiaCloudGaming", 12: "QuadroRTX", 13: "NvidiaRTX", 14: "Nvidia",
          15: "GeForceRTX", 16: "TitanRTX"}
_FABRIC_COMPLETED = 3

# pynvml keeps global state; one discovery at a time per process.
_nvml_lock = threading.Lock()


@dataclass(frozen=True)
class Device:
    """One allocatable device: a full GPU, or a MIG device when its GPU is in MIG mode."""

    name: str  # gpu-<minor> or gpu-<minor>-mig-<gi>-<ci>
    type: str  # "gpu" | "mig"
    minor: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str  # "9.0"
    memory_bytes: int
    pci_bus_id: str  # "0000:3b:00.0", the form resource.kubernetes.io/pciBusID uses
    pcie_root: str
    parent_uuid: str = ""
    profile: str = ""  # MIG profile, e.g. "1g.10gb"
    clique_id: str = ""  # "<clusterUuid>.<cliqueId>" when the fabric is up
    fabric: str = ""  # the fabric's cluster UUID
    nvlink_peers: int = 0  # other GPUs of this node reachable over NVLink


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_driver_version: str  # "13.0"
    devices: tuple[Device, ...] = field(default_factory=tuple)

    def by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(fn: Callable[[], T], default: T) -> T:
    """Run an optional NVML query; a library without it (or the GPU without the feature) is fine."""
    try:
        return fn()
    except pynvml.NVMLError as err:
        log.debug("optional NVML query failed: %s", err)
        return default


def _query(fn: Callable[..., Any], default: Any, *args: Any) -> Any:
    """``_optional`` for a pynvml function with arguments."""
    return _optional(lambda: fn(*args), default)


def normalize_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` -> ``0000:3b:00.0`` (sysfs form, as Kubernetes uses it)."""
    text = nvml_bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else text


def pcie_root(bus_id: str, sysfs: str = "/sys/bus/pci/devices") -> str:
    """The PCIe root complex (``pci0000:00``): from sysfs when the device exists there.

    Fake GPUs have no sysfs node, so fall back to one root per domain and bus, which keeps
    distinct GPUs distinct (they are never claimed to share a root they may not share).
    """
    real = os.path.realpath(os.path.join(sysfs, bus_id))
    for part in real.split(os.sep):
        if part.startswith("pci") and ":" in part:
            return part
    domain, _, rest = bus_id.partition(":")
    return f"pci{domain}:{rest.split(':')[0]}" if rest else f"pci{bus_id}"


def _memory(handle: Any) -> int:
    info = _query(pynvml.nvmlDeviceGetMemoryInfo, None, handle)
    return int(info.total) if info is not None else 0


def _clique(handle: Any) -> tuple[str, str]:
    def query() -> tuple[str, str]:
        info = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, pynvml.byref(info))
        if int(info.state) != _FABRIC_COMPLETED:
            return "", ""
        cluster = bytes(info.clusterUuid).hex()
        uuid = f"{cluster[:8]}-{cluster[8:12]}-{cluster[12:16]}-{cluster[16:20]}-{cluster[20:]}"
        return f"{uuid}.{int(info.cliqueId)}", uuid

    return _optional(query, ("", ""))


def _nvlink_peers(handles: list[Any]) -> list[int]:
    peers = [0] * len(handles)
    for i, a in enumerate(handles):
        for j, b in enumerate(handles):
            if i != j and _query(pynvml.nvmlDeviceGetP2PStatus, -1, a, b,
                                 pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == pynvml.NVML_P2P_STATUS_OK:
                peers[i] += 1
    return peers


def _mig_devices(parent: Device, handle: Any) -> list[Device] | None:
    """The MIG devices of a GPU in MIG mode (maybe none yet); None when MIG is off."""
    current, _pending = _query(pynvml.nvmlDeviceGetMigMode, (0, 0), handle)
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    found: list[Device] = []
    for index in range(_query(pynvml.nvmlDeviceGetMaxMigDeviceCount, 0, handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue  # an empty slot
        gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        ci = pynvml.nvmlDeviceGetComputeInstanceId(mig)
        full_name = _text(_query(pynvml.nvmlDeviceGetName, "", mig))
        # NVML names a MIG device "<product> MIG <profile>".
        profile = full_name.rsplit(" MIG ", 1)[1] if " MIG " in full_name else ""
        found.append(Device(
            name=f"{parent.name}-mig-{gi}-{ci}", type="mig", minor=parent.minor,
            uuid=_text(pynvml.nvmlDeviceGetUUID(mig)), product_name=parent.product_name,
            brand=parent.brand, architecture=parent.architecture,
            cuda_compute_capability=parent.cuda_compute_capability,
            memory_bytes=_memory(mig),
            pci_bus_id=parent.pci_bus_id, pcie_root=parent.pcie_root,
            parent_uuid=parent.uuid, profile=profile, clique_id=parent.clique_id,
            fabric=parent.fabric, nvlink_peers=parent.nvlink_peers,
        ))
    return found


def discover() -> Inventory:
    """Ask NVML for every GPU (and MIG device). Raises MissingPrerequisite without NVML."""
    with _nvml_lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise MissingPrerequisite(f"cannot initialise NVML (libnvidia-ml.so.1): {err}") from err
        try:
            return _discover_locked()
        finally:
            _optional(pynvml.nvmlShutdown, None)


def _discover_locked() -> Inventory:
    driver = _text(pynvml.nvmlSystemGetDriverVersion())
    cuda = int(_optional(pynvml.nvmlSystemGetCudaDriverVersion, 0))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    peers = _nvlink_peers(handles)
    devices: list[Device] = []
    for handle, nvlink_peers in zip(handles, peers, strict=True):
        minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
        bus = normalize_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
        major_cc, minor_cc = _query(pynvml.nvmlDeviceGetCudaComputeCapability, (0, 0), handle)
        clique, fabric = _clique(handle)
        gpu = Device(
            name=f"gpu-{minor}", type="gpu", minor=minor,
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            product_name=_text(pynvml.nvmlDeviceGetName(handle)),
            brand=_BRAND.get(_query(pynvml.nvmlDeviceGetBrand, 0, handle), "Unknown"),
            architecture=_ARCH.get(_query(pynvml.nvmlDeviceGetArchitecture, -1, handle), "Unknown"),
            cuda_compute_capability=f"{major_cc}.{minor_cc}",
            memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            pci_bus_id=bus, pcie_root=pcie_root(bus), clique_id=clique, fabric=fabric,
            nvlink_peers=nvlink_peers,
        )
        migs = _mig_devices(gpu, handle)
        # A GPU in MIG mode is only allocatable through its MIG devices (as NVIDIA's driver does).
        devices.extend(migs if migs is not None else [gpu])
    devices.sort(key=lambda d: (d.minor, d.name))
    return Inventory(driver_version=driver,
                     cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else "",
                     devices=tuple(devices))
