"""Enumerate the node's GPUs and MIG devices through pynvml into plain dataclasses.

pynvml loads whatever ``libnvidia-ml.so.1`` the loader finds (LD_LIBRARY_PATH first): the
fake one in tests, the real one on a GPU host. Optional queries (fabric, NVLink P2P, MIG) are
best effort: a library that answers NOT_SUPPORTED yields an empty value, never a failure.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pynvml

from fakegpu.errors import MissingPrerequisite
from fakegpu.kubeletplugin import pcie

from . import partitions

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
HOPPER = 9  # nvmlDeviceArchitecture_t: MIG mode changes without a GPU reset from here on
# KEP-5963 compatibility groups of a time-sliced GPU's devices (time_slice_shares).
GROUP_MIG = "mig"
GROUP_TIME_SLICED = "time-sliced"

# pynvml keeps global state; one discovery at a time per process.
nvml_lock = threading.Lock()


@contextlib.contextmanager
def nvml_session() -> Iterator[None]:
    """NVML initialised for the block, under ``nvml_lock``, and shut down after it.
    MissingPrerequisite (one line) when the library cannot be initialised."""
    with nvml_lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise MissingPrerequisite(f"cannot initialise NVML (libnvidia-ml.so.1): {err}") from err
        try:
            yield
        finally:
            _optional(pynvml.nvmlShutdown, None)


# (GPU UUID, GI id, CI id) of MIG devices already reported as left out.
_left_out: set[tuple[str, int, int]] = set()


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
    partial_ci: bool = False  # the compute instance spans fewer slices than its GPU instance


def rfc1123(name: str) -> str:
    """A profile name as NVIDIA's driver puts it into a device name: lower case, anything but
    ``[a-z0-9-.]`` as ``-``, no leading/trailing ``-``, no trailing ``.``."""
    name = re.sub(r"[^a-z0-9.-]", "-", name.lower()).strip("-")
    return (name[:-1] if name.endswith(".") else name)[:253]


def mig_device_name(minor: int, profile: str, mig: MigInfo) -> str:
    """NVIDIA's canonical name (its driver since v25.12, ``cmd/gpu-kubelet-plugin/mig.go``):
    ``gpu-<minor>-mig-<profile without dots, '+' as '-'>-<giProfileId>-<placementStart>``,
    e.g. ``gpu-0-mig-3g20gb-9-0``; NVIDIA parses it back with
    ``^gpu-(\\d+)-mig-(.+)-(\\d+)-(\\d+)$``.

    That name identifies a GPU instance; NVIDIA publishes one device per GPU instance. A GPU
    instance split into several compute instances would give several devices one name, so
    those get ``-ci<id>`` appended (fakegpu's own mode only: NVIDIA's driver cannot enumerate
    such a GPU, and the NVIDIA-compatible mode leaves those devices out).
    """
    base = (f"gpu-{minor}-mig-{rfc1123(profile.replace('.', ''))}-{mig.profile_id}-"
            f"{mig.placement_start}")
    return f"{base}-ci{mig.ci_id}" if mig.shared_gi else base


# NVML_GPU_INSTANCE_PROFILE_* index -> (GPU slices, name suffix), as go-nvlib's
# NewMigProfile derives them (REV1 = +me, ALL_ME = +me.all, GFX = +gfx, NO_ME = -me).
_NVLIB_PROFILES = {
    0x0: (1, ""), 0x1: (2, ""), 0x2: (3, ""), 0x3: (4, ""), 0x4: (7, ""), 0x5: (8, ""),
    0x6: (6, ""), 0x7: (1, "+me"), 0x8: (2, "+me"), 0x9: (1, ""), 0xA: (1, "+gfx"),
    0xB: (2, "+gfx"), 0xC: (4, "+gfx"), 0xD: (1, "-me"), 0xE: (2, "-me"), 0xF: (1, "+me.all"),
    0x10: (2, "+me.all"),
}


def nvlib_memory_gb(profile_mib: int, total_bytes: int) -> int:
    """go-nvlib's ``getMigMemorySizeGB``: the profile's share of the GPU's memory, rounded up
    to eighths, times the GPU's memory in whole GiB (rounded up), rounded half away from zero.
    Computed in doubles like the Go original so names agree to the last case."""
    if total_bytes <= 0:
        return 0
    fraction = math.ceil(float(profile_mib) * (1 << 20) / float(total_bytes) * 8) / 8
    total_gb = float((total_bytes + (1 << 30) - 1) >> 30)
    return math.floor(fraction * total_gb + 0.5)


def nvml_profile_name(info: Any) -> str:
    """The profile name from NVML's v2 profile info without NVIDIA's ``MIG `` prefix: a real
    driver (580.159.04) says ``MIG 1g.18gb`` where the MIG device's name ends ``MIG 1g.18gb``
    and NVIDIA's driver publishes ``1g.18gb``. "" for a v1 struct (no name)."""
    name = text(getattr(info, "name", b""))
    return name[len("MIG "):] if name.startswith("MIG ") else name


