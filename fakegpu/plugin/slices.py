"""Devices -> ResourceSlice objects (plain dicts) for one resource.k8s.io version. Pure.

Attribute names follow NVIDIA's DRA driver so manifests written for it select our devices
unchanged; fakegpu's own facts live under the ``fakegpu.dev/`` domain so they never clash with
attributes NVIDIA may add.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

# GROUP, VERSIONS: the one resource.k8s.io rule (newest first), shared with cluster and test kit.
from fakegpu.kube.resource import GROUP, VERSIONS
from fakegpu.kubeletplugin import pcie, slicepool
from fakegpu.kubeletplugin.slicepool import Taint, slice_name

from . import partitions
from .discovery import Device, Inventory
from .shape import FAKEGPU, Shape, apply_shares

MAX_DEVICES_PER_SLICE = 128
MAX_TAINTED_DEVICES_PER_SLICE = 64  # the apiserver's limit once any device has taints (1.35+)
OWN_DOMAIN = "fakegpu.dev"
# Taint keys, under the driver's own name as NVIDIA's driver does (gpu.nvidia.com/xid).
TAINT_GPU_LOST = "gpu-lost"
TAINT_XID = "xid"
TAINT_ECC = "ecc"  # fakegpu's: NVIDIA's driver ignores ECC events (see docs/plugin.md)
TAINT_NVLINK = "nvlink-down"  # fakegpu's, like the next: NVIDIA's driver watches neither
TAINT_FABRIC = "fabric"
# Taints that follow what NVML answers now, never adopted from published slices.
FOLLOW_NVML = (TAINT_GPU_LOST, TAINT_NVLINK, TAINT_FABRIC)
NO_SCHEDULE = "NoSchedule"
INFORMATIONAL = "None"  # the effect of a taint that only informs (resource.k8s.io 1.35+)
# A device that must be attached first (KEP-5007): the scheduler binds a pod only once the
# claim's status.devices entry has ATTACHED true, and allocates again if ATTACH_FAILED is.
ATTACHED = f"{OWN_DOMAIN}/Attached"
ATTACH_FAILED = f"{OWN_DOMAIN}/AttachFailed"
TAINT_ATTACH_FAILED = "attach-failed"


def taint(driver: str, name: str, value: str = "", effect: str = NO_SCHEDULE) -> Taint:
    """A device taint keyed ``<driver>/<name>``.

    NoSchedule: keep new claims off the device but leave running pods alone; evicting them
    (NoExecute) is an operator's decision, taken with a DeviceTaintRule. ``None`` only
    informs (an XID the application caused).
    """
    return {"key": f"{driver}/{name}", **({"value": value} if value else {}), "effect": effect}


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


def device_attributes(device: Device, inventory: Inventory,
                      shape: Shape = FAKEGPU) -> dict[str, dict[str, Any]]:
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": device.type},
        "productName": {"string": device.product_name},
        "brand": {"string": device.brand},
        "architecture": {"string": device.architecture},
        "cudaComputeCapability": {"version": semver(device.cuda_compute_capability)},
        "driverVersion": {"version": semver(inventory.driver_version)},
        "resource.kubernetes.io/pciBusID": {"string": device.pci_bus_id},
        f"{OWN_DOMAIN}/minor": {"int": device.minor},
        f"{OWN_DOMAIN}/nvlinkPeers": {"int": device.nvlink_peers},
    }
    # The NVML index (what CUDA_VISIBLE_DEVICES and `nvidia-smi -i` count) and minor: a GPU's
    # own, a MIG device's parent's (`parentIndex`). fakegpu's shape, and NVIDIA's up to v25.3
    # only (shape.py): its current driver has none, so a selector on them fails there too.
    if shape.index_attributes and device.index >= 0:
        attrs["parentIndex" if device.type == "mig" else "index"] = {"int": device.index}
    if shape.index_attributes and device.type == "gpu":
        attrs["minor"] = {"int": device.minor}
    if device.uuid:  # a dynamic MIG partition has none until it is created (NVIDIA's has none)
        attrs["uuid"] = {"string": device.uuid}
    if inventory.cuda_driver_version:
        attrs["cudaDriverVersion"] = {"version": semver(inventory.cuda_driver_version)}
    # Both only when known, as NVIDIA's driver does: a MIG device carries its GPU's.
    if device.pcie_root:
        attrs["resource.kubernetes.io/pcieRoot"] = {"string": device.pcie_root}
    # The standard NUMA attribute (KEP-6072): its scalar form needs no feature gate, its list
    # form (shape.numa_list) DRAListTypeAttributes; left out for a device without NUMA
    # affinity, as the standard asks.
    attrs.update(pcie.numa_attribute(device.numa_node, device.numa_list, shape.numa_list))
    if device.addressing_mode:
        attrs["addressingMode"] = {"string": device.addressing_mode}
    if device.type == "mig":
        attrs["parentUUID"] = {"string": device.parent_uuid}
        attrs["profile"] = {"string": device.profile}
        if device.mig is not None and device.mig.gi_id >= 0:
            attrs[f"{OWN_DOMAIN}/gpuInstance"] = {"int": device.mig.gi_id}
            attrs[f"{OWN_DOMAIN}/computeInstance"] = {"int": device.mig.ci_id}
    if device.time_sliced:  # which share of how many (time_slice_shares)
        attrs[f"{OWN_DOMAIN}/timeSlice"] = {"int": device.time_slice}
        attrs[f"{OWN_DOMAIN}/timeSlices"] = {"int": device.time_slices}
    if device.attach:  # so a claim can ask for (or avoid) a GPU that is attached first
        attrs[f"{OWN_DOMAIN}/attach"] = {"string": device.attach}
    if device.clique_id:
        attrs[f"{OWN_DOMAIN}/cliqueID"] = {"string": device.clique_id}
    if device.fabric:
        attrs[f"{OWN_DOMAIN}/fabric"] = {"string": device.fabric}
    return attrs


def device_capacity(device: Device, shape: Shape = FAKEGPU) -> dict[str, dict[str, str]]:
    """``memory``; a MIG device adds NVIDIA's engine counts and one ``memorySlice<i>`` per
    memory slice its GPU instance spans (what lets CEL tell overlapping placements apart).

    NVIDIA's shape of dynamic MIG (``partitions.go``): a partition has no ``memorySlice<i>``
    (its counters name the slices), and the whole GPU has the largest value of every MIG
    capacity, engines included, the counters it consumes without the memory slices."""
    if shape.nvidia and device.type == "gpu" and device.consumes:
        consumes = dict(device.consumes)
        largest = {name: consumes.get(partitions.counter_name(name), 0)
                   for name in partitions.CAPACITIES}
        return {name: {"value": quantity(value) if name == "memory" else str(value)}
                for name, value in largest.items()}
    capacity = {"memory": {"value": quantity(device.memory_bytes)}}
    mig = device.mig
    if mig is not None:
        for name, count in (("multiprocessors", mig.multiprocessors),
                            ("copyEngines", mig.copy_engines), ("decoders", mig.decoders),
                            ("encoders", mig.encoders), ("jpegEngines", mig.jpeg_engines),
                            ("ofaEngines", mig.ofa_engines)):
            capacity[name] = {"value": str(count)}
        if not (shape.nvidia and device.partition):
            for i in range(mig.placement_start, mig.placement_start + mig.placement_size):
                capacity[f"memorySlice{i}"] = {"value": "1"}
    return capacity


def device_entry(device: Device, inventory: Inventory, version: str,
                 taints: Sequence[Taint] = (), shape: Shape = FAKEGPU) -> dict[str, Any]:
    body: dict[str, Any] = {"attributes": device_attributes(device, inventory, shape),
                            "capacity": device_capacity(device, shape)}
    if taints:
        body["taints"] = [dict(t) for t in taints]
    if shape.shares and not device.consumes:
        # NVIDIA's --consumable-shares: every GPU and static MIG device (fakegpu leaves dynamic
        # MIG's devices unshared: a partition is created per claim).
        apply_shares(body, shape.consumable_shares, device.memory_bytes)
    elif device.shared:  # several claims, each taking a share of the memory (1.34+)
        body["allowMultipleAllocations"] = True
        body["capacity"]["memory"]["requestPolicy"] = {
            # A claim that names no memory takes all of it: exclusive unless it asks for less.
            "default": quantity(device.memory_bytes), "validRange": {"min": "1Gi"}}
    if device.attach:  # attached by the plugin before a pod binds (attach.py, 1.34+)
        body["bindsToNode"] = True
        body["bindingConditions"] = [ATTACHED]
        body["bindingFailureConditions"] = [ATTACH_FAILED]
    if device.consumes:
        body["consumesCounters"] = [{
            "counterSet": partitions.counter_set_name(device.minor),
            "counters": partitions.counters_json(dict(device.consumes)),
            **({"compatibilityGroups": list(device.compat_groups)}
               if device.compat_groups else {})}]
    return slicepool.device(device.name, body, version)


def device_uuid(entry: Mapping[str, Any]) -> str:
    body = entry.get("basic", entry)
    return str(((body.get("attributes") or {}).get("uuid") or {}).get("string", ""))


def unhealthy(taints: Sequence[Taint]) -> bool:
    """Any taint that keeps claims off (an informational one does not)."""
    return any(t.get("effect") != INFORMATIONAL for t in taints)


def build_slices(driver: str, node: str, inventory: Inventory, version: str,
                 generation: int, taints: Mapping[str, Sequence[Taint]] | None = None,
                 use_taints: bool = True, node_wide_lost: bool = False,
                 owner: Mapping[str, Any] | None = None,
                 separate_counters: bool = True, use_counters: bool = True,
                 use_shared: bool = True, use_groups: bool = True,
                 shape: Shape = FAKEGPU) -> list[dict[str, Any]]:
    """The node's pool (named after the node) as one or more slices of at most 128 devices.

    ``taints`` maps device names to their taints; a lost device gets ``<driver>/gpu-lost``,
    and with ``node_wide_lost`` (NVIDIA's driver) every device of the node does while any GPU
    is lost. Without ``use_taints`` (an apiserver that drops them: DRADeviceTaints off) an
    unhealthy device is left out of the pool instead, so nothing schedules onto it either
    way. ``owner``: the ownerReference every slice carries (the Node), when known.

    Dynamic MIG's CounterSets (``inventory.counter_sets``): with ``separate_counters``
    (resource.k8s.io 1.35+, where a slice holds devices or counters, never both) in slices of
    their own, at most 8 sets each, before the device slices; without it (1.34) each slice
    holds whole GPUs with their sets. Slices with counters hold at most 64 devices.
    Without ``use_counters`` (an apiserver that drops them: DRAPartitionableDevices off) the
    partitions are left out and the GPUs published plainly, so no two overlapping partitions
    can ever be allocated; without ``use_shared`` (DRAConsumableCapacity off) shared GPUs are
    published as ordinary ones; without ``use_groups`` (DRADeviceCompatibilityGroups off, or
    below 1.37) time-sliced shares are left out, since counters alone would let them be
    allocated beside their GPU's MIG devices. ``shape``: fakegpu's or NVIDIA's (shape.py).
    """
    if not use_groups:
        inventory = replace(inventory, devices=tuple(
            replace(d, compat_groups=()) for d in inventory.devices if not d.time_sliced))
    if not use_counters:
        inventory = replace(inventory, counter_sets=(), devices=tuple(
            replace(d, consumes=()) for d in inventory.devices if not d.partition))
    if not use_shared:
        inventory = replace(inventory, devices=tuple(
            replace(d, shared=False) for d in inventory.devices))
        shape = replace(shape, consumable_shares="disabled")
    if version not in VERSIONS:
        raise ValueError(f"unsupported resource.k8s.io version {version!r}")
    any_lost = node_wide_lost and (bool(inventory.lost_indices)
                                   or any(d.lost for d in inventory.devices))
    wanted: dict[str, list[Taint]] = {}
    for device in inventory.devices:
        found = [dict(t) for t in (taints or {}).get(device.name, ())]
        if device.lost or any_lost:
            found.insert(0, taint(driver, TAINT_GPU_LOST))
        if found:
            wanted[device.name] = found
    devices: Sequence[Device] = [d for d in inventory.devices
                                 if use_taints or not unhealthy(wanted.get(d.name, ()))]
    size = MAX_TAINTED_DEVICES_PER_SLICE if use_taints and wanted else MAX_DEVICES_PER_SLICE
    sets = [{"name": name, "counters": partitions.counters_json(dict(counters))}
            for name, counters in inventory.counter_sets]
    chunk_sets: list[list[dict[str, Any]]]
    chunks: list[Sequence[Device]]
    if sets or shape.numa_list:  # the apiserver's limit for counters and list attributes
        size = MAX_TAINTED_DEVICES_PER_SLICE
    if sets and separate_counters:
        chunk_sets = [sets[i:i + MAX_COUNTER_SETS_PER_SLICE]
                      for i in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)]
        device_chunks = [devices[i:i + size] for i in range(0, len(devices), size)]
        chunks = [*([] for _ in chunk_sets), *device_chunks]
        chunk_sets += [[] for _ in device_chunks]
    elif sets:
        by_gpu, chunk_sets = _by_gpu(devices, sets, size)
        chunks = list(by_gpu)
    else:
        chunks = [devices[i:i + size] for i in range(0, len(devices), size)] or [[]]
        chunk_sets = [[] for _ in chunks]
    metadata: dict[str, Any] = {"labels": {"app.kubernetes.io/managed-by": "fakegpu-plugin"}}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return [{
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(driver, node, i), **copy.deepcopy(metadata)},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)},
            # A counters-only slice has no devices at all (the apiserver stores none).
            **({} if chunk_sets[i] and not chunk else {"devices": [
                device_entry(d, inventory, version, wanted.get(d.name, ()) if use_taints else (),
                             shape)
                for d in chunk]}),
            **({"sharedCounters": copy.deepcopy(chunk_sets[i])} if chunk_sets[i] else {}),
        },
    } for i, chunk in enumerate(chunks)]


MAX_COUNTER_SETS_PER_SLICE = 8  # the apiserver's limit (1.35+)


def _by_gpu(devices: Sequence[Device], sets: list[dict[str, Any]], size: int
            ) -> tuple[list[list[Device]], list[list[dict[str, Any]]]]:
    """1.34: a device and the CounterSet it consumes from share a slice, so slices hold whole
    GPUs (a GPU's devices and its set), at most ``size`` devices and 8 sets each."""
    by_minor: dict[int, list[Device]] = {}
    for device in devices:
        by_minor.setdefault(device.minor, []).append(device)
    named = {s["name"]: s for s in sets}
    chunks: list[list[Device]] = [[]]
    chunk_sets: list[list[dict[str, Any]]] = [[]]
    for minor, group in sorted(by_minor.items()):
        own = named.get(partitions.counter_set_name(minor))
        full = (len(chunks[-1]) + len(group) > size
                or (own is not None and len(chunk_sets[-1]) >= MAX_COUNTER_SETS_PER_SLICE))
        if chunks[-1] and full:
            chunks.append([])
            chunk_sets.append([])
        chunks[-1].extend(group)
        if own is not None:
            chunk_sets[-1].append(own)
    return chunks, chunk_sets


