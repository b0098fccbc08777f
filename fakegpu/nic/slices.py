"""The NICs as ResourceSlice devices: the standard attributes where the NIC sits (the same
``resource.kubernetes.io/pcieRoot`` and ``numaNode`` values the GPU plugin publishes for a GPU
under the same root) and what a network claim selects on."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fakegpu.kubeletplugin import slicepool

from .discovery import Nic

MANAGED_BY = "fakegpu-nic-plugin"
TAINT_LINK_DOWN = "link-down"  # <driver>/link-down, NoSchedule, while the carrier is lost


def device_name(nic: Nic) -> str:
    """A DNS label: the interface name, lowercase, anything else as '-'."""
    return re.sub(r"[^a-z0-9-]", "-", nic.name.lower()).strip("-")[:63] or "nic"


def attributes(nic: Nic) -> dict[str, dict[str, Any]]:
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
    if nic.pcie_root:
        attrs["resource.kubernetes.io/pcieRoot"] = {"string": nic.pcie_root}
    if nic.numa_node is not None:
        attrs["resource.kubernetes.io/numaNode"] = {"int": nic.numa_node}
    return attrs


def device_body(driver: str, nic: Nic) -> dict[str, Any]:
    body: dict[str, Any] = {"attributes": attributes(nic)}
    if not nic.link_up:  # nothing new is scheduled onto a NIC without a link
        body["taints"] = [{"key": f"{driver}/{TAINT_LINK_DOWN}", "effect": "NoSchedule"}]
    return body


def build_slice(driver: str, node: str, nics: Sequence[Nic], version: str, generation: int,
                owner: dict[str, Any] | None) -> dict[str, Any]:
    return slicepool.pool_slice(
        driver, node, version, generation,
        [slicepool.device(device_name(n), device_body(driver, n), version) for n in nics],
        owner, MANAGED_BY)
