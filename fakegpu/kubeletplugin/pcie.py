"""Where a PCI device sits, read from sysfs as Kubernetes' deviceattribute package reads it:
the standard attributes ``resource.kubernetes.io/pcieRoot`` and ``numaNode`` (in its scalar
and its list form). One rule for every plugin here, so a GPU and a NIC under one root publish
the same value.
"""

from __future__ import annotations

import os
from typing import Any

from fakegpu.nvml import sysfs

NUMA_NODE = "resource.kubernetes.io/numaNode"


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


def numa_nodes(bus_id: str, vendor: str, root: str | None = None) -> tuple[int, ...]:
    """``resource.kubernetes.io/numaNode`` in its list form (KEP-5491; the deviceattribute
    package's ListAttribute): the device's NUMA node, then, in ascending order, the other NUMA
    nodes at the smallest ACPI SLIT distance from it on the same socket (``node<N>/distance``;
    the socket of a NUMA node is its first CPU's ``physical_package_id``). Just the device's
    node when the distances cannot be read; () when the device has no NUMA affinity."""
    root = root or sysfs_root()
    node = numa_node(bus_id, vendor, root)
    if node is None:
        return ()
    system = os.path.join(root, "devices", "system")
    try:
        with open(os.path.join(system, "node", f"node{node}", "distance"),
                  encoding="ascii") as f:
            distances = [int(d) for d in f.read().split()]
    except (OSError, ValueError):
        return (node,)
    others = [d for i, d in enumerate(distances) if i != node]
    if node >= len(distances) or not others:
        return (node,)
    nearest, socket = min(others), _socket(system, node)
    return (node, *(i for i, d in enumerate(distances)
                    if i != node and d == nearest
                    and (socket is None or _socket(system, i) in (None, socket))))


def _socket(system: str, node: int) -> int | None:
    """The socket (``physical_package_id``) of NUMA node ``node``'s first CPU; None when
    sysfs does not say."""
    try:
        with open(os.path.join(system, "node", f"node{node}", "cpulist"), encoding="ascii") as f:
            first = f.read().strip().split(",")[0].split("-")[0]
        with open(os.path.join(system, "cpu", f"cpu{int(first)}", "topology",
                               "physical_package_id"), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def numa_attribute(node: int | None, nodes: tuple[int, ...], as_list: bool
                   ) -> dict[str, dict[str, Any]]:
    """The ``numaNode`` attribute of a device on NUMA node ``node`` (None: none published):
    its list form ``nodes`` (``numa_nodes``) with ``as_list``, else the scalar."""
    if node is None:
        return {}
    if as_list and nodes:
        return {NUMA_NODE: {"ints": list(nodes)}}
    return {NUMA_NODE: {"int": node}}
