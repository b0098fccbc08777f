"""Devices -> ResourceSlice objects (plain dicts) for one resource.k8s.io version. Pure.

Attribute names follow NVIDIA's DRA driver so manifests written for it select our devices
unchanged; fakegpu's own facts live under the ``fakegpu.dev/`` domain so they never clash with
attributes NVIDIA may add.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from .discovery import Device, Inventory

GROUP = "resource.k8s.io"
# Newest first: the plugin publishes with the first one the apiserver serves.
VERSIONS = ("v1", "v1beta2", "v1beta1")
MAX_DEVICES_PER_SLICE = 128
OWN_DOMAIN = "fakegpu.dev"


def semver(text: str) -> str:
    """NVIDIA versions ("580.159.03", "9.0") as the semver a version attribute needs."""
    parts = [str(int(p)) for p in re.findall(r"\d+", text)[:3]] or ["0"]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def quantity(nbytes: int) -> str:
    """Bytes as a Kubernetes binary quantity, in the largest unit that keeps it exact."""
    for suffix, shift in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if nbytes and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{suffix}"
    return str(nbytes)


def device_attributes(device: Device, inventory: Inventory) -> dict[str, dict[str, Any]]:
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": device.type},
        "uuid": {"string": device.uuid},
        "productName": {"string": device.product_name},
        "brand": {"string": device.brand},
        "architecture": {"string": device.architecture},
        "cudaComputeCapability": {"version": semver(device.cuda_compute_capability)},
        "driverVersion": {"version": semver(inventory.driver_version)},
        "resource.kubernetes.io/pciBusID": {"string": device.pci_bus_id},
        "resource.kubernetes.io/pcieRoot": {"string": device.pcie_root},
        f"{OWN_DOMAIN}/minor": {"int": device.minor},
        f"{OWN_DOMAIN}/nvlinkPeers": {"int": device.nvlink_peers},
    }
    if inventory.cuda_driver_version:
        attrs["cudaDriverVersion"] = {"version": semver(inventory.cuda_driver_version)}
    if device.type == "mig":
        attrs["parentUUID"] = {"string": device.parent_uuid}
        attrs["profile"] = {"string": device.profile}
    if device.clique_id:
        attrs[f"{OWN_DOMAIN}/cliqueID"] = {"string": device.clique_id}
    if device.fabric:
        attrs[f"{OWN_DOMAIN}/fabric"] = {"string": device.fabric}
    return attrs


def device_entry(device: Device, inventory: Inventory, version: str) -> dict[str, Any]:
    attributes = device_attributes(device, inventory)
    capacity = {"memory": {"value": quantity(device.memory_bytes)}}
    if version == "v1beta1":  # v1beta1 nests them under "basic"; later versions flattened it
        return {"name": device.name, "basic": {"attributes": attributes, "capacity": capacity}}
    return {"name": device.name, "attributes": attributes, "capacity": capacity}


def slice_name(driver: str, node: str, index: int) -> str:
    """Deterministic, DNS-safe, <= 63 chars: every instance computes the same names."""
    base = re.sub(r"[^a-z0-9-]", "-", f"{node}-{driver}".lower()).strip("-")
    if len(base) > 50:
        base = base[:41].rstrip("-") + "-" + hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base}-{index}"


def build_slices(driver: str, node: str, inventory: Inventory, version: str,
                 generation: int) -> list[dict[str, Any]]:
    """The node's pool (named after the node) as one or more slices of at most 128 devices."""
    if version not in VERSIONS:
        raise ValueError(f"unsupported resource.k8s.io version {version!r}")
    devices: Sequence[Device] = inventory.devices
    chunks = [devices[i:i + MAX_DEVICES_PER_SLICE]
              for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)] or [[]]
    return [{
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(driver, node, i),
                     "labels": {"app.kubernetes.io/managed-by": "fakegpu-plugin"}},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)},
            "devices": [device_entry(d, inventory, version) for d in chunk],
        },
    } for i, chunk in enumerate(chunks)]


def _contains(have: Any, want: Any) -> bool:
    """``want`` is in ``have``: the apiserver may add defaulted fields, never drop ours."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _contains(have[k], v)
                                              for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(have) == len(want)
                and all(_contains(h, w) for h, w in zip(have, want, strict=True)))
    return bool(have == want)


def same_devices(existing: Sequence[dict[str, Any]], desired: Sequence[dict[str, Any]]) -> bool:
    """True when the published slices already carry exactly the desired pool content."""
    if len(existing) != len(desired):
        return False
    have = {o["metadata"]["name"]: o["spec"] for o in existing}
    for obj in desired:
        spec = dict(obj["spec"])
        spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
        if not _contains(have.get(obj["metadata"]["name"]), spec):
            return False
    return True
