"""The ``pcie`` section of a node (and of a catalog baseboard): root complexes, PCIe switches,
which GPUs and NICs sit under which, and the NICs themselves.

```yaml
pcie:
  roots:
    - name: pci0000:12          # the host bridge, as /sys/devices names it
      numa: 0                   # the numa_node of every device below it
      switches:
        - {gpus: [0], nics: [ibp21s0]}
      nics: [enp69s0f0]         # on a root port, no switch (gpus: too)
  nics:
    - {name: ibp21s0, model: ConnectX-7, gbps: 400, pci: "0000:15:00.0", rdma: mlx5_0}
  sockets: [[0, 1, 2, 3], [4, 5, 6, 7]]   # optional: the NUMA nodes of each CPU socket
  numa_attribute: list      # optional: how plugins publish numaNode (scalar, the default)
```

Every GPU of the node and every NIC listed must sit in exactly one place, under a root of its
own PCI domain and above its bus. A GPU's NUMA node is its root's. ``sockets`` (several NUMA
nodes per socket: AMD EPYC's NPS2/NPS4, Intel's sub-NUMA clustering) must name every root's
NUMA node once; without it each NUMA node is a socket of its own. ``numa_attribute: list``
makes the node's plugins publish ``resource.kubernetes.io/numaNode`` in its list form (KEP-5491:
the device's NUMA node, then the other NUMA nodes of its socket), which needs Kubernetes 1.36+.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import Any

from .fields import Report, join, type_name
from .model import Nic, NicRole, PciAddress, PcieRoot, PcieSwitch, PcieTree

MAX_NUMA = 63
NUMA_SCALAR, NUMA_LIST = "scalar", "list"
NUMA_FORMS = (NUMA_SCALAR, NUMA_LIST)
MAX_NICS = 64
MAX_GBPS = 16000.0  # as network.MAX_GBPS_PER_GPU: 1.6 Tb/s ports exist, ten times that is a typo
_ROOT = re.compile(r"pci([0-9a-fA-F]{4}):([0-9a-fA-F]{2})")
_PCI = re.compile(r"([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])")
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # IFNAMSIZ - 1
_ROOT_KEYS = ("name", "numa", "switches", "gpus", "nics")
_NIC_KEYS = ("name", "model", "gbps", "pci", "role", "rdma", "ips")
MAX_IPS = 8
# Where an undeclared port's address comes from: RFC 2544's benchmarking block (no real
# network routes it, and it meets no pod, service or kind network), one /21 per NIC position.
FABRIC = ipaddress.IPv4Network("198.18.0.0/15")
RAIL_PREFIX = 21


def parse_address(text: str) -> PciAddress | None:
    """``DDDD:BB:DD.F`` (4- or 8-digit domain) -> PciAddress; None if malformed."""
    match = _PCI.fullmatch(text)
    if match is None:
        return None
    return PciAddress(*(int(g, 16) for g in match.groups()))


def parse(report: Report, raw: Any, path: str, gpu_pci: list[PciAddress],
          taken: dict[str, str]) -> PcieTree | None:
    """Validate one ``pcie`` mapping for a node of ``gpu_pci`` GPUs; ``taken`` maps bus ids
    already used on the node (NVSwitches) to what uses them."""
    data = report.mapping(raw, path, ("roots", "nics", "sockets", "numa_attribute"))
    if data is None:
        return None
    before = len(report.problems)
    form = report.get(data, "numa_attribute", path, str, default=NUMA_SCALAR)
    if form is not None and form not in NUMA_FORMS:
        report.add(join(path, "numa_attribute"), f"is {form!r}, expected one of "
                                                 f"{', '.join(NUMA_FORMS)}")
    sockets = _sockets(report, data.get("sockets"), join(path, "sockets"))
    nics = _nics(report, data.get("nics"), join(path, "nics"),
                 {**taken, **{a.bus_id: f"GPU {i}" for i, a in enumerate(gpu_pci)}})
    roots_raw = data.get("roots")
    if not isinstance(roots_raw, list) or not roots_raw:
        report.add(join(path, "roots"), f"is {type_name(roots_raw)}, expected a non-empty list "
                                        "of root complexes")
        return None
    placed = _Placed(gpu_pci, nics or [])
    roots: list[PcieRoot] = []
    for r, item in enumerate(roots_raw):
        where = join(join(path, "roots"), r)
        root = _root(report, item, where, roots)
        if root is None:
            continue
        roots.append(root)
        entry = item  # a mapping: _root checked it
        for s, sw in enumerate(_list(report, entry.get("switches"), join(where, "switches"))):
            sw_path = join(join(where, "switches"), s)
            sw_data = report.mapping(sw, sw_path, ("gpus", "nics"))
            if sw_data is None:
                continue
            gpus = placed.gpus(report, sw_data.get("gpus"), join(sw_path, "gpus"), root)
            nic_ids = placed.nics(report, sw_data.get("nics"), join(sw_path, "nics"), root)
            placed.switches.append(PcieSwitch(len(roots) - 1, gpus, nic_ids))
        gpus = placed.gpus(report, entry.get("gpus"), join(where, "gpus"), root)
        nic_ids = placed.nics(report, entry.get("nics"), join(where, "nics"), root)
        if gpus or nic_ids:
            placed.direct.append((len(roots) - 1, gpus, nic_ids))
    if len(report.problems) > before or nics is None or sockets is None:
        return None
    for root in roots:
        if sockets and not any(root.numa_node in numa for numa in sockets):
            report.add(join(path, "sockets"), f"names no socket for NUMA node {root.numa_node} "
                                              f"of root {root.name}, expected every root's "
                                              "NUMA node in one socket")
            return None
    for i in range(len(gpu_pci)):
        if i not in placed.gpu_at:
            report.add(join(path, "roots"), f"GPU {i} is under no root or switch, expected "
                                            "every GPU of the node placed")
            return None
    for nic in nics:
        if nic.name not in placed.nic_at:
            report.add(join(path, "roots"), f"NIC '{nic.name}' is under no root or switch, "
                                            "expected every NIC placed")
            return None
    return PcieTree(tuple(roots), tuple(placed.switches), tuple(nics), tuple(placed.direct),
                    sockets, form == NUMA_LIST)


def restrict(tree: PcieTree, gpus: int) -> PcieTree:
    """The tree of a node with only the first ``gpus`` positions of a baseboard populated."""
    return replace(
        tree,
        switches=tuple(PcieSwitch(s.root, tuple(g for g in s.gpus if g < gpus), s.nics)
                       for s in tree.switches),
        direct=tuple((r, tuple(g for g in gs if g < gpus), ns) for r, gs, ns in tree.direct))


def _sockets(report: Report, raw: Any, path: str) -> tuple[tuple[int, ...], ...] | None:
    """``sockets``: a list of non-empty lists of NUMA node ids, each id in one socket."""
    out: list[tuple[int, ...]] = []
    seen: dict[int, int] = {}
    for s, numa in enumerate(_list(report, raw, path)):
        where = join(path, s)
        if not isinstance(numa, list) or not numa:
            report.add(where, f"is {type_name(numa)}, expected a non-empty list of the "
                              "socket's NUMA nodes")
            return None
        for n, node in enumerate(numa):
            if not isinstance(node, int) or isinstance(node, bool) or not 0 <= node <= MAX_NUMA:
                report.add(join(where, n), f"is {node!r}, expected a NUMA node 0..{MAX_NUMA}")
                return None
            if node in seen:
                report.add(join(where, n), f"NUMA node {node} is also in socket {seen[node]}, "
                                           "expected each NUMA node in one socket")
                return None
            seen[node] = s
        out.append(tuple(numa))
    return tuple(out)


class _Placed:
    """Where each GPU and NIC went so far: each goes in exactly one place."""

    def __init__(self, gpu_pci: list[PciAddress], nics: list[Nic]) -> None:
        self.gpu_pci = gpu_pci
        self.nic_list = nics
        self.gpu_at: dict[int, str] = {}
        self.nic_at: dict[str, str] = {}
        self.switches: list[PcieSwitch] = []
        self.direct: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def gpus(self, report: Report, raw: Any, path: str, root: PcieRoot) -> tuple[int, ...]:
        out = []
        count = len(self.gpu_pci)
        for i, gpu in enumerate(_list(report, raw, path)):
            where = join(path, i)
            if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < count:
                report.add(where, f"is {gpu!r}: no such GPU, expected a GPU index 0..{count - 1}")
                continue
            if gpu in self.gpu_at:
                report.add(where, f"GPU {gpu} is also under {self.gpu_at[gpu]}, expected one "
                                  "place per GPU")
                continue
            why = _outside(self.gpu_pci[gpu], root)
            if why:
                report.add(where, f"GPU {gpu} ({self.gpu_pci[gpu].bus_id_legacy}) {why}")
                continue
            self.gpu_at[gpu] = path
            out.append(gpu)
        return tuple(out)

    def nics(self, report: Report, raw: Any, path: str, root: PcieRoot) -> tuple[int, ...]:
        out = []
        names = [n.name for n in self.nic_list]
        for i, name in enumerate(_list(report, raw, path)):
            where = join(path, i)
            if name not in names:
                known = ", ".join(names) if names else "none are listed under pcie.nics"
                report.add(where, f"unknown NIC {name!r}, expected one of {known}")
                continue
            if name in self.nic_at:
                report.add(where, f"NIC '{name}' is also under {self.nic_at[name]}, expected "
                                  "one place per NIC")
                continue
            index = names.index(name)
            why = _outside(self.nic_list[index].pci, root)
            if why:
                report.add(where, f"NIC '{name}' ({self.nic_list[index].pci.bus_id_legacy}) "
                                  f"{why}")
                continue
            self.nic_at[name] = path
            out.append(index)
        return tuple(out)


def _outside(address: PciAddress, root: PcieRoot) -> str:
    """Why ``address`` cannot sit below ``root`` ("" if it can): sysfs puts a device under
    the host bridge of its own domain, on a bus the bridge's numbering reaches."""
    if address.domain != root.domain:
        return f"is in PCI domain {address.domain:04x}, not in {root.name}'s"
    if address.bus <= root.bus:
        return f"is on bus {address.bus:02x}, expected a bus above {root.name}'s"
    return ""


