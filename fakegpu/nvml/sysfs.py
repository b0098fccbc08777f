"""The node's sysfs view of its PCIe tree, beside its NVML state file: where a DRA driver reads
which root complex and NUMA node a device sits on.

Real drivers do not ask NVML where a GPU sits: NVIDIA's plugin (through
k8s.io/dynamic-resource-allocation's deviceattribute package) reads the link
``/sys/bus/pci/devices/<bus id>``, which points into ``/sys/devices/pci<domain>:<bus>/...``,
and takes that first component as ``resource.kubernetes.io/pcieRoot``; the NUMA node is the
device directory's ``numa_node`` file. A fake GPU has no sysfs node, so the node's fake host
gets one: ``<state>.sysfs/`` laid out like ``/sys`` for the topology's tree (root complex,
root port, switch upstream and downstream ports, the endpoint), with ``vendor``, ``device``,
``class`` and ``numa_node`` in each GPU's and NIC's directory (and a GPU's ``resource``) and
the ``bus/pci/devices`` links, and the NUMA nodes' distances and sockets under
``devices/system`` (``numa_system``). Bridge names below the root are illustrative; the root's
and endpoints' are the topology's. A node without a known tree gets no view, and its GPUs publish
no root.

A NIC's directory holds what a network driver reads there: ``net/<interface>/address`` (the
MAC, ``mac``), ``net/<interface>/speed`` (Mb/s, as the kernel writes it), for an RDMA port
``infiniband/<rdma device>/`` and ``infiniband_verbs/uverbs<N>/{ibdev,dev}`` (N counts the
node's RDMA ports in the topology's order), ``net/<interface>/carrier`` and ``operstate``
(``0``/``down`` while a ``nic-link-down`` fault holds: ``set_link``), and two files no real
sysfs has, for what a real host keeps elsewhere: ``net/<interface>/fakegpu_role`` (the
topology's ``role``) and ``net/<interface>/fakegpu_addresses`` (the port's addresses, one CIDR
a line, ``topology.pcie.nic_addresses``; a real host holds them in the kernel's netlink
tables, and a fake port has no interface until its claim is prepared).

Processes find it through ``FAKEGPU_SYSFS`` (set beside the NVML state variable), as they find
the fake library through the loader path; unset, they read the real ``/sys``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
from pathlib import Path

from fakegpu import fsutil
from fakegpu.topology.model import Node, PciAddress, PcieRoot, PcieTree
from fakegpu.topology.pcie import nic_addresses

SYSFS_ENV = "FAKEGPU_SYSFS"
NVIDIA_VENDOR = "0x10de"
MELLANOX_VENDOR = "0x15b3"
GPU_CLASS = "0x030200"  # 3D controller, as data-centre GPUs report it
NIC_CLASS = {"ib": "0x020700", "en": "0x020000"}  # InfiniBand / Ethernet controller
# PCI device ids of the NIC models the catalog names (the pci.ids database).
NIC_DEVICE = {"ConnectX-6": "0x101b", "ConnectX-7": "0x1021", "BlueField-3": "0xa2dc"}
# net/<if>/type (ARPHRD_*) and the MTU an interface comes up with: Ethernet 1500, IPoIB in
# datagram mode on a 4K IB MTU 4092.
ARPHRD = {"en": 1, "ib": 32}
DEFAULT_MTU = {"en": 1500, "ib": 4092}
UVERBS_MAJOR, UVERBS_MINOR_BASE = 231, 192  # /dev/infiniband/uverbs<N>: char 231:192+N
# IORESOURCE_MEM | SIZEALIGN; and | PREFETCH | MEM_64, as the kernel flags a GPU's BARs.
MMIO_FLAGS, PREFETCH64_FLAGS = 0x40200, 0x14220C
ROLE_FILE = "fakegpu_role"
ADDRESSES_FILE = "fakegpu_addresses"


def mac(node: str, interface: str) -> str:
    """The NIC's MAC: stable per node and interface, locally administered (02:...) so it can
    never be a real vendor's address."""
    digest = hashlib.sha256(f"{node}/{interface}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def path_for(state: str | Path) -> Path:
    """Where the view of the node whose NVML state is ``state`` lives."""
    state = Path(state)
    return state.with_name(state.name + ".sysfs")


def bus_id(address: PciAddress) -> str:
    """sysfs spells bus ids in lowercase with a 4-digit domain: ``0000:18:00.0``."""
    return address.bus_id_legacy.lower()


def gpu_resource(bus: int, memory_mib: int) -> str:
    """A GPU's ``resource`` file: the kernel's line per region (start, end, flags; 6 BARs, the
    ROM, 6 SR-IOV BARs), the regions of a data-centre GPU: BAR0 16 MiB of registers, BAR1
    (64-bit, prefetchable) the framebuffer rounded up to a power of two, BAR3 32 MiB. go-nvlib
    (NVIDIA's plugin) refuses a GPU without the file, and with it its NUMA node. The addresses
    are illustrative, one window per bus so no two GPUs overlap."""
    bar1 = 1 << max(memory_mib - 1, 1).bit_length() + 20
    window = (0x100 + bus) << 39
    regions = {0: (bus << 24, 16 << 20, MMIO_FLAGS), 1: (window, bar1, PREFETCH64_FLAGS),
               3: (window + (1 << 38), 32 << 20, PREFETCH64_FLAGS)}
    lines = []
    for i in range(13):
        start, size, flags = regions.get(i, (0, 0, 0))
        end = start + size - 1 if size else 0
        lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags:016x}")
    return "\n".join(lines)


