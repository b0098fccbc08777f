"""The NICs as ResourceSlice devices: the standard attributes where the NIC sits (the same
``resource.kubernetes.io/pcieRoot`` and ``numaNode`` values the GPU plugin publishes for a GPU
under the same root) and what a network claim selects on.

Two vocabularies, chosen by the driver name: fakegpu's own (``nic.fakegpu.dev``: devices named
for their interface, unprefixed attributes), and DRANET's (``dra.net``: devices named for
their PCI address, ``pci-0000-18-00-0``, and the ``dra.net/*`` attributes of
kubernetes-sigs/dranet's ``pkg/apis/attributes.go``, with the values its inventory reads from
netlink and sysfs), so a DeviceClass or CEL selector written for DRANET matches fakegpu's NICs.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from fakegpu import drivers
from fakegpu.kubeletplugin import pcie, slicepool
from fakegpu.kubeletplugin.health import HEALTHY, UNHEALTHY, DeviceStatus

from .discovery import Nic

MANAGED_BY = "fakegpu-nic-plugin"
TAINT_LINK_DOWN = "link-down"  # <driver>/link-down, NoSchedule, while the carrier is lost


DRANET_PREFIX = "dra.net/"
PCI_VENDOR_NAME = "Mellanox Technologies"  # vendor 0x15b3 in the pci.ids database
# The pci.ids product names of the models fakegpu renders (sysfs.NIC_DEVICE), as DRANET
# publishes them in dra.net/pciDevice.
PCI_DEVICE_NAME = {"ConnectX-6": "MT28908 Family [ConnectX-6]",
                   "ConnectX-7": "MT2910 Family [ConnectX-7]",
                   "BlueField-3": "MT43244 BlueField-3 integrated ConnectX-7 network controller"}


def device_name(nic: Nic, driver: str = drivers.NIC) -> str:
    """A DNS label. fakegpu's: the interface name, lowercase, anything else as '-'. DRANET's:
    ``pci-`` and the PCI address with ':' and '.' as '-'."""
    if drivers.is_dranet(driver):
        return "pci-" + re.sub(r"[^a-z0-9]", "-", nic.pci_bus_id.lower())
    return re.sub(r"[^a-z0-9-]", "-", nic.name.lower()).strip("-")[:63] or "nic"


def _where(nic: Nic, numa_list: bool) -> dict[str, dict[str, Any]]:
    attrs: dict[str, dict[str, Any]] = {}
    if nic.pcie_root:
        attrs["resource.kubernetes.io/pcieRoot"] = {"string": nic.pcie_root}
    return attrs | pcie.numa_attribute(nic.numa_node, nic.numa_list, numa_list)


def _global_unicast(cidr: str) -> bool:
    # Go's net.IP.IsGlobalUnicast, which DRANET filters by: private ranges count, loopback,
    # link-local, multicast and unspecified do not.
    ip = ipaddress.ip_interface(cidr).ip
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified
                or ip == ipaddress.IPv4Address("255.255.255.255"))


def addresses_by_family(ips: Sequence[str]) -> dict[int, str]:
    """IP version -> the port's global unicast addresses of that version, CIDR, sorted and
    comma-joined as DRANET publishes them in ``dra.net/ipv4`` and ``dra.net/ipv6``."""
    out: dict[int, list[str]] = {}
    for cidr in ips:
        if _global_unicast(cidr):
            out.setdefault(ipaddress.ip_interface(cidr).version, []).append(cidr)
    return {version: ",".join(sorted(cidrs)) for version, cidrs in out.items()}


def dranet_attributes(nic: Nic, numa_list: bool = False) -> dict[str, dict[str, Any]]:
    """A NIC function's attributes under DRANET's names, as its inventory reads a host."""
    def a(name: str, kind: str, value: Any) -> tuple[str, dict[str, Any]]:
        return DRANET_PREFIX + name, {kind: value}

    attrs = dict([
        a("ifName", "string", nic.name), a("mac", "string", nic.mac),
        a("pciAddress", "string", nic.pci_bus_id),
        a("pciVendor", "string", PCI_VENDOR_NAME),
        a("encapsulation", "string", "infiniband" if nic.infiniband else "ether"),
        a("alias", "string", ""),
        a("state", "string", "up" if nic.link_up else "down"),
        # netlink's link type: a physical Ethernet function is a "device", IPoIB "ipoib".
        a("type", "string", "ipoib" if nic.infiniband else "device"),
        a("ebpf", "bool", False), a("sriov", "bool", False), a("virtual", "bool", False),
        a("rdma", "bool", bool(nic.rdma)),
    ])
    if nic.model in PCI_DEVICE_NAME:
        attrs.update([a("pciDevice", "string", PCI_DEVICE_NAME[nic.model])])
    if nic.mtu:
        attrs.update([a("mtu", "int", nic.mtu)])
    if nic.rdma:
        attrs.update([a("rdmaDevice", "string", nic.rdma)])
    if nic.numa_node is not None:
        attrs.update([a("numaNode", "int", nic.numa_node)])
    attrs.update(a(f"ipv{version}", "string", joined)
                 for version, joined in addresses_by_family(nic.ips).items())
    return attrs | _where(nic, numa_list)


def attributes(nic: Nic, driver: str = drivers.NIC, numa_list: bool = False
               ) -> dict[str, dict[str, Any]]:
    """``numa_list``: the standard numaNode in its list form (KEP-5491)."""
    if drivers.is_dranet(driver):
        return dranet_attributes(nic, numa_list)
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": "nic"},
        "interfaceName": {"string": nic.name},
        "macAddress": {"string": nic.mac},
        "model": {"string": nic.model},
        "linkSpeedGbps": {"int": nic.gbps},
        "rdma": {"bool": bool(nic.rdma)},
        "resource.kubernetes.io/pciBusID": {"string": nic.pci_bus_id},
    }
    if nic.role:
        attrs["role"] = {"string": nic.role}
    if nic.rdma:
        attrs["rdmaDevice"] = {"string": nic.rdma}
    return attrs | _where(nic, numa_list)


def device_body(driver: str, nic: Nic, numa_list: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"attributes": attributes(nic, driver, numa_list)}
    if not nic.link_up:  # nothing new is scheduled onto a NIC without a link
        body["taints"] = [{"key": f"{driver}/{TAINT_LINK_DOWN}", "effect": "NoSchedule"}]
    return body


def device_health(driver: str, nics: Sequence[Nic]) -> list[DeviceStatus]:
    """Each NIC's health for the kubelet's health streams (pod status): unhealthy while it
    has no link, named by the taint its slice carries then."""
    return [DeviceStatus(device_name(n, driver), HEALTHY) if n.link_up
            else DeviceStatus(device_name(n, driver), UNHEALTHY, f"{driver}/{TAINT_LINK_DOWN}")
            for n in nics]


def build_slice(driver: str, node: str, nics: Sequence[Nic], version: str, generation: int,
                owner: dict[str, Any] | None, numa_list: bool = False) -> dict[str, Any]:
    # One slice: a node has at most 64 NICs (topology.pcie.MAX_NICS), the apiserver's limit
    # for a slice with list attributes or taints.
    return slicepool.pool_slice(
        driver, node, version, generation,
        [slicepool.device(device_name(n, driver), device_body(driver, n, numa_list), version)
         for n in nics],
        owner, MANAGED_BY)