def _list(report: Report, raw: Any, path: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        report.add(path, f"is {type_name(raw)}, expected a list")
        return []
    return raw


def _root(report: Report, raw: Any, path: str, seen: list[PcieRoot]) -> PcieRoot | None:
    data = report.mapping(raw, path, _ROOT_KEYS)
    if data is None:
        return None
    name = report.get(data, "name", path, str)
    numa = report.int_in(data, "numa", path, 0, MAX_NUMA, default=0)
    if name is None or numa is None:
        return None
    if _ROOT.fullmatch(name) is None:
        report.add(join(path, "name"), f"is '{name}', expected a root complex like 'pci0000:00'")
        return None
    name = name.lower()  # sysfs spells hex in lowercase
    if any(r.name == name for r in seen):
        report.add(join(path, "name"), f"root '{name}' is listed twice")
        return None
    return PcieRoot(name, numa)


def _nics(report: Report, raw: Any, path: str, taken: dict[str, str]) -> list[Nic] | None:
    items = _list(report, raw, path)
    if len(items) > MAX_NICS:
        report.add(path, f"lists {len(items)} NICs, expected at most {MAX_NICS}")
        return None
    out: list[Nic] = []
    used = dict(taken)
    for i, item in enumerate(items):
        where = join(path, i)
        data = report.mapping(item, where, _NIC_KEYS)
        if data is None:
            return None
        name = report.get(data, "name", where, str)
        model = report.get(data, "model", where, str)
        gbps = report.get(data, "gbps", where, float)
        text = report.get(data, "pci", where, str)
        role = report.get(data, "role", where, str, default=NicRole.COMPUTE.value)
        rdma = report.get(data, "rdma", where, str, default="")
        if None in (name, model, gbps, text, role, rdma):
            return None
        assert name is not None and model is not None and gbps is not None  # narrowed above
        assert text is not None and role is not None and rdma is not None
        if _IFNAME.fullmatch(name) is None:
            report.add(join(where, "name"), f"is {name!r}, expected an interface name of 1..15 "
                                            "letters, digits, '_', '.' or '-'")
            return None
        if any(n.name == name for n in out):
            report.add(join(where, "name"), f"NIC '{name}' is listed twice")
            return None
        if not 0 < gbps <= MAX_GBPS:
            report.add(join(where, "gbps"), f"is {gbps:g}, expected a link speed in Gb/s above "
                                            f"0 and at most {MAX_GBPS:g}")
            return None
        address = parse_address(text)
        if address is None:
            report.add(join(where, "pci"), f"is '{text}', expected a PCI bus id like "
                                           "'0000:18:00.0'")
            return None
        if address.bus_id in used:
            report.add(join(where, "pci"), f"{address.bus_id_legacy} is also {used[address.bus_id]}"
                                           ", expected unique bus ids")
            return None
        if role not in {r.value for r in NicRole}:
            report.add(join(where, "role"), f"is '{role}', expected one of "
                                            f"{', '.join(r.value for r in NicRole)}")
            return None
        ips = _ips(report, data.get("ips"), join(where, "ips"))
        if ips is None:
            return None
        used[address.bus_id] = f"NIC '{name}'"
        out.append(Nic(name, model, gbps, address, NicRole(role), rdma, ips))
    return out


def _ips(report: Report, raw: Any, path: str) -> tuple[str, ...] | None:
    """A port's declared addresses: host addresses with their prefix, IPv4 or IPv6."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_IPS:
        report.add(path, f"is {type_name(raw)}, expected a list of 1 to {MAX_IPS} addresses "
                         "like '192.168.10.7/24'")
        return None
    out: list[str] = []
    for i, text in enumerate(raw):
        try:
            iface = ipaddress.ip_interface(text) if isinstance(text, str) and "/" in text \
                else None
        except ValueError:
            iface = None
        # A network's own address is no host's (but a /31's or /32's are).
        if iface is None or (iface.ip == iface.network.network_address
                             and iface.network.num_addresses > 2):
            report.add(join(path, i), f"is {text!r}, expected a host address with its prefix "
                                      "like '192.168.10.7/24'")
            return None
        out.append(str(iface))
    return tuple(out)


def nic_addresses(node_index: int, position: int, nic: Nic) -> tuple[str, ...]:
    """The port's addresses: the declared ones, else one of the fabric's: the /21 of
    ``FABRIC`` for the NIC's position on its node (a rail: that NIC on every node), host
    ``node_index + 1``; none past the 2046th node (a rail's last host address)."""
    if nic.ips:
        return nic.ips
    size = 1 << (32 - RAIL_PREFIX)
    if not 0 <= position < MAX_NICS or node_index + 1 > size - 2:
        return ()
    host = FABRIC.network_address + position * size + node_index + 1
    return (f"{host}/{RAIL_PREFIX}",)
