"""The validated, immutable model of a fake GPU cluster.

Everything downstream (the NVML state renderer, the CLI, the cluster providers) reads these
types and nothing else; the loader (``load.py``) is the only code that builds them from YAML.
All identifiers here are already derived and deterministic: consumers never invent UUIDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# --- hardware catalog types (facts about real products, see catalog/*.yaml) -----------------


@dataclass(frozen=True)
class MigPlacement:
    """A legal GPU-instance placement: memory/compute slice ``start`` spanning ``size`` slices."""

    start: int
    size: int


@dataclass(frozen=True)
class MigGpuInstanceProfile:
    """One row of ``nvidia-smi mig -lgip`` with NVML's profile id."""

    # NVML_GPU_INSTANCE_PROFILE_* value (0 = 1 slice, 1 = 2 slices, 7 = 1 slice + me, ...)
    id: int
    name: str  # e.g. "1g.10gb", "1g.10gb+me"
    instance_count: int  # how many fit on an empty GPU
    slice_count: int  # compute slices (the "Ng")
    memory_slices: int  # of the product's ``mig.memory_slices`` (8 on A100/H100/H200/B200)
    memory_mib: int  # as NVML reports it in nvmlGpuInstanceProfileInfo.memorySizeMB
    sm_count: int  # multiprocessorCount
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    placements: tuple[MigPlacement, ...]  # nvmlDeviceGetGpuInstancePossiblePlacements_v2
    smi_id: int | None = None  # the "ID" column of ``nvidia-smi mig -lgip`` (19, 20, 15, ...)


@dataclass(frozen=True)
class MigCapability:
    memory_slices: int  # 8
    compute_slices: int  # 7
    max_gpu_instances: int  # nvmlDeviceGetMaxMigDeviceCount
    profiles: tuple[MigGpuInstanceProfile, ...]

    def profile(self, name: str) -> MigGpuInstanceProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class NvLinkSpec:
    generation: int  # NVML nvlink version: 3 for A100, 4 for Hopper, 5 for Blackwell
    links_per_gpu: int
    link_bandwidth_gbps: float  # GB/s per link, both directions together


@dataclass(frozen=True)
class Baseboard:
    """How a product is usually built into a node: PCI addresses, NUMA, switches."""

    system: str  # e.g. "DGX H100"
    pci: tuple[PciAddress, ...]  # per baseboard position, in NVML index order
    numa: tuple[int, ...]  # NUMA node per position
    gpus_per_board: int = 1  # GPUs sharing one board serial (2 on a GB200 superchip)
    nvswitches: int = 0  # NVSwitch chips inside the node
    nvswitch_pci: tuple[PciAddress, ...] = ()
    fabric_switch_chips: int = 0  # off-node switch chips a fabric GPU links to (NVL72: 18)
    pcie: PcieTree | None = None  # the system's PCIe tree for all its positions, with its NICs


@dataclass(frozen=True)
class Product:
    """One GPU product as NVML describes it. Values cite ``sources`` in the catalog file."""

    key: str  # catalog key, e.g. "H100-SXM5-80GB"
    name: str  # nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
    brand: str  # nvmlBrandType_t name without prefix, e.g. "NVIDIA" or "TESLA"
    architecture: str  # "ampere" | "hopper" | "blackwell"
    cuda_compute_capability: tuple[int, int]
    memory_mib: int  # nvmlMemory_t.total / MiB
    pci_device_id: int  # 16-bit device id, e.g. 0x2330 (vendor 0x10de implied)
    pci_subsystem_id: int  # 32-bit nvmlPciInfo_t.pciSubSystemId
    sm_count: int
    board_part_number: str
    nvlink: NvLinkSpec | None
    mig: MigCapability | None
    power_limit_mw: int
    max_sm_clock_mhz: int
    max_mem_clock_mhz: int
    sources: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = ()  # names of fields whose value is not confirmed
    baseboard: Baseboard | None = None
    multinode_nvlink: bool = False  # can join a multi-node NVLink fabric (clique)
    # nvmlMemory_v2_t.reserved in bytes where read on a real card; None: the library's estimate
    memory_reserved_bytes: int | None = None
    idle_sm_clock_mhz: int | None = None  # current SM clock at 0% utilisation; None: the max


# --- the cluster -------------------------------------------------------------------------------


class LinkState(StrEnum):
    UP = "up"
    DOWN = "down"


