"""The node's NICs, read from sysfs as a network DRA driver reads them.

Every Mellanox PCI function under ``bus/pci/devices`` with a network interface is one NIC: its
interface name, MAC and speed from ``net/<interface>/``, its RDMA device and uverbs node from
``infiniband/`` and ``infiniband_verbs/``, and where it sits (``pcieRoot``, ``numaNode``) by the
same rule as the GPU plugin's (``kubeletplugin.pcie``). On a fakegpu node sysfs is the node's
view (``FAKEGPU_SYSFS``, fakegpu/nvml/sysfs.py); without one the real /sys, where a host
without such a NIC has none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fakegpu.kubeletplugin import pcie
from fakegpu.nvml import sysfs

_MODELS = {device: model for model, device in sysfs.NIC_DEVICE.items()}


@dataclass(frozen=True)
class Nic:
    name: str  # the interface name, as the container sees it
    pci_bus_id: str  # sysfs form, 0000:18:00.0
    model: str
    mac: str
    gbps: int  # link speed
    role: str  # compute, storage, management ("" when sysfs does not say)
    rdma: str = ""  # the RDMA device, e.g. mlx5_0 ("" for none)
    uverbs: str = ""  # its verbs node, e.g. uverbs0
    uverbs_dev: tuple[int, int] | None = None  # (major, minor) of /dev/infiniband/<uverbs>
    pcie_root: str = ""  # "" when unknown: the attribute is left out
    numa_node: int | None = None
    numa_list: tuple[int, ...] = ()  # numaNode's list form (kubeletplugin.pcie.numa_nodes)
    link_up: bool = True  # sysfs carrier (a nic-link-down fault sets it 0)
    mtu: int = 0  # 0 when sysfs does not say
    infiniband: bool = False  # net/<if>/type 32 (IPoIB), else Ethernet
    ips: tuple[str, ...] = ()  # the port's addresses (CIDR), given to the pod's interface


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return ""


def _verbs(device: Path, rdma: str) -> tuple[str, tuple[int, int] | None]:
    for entry in sorted((device / "infiniband_verbs").glob("uverbs*")):
        if _read(entry / "ibdev") == rdma:
            major, _, minor = _read(entry / "dev").partition(":")
            if major.isdigit() and minor.isdigit():
                return entry.name, (int(major), int(minor))
    return "", None


def discover(root: str | None = None) -> list[Nic]:
    """The node's NICs, by interface name."""
    root = root or pcie.sysfs_root()
    links = Path(root, "bus", "pci", "devices")
    if not links.is_dir():
        return []
    found = []
    for link in sorted(links.iterdir()):
        bus = link.name
        where = pcie.device_dir(bus, sysfs.MELLANOX_VENDOR, root)
        if where is None:
            continue
        device = Path(where[0])
        rdma = next((p.name for p in sorted((device / "infiniband").glob("*"))), "")
        uverbs, dev = _verbs(device, rdma) if rdma else ("", None)
        for net in sorted((device / "net").glob("*")):
            speed = _read(net / "speed")
            found.append(Nic(
                name=net.name, pci_bus_id=bus,
                model=_MODELS.get(_read(device / "device"), "unknown"),
                mac=_read(net / "address"),
                gbps=int(speed) // 1000 if speed.isdigit() else 0,
                role=_read(net / sysfs.ROLE_FILE), rdma=rdma, uverbs=uverbs, uverbs_dev=dev,
                pcie_root=where[1],
                numa_node=pcie.numa_node(bus, sysfs.MELLANOX_VENDOR, root),
                numa_list=pcie.numa_nodes(bus, sysfs.MELLANOX_VENDOR, root),
                link_up=_read(net / "carrier") != "0",
                mtu=int(mtu) if (mtu := _read(net / "mtu")).isdigit() else 0,
                infiniband=_read(net / "type") == str(sysfs.ARPHRD["ib"]),
                ips=tuple(_read(net / sysfs.ADDRESSES_FILE).split())))
    return sorted(found, key=lambda n: n.name)


def link_dirs(root: str | None = None) -> list[Path]:
    """The ``net/<interface>`` directories of the node's sysfs view, where a NIC's link state
    is written (``carrier``, ``operstate``); none on a real /sys, too large to watch."""
    if not has_view() and root is None:
        return []
    return sorted(p for p in Path(root or pcie.sysfs_root()).glob("devices/**/net/*")
                  if p.is_dir())


def has_view() -> bool:
    return bool(os.environ.get(sysfs.SYSFS_ENV))
