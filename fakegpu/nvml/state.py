"""The per-node NVML state file: its layout (mirroring csrc/state.h) and the renderer.

``render(topology, node, path)`` writes one node's GPUs as the fake libnvidia-ml.so.1 reads
them. The file is written whole to a temporary file, synced and renamed into place, so a
reader never sees half a file. After that only the C library (and fakegpu_* helpers it
exports, see faults.py) change it, under its lock and journal protocol.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import uuid as uuidlib
import zlib
from pathlib import Path

from fakegpu.errors import InvalidInput
from fakegpu.fsutil import atomic_write
from fakegpu.nvml import sysfs
from fakegpu.topology.model import (
    FabricHealth,
    FabricState,
    FaultKind,
    Gpu,
    LinkState,
    MigCapability,
    MigGpuInstanceProfile,
    Node,
    RemoteType,
    Topology,
)

MAGIC = b"FAKEGPU\0"
# 3: idle_sm_clock_mhz (was padding), H200 facts read 2026-12-04; 4: compute_mode, timeslice
LAYOUT_VERSION = 4
MAX_GPUS = 256
MAX_LINKS = 36
MAX_PROFILES = 16
MAX_PLACEMENTS = 8
MAX_GIS = 8
MAX_CIS = 8
EVENT_RING = 64
STR = 96
NO_ID = 0xFFFFFFFF
MIB = 1024 * 1024
# What the driver keeps for itself (nvmlMemory_v2_t.reserved); v1 reports it as used.
RESERVED_MIB = 512

ARCHITECTURES = {"ampere": 7, "hopper": 9, "blackwell": 10}  # NVML_DEVICE_ARCH_*
BRANDS = {  # nvmlBrandType_t
    "UNKNOWN": 0, "QUADRO": 1, "TESLA": 2, "NVS": 3, "GEFORCE": 5, "TITAN": 6,
    "NVIDIA_RTX": 13, "NVIDIA": 14,
}
FABRIC_STATES = {
    FabricState.NOT_SUPPORTED: 0, FabricState.NOT_STARTED: 1,
    FabricState.IN_PROGRESS: 2, FabricState.COMPLETED: 3,
}
# nvmlIntNvLinkDeviceType_t
REMOTE_TYPES = {RemoteType.GPU: 0, RemoteType.SWITCH: 2}
NVSWITCH_PCI_DEVICE_ID = 0x22A3  # NVSwitch gen 3 (uncertain for gen 4); vendor 0x10de added
NVIDIA_VENDOR = 0x10DE
# nvmlDeviceAddressingModeType_t. ATS needs a cache-coherent link to the CPU (NVLink-C2C to
# Grace). On x86 the driver can mirror CPU page tables in software (HMM), but only where the
# kernel offers it: a real H200 on an x86 host (driver 580.159.04, open kernel modules, Linux
# 6.18) answered NONE, so x86 parts answer NONE (docs/fidelity.md). Products that only ship on
# a Grace host, by catalog key:
ADDRESSING_NONE, ADDRESSING_HMM, ADDRESSING_ATS = 0, 1, 2
GRACE_HOSTED = frozenset({"GB200"})
# compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_*
CI_PROFILES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class Event(ctypes.Structure):
    _fields_ = [
        ("gpu", ctypes.c_uint32), ("gpu_instance_id", ctypes.c_uint32),
        ("compute_instance_id", ctypes.c_uint32), ("pad", ctypes.c_uint32),
        ("event_type", ctypes.c_uint64), ("event_data", ctypes.c_uint64),
    ]


class Link(ctypes.Structure):
    _fields_ = [
        ("present", ctypes.c_uint32), ("remote_type", ctypes.c_uint32),
        ("remote_gpu_index", ctypes.c_uint32), ("remote_domain", ctypes.c_uint32),
        ("remote_bus", ctypes.c_uint32), ("remote_device", ctypes.c_uint32),
        ("remote_function", ctypes.c_uint32), ("remote_pci_device_id", ctypes.c_uint32),
        ("remote_node", ctypes.c_char * 64),
    ]


class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class Profile(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint32), ("nvml_profile", ctypes.c_uint32),
        ("instance_count", ctypes.c_uint32), ("slice_count", ctypes.c_uint32),
        ("memory_slices", ctypes.c_uint32), ("sm_count", ctypes.c_uint32),
        ("copy_engines", ctypes.c_uint32), ("decoders", ctypes.c_uint32),
        ("encoders", ctypes.c_uint32), ("jpegs", ctypes.c_uint32), ("ofas", ctypes.c_uint32),
        ("placement_count", ctypes.c_uint32), ("memory_mib", ctypes.c_uint64),
        ("name", ctypes.c_char * 32), ("placements", Placement * MAX_PLACEMENTS),
    ]


class GpuStatic(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("module_id", ctypes.c_uint32),
        ("numa_node", ctypes.c_uint32), ("name", ctypes.c_char * STR),
        ("uuid", ctypes.c_char * STR), ("serial", ctypes.c_char * 32),
        ("board_part_number", ctypes.c_char * 80), ("architecture", ctypes.c_uint32),
        ("brand", ctypes.c_uint32), ("cc_major", ctypes.c_uint32), ("cc_minor", ctypes.c_uint32),
        ("memory_total", ctypes.c_uint64), ("memory_reserved", ctypes.c_uint64),
        ("pci_domain", ctypes.c_uint32), ("pci_bus", ctypes.c_uint32),
        ("pci_device", ctypes.c_uint32), ("pci_function", ctypes.c_uint32),
        ("pci_device_id", ctypes.c_uint32), ("pci_subsystem_id", ctypes.c_uint32),
        ("sm_count", ctypes.c_uint32), ("power_limit_mw", ctypes.c_uint32),
        ("max_sm_clock_mhz", ctypes.c_uint32), ("max_mem_clock_mhz", ctypes.c_uint32),
        ("nvlink_version", ctypes.c_uint32), ("link_count", ctypes.c_uint32),
        ("links", Link * MAX_LINKS), ("fabric_present", ctypes.c_uint32),
        ("fabric_state", ctypes.c_uint32), ("cluster_uuid", ctypes.c_uint8 * 16),
        ("clique_id", ctypes.c_uint32), ("mig_capable", ctypes.c_uint32),
        ("mig_memory_slices", ctypes.c_uint32), ("mig_compute_slices", ctypes.c_uint32),
        ("mig_max_gpu_instances", ctypes.c_uint32), ("profile_count", ctypes.c_uint32),
        ("profiles", Profile * MAX_PROFILES), ("addressing_mode", ctypes.c_uint32),
        ("idle_sm_clock_mhz", ctypes.c_uint32),
    ]


class ComputeInstance(ctypes.Structure):
    _fields_ = [
        ("active", ctypes.c_uint32), ("id", ctypes.c_uint32), ("nvml_profile", ctypes.c_uint32),
        ("start", ctypes.c_uint32), ("size", ctypes.c_uint32), ("pad", ctypes.c_uint32),
    ]


class GpuInstance(ctypes.Structure):
    _fields_ = [
        ("active", ctypes.c_uint32), ("id", ctypes.c_uint32), ("profile_index", ctypes.c_uint32),
        ("start", ctypes.c_uint32), ("size", ctypes.c_uint32), ("pad", ctypes.c_uint32),
        ("cis", ComputeInstance * MAX_CIS),
    ]


class GpuDynamic(ctypes.Structure):
    _fields_ = [
        ("mig_current", ctypes.c_uint32), ("mig_pending", ctypes.c_uint32),
        ("persistence_mode", ctypes.c_uint32), ("lost", ctypes.c_uint32),
        ("fabric_degraded", ctypes.c_uint32), ("last_xid", ctypes.c_uint32),
        ("compute_mode", ctypes.c_uint32), ("timeslice", ctypes.c_uint32),
        ("link_down_mask", ctypes.c_uint64), ("ecc_dbe_volatile", ctypes.c_uint64),
        ("xid_count", ctypes.c_uint64), ("gis", GpuInstance * MAX_GIS),
    ]


class GpuRecord(ctypes.Structure):
    _fields_ = [("s", GpuStatic), ("d", GpuDynamic)]


class Header(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_char * 8), ("layout_version", ctypes.c_uint32),
        ("header_size", ctypes.c_uint32), ("gpu_size", ctypes.c_uint32),
        ("gpu_count", ctypes.c_uint32), ("file_size", ctypes.c_uint64),
        ("checksum", ctypes.c_uint32), ("cuda_driver_version", ctypes.c_uint32),
        ("driver_version", ctypes.c_char * 80), ("nvml_version", ctypes.c_char * 80),
        ("topology", ctypes.c_char * 64), ("node", ctypes.c_char * 64),
        ("generation", ctypes.c_uint64), ("event_seq", ctypes.c_uint64),
        ("events", Event * EVENT_RING), ("journal_state", ctypes.c_uint32),
        ("journal_gpu", ctypes.c_uint32), ("journal_has_event", ctypes.c_uint32),
        ("journal_event_seq", ctypes.c_uint32), ("journal_event", Event),
        ("journal_dyn", GpuDynamic),
    ]


_C_NAMES: dict[str, type[ctypes.Structure]] = {
    "fgs_header": Header, "fgs_gpu": GpuRecord, "fgs_gpu_static": GpuStatic,
    "fgs_gpu_dynamic": GpuDynamic, "fgs_link": Link, "fgs_profile": Profile,
    "fgs_gi": GpuInstance, "fgs_ci": ComputeInstance, "fgs_event": Event,
}


def layout() -> dict[str, int]:
    """This mirror's sizes and offsets, keyed like the C library's fakegpu_state_layout()."""
    out: dict[str, int] = {}
    for cname, struct in _C_NAMES.items():
        out[cname] = ctypes.sizeof(struct)
        for fname, *_ in struct._fields_:
            out[f"{cname}.{fname}"] = getattr(struct, fname).offset
    return out


def checksum(header: Header, gpus: list[GpuRecord]) -> int:
    """CRC-32 of the static bytes: the header up to ``generation`` (checksum as 0), GPU statics."""
    raw = bytearray(bytes(header)[: Header.generation.offset])
    raw[Header.checksum.offset : Header.checksum.offset + 4] = b"\0\0\0\0"
    crc = zlib.crc32(bytes(raw))
    for g in gpus:
        crc = zlib.crc32(bytes(g.s), crc)
    return crc


def _text(value: str, size: int, what: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) >= size:
        raise InvalidInput(f"{what} {value!r} is longer than {size - 1} bytes")
    return data


def _profile_id(p: MigGpuInstanceProfile) -> int:
    """The id nvmlGpuInstanceProfileInfo.id reports and create/placement calls take: the one
    nvidia-smi shows (19, 20, 15, ...), not the NVML_GPU_INSTANCE_PROFILE_* index."""
    if p.smi_id is None:
        raise ValueError(f"catalog profile {p.name} lacks its nvidia-smi id")
    return p.smi_id


def _fill_profiles(s: GpuStatic, mig: MigCapability) -> None:
    if len(mig.profiles) > MAX_PROFILES:
        raise InvalidInput(f"more than {MAX_PROFILES} MIG profiles")
    s.mig_capable = 1
    s.mig_memory_slices = mig.memory_slices
    s.mig_compute_slices = mig.compute_slices
    s.mig_max_gpu_instances = mig.max_gpu_instances
    s.profile_count = len(mig.profiles)
    for i, p in enumerate(mig.profiles):
        if len(p.placements) > MAX_PLACEMENTS:
            raise InvalidInput(f"MIG profile {p.name}: more than {MAX_PLACEMENTS} placements")
        r = s.profiles[i]
        r.id = _profile_id(p)
        r.nvml_profile = p.id
        r.instance_count = p.instance_count
        r.slice_count = p.slice_count
        r.memory_slices = p.memory_slices
        r.sm_count = p.sm_count
        r.copy_engines = p.copy_engines
        r.decoders = p.decoders
        r.encoders = p.encoders
        r.jpegs = p.jpegs
        r.ofas = p.ofas
        r.memory_mib = p.memory_mib
        r.name = _text(p.name, 32, "MIG profile name")
        r.placement_count = len(p.placements)
        for j, pl in enumerate(p.placements):
            r.placements[j].start = pl.start
            r.placements[j].size = pl.size


def _fill_mig_instances(gpu: Gpu, d: GpuDynamic) -> None:
    mig = gpu.product.mig
    d.mig_current = d.mig_pending = 1 if gpu.mig.enabled else 0
    if not gpu.mig.instances:
        return
    if mig is None or not gpu.mig.enabled:
        raise InvalidInput(f"GPU {gpu.index}: MIG instances without MIG enabled")
    used_ids: set[int] = set()
    for slot, inst in enumerate(gpu.mig.instances):
        index = next((i for i, p in enumerate(mig.profiles) if p.name == inst.profile), None)
        if index is None or slot >= MAX_GIS:
            raise InvalidInput(f"GPU {gpu.index}: cannot place MIG instance {inst.profile}")
        p = mig.profiles[index]
        size = next((pl.size for pl in p.placements if pl.start == inst.placement_start), None)
        if size is None:
            raise InvalidInput(f"GPU {gpu.index}: {p.name} cannot start at {inst.placement_start}")
        # the same id rule as the library: the full GPU is 0, others the lowest free from 1
        gi_id = 0 if p.slice_count >= mig.compute_slices else min(
            i for i in range(1, MAX_GIS + 2) if i not in used_ids
        )
        used_ids.add(gi_id)
        gi = d.gis[slot]
        gi.active, gi.id, gi.profile_index = 1, gi_id, index
        gi.start, gi.size = inst.placement_start, size
        ci = gi.cis[0]
        ci.active, ci.id, ci.nvml_profile = 1, 0, CI_PROFILES.get(p.slice_count, 0)
        ci.start, ci.size = 0, p.slice_count


def _remote_pci_device_id(topology: Topology, link_remote_node: str, gpu_index: int | None) -> int:
    if gpu_index is None:
        return (NVSWITCH_PCI_DEVICE_ID << 16) | NVIDIA_VENDOR
    try:
        remote = topology.node(link_remote_node).gpu(gpu_index)
    except (KeyError, IndexError):
        return 0
    return (remote.product.pci_device_id << 16) | NVIDIA_VENDOR


def _on_node_nvswitch(architecture: str, node: Node, gpu: Gpu) -> bool:
    """Hopper or newer (GPU fabric info starts there) with NVLinks to this node's NVSwitches."""
    return architecture not in ("ampere",) and any(
        link.remote_type is RemoteType.SWITCH and link.remote_node == node.name
        for link in gpu.nvlinks)