class RemoteType(StrEnum):
    GPU = "gpu"
    SWITCH = "switch"


@dataclass(frozen=True)
class PciAddress:
    domain: int
    bus: int
    device: int
    function: int = 0

    @property
    def bus_id(self) -> str:
        """NVML's busId form: 8-digit domain, e.g. ``00000000:18:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"

    @property
    def bus_id_legacy(self) -> str:
        """NVML's busIdLegacy form: 4-digit domain, e.g. ``0000:18:00.0``."""
        return f"{self.domain:04X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"


@dataclass(frozen=True)
class PcieRoot:
    """A PCIe root complex (host bridge) as sysfs names it: ``/sys/devices/pci0000:15``."""

    name: str  # "pci<domain>:<bus>", lowercase hex: the value of resource.kubernetes.io/pcieRoot
    numa_node: int  # what every device below it reports in sysfs numa_node

    @property
    def domain(self) -> int:
        return int(self.name[3:7], 16)

    @property
    def bus(self) -> int:
        return int(self.name[8:10], 16)


class NicRole(StrEnum):
    COMPUTE = "compute"  # the GPU's scale-out (GPUDirect RDMA) NIC, beside it under a switch
    STORAGE = "storage"
    MANAGEMENT = "management"


@dataclass(frozen=True)
class Nic:
    """A network adapter port (one PCI function) of a node; no driver publishes it yet."""

    name: str  # the netdev interface name, e.g. "ibp24s0"
    model: str  # e.g. "ConnectX-7"
    gbps: float  # link speed, Gb/s
    pci: PciAddress
    role: NicRole = NicRole.COMPUTE
    rdma: str = ""  # the RDMA device, e.g. "mlx5_0"
    ips: tuple[str, ...] = ()  # the port's addresses as declared (CIDR); () = nic_addresses'


@dataclass(frozen=True)
class PcieSwitch:
    root: int  # index into PcieTree.roots
    gpus: tuple[int, ...]  # NVML indices of the GPUs below it
    nics: tuple[int, ...]  # indices into PcieTree.nics


@dataclass(frozen=True)
class PcieTree:
    """Where a node's GPUs and NICs sit: under a switch, or straight on a root port."""

    roots: tuple[PcieRoot, ...]
    switches: tuple[PcieSwitch, ...]
    nics: tuple[Nic, ...]
    # Devices on a root port without a switch: (root index, GPU indices, NIC indices).
    direct: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()
    # The NUMA nodes of each CPU socket (``pcie.sockets``); empty: each NUMA node of a root
    # is a socket of its own. What the list form of numaNode is made of (numa_lists).
    sockets: tuple[tuple[int, ...], ...] = ()
    # The node's plugins publish resource.kubernetes.io/numaNode as a list (KEP-5491's
    # DRAListTypeAttributes, 1.36+): the device's NUMA node, then the others of its socket.
    numa_list: bool = False

    @property
    def socket_numa(self) -> tuple[tuple[int, ...], ...]:
        """The NUMA nodes of each socket: the declared ones, else one socket per NUMA node
        of the roots."""
        if self.sockets:
            return self.sockets
        return tuple((n,) for n in sorted({r.numa_node for r in self.roots}))

    def gpu_root(self, gpu: int) -> PcieRoot | None:
        for sw in self.switches:
            if gpu in sw.gpus:
                return self.roots[sw.root]
        for root, gpus, _nics in self.direct:
            if gpu in gpus:
                return self.roots[root]
        return None

    def gpu_switch(self, gpu: int) -> int | None:
        return next((i for i, sw in enumerate(self.switches) if gpu in sw.gpus), None)

    def nic_root(self, nic: int) -> PcieRoot:
        for sw in self.switches:
            if nic in sw.nics:
                return self.roots[sw.root]
        for root, _gpus, nics in self.direct:
            if nic in nics:
                return self.roots[root]
        raise KeyError(nic)  # the loader places every NIC

    def nic_switch(self, nic: int) -> int | None:
        return next((i for i, sw in enumerate(self.switches) if nic in sw.nics), None)

    def gpu_nics(self, gpus: int) -> tuple[int | None, ...]:
        """For each of the node's ``gpus`` GPUs, the compute NIC it sends GPUDirect RDMA
        through, as NCCL picks it: the nearest by PCIe distance, under its switch, else its
        root complex, else its NUMA node; GPUs with the same nearest NICs share them out in
        index order (DGX A100: two GPUs and two NICs per switch; GB200: two per Grace CPU).
        None for a GPU the tree does not place or with no compute NIC near it."""
        compute = [i for i, n in enumerate(self.nics) if n.role is NicRole.COMPUTE]
        places = [(self.nic_switch(i), self.nic_root(i)) for i in compute]

        def nearest(g: int) -> tuple[int, ...]:
            root, switch = self.gpu_root(g), self.gpu_switch(g)
            if root is None:
                return ()
            # Per NIC: (under its switch, under its root, on its NUMA node); nearest tier first.
            tiers = zip(*[(switch is not None and sw == switch, r.name == root.name,
                           r.numa_node == root.numa_node) for sw, r in places], strict=True)
            for tier in tiers:
                found = tuple(i for i, near in zip(compute, tier, strict=True) if near)
                if found:
                    return found
            return ()

        wanted = [nearest(g) for g in range(gpus)]
        return tuple(mine[wanted[:g].count(mine) % len(mine)] if mine else None
                     for g, mine in enumerate(wanted))


