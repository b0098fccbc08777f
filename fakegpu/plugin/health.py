"""Device health from NVML events: critical XIDs and uncorrectable ECC errors become taints.

A background thread waits on an NVML event set (nvmlEventSetCreate, nvmlDeviceRegisterEvents,
nvmlEventSetWait) registered on every GPU, as NVIDIA's driver does; each event that marks a
device unhealthy is recorded in ``Health`` and wakes the slice publisher, which republishes
with the taint at once instead of at the next periodic rediscovery. A lost GPU needs no
bookkeeping here: discovery itself sees it answer GPU_IS_LOST.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pynvml

from . import discovery
from .discovery import Device, Inventory
from .slices import INFORMATIONAL, NO_SCHEDULE, TAINT_ECC, TAINT_XID, Taint, taint

log = logging.getLogger(__name__)

# XIDs caused by the application, not the GPU: NVIDIA's driver does not mark a device
# unhealthy for them (graphics engine exception, page fault, stopped processing, preemptive
# cleanup, video processor exception, context switch timeout), it publishes them with the
# informational effect None (device_health.go, xidsToSkip / IsEventNonFatal).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# nvmlEventData_t.gpuInstanceId/computeInstanceId for an event of the whole GPU.
WHOLE_GPU = 0xFFFFFFFF
WAIT_MS = 500  # how long one nvmlEventSetWait blocks: bounds how fast stop() is noticed


class Health:
    """Taints recorded since start, by device UUID.

    fakegpu's own semantics: a GPU's record covers its MIG devices, and an informational taint
    never replaces a fatal one of the same key (a device stays off limits once an XID made
    it so). ``nvidia_compatible`` follows NVIDIA's driver: a record covers only the device
    itself, and the latest XID replaces the previous one, effect included.
    """

    def __init__(self, driver: str, nvidia_compatible: bool = False) -> None:
        self._driver = driver
        self.nvidia_compatible = nvidia_compatible
        self._lock = threading.Lock()
        self._by_uuid: dict[str, dict[str, Taint]] = {}

    def record(self, uuid: str, name: str, value: str, effect: str = NO_SCHEDULE) -> bool:
        """Taint ``<driver>/<name>=<value>`` on ``uuid``; True when that changed anything.

        One taint per key and device: a newer XID replaces the value of an older one.
        """
        new = taint(self._driver, name, value, effect)
        with self._lock:
            known = self._by_uuid.setdefault(uuid, {})
            old = known.get(new["key"])
            if old == new or (old is not None and not self.nvidia_compatible
                              and effect == INFORMATIONAL
                              and old.get("effect") != INFORMATIONAL):
                return False
            known[new["key"]] = new
            return True

    def taints(self, inventory: Inventory) -> dict[str, list[Taint]]:
        """Device name -> its recorded taints (own ones, then those of its parent GPU)."""
        with self._lock:
            snapshot = {u: dict(t) for u, t in self._by_uuid.items()}
        out: dict[str, list[Taint]] = {}
        for device in inventory.devices:
            merged: dict[str, Taint] = {}
            sources = (device.uuid,) if self.nvidia_compatible else (device.parent_uuid,
                                                                     device.uuid)
            for uuid in sources:  # the device's own value wins
                if not uuid:
                    continue
                for key, t in snapshot.get(uuid, {}).items():
                    if (not self.nvidia_compatible and key in merged
                            and t["effect"] == INFORMATIONAL
                            and merged[key]["effect"] != INFORMATIONAL):
                        continue  # the parent's fatal XID outranks the device's informational
                    merged[key] = t
            if merged:
                out[device.name] = list(merged.values())
        return out


def classify(event_type: int, event_data: int,
             nvidia_compatible: bool = False) -> tuple[str, str, str] | None:
    """(taint name, value, effect) for an event worth a taint, else None. Pure.

    An application XID gets an informational taint (effect None); a double-bit ECC event is
    fakegpu's addition, which NVIDIA's driver (and so the compatible mode) ignores.
    """
    if event_type & pynvml.nvmlEventTypeXidCriticalError:
        effect = INFORMATIONAL if event_data in APPLICATION_XIDS else NO_SCHEDULE
        return (TAINT_XID, str(event_data), effect)
    if event_type & pynvml.nvmlEventTypeDoubleBitEccError and not nvidia_compatible:
        return (TAINT_ECC, "dbe", NO_SCHEDULE)
    return None  # single-bit ECC errors are corrected; clocks and P-states are not faults


def target_uuid(gpu_uuid: str, gi: int, ci: int, devices: Mapping[str, Device],
                nvidia_compatible: bool = False) -> str:
    """The UUID an event is about: the MIG device named by its GI/CI ids, else the GPU.

    NVIDIA's driver looks the event up among the devices it publishes and ignores it when
    none matches: a GPU-wide event on a GPU in MIG mode (the GPU is not published whole), or
    an unknown GI/CI. With ``nvidia_compatible`` those answer "" (ignore).
    """
    if gi != WHOLE_GPU and ci != WHOLE_GPU:
        for device in devices.values():
            if (device.parent_uuid == gpu_uuid and device.mig is not None
                    and device.mig.gi_id == gi and device.mig.ci_id == ci):
                return device.uuid
    if nvidia_compatible and not (gi == WHOLE_GPU and ci == WHOLE_GPU and any(
            d.uuid == gpu_uuid and d.type == "gpu" for d in devices.values())):
        return ""
    return gpu_uuid


def _address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class EventWatcher:
    """The thread that turns NVML events into ``Health`` records and wakes the publisher."""

    MASK = (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
            | pynvml.nvmlEventTypeSingleBitEccError)

    def __init__(self, health: Health, inventory: Callable[[], Inventory],
                 on_change: Callable[[], None]) -> None:
        self._health, self._inventory, self._on_change = health, inventory, on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self.ready = threading.Event()  # set once the event set is registered (or given up)
        self.watching: list[str] = []  # UUIDs of the GPUs registered

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 + WAIT_MS / 1000)

    def _run(self) -> None:
        try:
            self._watch()
        except pynvml.NVMLError as err:  # health is an extra: the plugin keeps serving
            log.warning("NVML events unavailable, relying on periodic rediscovery: %s", err)
        finally:
            self.ready.set()

    def _register(self, event_set: Any) -> dict[int, str]:
        """Register every answering GPU; handle address -> GPU UUID (an event's device may be
        lost by the time it is read, and then cannot tell its UUID any more)."""
        by_address: dict[int, str] = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = discovery.text(pynvml.nvmlDeviceGetUUID(handle))
                supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(handle))
                pynvml.nvmlDeviceRegisterEvents(handle, self.MASK & supported, event_set)
            except pynvml.NVMLError as err:
                log.warning("cannot watch events of GPU %d: %s", index, err)
                continue
            by_address[_address(handle)] = uuid
            self.watching.append(uuid)
        return by_address

    def _watch(self) -> None:
        with discovery.nvml_lock:  # pynvml's library loading is not re-entrant
            pynvml.nvmlInit()
        try:
            event_set = pynvml.nvmlEventSetCreate()
            try:
                by_address = self._register(event_set)
                self.ready.set()
                log.info("watching NVML events gpus=%d", len(by_address))
                while not self._stop.is_set():
                    try:
                        data = pynvml.nvmlEventSetWait(event_set, WAIT_MS)
                    except pynvml.NVMLError_Timeout:
                        continue
                    self._handle(data, by_address)
            finally:
                pynvml.nvmlEventSetFree(event_set)
        finally:
            with discovery.nvml_lock:
                pynvml.nvmlShutdown()

    def _handle(self, data: Any, by_address: Mapping[int, str]) -> None:
        event_type, value = int(data.eventType), int(data.eventData)
        gpu_uuid = by_address.get(_address(data.device), "")
        nvidia = self._health.nvidia_compatible
        found = classify(event_type, value, nvidia)
        log.info("NVML event gpu=%s type=0x%x data=%d gi=%d ci=%d%s", gpu_uuid or "?",
                 event_type, value, int(data.gpuInstanceId), int(data.computeInstanceId),
                 "" if found else " (not a fault)")
        if found is None or not gpu_uuid:
            return
        uuid = target_uuid(gpu_uuid, int(data.gpuInstanceId), int(data.computeInstanceId),
                           self._inventory().by_name(), nvidia)
        if not uuid:
            log.info("NVML event names no published device: ignored, as NVIDIA's driver does")
            return
        if self._health.record(uuid, *found):
            self._on_change()