def nvlib_profile_name(profile_index: int, profile_mib: int, total_bytes: int) -> str:
    """The profile name NVIDIA's driver publishes (go-nvlib's ``MigProfileInfo.String`` for a
    compute instance spanning its GPU instance): ``<g>g.<gb>gb<suffix>``, computed from the
    profile's MiB and the GPU's memory, never copied from NVML's name. "" for an index
    go-nvlib does not know."""
    known = _NVLIB_PROFILES.get(profile_index)
    if known is None:
        return ""
    slices, suffix = known
    return f"{slices}g.{nvlib_memory_gb(profile_mib, total_bytes)}gb{suffix}"


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
    pcie_root: str = ""  # "" when unknown (no sysfs node): the attribute is left out
    numa_node: int | None = None  # sysfs numa_node; None when unknown or -1: left out
    # numaNode's list form: numa_node, then its socket's equidistant NUMA nodes (pcie.py)
    numa_list: tuple[int, ...] = ()
    addressing_mode: str = ""  # "HMM" | "ATS" | "None"; "" where NVML does not support it
    parent_uuid: str = ""
    profile: str = ""  # MIG profile, e.g. "1g.10gb"
    clique_id: str = ""  # "<clusterUuid>.<cliqueId>" when the fabric is up
    fabric: str = ""  # the fabric's cluster UUID
    nvlink_peers: int = 0  # other GPUs of this node reachable over NVLink
    index: int = -1  # NVML index of the (parent) GPU: how a lost GPU is still recognised
    mig: MigInfo | None = None
    lost: bool = False  # the GPU stopped answering (GPU_IS_LOST): last known facts, tainted
    # Dynamic MIG (partitions.py): what allocating this device consumes of its GPU's
    # CounterSet (gpu-<minor>-counter-set); empty for every other device. A partition that
    # does not exist yet has no uuid and gi_id/ci_id -1.
    consumes: tuple[tuple[str, int], ...] = ()
    # Several claims may share this whole GPU by memory (DRAConsumableCapacity, --shared-gpus).
    shared: bool = False
    # Attached before a pod binds (attach.py): "" | "hotplug" | "broken" (--attach-gpus).
    attach: str = ""
    # A time-sliced share of a dynamic-MIG GPU (--time-sliced-gpus): share ``time_slice`` of
    # ``time_slices``, the whole GPU to its pods, 1/N of the memory counter consumed.
    time_slice: int = -1
    time_slices: int = 0
    # KEP-5963: the compatibility groups of its counter consumption; only the devices of a
    # time-sliced GPU have any (its partitions GROUP_MIG, its shares GROUP_TIME_SLICED).
    compat_groups: tuple[str, ...] = ()

    @property
    def time_sliced(self) -> bool:
        return self.time_slice >= 0

    @property
    def partition(self) -> bool:
        """A dynamic MIG placement: created at prepare, destroyed at unprepare."""
        return self.type == "mig" and bool(self.consumes)


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_driver_version: str  # "13.0"
    devices: tuple[Device, ...] = field(default_factory=tuple)
    lost_indices: tuple[int, ...] = ()  # NVML indices answering GPU_IS_LOST
    # Dynamic MIG: (counter set name, its counters) per partitionable GPU.
    counter_sets: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

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