@dataclass(frozen=True)
class NvLink:
    link: int  # link index on this GPU
    remote_type: RemoteType
    remote_pci: PciAddress  # of the far GPU or NVSwitch
    remote_node: str  # node the far end lives on (switch trays count as the GPU's own node)
    remote_gpu_index: int | None  # NVML index of the far GPU on remote_node, if a GPU
    state: LinkState = LinkState.UP


@dataclass(frozen=True)
class NvSwitch:
    index: int
    uuid: str
    pci: PciAddress
    links: int


class FabricState(StrEnum):
    """nvmlGpuFabricState_t."""

    NOT_SUPPORTED = "not-supported"  # 0
    NOT_STARTED = "not-started"  # 1
    IN_PROGRESS = "in-progress"  # 2
    COMPLETED = "completed"  # 3


class FabricHealth(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"


@dataclass(frozen=True)
class GpuFabric:
    """Multi-node NVLink membership as nvmlDeviceGetGpuFabricInfoV reports it."""

    cluster_uuid: str  # canonical UUID text
    clique_id: int
    state: FabricState = FabricState.COMPLETED
    health: FabricHealth = FabricHealth.HEALTHY

    @property
    def clique(self) -> str:
        """The ID NVIDIA's DRA driver publishes: ``<clusterUuid>.<cliqueId>``."""
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclass(frozen=True)
class MigInstance:
    """A pre-created GPU instance (with one compute instance using all its slices)."""

    profile: str  # profile name from the product's MIG table
    placement_start: int  # resolved: the loader picks the first free placement if not given


@dataclass(frozen=True)
class Mig:
    enabled: bool = False
    instances: tuple[MigInstance, ...] = ()
    # NVIDIA's DynamicMIG: the node's plugin runs with --dynamic-mig (the feature gate is per
    # plugin, so per node: every MIG-capable GPU of the node must say so).
    dynamic: bool = False


MAX_XID = 999  # fault XIDs are 1..999, in topology files and injected at run time


class FaultKind(StrEnum):
    XID = "xid"  # value: the XID number
    ECC_DBE = "ecc-dbe"
    GPU_LOST = "gpu-lost"
    NVLINK_DOWN = "nvlink-down"  # value: the link index
    FABRIC_DEGRADED = "fabric-degraded"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    value: int | None = None


# How a GPU that must be attached before use behaves (Gpu.attach).
ATTACH_HOTPLUG = "hotplug"  # attached a few seconds after a claim gets it
ATTACH_BROKEN = "broken"  # the attach fails
ATTACH_MODES = (ATTACH_HOTPLUG, ATTACH_BROKEN)


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML index (ordered by PCI bus id, as the real driver does)
    minor: int  # /dev/nvidia<minor>
    product: Product
    uuid: str  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    serial: str  # board serial; the two GPUs of a GB200 superchip share one
    board_part_number: str
    module_id: int  # 1-based position on the baseboard (nvmlDeviceGetModuleId)
    pci: PciAddress
    numa_node: int
    nvlinks: tuple[NvLink, ...] = ()
    fabric: GpuFabric | None = None
    mig: Mig = field(default_factory=Mig)
    faults: tuple[Fault, ...] = ()
    # Several claims may share it by memory (DRAConsumableCapacity): the node's plugin runs
    # with --shared-gpus listing its minor.
    shared: bool = False
    # Needs attaching before a pod may bind to it (KEP-5007 binding conditions; docs/
    # topology.md): "hotplug" attaches, "broken" fails to. The plugin's --attach-gpus and
    # --broken-attach-gpus list such minors.
    attach: str = ""
    # Also offered as this many time-sliced shares, each 1/N of its memory (like vGPU's
    # time-sliced profiles), never at once with its MIG devices: KEP-5963's compatibility
    # groups keep them apart at scheduling. Needs mig.dynamic; the plugin's --time-sliced-gpus.
    time_slices: int = 0


@dataclass(frozen=True)
class Node:
    name: str
    index: int  # position in the cluster, 0-based
    gpus: tuple[Gpu, ...]
    nvswitches: tuple[NvSwitch, ...] = ()
    system: str | None = None  # e.g. "DGX H100", "GB200 NVL72 compute tray"
    numa_nodes: int = 1
    # A fleet node (docs/scale.md): no kubelet; KWOK keeps it Ready and its pods Running,
    # fakegpu's fleet publisher writes its ResourceSlices as its plugin would.
    simulated: bool = False
    pcie: PcieTree | None = None  # None: where the GPUs sit is unknown (nothing published)

    def gpu(self, index: int) -> Gpu:
        return self.gpus[index]

    @property
    def dynamic_mig(self) -> bool:
        """Its plugin runs with --dynamic-mig (every MIG GPU of the node says mig.dynamic)."""
        return any(g.mig.dynamic for g in self.gpus)

    @property
    def shared_minors(self) -> tuple[int, ...]:
        """Minors of the GPUs shared by memory (the plugin's --shared-gpus)."""
        return tuple(g.minor for g in self.gpus if g.shared)

    @property
    def time_sliced(self) -> tuple[tuple[int, int], ...]:
        """(minor, shares) of the GPUs also offered time-sliced (the plugin's
        --time-sliced-gpus)."""
        return tuple((g.minor, g.time_slices) for g in self.gpus if g.time_slices)

    def attach_minors(self, mode: str) -> tuple[int, ...]:
        """Minors of the GPUs attached before use in ``mode`` (one of ATTACH_MODES)."""
        return tuple(g.minor for g in self.gpus if g.attach == mode)


@dataclass(frozen=True)
class Driver:
    version: str  # nvmlSystemGetDriverVersion, e.g. "580.95.05"
    cuda_version: int  # nvmlSystemGetCudaDriverVersion_v2, e.g. 13000 for 13.0
    nvml_version: str  # nvmlSystemGetNVMLVersion, e.g. "13.580.95.05"


DEFAULT_NETWORK_GBPS_PER_GPU = 400.0  # one ~400 Gb/s NIC per GPU (REFERENCE.md section 5)


@dataclass(frozen=True)
class Network:
    """The node-to-node network: what GPU pairs without an NVLink path get."""

    gbps_per_gpu: float = DEFAULT_NETWORK_GBPS_PER_GPU  # Gb/s (bits), each direction

    @property
    def gbytes_per_gpu(self) -> float:
        """The same speed in GB/s (bytes), the unit NVLink figures use."""
        return self.gbps_per_gpu / 8


# The state file keeps the topology name NUL-terminated in a char[64] (fgs_header.topology):
# the loader counts UTF-8 bytes against it, so every valid topology renders.
MAX_NAME_BYTES = 63


@dataclass(frozen=True)
class Topology:
    name: str
    seed: int
    driver: Driver
    nodes: tuple[Node, ...]
    source: str = "<memory>"  # file it was loaded from, as given (for messages)
    network: Network = field(default_factory=Network)
    # What the file is, not how it was named: its resolved path ("" from text) and the sha256 of
    # its bytes. Host NVML state is keyed on these (nvml.env.state_dir). Not compared: two
    # loads of the same hardware are equal wherever they came from.
    path: str = field(default="", compare=False)
    digest: str = field(default="", compare=False)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def real_nodes(self) -> tuple[Node, ...]:
        """Nodes with a kubelet and the plugin of their own."""
        return tuple(n for n in self.nodes if not n.simulated)

    @property
    def simulated_nodes(self) -> tuple[Node, ...]:
        """Fleet nodes: kept by KWOK, their slices published by fakegpu."""
        return tuple(n for n in self.nodes if n.simulated)
