"""Plain YAML data -> validated, immutable Topology (all problems found, with paths)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from . import catalog, ids, network, pci, pcie
from .errors import Problem, TopologyError
from .fields import Report, join, type_name
from .mig import first_free, refusal
from .model import (
    ATTACH_MODES,
    MAX_NAME_BYTES,
    MAX_XID,
    Driver,
    FabricHealth,
    FabricState,
    Fault,
    FaultKind,
    Gpu,
    GpuFabric,
    LinkState,
    Mig,
    MigGpuInstanceProfile,
    MigInstance,
    Node,
    NvLink,
    NvSwitch,
    PciAddress,
    PcieTree,
    Product,
    RemoteType,
    Topology,
)

MAX_NODES = 1024
MAX_GPUS_PER_NODE = 16
MAX_FAULTS_PER_NODE = 256
DEFAULT_DRIVER = ("580.95.05", 13000)
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_RANGE_DIGITS = 9  # node names are at most 63 characters anyway
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a Kubernetes node name
_DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$")
_TOP_KEYS = ("name", "seed", "driver", "network", "fabrics", "nodes")
_NODE_KEYS = ("name", "system", "gpus", "nvlink", "faults", "simulated", "pcie")
_FAULTS_WITH_VALUE = {FaultKind.XID, FaultKind.NVLINK_DOWN}


@dataclass(frozen=True)
class _Fabric:
    cluster_uuid: str
    clique: int
    state: FabricState
    health: FabricHealth


@dataclass(frozen=True)
class _NvlinkMode:
    mode: str  # "none" | "switched" | "fabric"
    switches: int = 0
    fabric: str = ""
    clique: int | None = None


def build(data: Any, source: str) -> Topology:
    """Validate ``data`` (from YAML) and build the model, or raise TopologyError."""
    if not isinstance(data, dict):
        what = "empty" if data is None else type_name(data)
        raise TopologyError(source, [Problem("", f"top level is {what}, expected a mapping "
                                                 "with name and nodes")])
    report = Report()
    top = report.mapping(data, "", _TOP_KEYS)
    assert top is not None  # a dict, checked above
    name = report.get(top, "name", "", str)
    if name is not None and len(name.encode()) > MAX_NAME_BYTES:
        # The state file holds the name in a fixed field: count bytes, as it does.
        report.add("name", f"is {len(name.encode())} bytes in UTF-8, expected at most "
                           f"{MAX_NAME_BYTES}")
        name = None
    elif name is not None and not name.isprintable():
        # A NUL would cut the state file's copy short; a newline would split messages.
        report.add("name", f"is {name!r}, expected printable text without control characters")
        name = None
    seed = report.int_in(top, "seed", "", 0, 2**63 - 1, default=0)
    driver = _driver(report, top.get("driver"))
    fabrics = _fabrics(report, top.get("fabrics"), seed or 0)
    net = network.parse(report, top.get("network"))
    nodes = _nodes(report, top.get("nodes"), seed or 0, fabrics)
    if (report.problems or name is None or seed is None or driver is None or nodes is None
            or net is None):
        raise TopologyError(source, report.problems)
    return Topology(name=name, seed=seed, driver=driver, nodes=tuple(nodes), source=source,
                    network=net)


def _driver(report: Report, raw: Any) -> Driver | None:
    version: str | None = DEFAULT_DRIVER[0]
    cuda: int | None = DEFAULT_DRIVER[1]
    if raw is not None:
        data = report.mapping(raw, "driver", ("version", "cuda_version"))
        if data is None:
            return None
        version = report.get(data, "version", "driver", str, default=DEFAULT_DRIVER[0])
        if version is not None and not _DRIVER_VERSION.fullmatch(version):
            report.add("driver.version", f"is '{version}', expected a driver version like "
                                         "'580.95.05'")
            version = None
        cuda = _cuda_version(report, data.get("cuda_version", "13.0"))
    if version is None or cuda is None:
        return None
    return Driver(version=version, cuda_version=cuda, nvml_version=f"{cuda // 1000}.{version}")


def _cuda_version(report: Report, raw: Any) -> int | None:
    # "13.0" (or the YAML float 13.0) -> 13000, as nvmlSystemGetCudaDriverVersion reports it.
    text = str(raw) if isinstance(raw, (str, float)) else ""
    match = re.fullmatch(r"(\d{1,2})\.(\d{1,2})", text)
    if match is None:
        report.add("driver.cuda_version", f"is {raw!r}, expected a CUDA version like '13.0'")
        return None
    return int(match[1]) * 1000 + int(match[2]) * 10


def _fabrics(report: Report, raw: Any, seed: int) -> dict[str, _Fabric]:
    out: dict[str, _Fabric] = {}
    if raw is None:
        return out
    if not isinstance(raw, list):
        report.add("fabrics", f"is {type_name(raw)}, expected a list of fabrics")
        return out
    if len(raw) > MAX_NODES:  # one per node at most; every error message lists them
        report.add("fabrics", f"lists {len(raw)} fabrics, expected at most {MAX_NODES}")
        return out
    for i, item in enumerate(raw):
        path = join("fabrics", i)
        data = report.mapping(item, path, ("name", "cluster_uuid", "clique", "state", "health"))
        if data is None:
            continue
        name = report.get(data, "name", path, str)
        clique = report.int_in(data, "clique", path, 0, 2**32 - 1, default=1)
        state = _enum(report, data, "state", path, FabricState, FabricState.COMPLETED)
        health = _enum(report, data, "health", path, FabricHealth, FabricHealth.HEALTHY)
        given = report.get(data, "cluster_uuid", path, str, default="")
        cluster = ""
        if given:
            try:
                cluster = str(uuid.UUID(given))
            except ValueError:
                report.add(join(path, "cluster_uuid"), f"is '{given}', expected a UUID like "
                                                       "'2f1f2c1e-...'")
        if name is None or clique is None or state is None or health is None:
            continue
        if name in out:
            report.add(join(path, "name"), f"fabric '{name}' is defined twice")
            continue
        out[name] = _Fabric(cluster or ids.cluster_uuid(seed, name), clique, state, health)
    return out


E = TypeVar("E", FabricState, FabricHealth, FaultKind)


def _enum(report: Report, data: dict[str, Any], key: str, path: str, kind: type[E],
          default: E | None) -> E | None:
    raw = report.get(data, key, path, str, default=default)
    if raw is None or isinstance(raw, kind):
        return raw
    try:
        return kind(raw)
    except ValueError:
        choices = ", ".join(str(k.value) for k in kind)
        report.add(join(path, key), f"is '{raw}', expected one of {choices}")
        return None


def expand_name(pattern: str) -> list[str] | str:
    """``tray-{0..17}`` -> names; a str result is the reason the pattern is bad.

    Only the first and last name are checked (the names differ in digits only, and the
    last is the longest), so a bad pattern costs the same whatever its range.
    """
    ranges = _RANGE.findall(pattern)
    if not ranges:
        return [pattern] if _good_name(pattern) else _bad_name(pattern)
    if len(ranges) > 1:
        return "has more than one {A..B} range, expected one"
    low_text, high_text = ranges[0]
    if max(len(low_text), len(high_text)) > _RANGE_DIGITS:
        return f"range bounds have more than {_RANGE_DIGITS} digits, expected a range of " \
               f"at most {MAX_NODES} names"
    low, high = int(low_text), int(high_text)
    if low > high or high - low >= MAX_NODES:
        return f"range {{{low_text}..{high_text}}} is empty or above {MAX_NODES} names"
    width = len(low_text) if low_text.startswith("0") and len(low_text) > 1 else 0

    def name(n: int) -> str:
        return _RANGE.sub(str(n).zfill(width), pattern)

    bad = next((n for n in (name(low), name(high)) if not _good_name(n)), None)
    if bad is not None:
        return _bad_name(bad)
    return [name(n) for n in range(low, high + 1)]


def _good_name(name: str) -> bool:
    return len(name) <= 63 and _NODE_NAME.fullmatch(name) is not None


def _bad_name(name: str) -> str:
    shown = name if len(name) <= 70 else name[:67] + "..."
    return f"'{shown}' is not a valid node name, expected lowercase letters, digits, '-' " \
           "and '.' (at most 63)"


def _nodes(report: Report, raw: Any, seed: int, fabrics: dict[str, _Fabric]) -> list[Node] | None:
    if not isinstance(raw, list) or not raw:
        report.add("nodes", f"is {type_name(raw)}, expected a non-empty list of nodes")
        return None
    out: list[Node] = []
    seen: dict[str, str] = {}
    named = 0  # names expanded so far, duplicates included: bounds the work
    for i, item in enumerate(raw):
        path = join("nodes", i)
        data = report.mapping(item, path, _NODE_KEYS)
        if data is None:
            continue
        pattern = report.get(data, "name", path, str)
        if pattern is None:
            continue
        names = expand_name(pattern)
        if isinstance(names, str):
            report.add(join(path, "name"), names)
            continue
        named += len(names)
        if named > MAX_NODES:
            report.add(join(path, "name"), f"more than {MAX_NODES} nodes in total")
            return None
        before = len(report.problems)
        spec = _NodeSpec.parse(report, data, path, fabrics)
        if spec is None or len(report.problems) > before:
            continue
        for name in names:
            if name in seen:
                report.add(join(path, "name"), f"node '{name}' is also defined by "
                                               f"{seen[name]}, expected unique node names")
                continue
            seen[name] = path
            out.append(spec.node(name, len(out), seed, fabrics))
    return out


@dataclass(frozen=True)
class _GpuSpec:
    product: Product
    mig: Mig
    shared: bool = False  # published for several claims by memory (DRAConsumableCapacity)
    attach: str = ""  # "" | ATTACH_MODES: needs attaching before a pod binds (KEP-5007)
    time_slices: int = 0  # also offered as this many time-sliced shares (KEP-5963)


@dataclass(frozen=True)
class _NodeSpec:
    """One validated node entry, stamped out once per expanded name."""

    system: str
    gpus: tuple[_GpuSpec, ...]
    nvlink: _NvlinkMode
    faults: tuple[tuple[Fault, ...], ...]  # per GPU
    gpu_pci: tuple[PciAddress, ...]
    switch_pci: tuple[PciAddress, ...]
    simulated: bool = False  # a fleet node: KWOK keeps it, fakegpu publishes its slices
    pcie: PcieTree | None = None

    @staticmethod
    def parse(report: Report, data: dict[str, Any], path: str,
              fabrics: dict[str, _Fabric]) -> _NodeSpec | None:
        gpus = _gpus(report, data.get("gpus"), join(path, "gpus"))
        if not gpus:
            return None
        product = gpus[0].product
        board = product.baseboard
        system = report.get(data, "system", path, str,
                            default=board.system if board else product.key)
        nvlink = _nvlink(report, data.get("nvlink"), join(path, "nvlink"), product, fabrics)
        faults = _faults(report, data.get("faults"), join(path, "faults"), gpus, nvlink)
        simulated = report.get(data, "simulated", path, bool, default=False)
        if system is None or nvlink is None or faults is None or simulated is None:
            return None
        # Dynamic MIG is the node plugin's mode (NVIDIA's feature gate): all MIG GPUs or none.
        dynamic = {g.mig.dynamic for g in gpus if g.product.mig is not None}
        if len(dynamic) > 1:
            report.add(join(path, "gpus"), "mig.dynamic must be the same for every GPU of a "
                       "node (the node's plugin runs with --dynamic-mig or without)")
            return None
        switches = nvlink.switches if nvlink.mode == "switched" else 0
        gpu_pci, switch_pci = pci.addresses(product, len(gpus), switches)
        clash = pci.problem(gpu_pci, switch_pci)
        if clash is not None:
            field, why = clash
            where = join(join(path, "nvlink"), "switches") if field == "switches" \
                else join(path, "gpus")
            report.add(where, f"{len(gpus)} GPUs and {switches} NVSwitches do not fit: {why}")
            return None
        tree = _pcie(report, data.get("pcie"), join(path, "pcie"), product, gpu_pci,
                     switch_pci)
        if "pcie" in data and tree is None:
            return None
        per_gpu = tuple(tuple(f for g, f in faults if g == i) for i in range(len(gpus)))
        return _NodeSpec(system, tuple(gpus), nvlink, per_gpu, tuple(gpu_pci),
                         tuple(switch_pci), simulated, tree)

    def node(self, name: str, position: int, seed: int, fabrics: dict[str, _Fabric]) -> Node:
        product = self.gpus[0].product
        board = product.baseboard
        count = len(self.gpus)
        numa = [board.numa[i] if board and i < len(board.numa) else 0 for i in range(count)]
        if self.pcie is not None:  # a GPU's NUMA node is its root complex's
            numa = [root.numa_node if (root := self.pcie.gpu_root(i)) else numa[i]
                    for i in range(count)]
        per_board = board.gpus_per_board if board else 1
        switches = self._switches(name, seed)
        gpus = []
        for i, spec in enumerate(self.gpus):
            faults = self.faults[i]
            down = {f.value for f in faults if f.kind is FaultKind.NVLINK_DOWN}
            fabric = None
            if self.nvlink.mode == "fabric":
                fab = fabrics[self.nvlink.fabric]
                degraded = any(f.kind is FaultKind.FABRIC_DEGRADED for f in faults)
                fabric = GpuFabric(
                    cluster_uuid=fab.cluster_uuid,
                    clique_id=fab.clique if self.nvlink.clique is None else self.nvlink.clique,
                    state=fab.state,
                    health=FabricHealth.DEGRADED if degraded else fab.health)
            gpus.append(Gpu(
                index=i, minor=i, product=spec.product,
                uuid=ids.gpu_uuid(seed, name, i),
                serial=ids.board_serial(seed, name, i // per_board),
                board_part_number=spec.product.board_part_number,
                module_id=i + 1, pci=self.gpu_pci[i], numa_node=numa[i],
                nvlinks=self._links(name, switches, down), fabric=fabric,
                mig=spec.mig, faults=faults, shared=spec.shared, attach=spec.attach,
                time_slices=spec.time_slices))
        return Node(name=name, index=position, gpus=tuple(gpus), nvswitches=tuple(switches),
                    system=self.system, numa_nodes=max(numa) + 1, simulated=self.simulated,
                    pcie=self.pcie)

    def _switches(self, node: str, seed: int) -> list[NvSwitch]:
        if self.nvlink.mode != "switched":
            return []
        product = self.gpus[0].product
        links = product.nvlink.links_per_gpu if product.nvlink else 0
        out = []
        for s, address in enumerate(self.switch_pci):
            per_gpu = sum(1 for link in range(links)
                          if _switch_of(link, links, self.nvlink.switches) == s)
            out.append(NvSwitch(index=s, uuid=ids.switch_uuid(seed, node, s), pci=address,
                                links=per_gpu * len(self.gpus)))
        return out

    def _links(self, node: str, switches: list[NvSwitch],
               down: set[int | None]) -> tuple[NvLink, ...]:
        product = self.gpus[0].product
        if self.nvlink.mode == "none" or product.nvlink is None:
            return ()
        count = product.nvlink.links_per_gpu
        out = []
        for link in range(count):
            if self.nvlink.mode == "switched":
                remote = switches[_switch_of(link, count, len(switches))].pci
            else:
                remote = _fabric_switch_pci(link, product)
            out.append(NvLink(link=link, remote_type=RemoteType.SWITCH, remote_pci=remote,
                              remote_node=node, remote_gpu_index=None,
                              state=LinkState.DOWN if link in down else LinkState.UP))
        return tuple(out)


def _pcie(report: Report, raw: Any, path: str, product: Product, gpu_pci: list[PciAddress],
          switch_pci: list[PciAddress]) -> PcieTree | None:
    """The node's own ``pcie`` section, else its baseboard's tree (for the positions it
    fills), else None: GPUs beyond the reference board sit nowhere known."""
    taken = {a.bus_id: f"NVSwitch {i}" for i, a in enumerate(switch_pci)}
    if raw is not None:
        return pcie.parse(report, raw, path, gpu_pci, taken)
    board = product.baseboard
    if board is None or board.pcie is None or len(gpu_pci) > len(board.pci):
        return None
    tree = pcie.restrict(board.pcie, len(gpu_pci))
    if any(n.pci.bus_id in taken for n in tree.nics):
        return None  # NVSwitches invented beyond the board's took a NIC's bus: no tree
    return tree


def _switch_of(link: int, links: int, switches: int) -> int:
    """Links spread over switches in even contiguous blocks (DGX H100: 18 over 4)."""
    return link * switches // links


def _fabric_switch_pci(link: int, product: Product) -> PciAddress:
    # Switch chips live in the rack's switch trays, not on this node: the address is a
    # stable synthetic one (tray = domain 0x100+n, chip = bus), identical for every GPU.
    board = product.baseboard
    chips = (board.fabric_switch_chips or board.nvswitches) if board else 0
    chip = link % (chips or (product.nvlink.links_per_gpu if product.nvlink else 1))
    return PciAddress(0x100 + chip // 2, chip % 2, 0)


_GPU_KEYS = ("product", "mig", "shared", "attach", "time_slices")
MAX_TIME_SLICES = 8


def _gpus(report: Report, raw: Any, path: str) -> list[_GpuSpec] | None:
    if isinstance(raw, dict):
        data = report.mapping(raw, path, (*_GPU_KEYS, "count"))
        if data is None:
            return None
        count = report.int_in(data, "count", path, 1, MAX_GPUS_PER_NODE)
        one = _gpu(report, data, path, with_count=True)
        if count is None or one is None:
            return None
        if one.product.baseboard and one.product.baseboard.gpus_per_board > 1 \
                and count > len(one.product.baseboard.pci):
            report.add(join(path, "count"), f"is {count}, but a {one.product.baseboard.system} "
                       f"holds {len(one.product.baseboard.pci)} {one.product.key} GPUs")
            return None
        return [one] * count
    if isinstance(raw, list):
        if not 1 <= len(raw) <= MAX_GPUS_PER_NODE:
            report.add(path, f"lists {len(raw)} GPUs, expected 1..{MAX_GPUS_PER_NODE}")
            return None
        specs = []
        for i, item in enumerate(raw):
            where = join(path, i)
            data = report.mapping(item, where, _GPU_KEYS)
            spec = _gpu(report, data, where, with_count=False) if data is not None else None
            if spec is not None:
                specs.append(spec)
        if len(specs) != len(raw):
            return None
        first = specs[0].product.key
        for i, spec in enumerate(specs):
            if spec.product.key != first:
                report.add(join(join(path, i), "product"), f"is {spec.product.key}, expected "
                           f"{first} like the node's first GPU (one product per node)")
                return None
        return specs
    report.add(path, f"is {type_name(raw)}, expected {{product: NAME, count: N}} or a list "
                     "of GPUs")
    return None


def _gpu(report: Report, data: dict[str, Any], path: str, with_count: bool) -> _GpuSpec | None:
    key = report.get(data, "product", path, str)
    if key is None:
        return None
    product = catalog.lookup(key)
    if product is None:
        report.add(join(path, "product"), f"unknown product '{key}', expected one of "
                   f"{', '.join(catalog.products())}")
        return None
    mig = _mig(report, data.get("mig"), join(path, "mig"), product)
    shared = report.get(data, "shared", path, bool, default=False)
    attach = report.get(data, "attach", path, str, default="")
    slices = report.int_in(data, "time_slices", path, 0, MAX_TIME_SLICES, default=0)
    if mig is None or shared is None or attach is None or slices is None:
        return None
    if slices == 1:
        report.add(join(path, "time_slices"), f"is 1, expected 2..{MAX_TIME_SLICES}")
        return None
    if slices and not mig.dynamic:
        report.add(join(path, "time_slices"), "needs mig: {enabled: true, dynamic: true} (the "
                   "shares draw on the GPU's MIG counter set)")
        return None
    if shared and (mig.enabled or mig.dynamic):
        report.add(join(path, "shared"), "a GPU in MIG mode is shared as its MIG devices, "
                   "not by memory")
        return None
    if attach and attach not in ATTACH_MODES:
        report.add(join(path, "attach"), f"is '{attach}', expected one of "
                   f"{', '.join(ATTACH_MODES)}")
        return None
    if attach and (mig.enabled or mig.dynamic or shared):
        report.add(join(path, "attach"), "only a whole GPU, not shared and not in MIG mode, "
                   "is attached before use")
        return None
    return _GpuSpec(product, mig, shared, attach, slices)


def _mig(report: Report, raw: Any, path: str, product: Product) -> Mig | None:
    if raw is None:
        return Mig()
    data = report.mapping(raw, path, ("enabled", "instances", "dynamic"))
    if data is None:
        return None
    enabled = report.get(data, "enabled", path, bool, default=False)
    dynamic = report.get(data, "dynamic", path, bool, default=False)
    instances = data.get("instances") or []
    if enabled is None or dynamic is None:
        return None
    if dynamic:  # NVIDIA's DynamicMIG: the node's plugin makes the instances claims ask for
        if product.mig is None:
            report.add(join(path, "dynamic"), f"{product.key} does not support MIG")
            return None
        if instances:
            report.add(join(path, "instances"), "a dynamic-MIG GPU starts without instances "
                       "(the plugin creates them for claims)")
            return None
        return Mig(enabled=enabled, dynamic=True)
    if enabled and product.mig is None:
        report.add(join(path, "enabled"), f"{product.key} does not support MIG")
        return None
    if not enabled:
        if instances:
            report.add(join(path, "instances"), "MIG instances need mig.enabled: true")
            return None
        return Mig()
    cap = product.mig
    assert cap is not None  # checked above; narrows the type
    if not isinstance(instances, list):
        report.add(join(path, "instances"), f"is {type_name(instances)}, expected a list")
        return None
    placed: list[tuple[MigGpuInstanceProfile, int]] = []
    out = []
    names = ", ".join(p.name for p in cap.profiles)
    for i, item in enumerate(instances):
        where = join(join(path, "instances"), i)
        inst = report.mapping(item, where, ("profile", "placement"))
        if inst is None:
            return None
        name = report.get(inst, "profile", where, str)
        start = report.int_in(inst, "placement", where, 0, cap.memory_slices - 1, default=-1)
        if name is None or start is None:
            return None
        profile = cap.profile(name)
        if profile is None:
            report.add(join(where, "profile"), f"unknown profile '{name}' for {product.key}, "
                       f"expected one of {names}")
            return None
        if start < 0:
            found = first_free(cap, placed, profile)
            # No free placement: report why the first one is refused, the likeliest cause.
            start = profile.placements[0].start if found is None else found
        why = refusal(cap, placed, profile, start)
        if why is not None:
            report.add(join(where, "placement"), why)
            return None
        placed.append((profile, start))
        out.append(MigInstance(profile=name, placement_start=start))
    return Mig(enabled=True, instances=tuple(out))


def _nvlink(report: Report, raw: Any, path: str, product: Product,
            fabrics: dict[str, _Fabric]) -> _NvlinkMode | None:
    board = product.baseboard
    local = board.nvswitches if board else 0
    if raw is None:
        return _NvlinkMode("switched", local) if product.nvlink and local else _NvlinkMode("none")
    if raw == "none":
        return _NvlinkMode("none")
    if raw == "switched":
        raw = {"mode": "switched"}
    data = report.mapping(raw, path, ("mode", "switches", "fabric", "clique"))
    if data is None:
        return None
    mode = report.get(data, "mode", path, str)
    if mode not in ("none", "switched", "fabric"):
        if mode is not None:
            report.add(join(path, "mode"), f"is '{mode}', expected none, switched or fabric")
        return None
    if mode != "none" and product.nvlink is None:
        report.add(join(path, "mode"), f"{product.key} has no NVLink")
        return None
    if mode == "switched":
        extra = [k for k in ("fabric", "clique") if k in data]
        if extra:
            report.add(join(path, extra[0]), "only applies to mode: fabric")
            return None
        switches = report.int_in(data, "switches", path, 1, 64, default=local or 4)
        return _NvlinkMode("switched", switches) if switches is not None else None
    if mode == "none":
        return _NvlinkMode("none")
    if "switches" in data:
        report.add(join(path, "switches"), "only applies to mode: switched (fabric switches "
                                           "live in switch trays)")
        return None
    if not product.multinode_nvlink:
        report.add(join(path, "mode"), f"{product.key} does not support multi-node NVLink")
        return None
    fabric = report.get(data, "fabric", path, str)
    clique = report.int_in(data, "clique", path, 0, 2**32 - 1, default=-1)
    if fabric is None or clique is None:
        return None
    if fabric not in fabrics:
        known = (f"expected one of {', '.join(fabrics)}" if fabrics
                 else "no fabrics are defined under top-level fabrics")
        report.add(join(path, "fabric"), f"unknown fabric '{fabric}', {known}")
        return None
    return _NvlinkMode("fabric", fabric=fabric, clique=None if clique < 0 else clique)


def _faults(report: Report, raw: Any, path: str, gpus: list[_GpuSpec],
            nvlink: _NvlinkMode | None) -> list[tuple[int, Fault]] | None:
    if raw is None:
        return []
    if not isinstance(raw, list):
        report.add(path, f"is {type_name(raw)}, expected a list of faults")
        return None
    if len(raw) > MAX_FAULTS_PER_NODE:
        # Each node of a range gets them all: bound the work before looking at one.
        report.add(path, f"lists {len(raw)} faults, expected at most {MAX_FAULTS_PER_NODE}")
        return None
    out = []
    for i, item in enumerate(raw):
        where = join(path, i)
        data = report.mapping(item, where, ("gpu", "kind", "value"))
        if data is None:
            return None
        gpu = report.int_in(data, "gpu", where, 0, len(gpus) - 1)
        kind = _enum(report, data, "kind", where, FaultKind, None)
        if gpu is None or kind is None:
            return None
        value = report.get(data, "value", where, int, default=None)
        if kind in _FAULTS_WITH_VALUE and value is None:
            what = "an XID number" if kind is FaultKind.XID else "a link index"
            report.add(join(where, "value"), f"is required for {kind.value}, expected {what}")
            return None
        if kind not in _FAULTS_WITH_VALUE and "value" in data:
            report.add(join(where, "value"), f"does not apply to {kind.value}")
            return None
        spec = gpus[gpu].product.nvlink
        if kind is FaultKind.NVLINK_DOWN:
            links = spec.links_per_gpu if spec and nvlink and nvlink.mode != "none" else 0
            if value is None or not 0 <= value < links:
                report.add(join(where, "value"), f"is {value}, expected a link index "
                           f"0..{links - 1}" if links else "this GPU has no NVLinks")
                return None
        if kind is FaultKind.FABRIC_DEGRADED and (nvlink is None or nvlink.mode != "fabric"):
            report.add(join(where, "kind"), "fabric-degraded needs the node in a fabric "
                                            "(nvlink.mode: fabric)")
            return None
        if kind is FaultKind.XID and value is not None and not 1 <= value <= MAX_XID:
            report.add(join(where, "value"), f"is {value}, expected an XID 1..{MAX_XID}")
            return None
        out.append((gpu, Fault(kind, value)))
    return out