NVIDIA_PCI_VENDOR = "0x10de"


def pcie_root(bus_id: str, root: str | None = None) -> str:
    """``resource.kubernetes.io/pcieRoot`` of an NVIDIA device, as NVIDIA's driver reads it
    (``kubeletplugin.pcie``); "" (left out, as NVIDIA leaves it out) when sysfs does not know
    the device."""
    return pcie.pcie_root(bus_id, NVIDIA_PCI_VENDOR, root)


def numa_node(bus_id: str, root: str | None = None) -> int | None:
    """``resource.kubernetes.io/numaNode`` of an NVIDIA device (``kubeletplugin.pcie``)."""
    return pcie.numa_node(bus_id, NVIDIA_PCI_VENDOR, root)


# nvmlDeviceAddressingMode_t -> the strings NVIDIA's driver publishes (go-nvlib's
# GetAddressingModeAsString).
_ADDRESSING = {0: "None", 1: "HMM", 2: "ATS"}


def addressing_mode(handle: Any) -> str:
    """``addressingMode`` as NVIDIA publishes it; "" (left out) where NVML answers
    NOT_SUPPORTED or lacks the call, as go-nvlib does. Any other error is logged and the
    attribute left out too (NVIDIA's driver would fail the whole enumeration)."""
    get = getattr(pynvml, "nvmlDeviceGetAddressingMode", None)
    if get is None:
        return ""
    try:
        value = int(get(handle))
    except pynvml.NVMLError_FunctionNotFound:
        return ""
    except pynvml.NVMLError as err:
        if getattr(err, "value", None) != pynvml.NVML_ERROR_NOT_SUPPORTED:
            log.warning("cannot read the addressing mode: %s", err)
        return ""
    if value not in _ADDRESSING:
        log.warning("unknown addressing mode %d", value)
    return _ADDRESSING.get(value, "")


def _memory(handle: Any) -> int:
    info = _query(pynvml.nvmlDeviceGetMemoryInfo, None, handle)
    return int(info.total) if info is not None else 0


def _clique(handle: Any) -> tuple[str, str]:
    def query() -> tuple[str, str]:
        info = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, pynvml.byref(info))
        # An all-zero cluster UUID: NVLink through the node's own NVSwitches, no multi-node
        # fabric, so no clique (as NVIDIA's driver reads it).
        if int(info.state) != _FABRIC_COMPLETED or not any(bytes(info.clusterUuid)):
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


def _gi_profiles(handle: Any) -> dict[int, tuple[int, Any]]:
    """GI profile id (as in nvmlGpuInstanceInfo_t.profileId) -> (profile index, its info)."""
    found: dict[int, tuple[int, Any]] = {}
    for index in range(int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)) or 16):
        info = _query(pynvml.nvmlDeviceGetGpuInstanceProfileInfoV, None, handle, index)
        if info is None:  # an older library: v1 of the struct, without the name
            info = _query(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, None, handle, index)
        if info is not None:
            found.setdefault(int(info.id), (index, info))
    return found


def _ci_slices(gi_handle: Any, ci: int) -> int:
    """Compute slices of compute instance ``ci``; 0 when NVML cannot tell."""
    def query() -> int:
        ci_info = pynvml.nvmlComputeInstanceGetInfo(
            pynvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, ci))
        # A compute-instance profile's index and id coincide.
        profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi_handle, int(ci_info.profileId),
            pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return int(profile.sliceCount)

    return _optional(query, 0)


def _profile_name(parent: Device, mig: Any, entry: tuple[int, Any] | None,
                  nvidia: bool) -> str:
    """The ``profile`` attribute: go-nvlib's computed name in NVIDIA-compatible mode, else
    the name NVML gives the profile (v2 struct), else the tail of the MIG device's name
    ("<product> MIG <profile>")."""
    if entry is not None:
        index, profile = entry
        computed = nvlib_profile_name(index, int(profile.memorySizeMB), parent.memory_bytes)
        if nvidia and computed:  # (an index go-nvlib does not know: NVML's name below)
            return computed
        name = nvml_profile_name(profile)
        if name:
            return name
    full_name = text(_query(pynvml.nvmlDeviceGetName, "", mig))
    return full_name.rsplit(" MIG ", 1)[1] if " MIG " in full_name else ""


