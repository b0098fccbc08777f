"""The GPU plugin's device health for the kubelet's DRAResourceHealth streams
(``kubeletplugin.health``): from the same taints the slices carry. A device with a taint that
keeps claims off (not an informational one), or a lost GPU, is ``UNHEALTHY``; every other
device is ``HEALTHY``. The message names the taints (``gpu.fakegpu.dev/xid=79``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fakegpu.kubeletplugin.health import HEALTHY, UNHEALTHY, DeviceStatus
from fakegpu.kubeletplugin.slicepool import Taint

from .discovery import Inventory
from .slices import TAINT_GPU_LOST, unhealthy


def device_statuses(driver: str, inventory: Inventory, taints: Mapping[str, Sequence[Taint]],
                    node_wide_lost: bool = False) -> list[DeviceStatus]:
    """Every device's health from its taints, as the slices show them. Pure."""
    any_lost = node_wide_lost and (bool(inventory.lost_indices)
                                   or any(d.lost for d in inventory.devices))
    out = []
    for device in inventory.devices:
        found = [dict(t) for t in taints.get(device.name, ())]
        if device.lost or any_lost:
            found.insert(0, {"key": f"{driver}/{TAINT_GPU_LOST}", "effect": "NoSchedule"})
        message = ", ".join(f"{t['key']}={t['value']}" if t.get("value") else t["key"]
                            for t in found)
        out.append(DeviceStatus(device.name, UNHEALTHY if unhealthy(found) else HEALTHY,
                                message))
    return out
