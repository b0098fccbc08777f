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
from dataclasses import dataclass, field, replace
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
nvml_lock = threading.Lock()


@dataclass(frozen=True)
class MigInfo:
    """What NVIDIA's driver publishes of a MIG device, from its GPU instance and profile."""

    gi_id: int
    ci_id: int
    profile_id: int  # the GI profile id nvidia-smi shows (19 for 1g.10gb on H100)
    placement_start: int  # first memory slice of the GPU instance
    placement_size: int  # memory slices it spans
    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0
    shared_gi: bool = False  # more compute instances than this one share the GPU instance


def mig_device_name(minor: int, mig: MigInfo) -> str:
    """NVIDIA's canonical name ``gpu-<minor>-mig-<giProfileId>-<start>-<size>``.

    That name identifies a GPU instance; NVIDIA publishes one device per GPU instance. A GPU
    instance split into several compute instances would give several devices one name, so
    those get ``-ci<id>`` appended (fakegpu's extension; NVIDIA's driver never sees that case).
    """
    base = f"gpu-{minor}-mig-{mig.profile_id}-{mig.placement_start}-{mig.placement_size}"
    return f"{base}-ci{mig.ci_id}" if mig.shared_gi else base


@dataclass(frozen=True)
class Device:
    """One allocatable device: a full GPU, or a MIG device when its GPU is in MIG mode."""

    name: str  # gpu-<minor> or mig_device_name()
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
    index: int = -1  # NVML index of the (parent) GPU: how a lost GPU is still recognised
    mig: MigInfo | None = None
    lost: bool = False  # the GPU stopped answering (GPU_IS_LOST): last known facts, tainted


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_driver_version: str  # "13.0"
    devices: tuple[Device, ...] = field(default_factory=tuple)
    lost_indices: tuple[int, ...] = ()  # NVML indices answering GPU_IS_LOST

    def by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}


def carry_lost(previous: Inventory | None, fresh: Inventory) -> Inventory:
    """``fresh`` plus, for each GPU lost since, the devices ``previous`` knew on it, marked lost.

    A lost GPU answers nothing (not even its UUID), so its last known facts are the only way
    to keep it in the pool with a ``gpu-lost`` taint rather than have it silently vanish.
    An instance started after the loss never knew the GPU: it simply does not publish it.
    """
    if previous is None or not fresh.lost_indices:
        return fresh
    lost = set(fresh.lost_indices)
    present = {d.name for d in fresh.devices}
    kept = [replace(d, lost=True) for d in previous.devices
            if d.index in lost and d.name not in present]
    if not kept:
        return fresh
    devices = sorted((*fresh.devices, *kept), key=lambda d: (d.minor, d.name))
    return replace(fresh, devices=tuple(devices))


def text(value: Any) -> str:
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


def _gi_profiles(handle: Any) -> dict[int, Any]:
    """GI profile id (as in nvmlGpuInstanceInfo_t.profileId) -> its profile info."""
    found: dict[int, Any] = {}
    for index in range(int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)) or 16):
        info = _query(pynvml.nvmlDeviceGetGpuInstanceProfileInfoV, None, handle, index)
        if info is None:  # an older library: v1 of the struct, without the name
            info = _query(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, None, handle, index)
        if info is not None:
            found.setdefault(int(info.id), info)
    return found