def _mig_devices(parent: Device, handle: Any, nvidia: bool) -> list[Device] | None:
    """The MIG devices of a GPU in MIG mode (maybe none yet); None when MIG is off.

    In NVIDIA-compatible mode a compute instance that does not span its whole GPU instance
    (one of several in it, or a smaller profile) is left out: NVIDIA's driver finds no
    profile for it and fails its whole enumeration, so no device of it could ever exist.
    """
    current, _pending = _query(pynvml.nvmlDeviceGetMigMode, (0, 0), handle)
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    profiles = _gi_profiles(handle)
    raw: list[tuple[Any, MigInfo, tuple[int, Any] | None]] = []
    for index in range(_query(pynvml.nvmlDeviceGetMaxMigDeviceCount, 0, handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue  # an empty slot
        gi = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
        gi_handle = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi)
        gi_info = pynvml.nvmlGpuInstanceGetInfo(gi_handle)
        entry = profiles.get(int(gi_info.profileId))
        profile = entry[1] if entry is not None else None
        ci_slices = _ci_slices(gi_handle, ci)
        gi_slices = int(getattr(profile, "sliceCount", 0))
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
            partial_ci=bool(ci_slices and gi_slices and ci_slices < gi_slices),
        )
        raw.append((mig, info, entry))
    per_gi: dict[int, int] = {}
    for _mig, info, _entry in raw:
        per_gi[info.gi_id] = per_gi.get(info.gi_id, 0) + 1
    found: list[Device] = []
    for mig, info, entry in raw:
        info = replace(info, shared_gi=per_gi[info.gi_id] > 1)
        if nvidia and (info.shared_gi or info.partial_ci):
            key = (parent.uuid, info.gi_id, info.ci_id)
            if key not in _left_out:  # rediscovery runs every few seconds: say it once
                _left_out.add(key)
                log.error("%s: compute instance %d of GPU instance %d does not span it; "
                          "NVIDIA's driver cannot enumerate such a GPU: left out",
                          parent.name, info.ci_id, info.gi_id)
            continue
        name = _profile_name(parent, mig, entry, nvidia)
        # NVIDIA's driver publishes the profile's memory, not what the instance reports free.
        memory = (int(entry[1].memorySizeMB) << 20) if entry is not None else _memory(mig)
        found.append(replace(
            parent, name=mig_device_name(parent.minor, name, info), type="mig",
            uuid=text(pynvml.nvmlDeviceGetUUID(mig)), memory_bytes=memory,
            parent_uuid=parent.uuid, profile=name, mig=info,
        ))
    return found


def discover(nvidia_compatible: bool = False, dynamic_mig: bool = False,
             shared_minors: frozenset[int] = frozenset(),
             time_sliced: Mapping[int, int] | None = None) -> Inventory:
    """Ask NVML for every GPU (and MIG device). Raises MissingPrerequisite without NVML.

    ``nvidia_compatible``: MIG profiles named as NVIDIA's driver computes them, and MIG
    devices NVIDIA's driver could not enumerate left out (see ``_mig_devices``).
    ``dynamic_mig`` (NVIDIA's DynamicMIG feature gate): every GPU that supports MIG is
    published whole and as every placement of every profile, with a CounterSet
    (``_dynamic_devices``); its existing MIG devices are not published (the plugin made them
    for prepared claims). ``shared_minors``: whole GPUs published for several claims at once,
    by memory (``Device.shared``). ``time_sliced``: minor -> N, dynamic-MIG GPUs also offered
    as N time-sliced shares (``time_slice_shares``); fakegpu's own, so not with
    ``nvidia_compatible``."""
    with nvml_session():
        inventory = _discover_locked(nvidia_compatible, dynamic_mig)
    if time_sliced and not nvidia_compatible:
        inventory = time_slice_shares(inventory, time_sliced)
    if not shared_minors:
        return inventory
    # Only a whole GPU outside MIG (and dynamic MIG) is shared by memory.
    return replace(inventory, devices=tuple(
        replace(d, shared=True) if d.type == "gpu" and not d.consumes and d.minor in shared_minors
        else d for d in inventory.devices))