def gpu_record(topology: Topology, node: Node, gpu: Gpu) -> GpuRecord:
    """One GPU as the library reads it."""
    rec = GpuRecord()
    s, d = rec.s, rec.d
    # Persistence on, as nvidia-persistenced leaves a data-center GPU (a real H200 read with
    # driver 580.159.04 answered enabled).
    d.persistence_mode = 1
    p = gpu.product
    s.index, s.minor, s.module_id, s.numa_node = gpu.index, gpu.minor, gpu.module_id, gpu.numa_node
    s.name = _text(p.name, STR, "GPU name")
    s.uuid = _text(gpu.uuid, STR, "GPU UUID")
    s.serial = _text(gpu.serial, 32, "serial")
    s.board_part_number = _text(gpu.board_part_number, 80, "board part number")
    if p.architecture not in ARCHITECTURES:
        raise InvalidInput(f"GPU {gpu.index}: unknown architecture {p.architecture!r}")
    s.architecture = ARCHITECTURES[p.architecture]
    s.brand = BRANDS.get(p.brand.upper().replace(" ", "_"), 0)
    s.cc_major, s.cc_minor = p.cuda_compute_capability
    s.memory_total = p.memory_mib * MIB
    s.memory_reserved = (p.memory_reserved_bytes if p.memory_reserved_bytes is not None
                         else min(RESERVED_MIB, p.memory_mib // 16) * MIB)
    s.pci_domain, s.pci_bus = gpu.pci.domain, gpu.pci.bus
    s.pci_device, s.pci_function = gpu.pci.device, gpu.pci.function
    s.pci_device_id = (p.pci_device_id << 16) | NVIDIA_VENDOR
    s.pci_subsystem_id = p.pci_subsystem_id
    s.sm_count = p.sm_count
    s.power_limit_mw = p.power_limit_mw
    s.max_sm_clock_mhz, s.max_mem_clock_mhz = p.max_sm_clock_mhz, p.max_mem_clock_mhz
    s.idle_sm_clock_mhz = p.idle_sm_clock_mhz or 0
    s.nvlink_version = p.nvlink.generation if p.nvlink else 0
    link_count = max((link.link + 1 for link in gpu.nvlinks), default=0)
    if link_count > MAX_LINKS:
        raise InvalidInput(f"GPU {gpu.index}: link {link_count - 1} beyond NVML's {MAX_LINKS}")
    s.link_count = link_count
    for link in gpu.nvlinks:
        r = s.links[link.link]
        r.present = 1
        r.remote_type = REMOTE_TYPES[link.remote_type]
        r.remote_gpu_index = NO_ID if link.remote_gpu_index is None else link.remote_gpu_index
        rp = link.remote_pci
        r.remote_domain, r.remote_bus = rp.domain, rp.bus
        r.remote_device, r.remote_function = rp.device, rp.function
        r.remote_pci_device_id = _remote_pci_device_id(
            topology, link.remote_node, link.remote_gpu_index
        )
        r.remote_node = _text(link.remote_node, 64, "node name")
        if link.state is LinkState.DOWN:
            d.link_down_mask |= 1 << link.link
    s.addressing_mode = ADDRESSING_ATS if p.key in GRACE_HOSTED else ADDRESSING_NONE
    if gpu.fabric is None and _on_node_nvswitch(p.architecture, node, gpu):
        # NVSwitch systems (DGX/HGX H100, H200, B200): the fabric manager trains the node's
        # switches and the GPU reports a completed fabric with no cluster (all-zero UUID,
        # clique 0), which NVIDIA's driver reads as "NVLink, but not multi-node".
        s.fabric_present = 1
        s.fabric_state = FABRIC_STATES[FabricState.COMPLETED]
    elif gpu.fabric is None and p.architecture != "ampere":
        # Hopper or newer without NVSwitches: the call succeeds with state NOT_SUPPORTED (read
        # on a real H200 without a fabric, driver 580.159.04), not an error.
        s.fabric_present = 1
        s.fabric_state = FABRIC_STATES[FabricState.NOT_SUPPORTED]
    if gpu.fabric is not None:
        s.fabric_present = 1
        s.fabric_state = FABRIC_STATES[gpu.fabric.state]
        for i, b in enumerate(uuidlib.UUID(gpu.fabric.cluster_uuid).bytes):
            s.cluster_uuid[i] = b
        s.clique_id = gpu.fabric.clique_id
        d.fabric_degraded = 1 if gpu.fabric.health is FabricHealth.DEGRADED else 0
    if p.mig is not None:
        _fill_profiles(s, p.mig)
    _fill_mig_instances(gpu, d)
    for fault in gpu.faults:
        if fault.kind is FaultKind.XID:
            d.last_xid = fault.value or 0
        elif fault.kind is FaultKind.ECC_DBE:
            d.ecc_dbe_volatile += 1
        elif fault.kind is FaultKind.GPU_LOST:
            d.lost = 1
        elif fault.kind is FaultKind.NVLINK_DOWN and fault.value is not None:
            d.link_down_mask |= 1 << fault.value
        elif fault.kind is FaultKind.FABRIC_DEGRADED:
            d.fabric_degraded = 1
    return rec


def render_bytes(topology: Topology, node: Node) -> bytes:
    if len(node.gpus) > MAX_GPUS:
        raise InvalidInput(f"node {node.name}: {len(node.gpus)} GPUs, at most {MAX_GPUS}")
    gpus = [gpu_record(topology, node, g) for g in node.gpus]
    h = Header()
    h.magic = MAGIC
    h.layout_version = LAYOUT_VERSION
    h.header_size = ctypes.sizeof(Header)
    h.gpu_size = ctypes.sizeof(GpuRecord)
    h.gpu_count = len(gpus)
    h.file_size = h.header_size + h.gpu_count * h.gpu_size
    h.cuda_driver_version = topology.driver.cuda_version
    h.driver_version = _text(topology.driver.version, 80, "driver version")
    h.nvml_version = _text(topology.driver.nvml_version, 80, "NVML version")
    h.topology = _text(topology.name, 64, "topology name")
    h.node = _text(node.name, 64, "node name")
    h.checksum = checksum(h, gpus)
    return bytes(h) + b"".join(bytes(g) for g in gpus)


def render(topology: Topology, node: str | Node, path: str | Path) -> Path:
    """Render one node's state file to ``path`` (replacing any old one), and the sysfs view of
    its PCIe tree beside it (``sysfs.path_for``), and return the state file's path."""
    if isinstance(node, str):
        try:
            node = topology.node(node)
        except KeyError:
            names = ", ".join(n.name for n in topology.nodes)
            raise InvalidInput(f"no node {node!r} in topology {topology.name} ({names})") from None
    data = render_bytes(topology, node)
    sysfs.render(node, sysfs.path_for(path))
    old = _open_replaced(Path(path))
    try:
        # 0644: readers (containers, monitoring) need no write access; changes need the owner
        atomic_write(Path(path), data, mode=0o644)
        if old is not None:
            _retire(old)
    finally:
        if old is not None:
            os.close(old)
    return Path(path)


def _open_replaced(path: Path) -> int | None:
    """The state file a render is about to replace (not through a symlink), or None."""
    try:
        return os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None


def _retire(fd: int) -> None:
    """Clear the replaced file's magic under the writers' lock: clients still mapping it check
    the magic on every access, notice, and open the path again (docs/nvml.md)."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        if os.pread(fd, len(MAGIC), 0) == MAGIC:
            os.pwrite(fd, bytes(len(MAGIC)), 0)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def read_header(path: str | Path) -> Header:
    """The header of a state file (for inspection; the library validates it fully)."""
    data = Path(path).read_bytes()
    if len(data) < ctypes.sizeof(Header):
        raise InvalidInput(f"{path}: too short for a fakegpu state file")
    return Header.from_buffer_copy(data)