def render(node: Node, target: str | Path) -> Path | None:
    """Write the view of ``node`` to ``target`` (replacing any old one); None, and no view,
    when the node's tree is unknown."""
    target = Path(target)
    if node.pcie is None:
        shutil.rmtree(target, ignore_errors=True)
        return None
    # Unique per render, not per pid: the plugin containers of a kind node (GPU, NIC,
    # compute-domain) are each PID 1 and may render one hostPath view at once.
    unique = f"{os.getpid()}.{secrets.token_hex(4)}"
    tmp = target.with_name(f".{target.name}.{unique}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tree = node.pcie
    links = tmp / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    children: dict[int, int] = {}  # root index -> root ports handed out

    def port(root_index: int) -> Path:
        root = tree.roots[root_index]
        children[root_index] = children.get(root_index, 0) + 1
        return (tmp / "devices" / root.name /
                f"{root.domain:04x}:{root.bus:02x}:{children[root_index]:02x}.0")

    def endpoint(parent: Path, address: PciAddress, files: dict[str, str]) -> Path:
        where = parent / bus_id(address)
        where.mkdir(parents=True)
        for name, value in files.items():
            (where / name).write_text(value + "\n", encoding="ascii")
        (links / bus_id(address)).symlink_to(os.path.relpath(where, links))
        return where

    def gpu_files(index: int, root: PcieRoot) -> dict[str, str]:
        gpu = node.gpus[index]
        return {"vendor": NVIDIA_VENDOR, "device": f"0x{gpu.product.pci_device_id:04x}",
                "class": GPU_CLASS, "numa_node": str(root.numa_node),
                "resource": gpu_resource(gpu.pci.bus, gpu.product.memory_mib)}

    rdma_ports = [n.name for n in tree.nics if n.rdma]

    def nic(parent: Path, index: int, root: PcieRoot) -> None:
        card = tree.nics[index]
        kind = "ib" if card.name.startswith("ib") else "en"
        files = {"vendor": MELLANOX_VENDOR, "device": NIC_DEVICE.get(card.model, "0x0000"),
                 "class": NIC_CLASS[kind], "numa_node": str(root.numa_node)}
        where = endpoint(parent, card.pci, files)
        net = where / "net" / card.name
        net.mkdir(parents=True)
        for name, value in (("address", mac(node.name, card.name)),
                            ("speed", str(round(card.gbps * 1000))),
                            ("carrier", "1"), ("operstate", "up"),
                            ("type", str(ARPHRD[kind])), ("mtu", str(DEFAULT_MTU[kind])),
                            (ROLE_FILE, str(card.role)),
                            (ADDRESSES_FILE, "\n".join(nic_addresses(node.index, index, card)))):
            (net / name).write_text(value + "\n", encoding="ascii")
        if card.rdma:
            (where / "infiniband" / card.rdma).mkdir(parents=True)
            n = rdma_ports.index(card.name)
            verbs = where / "infiniband_verbs" / f"uverbs{n}"
            verbs.mkdir(parents=True)
            (verbs / "ibdev").write_text(card.rdma + "\n", encoding="ascii")
            (verbs / "dev").write_text(f"{UVERBS_MAJOR}:{UVERBS_MINOR_BASE + n}\n",
                                       encoding="ascii")

    for switch in tree.switches:
        root = tree.roots[switch.root]
        buses = [node.gpus[g].pci.bus for g in switch.gpus] + \
            [tree.nics[n].pci.bus for n in switch.nics]
        # Upstream port, then the downstream ports' bus, just below the lowest endpoint's.
        upstream_bus = max(root.bus + 1, min(buses, default=root.bus + 3) - 2)
        upstream = port(switch.root) / f"{root.domain:04x}:{upstream_bus:02x}:00.0"
        slot = 0
        for g in switch.gpus:
            downstream = upstream / f"{root.domain:04x}:{upstream_bus + 1:02x}:{slot:02x}.0"
            endpoint(downstream, node.gpus[g].pci, gpu_files(g, root))
            slot += 1
        for n in switch.nics:
            nic(upstream / f"{root.domain:04x}:{upstream_bus + 1:02x}:{slot:02x}.0", n, root)
            slot += 1
        if not switch.gpus and not switch.nics:
            upstream.mkdir(parents=True)
    for root_index, gpus, nics in tree.direct:
        root = tree.roots[root_index]
        for g in gpus:
            endpoint(port(root_index), node.gpus[g].pci, gpu_files(g, root))
        for n in nics:
            nic(port(root_index), n, root)
    numa_system(tree, tmp / "devices" / "system")
    old = target.with_name(f".{target.name}.{unique}.old")
    with contextlib.suppress(FileNotFoundError):  # the first render
        target.rename(old)
    try:
        tmp.rename(target)
    except OSError:
        # Another render of the same node got there between the two renames: it is what
        # this one would have written (the view depends on the topology node only).
        if not target.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return target


def numa_system(tree: PcieTree, system: Path) -> None:
    """The NUMA nodes and sockets under ``devices/system``, what the list form of numaNode is
    read from: ``node/node<N>/distance`` (ACPI SLIT: 10 local, 12 to a NUMA node of the same
    socket, 32 to another socket's, the figures ``numactl --hardware`` shows on a two-socket AMD
    EPYC; 21 between sockets of one NUMA node each, as on two-socket Xeons), ``cpulist`` and
    ``cpu/cpu<K>/topology/physical_package_id``. One CPU per NUMA node, numbered as the node:
    the view has no core count to tell, and only the socket matters here."""
    sockets = tree.socket_numa
    socket_of = {n: s for s, numa in enumerate(sockets) for n in numa}
    several = any(len(numa) > 1 for numa in sockets)
    ids = range(max(socket_of) + 1)

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if a in socket_of and socket_of[a] == socket_of.get(b):
            return 12
        return 32 if several else 21

    for n, s in socket_of.items():
        where = system / "node" / f"node{n}"
        where.mkdir(parents=True)
        (where / "distance").write_text(" ".join(str(distance(n, m)) for m in ids) + "\n",
                                        encoding="ascii")
        (where / "cpulist").write_text(f"{n}\n", encoding="ascii")
        topology = system / "cpu" / f"cpu{n}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{s}\n", encoding="ascii")


def nic_names(view: str | Path) -> list[str]:
    """The interfaces of the NICs in a node's view."""
    return sorted(p.name for p in Path(view).glob("devices/**/net/*") if p.is_dir())


def set_link(view: str | Path, interface: str, up: bool) -> None:
    """A NIC's link up or down in the view (``nic-link-down`` and its clearing), as the
    kernel shows it: ``carrier`` 1/0, ``operstate`` up/down. Raises KeyError for an
    interface the view does not have."""
    found = [p for p in Path(view).glob(f"devices/**/net/{interface}") if p.is_dir()]
    if not found:
        raise KeyError(interface)
    for name, value in (("carrier", "1" if up else "0"), ("operstate", "up" if up else "down")):
        fsutil.atomic_write(found[0] / name, value + "\n", mode=0o644)