def time_slice_shares(inventory: Inventory, time_sliced: Mapping[int, int]) -> Inventory:
    """Each dynamic-MIG GPU of ``time_sliced`` (minor -> N) offered also as N time-sliced
    shares (``gpu-<minor>-ts-<k>``), each consuming 1/N of its counter set's memory.

    Counters alone would let a share and a MIG device of one GPU be allocated together (a
    1g.10gb and a quarter of an H100 fit its memory), which the GPU cannot do: time-slicing
    needs MIG mode off. So its partitions consume in group GROUP_MIG, its shares in
    GROUP_TIME_SLICED, and the scheduler never co-allocates devices whose groups do not
    intersect (KEP-5963). The whole GPU declares none: it consumes everything anyway."""
    sets = dict(inventory.counter_sets)
    memory = partitions.counter_name("memory")
    devices: list[Device] = []
    for device in inventory.devices:
        n = time_sliced.get(device.minor, 0)
        counters = dict(sets.get(partitions.counter_set_name(device.minor), ()))
        if not (n and device.consumes and memory in counters):
            devices.append(device)
            continue
        if device.partition:
            devices.append(replace(device, compat_groups=(GROUP_MIG,)))
            continue
        devices.append(device)
        share = (counters[memory] // n) >> 20 << 20  # whole MiB, as NVML counts memory
        devices.extend(replace(
            device, name=time_slice_name(device.minor, k), memory_bytes=share,
            consumes=((memory, share),), time_slice=k, time_slices=n,
            compat_groups=(GROUP_TIME_SLICED,)) for k in range(n))
    return replace(inventory, devices=tuple(devices))


def time_slice_name(minor: int, share: int) -> str:
    return f"gpu-{minor}-ts-{share}"


def _discover_locked(nvidia: bool, dynamic: bool = False) -> Inventory:
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
    counter_sets: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    for (index, handle), nvlink_peers in zip(handles, peers, strict=True):
        try:
            found = _dynamic_devices(index, handle, nvlink_peers, nvidia) if dynamic else None
            if found is not None:
                devices.extend(found[0])
                counter_sets.append(found[1])
                continue
            devices.extend(_read_gpu(index, handle, nvlink_peers, nvidia))
        except pynvml.NVMLError as err:
            if not _is_lost(err):  # lost between the handle and the queries: same thing
                raise
            lost.append(index)
    devices.sort(key=lambda d: (d.minor, d.name))
    return Inventory(driver_version=driver,
                     cuda_driver_version=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else "",
                     devices=tuple(devices), lost_indices=tuple(sorted(lost)),
                     counter_sets=tuple(counter_sets))


def _is_lost(err: pynvml.NVMLError) -> bool:
    return bool(getattr(err, "value", None) == pynvml.NVML_ERROR_GPU_IS_LOST)


def _read_gpu(index: int, handle: Any, nvlink_peers: int, nvidia: bool) -> list[Device]:
    """The GPU, or its MIG devices when it is in MIG mode."""
    gpu = _gpu_device(index, handle, nvlink_peers)
    migs = _mig_devices(gpu, handle, nvidia)
    # A GPU in MIG mode is only allocatable through its MIG devices (as NVIDIA's driver does).
    return migs if migs is not None else [gpu]


def _gpu_device(index: int, handle: Any, nvlink_peers: int) -> Device:
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
        pci_bus_id=bus, pcie_root=pcie_root(bus), numa_node=numa_node(bus),
        numa_list=pcie.numa_nodes(bus, NVIDIA_PCI_VENDOR),
        clique_id=clique, fabric=fabric,
        nvlink_peers=nvlink_peers, index=index, addressing_mode=addressing_mode(handle),
    )
    return gpu


