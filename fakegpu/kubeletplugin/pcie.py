"""Where a PCI device sits, read from sysfs as Kubernetes' deviceattribute package reads it:
the standard attributes ``resource.kubernetes.io/pcieRoot`` and ``numaNode``. One rule for
every plugin here, so a GPU and a NIC under one root publish the same value.
"""

from __future__ import annotations

import os

from fakegpu.nvml import sysfs


def sysfs_root() -> str:
    """The sysfs a plugin reads: the node's fake host's view (``FAKEGPU_SYSFS``, set with the
    NVML state: fakegpu/nvml/sysfs.py), else the real /sys."""
    return os.environ.get(sysfs.SYSFS_ENV) or "/sys"


def device_dir(bus_id: str, vendor: str, root: str) -> tuple[str, str] | None:
    """(the device's directory, its root complex) for a device of PCI ``vendor``, resolved as
    k8s.io/dynamic-resource-allocation's deviceattribute package does: the link
    ``bus/pci/devices/<bus id>`` must lead to ``devices/pci<domain>:<bus>/.../<bus id>``.
    None when sysfs has no such device at that address: a fake device without a view has no
    node, and a host device that merely sits at the same address is another vendor's."""
    link = os.path.join(root, "bus", "pci", "devices", bus_id)
    try:
        target = os.readlink(link)
        with open(os.path.join(link, "vendor"), encoding="ascii") as f:
            found_vendor = f.read().strip().lower()
    except (OSError, ValueError):
        return None
    if found_vendor != vendor.lower():
        return None
    if not os.path.isabs(target):
        target = os.path.normpath(os.path.join(os.path.dirname(link), target))
    parts = os.path.relpath(target, root).split(os.sep)
    if len(parts) < 3 or parts[0] != "devices" or not parts[1].startswith("pci") \
            or parts[-1] != bus_id:
        return None
    return target, parts[1]


def pcie_root(bus_id: str, vendor: str, root: str | None = None) -> str:
    """``resource.kubernetes.io/pcieRoot`` (``pci0000:17``): the first component below
    ``devices/``; "" (the attribute is then left out) when sysfs does not know the device."""
    found = device_dir(bus_id, vendor, root or sysfs_root())
    return found[1] if found else ""


def numa_node(bus_id: str, vendor: str, root: str | None = None) -> int | None:
    """``resource.kubernetes.io/numaNode``: the device's sysfs ``numa_node``; None (left out,
    as the standard says for a device without NUMA affinity) when it is -1 or unknown."""
    found = device_dir(bus_id, vendor, root or sysfs_root())
    if found is None:
        return None
    try:
        with open(os.path.join(found[0], "numa_node"), encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