def _mig_devices(parent: Device, handle: Any) -> list[Device] | None:
    """The MIG devices of a GPU in MIG mode (maybe none yet); None when MIG is off."""
    current, _pending = _query(pynvml.nvmlDeviceGetMigMode, (0, 0), handle)
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    profiles = _gi_profiles(handle)
    raw: list[tuple[Any, MigInfo, Any]] = []
    for index in range(_query(pynvml.nvmlDeviceGetMaxMigDeviceCount, 0, handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue  # an empty slot
        gi = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
        gi_info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        profile = profiles.get(int(gi_info.profileId))
        info = MigInfo(
            gi_id=gi, ci_id=ci, profile_id=int(gi_info.profileId),
            placement_start=int(gi_info.placement.start),
            placement_size=int(gi_info.placement.size),
            multiprocessors=int(getattr(profile, "multiprocessorCount", 0)),
            copy_engines=int(getattr(profile, "copyEngineCount", 0)),
            decoders=int(getattr(profile, "decoderCount", 0)),
            encoders=int(getattr(profile, "encoderCount", 0)),
            jpeg_engines=int(getattr(profile, "jpegCount", 0)),
            ofa_engines=int(getattr(profile, "ofaCount", 0)),
        )
        raw.append((mig, info, profile))
    per_gi: dict[int, int] = {}
    for _mig, info, _profile in raw:
        per_gi[info.gi_id] = per_gi.get(info.gi_id, 0) + 1
    found: list[Device] = []
    for mig, info, profile in raw:
        info = replace(info, shared_gi=per_gi[info.gi_id] > 1)
        full_name = text(_query(pynvml.nvmlDeviceGetName, "", mig))
        # The profile's own name when the library reports it (v2 struct); else NVML's MIG
        # device name, "<product> MIG <profile>".
        name = text(getattr(profile, "name", b"")) if profile is not None else ""
        if not name and " MIG " in full_name:
            name = full_name.rsplit(" MIG ", 1)[1]
        # NVIDIA's driver publishes the profile's memory, not what the instance reports free.
        memory = (int(profile.memorySizeMB) << 20) if profile is not None else _memory(mig)
        found.append(replace(
            parent, name=mig_device_name(parent.minor, info), type="mig",
            uuid=text(pynvml.nvmlDeviceGetUUID(mig)), memory_bytes=memory,
            parent_uuid=parent.uuid, profile=name, mig=info,
        ))
    return found


def discover() -> Inventory:
    """Ask NVML for every GPU (and MIG device). Raises MissingPrerequisite without NVML."""
    with nvml_lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise MissingPrerequisite(f"cannot initialise NVML (libnvidia-ml.so.1): {err}") from err
        try:
            return _discover_locked()
        finally:
            _optional(pynvml.nvmlShutdown, None)


def _discover_locked() -> Inventory:
    driver = text(pynvml.nvmlSystemGetDriverVersion())
    cuda = int(_optional(pynvml.nvmlSystemGetCudaDriverVersion, 0))
    handles: list[tuple[int, Any]] = []
    lost: list[int] = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        try:
            handles.append((i, pynvml.nvmlDeviceGetHandleByIndex(i)))
        except pynvml.NVMLError as err:
            if not _is_lost(err):
                raise
            lost.append(i)
    peers = _nvlink_peers([h for _i, h in handles])
    devices: list[Device] = []
    for (index, handle), nvlink_peers in zip(handles, peers, strict=True):
        try:
            devices.extend(_read_gpu(index, handle, nvlink_peers))
        except pynvml.NVMLError as err:
            if not _is_lost(err):  # lost between the handle and the queries: same thing
                raise
            lost.append(index)
    devices.sort(key=lambda d: (d.minor, d.name))
    return Inventory(driver_version=driver,
                     cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else "",
                     devices=tuple(devices), lost_indices=tuple(sorted(lost)))


def _is_lost(err: pynvml.NVMLError) -> bool:
    return bool(getattr(err, "value", None) == pynvml.NVML_ERROR_GPU_IS_LOST)


def _read_gpu(index: int, handle: Any, nvlink_peers: int) -> list[Device]:
    """The GPU, or its MIG devices when it is in MIG mode."""
    minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
    bus = normalize_bus_id(text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
    major_cc, minor_cc = _query(pynvml.nvmlDeviceGetCudaComputeCapability, (0, 0), handle)
    clique, fabric = _clique(handle)
    gpu = Device(
        name=f"gpu-{minor}", type="gpu", minor=minor,
        uuid=text(pynvml.nvmlDeviceGetUUID(handle)),
        product_name=text(pynvml.nvmlDeviceGetName(handle)),
        brand=_BRAND.get(_query(pynvml.nvmlDeviceGetBrand, 0, handle), "Unknown"),
        architecture=_ARCH.get(_query(pynvml.nvmlDeviceGetArchitecture, -1, handle), "Unknown"),
        cuda_compute_capability=f"{major_cc}.{minor_cc}",
        memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        pci_bus_id=bus, pcie_root=pcie_root(bus), clique_id=clique, fabric=fabric,
        nvlink_peers=nvlink_peers, index=index,
    )
    migs = _mig_devices(gpu, handle)
    # A GPU in MIG mode is only allocatable through its MIG devices (as NVIDIA's driver does).
    return migs if migs is not None else [gpu]