def possible_placements(handle: Any, profile_id: int) -> tuple[tuple[int, int], ...]:
    """nvmlDeviceGetGpuInstancePossiblePlacements_v2: (start, size) of each placement. pynvml
    passes the caller's buffers through: ask for the count first, as nvml.h describes."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None,
                                                      ctypes.byref(count))
    buf = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, buf,
                                                      ctypes.byref(count))
    return tuple((int(buf[i].start), int(buf[i].size)) for i in range(count.value))


def gpu_partitions(minor: int, handle: Any, nvidia: bool, memory_bytes: int
                   ) -> partitions.GpuPartitions | None:
    """Every GPU-instance profile and its possible placements, from NVML; None for a GPU
    without MIG (or a library that cannot say)."""
    _current, _pending = _query(pynvml.nvmlDeviceGetMigMode, (None, None), handle)
    if _current is None:
        return None
    profiles = []
    memory_slices = 0
    for pid, (index, info) in sorted(_gi_profiles(handle).items(), key=lambda kv: kv[1][0]):
        placements = _query(possible_placements, (), handle, pid)
        if not placements:
            continue
        memory_slices = max(memory_slices, *(start + size for start, size in placements))
        computed = nvlib_profile_name(index, int(info.memorySizeMB), memory_bytes)
        name = computed if nvidia and computed else (nvml_profile_name(info) or computed)
        profiles.append(partitions.Profile(
            name=name, index=index, profile_id=pid, instance_count=int(info.instanceCount),
            compute_slices=int(info.sliceCount), memory_mib=int(info.memorySizeMB),
            multiprocessors=int(info.multiprocessorCount), copy_engines=int(info.copyEngineCount),
            decoders=int(info.decoderCount), encoders=int(info.encoderCount),
            jpeg_engines=int(info.jpegCount), ofa_engines=int(info.ofaCount),
            placements=placements))
    if not profiles:
        return None
    return partitions.GpuPartitions(minor=minor, memory_slices=memory_slices,
                                    profiles=tuple(profiles))


def _dynamic_devices(index: int, handle: Any, nvlink_peers: int, nvidia: bool
                     ) -> tuple[list[Device], tuple[str, tuple[tuple[str, int], ...]]] | None:
    """A dynamic-MIG GPU: the whole GPU and one device per placement of every profile, each
    consuming its share of the GPU's CounterSet; None for a GPU without MIG.

    As NVIDIA's driver: MIG mode changes without a reset only from Hopper on. An older GPU
    (Ampere) with MIG off is an ordinary GPU (None); with MIG on it is offered only as
    partitions, never whole."""
    arch = int(_query(pynvml.nvmlDeviceGetArchitecture, -1, handle))
    current, _pending = _query(pynvml.nvmlDeviceGetMigMode, (0, 0), handle)
    mig_on = current == pynvml.NVML_DEVICE_MIG_ENABLE
    toggles = arch >= HOPPER
    if not mig_on and not toggles:
        return None
    gpu = _gpu_device(index, handle, nvlink_peers)
    parts = gpu_partitions(gpu.minor, handle, nvidia, gpu.memory_bytes)
    if parts is None:
        return None
    whole = replace(gpu, consumes=tuple(sorted(parts.full_consumption().items())))
    devices = [whole] if toggles or not mig_on else []
    for placement in parts.placements():
        profile = placement.profile
        info = MigInfo(gi_id=-1, ci_id=-1, profile_id=profile.profile_id,
                       placement_start=placement.start, placement_size=placement.size,
                       multiprocessors=profile.multiprocessors,
                       copy_engines=profile.copy_engines, decoders=profile.decoders,
                       encoders=profile.encoders, jpeg_engines=profile.jpeg_engines,
                       ofa_engines=profile.ofa_engines)
        devices.append(replace(
            gpu, name=mig_device_name(gpu.minor, profile.name, info), type="mig", uuid="",
            memory_bytes=profile.memory_mib << 20, parent_uuid=gpu.uuid, profile=profile.name,
            mig=info, consumes=tuple(sorted(parts.consumption(placement).items()))))
    counters = (partitions.counter_set_name(gpu.minor), tuple(sorted(parts.counters().items())))
    return devices, counters
