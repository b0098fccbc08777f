"""Keep the node's ResourceSlices equal to what NVML shows, retrying while the apiserver is away.

Stateless like the rest: the desired slices are compared with the published ones, and only
a difference bumps the pool generation. Two instances publishing the same devices therefore
agree, and a restarted instance changes nothing.

Taints: an XID/ECC taint, once published, is kept by every instance for as long as the device
(same name, same UUID) is there and NVML does not say the fault is over, even by one that never
saw the event: the apiserver is the record of health, so two instances never undo each other's
taints (and never flap). ``gpu-lost``, ``nvlink-down`` and ``fabric`` are not sticky: they
follow what NVML answers now. An apiserver that drops taints
(DRADeviceTaints off) is detected from what it stores; unhealthy devices are then left out.
Informational taints (effect None) exist from resource.k8s.io 1.35: an older apiserver gets
none. Slices are owned by their Node, as NVIDIA's are, when the plugin may read the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fakegpu.kubeletplugin import slicepool
from fakegpu.kubeletplugin.slicepool import SliceApi, Taint

from . import slices
from .discovery import Inventory
from .driver import Devices
from .shape import FAKEGPU, Shape

log = logging.getLogger(__name__)
SEPARATE_COUNTERS_MINOR = 35  # resource.k8s.io: a slice holds devices or counters, not both


# The first Kubernetes minor whose apiserver accepts the taint effect None.
EFFECT_NONE_MINOR = 35


def sticky_taints(driver: str, inventory: Inventory,
                  existing: Sequence[Mapping[str, Any]]) -> dict[str, list[Taint]]:
    """Device name -> the taints of this driver already published on that same device. Pure."""
    uuids = {d.name: d.uuid for d in inventory.devices}
    current = {f"{driver}/{name}" for name in slices.FOLLOW_NVML}
    out: dict[str, list[Taint]] = {}
    for obj in existing:
        for entry in obj["spec"].get("devices") or []:
            name = entry.get("name", "")
            if name not in uuids or slices.device_uuid(entry) != uuids[name]:
                continue  # gone, or another device under the same name (MIG reconfigured)
            kept = [{k: v for k, v in t.items() if k in ("key", "value", "effect")}
                    for t in slicepool.device_taints(entry)
                    if t.get("key", "").startswith(f"{driver}/") and t.get("key") not in current]
            if kept:
                out[name] = kept
    return out


def merge_taints(*sources: Mapping[str, Sequence[Taint]],
                 keep_fatal: bool = False) -> dict[str, list[Taint]]:
    """Union by device and taint key; a later source's value wins for the same key, except
    that with ``keep_fatal`` an informational taint never replaces a fatal one."""
    out: dict[str, dict[str, Taint]] = {}
    for source in sources:
        for name, taints in source.items():
            for t in taints:
                old = out.setdefault(name, {}).get(t["key"])
                if (keep_fatal and old is not None and t.get("effect") == slices.INFORMATIONAL
                        and old.get("effect") != slices.INFORMATIONAL):
                    continue
                out[name][t["key"]] = dict(t)
    return {name: list(by_key.values()) for name, by_key in out.items()}


def fatal_only(taints: Mapping[str, Sequence[Taint]]) -> dict[str, list[Taint]]:
    """``taints`` without the informational ones (an apiserver older than 1.35)."""
    kept = {name: [t for t in ts if t.get("effect") != slices.INFORMATIONAL]
            for name, ts in taints.items()}
    return {name: ts for name, ts in kept.items() if ts}


def _kept_taints(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """False when we sent taints and the apiserver stored none (its taint gate is off)."""
    have = {e.get("name"): e for e in stored.get("spec", {}).get("devices") or []}
    return all(slicepool.device_taints(have.get(e["name"], {}))
               for e in sent["spec"].get("devices") or () if slicepool.device_taints(e))


def _dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> set[str]:
    """Fields we sent that the apiserver did not store (its feature gate is off)."""
    dropped = set()
    if sent["spec"].get("sharedCounters") and not stored.get("spec", {}).get("sharedCounters"):
        dropped.add("sharedCounters")
    have = {e.get("name"): e.get("basic", e)
            for e in stored.get("spec", {}).get("devices") or []}
    for entry in sent["spec"].get("devices") or ():
        body = entry.get("basic", entry)
        stored_body = have.get(entry["name"], {})
        for key in ("consumesCounters", "allowMultipleAllocations"):
            if body.get(key) and not stored_body.get(key):
                dropped.add(key)
        if (any(c.get("compatibilityGroups") for c in body.get("consumesCounters") or ())
                and not any(c.get("compatibilityGroups")
                            for c in stored_body.get("consumesCounters") or ())):
            dropped.add("compatibilityGroups")
    return dropped


class SlicePublisher(slicepool.PoolPublisher):
    def __init__(self, kube: SliceApi, devices: Devices, driver: str, node: str,
                 interval_s: float = 10.0,
                 health: Callable[[Inventory], Mapping[str, Sequence[Taint]]] | None = None,
                 shape: Shape = FAKEGPU,
                 still_faulty: Callable[[Inventory, Mapping[str, Sequence[Taint]]],
                                        Mapping[str, Sequence[Taint]]] | None = None) -> None:
        super().__init__(kube, driver, node, interval_s)
        self._devices = devices
        self._health = health or (lambda _inventory: {})
        self._shape = shape  # fakegpu's or NVIDIA's (shape.py)
        self._nvidia = shape.nvidia
        self._still_faulty = still_faulty or (lambda _inventory, taints: taints)
        self.use_taints = True  # until the apiserver shows it drops them
        self.use_counters = True  # dynamic MIG's counters, likewise (DRAPartitionableDevices)
        self.use_shared = True  # GPUs shared by memory, likewise (DRAConsumableCapacity)
        self.use_groups = True  # time-sliced shares, likewise (DRADeviceCompatibilityGroups)
        self.adopted: Mapping[str, Sequence[Taint]] = {}  # taints kept from published slices

    def sync(self) -> bool:
        """Publish if needed; True when something changed. Raises KubeError."""
        version = self._kube.version()
        owner = self.owner()
        inventory = self._devices.refresh()
        existing = self._kube.list_slices(self._driver, self._node)
        # Adopted taints last only while NVML still reports their fault (a cleared one goes).
        adopted = self._still_faulty(inventory, sticky_taints(self._driver, inventory, existing))
        self.adopted = adopted  # what another instance published: health reports it too
        taints = merge_taints(adopted, self._health(inventory), keep_fatal=not self._nvidia)
        if self._kube.server_minor() < EFFECT_NONE_MINOR:
            taints = fatal_only(taints)
        # Dynamic MIG's counters: a slice of their own from 1.35 on, beside the devices before.
        separate_counters = self._kube.server_minor() >= SEPARATE_COUNTERS_MINOR

        def build(generation: int) -> list[dict[str, Any]]:
            return slices.build_slices(self._driver, self._node, inventory, version, generation,
                                       taints, self.use_taints, node_wide_lost=self._nvidia,
                                       owner=owner, separate_counters=separate_counters,
                                       use_counters=self.use_counters,
                                       use_shared=self.use_shared,
                                       use_groups=self.use_groups, shape=self._shape)

        desired = build(0)
        if slicepool.same_devices(existing, desired):
            return False
        generation = slicepool.next_generation(existing)
        desired = build(generation)
        dropped = False
        dropped_fields: set[str] = set()
        for body, stored in slicepool.write_pool(self._kube, existing, desired):
            dropped = dropped or not _kept_taints(body, stored)
            dropped_fields |= _dropped_fields(body, stored)
        log.info("published ResourceSlices driver=%s pool=%s generation=%d devices=%d "
                 "tainted=%s version=%s", self._driver, self._node, generation,
                 sum(len(o["spec"].get("devices") or ()) for o in desired),
                 ",".join(sorted(taints)) or "none", version)
        if dropped:
            log.warning("the apiserver drops device taints (DRADeviceTaints off?): "
                        "leaving unhealthy devices out of the pool instead")
            self.use_taints = False
            self.wake()
        if {"consumesCounters", "sharedCounters"} & dropped_fields:
            log.error("the apiserver drops counters (DRAPartitionableDevices off?): publishing "
                      "no dynamic MIG partitions, only whole GPUs")
            self.use_counters = False
            self.wake()
        if "allowMultipleAllocations" in dropped_fields:
            log.error("the apiserver drops allowMultipleAllocations (DRAConsumableCapacity "
                      "off?): publishing shared GPUs as ordinary ones")
            self.use_shared = False
            self.wake()
        if "compatibilityGroups" in dropped_fields and "consumesCounters" not in dropped_fields:
            log.error("the apiserver drops compatibilityGroups (DRADeviceCompatibilityGroups "
                      "off, or before 1.37?): publishing no time-sliced shares, which counters "
                      "alone would let beside MIG devices")
            self.use_groups = False
            self.wake()
        return True
