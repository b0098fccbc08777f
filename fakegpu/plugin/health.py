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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from fakegpu.kubeletplugin.slicepool import Taint

from . import discovery
from .discovery import Device, Inventory
from .slices import (
    INFORMATIONAL,
    NO_SCHEDULE,
    TAINT_ECC,
    TAINT_FABRIC,
    TAINT_NVLINK,
    TAINT_XID,
    taint,
)

log = logging.getLogger(__name__)

# XIDs caused by the application, not the GPU: NVIDIA's driver does not mark a device
# unhealthy for them (graphics engine exception, page fault, stopped processing, preemptive
# cleanup, video processor exception, context switch timeout), it publishes them with the
# informational effect None (device_health.go, xidsToSkip / IsEventNonFatal).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# nvmlEventData_t.gpuInstanceId/computeInstanceId for an event of the whole GPU.
WHOLE_GPU = 0xFFFFFFFF
WAIT_MS = 500  # how long one nvmlEventSetWait blocks: bounds how fast stop() is noticed


@dataclass(frozen=True)
class GpuFaults:
    """What NVML says is wrong with one GPU now; None where it cannot tell.

    ``last_xid`` comes from fakegpu's own query (``fakegpu_device_last_xid``): real NVML has
    none, so on a real GPU it is None and an XID taint stays (as NVIDIA's does).
    """

    last_xid: int | None = None
    ecc_dbe: bool | None = None  # uncorrected volatile ECC errors counted since the reset
    links_down: tuple[int, ...] = ()
    fabric_degraded: bool = False


# nvmlGpuFabricInfoV healthMask: the degraded-bandwidth field (NVML_GPU_FABRIC_HEALTH_MASK_*).
_DEGRADED_BW_SHIFT, _DEGRADED_BW_WIDTH, _DEGRADED_BW_TRUE = 0, 0x3, 1


def _last_xid(handle: Any) -> int | None:
    fn = getattr(pynvml.nvmlLib, "fakegpu_device_last_xid", None)
    if fn is None:  # real NVML: no such query
        return None
    xid = ctypes.c_uint(0)
    if fn(handle, ctypes.byref(xid)) != pynvml.NVML_SUCCESS:
        return None
    return int(xid.value)


def _optional(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except pynvml.NVMLError:
        return None


def read_faults(handle: Any) -> GpuFaults:
    """One GPU's faults, through NVML (cheap calls: this runs twice a second)."""
    ecc = _optional(lambda: pynvml.nvmlDeviceGetTotalEccErrors(
        handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
    down = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if not pynvml.nvmlDeviceGetNvLinkState(handle, link):
                down.append(link)
        except pynvml.NVMLError:
            continue  # no such link (NOT_SUPPORTED), or a MIG device
    fabric = pynvml.c_nvmlGpuFabricInfo_v2_t()
    fabric.version = pynvml.nvmlGpuFabricInfo_v2  # v2 carries healthMask; every driver has it
    known = _optional(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(fabric)))
    degraded = known is not None and (
        (int(fabric.healthMask) >> _DEGRADED_BW_SHIFT) & _DEGRADED_BW_WIDTH) == _DEGRADED_BW_TRUE
    return GpuFaults(last_xid=_last_xid(handle), ecc_dbe=None if ecc is None else int(ecc) > 0,
                     links_down=tuple(down), fabric_degraded=degraded)


def read_all_faults() -> dict[str, GpuFaults]:
    """GPU UUID -> its faults, for every GPU that answers (a lost one cannot tell)."""
    out: dict[str, GpuFaults] = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            out[discovery.text(pynvml.nvmlDeviceGetUUID(handle))] = read_faults(handle)
        except pynvml.NVMLError:
            continue
    return out


def _gpu_of(device: Device) -> str:
    return device.parent_uuid or device.uuid


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
        self._faults: dict[str, GpuFaults] = {}  # GPU UUID -> what NVML said last
        self._parents: dict[str, str] = {}  # MIG device UUID -> GPU UUID, from inventories

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

    def update_faults(self, faults: Mapping[str, GpuFaults]) -> bool:
        """Take NVML's current faults of every GPU that answered; True when that may change
        any taint.

        A fault NVML no longer reports (``fakegpu fault clear``) also forgets the taints its
        events recorded, on the GPU and on its MIG devices, so the same fault coming back is
        a change again.
        """
        with self._lock:
            # The whole reading replaces the last: a GPU missing from it (lost: it answers
            # nothing) is unknown again, never judged by what it said before.
            changed = dict(faults) != self._faults
            self._faults = dict(faults)
            # Always: an event recorded after the last reading may already be cleared.
            for uuid, known in self._by_uuid.items():
                for key in [k for k in known if self._lifted(self._gpu(uuid), k)]:
                    del known[key]
                    changed = True
            return changed

    def _gpu(self, uuid: str) -> str:
        """The GPU a device UUID belongs to (itself for a GPU; lock held)."""
        return self._parents.get(uuid, uuid)

    def _lifted(self, gpu_uuid: str, key: str) -> bool:
        """Whether NVML says the fault behind taint ``key`` is gone from that GPU (lock held).

        Unknown (a lost GPU, real NVML for XIDs, no reading yet) is not gone.
        """
        now = self._faults.get(gpu_uuid)
        if now is None:
            return False
        name = key.removeprefix(f"{self._driver}/")
        if name == TAINT_XID:
            return now.last_xid == 0
        if name == TAINT_ECC:
            return now.ecc_dbe is False
        return False

    def still_faulty(self, inventory: Inventory,
                     taints: Mapping[str, Sequence[Taint]]) -> dict[str, list[Taint]]:
        """``taints`` (by device name) without those whose fault NVML no longer reports: how
        taints adopted from the published slices are lifted once the fault is cleared."""
        gpus = {d.name: _gpu_of(d) for d in inventory.devices}
        out: dict[str, list[Taint]] = {}
        with self._lock:
            for name, ts in taints.items():
                kept = [dict(t) for t in ts
                        if name not in gpus or not self._lifted(gpus[name], t["key"])]
                if kept:
                    out[name] = kept
        return out

    def _derived(self, gpu_uuid: str) -> dict[str, Taint]:
        """Taints that follow NVML's state directly (fakegpu's own: NVIDIA has none)."""
        now = self._faults.get(gpu_uuid)
        if now is None or self.nvidia_compatible:
            return {}
        out = []
        if now.ecc_dbe:
            out.append(taint(self._driver, TAINT_ECC, "dbe"))
        if now.links_down:
            out.append(taint(self._driver, TAINT_NVLINK, "_".join(map(str, now.links_down))))
        if now.fabric_degraded:
            out.append(taint(self._driver, TAINT_FABRIC, "degraded"))
        return {t["key"]: t for t in out}

    def taints(self, inventory: Inventory) -> dict[str, list[Taint]]:
        """Device name -> its taints: recorded from events (own ones, then those of its parent
        GPU) and derived from NVML's current state of its GPU."""
        with self._lock:
            for device in inventory.devices:
                if device.parent_uuid:
                    self._parents[device.uuid] = device.parent_uuid
            snapshot = {u: dict(t) for u, t in self._by_uuid.items()}
            derived = {g: self._derived(g) for g in {_gpu_of(d) for d in inventory.devices}}
        out: dict[str, list[Taint]] = {}
        for device in inventory.devices:
            merged: dict[str, Taint] = {}
            sources = (device.uuid,) if self.nvidia_compatible else (device.parent_uuid,
                                                                     device.uuid)
            for uuid in sources:  # the device's own value wins
                if not uuid:
                    continue
                for key, t in snapshot.get(uuid, {}).items():
                    if self._lifted(_gpu_of(device), key):
                        continue  # cleared since it was recorded
                    if (not self.nvidia_compatible and key in merged
                            and t["effect"] == INFORMATIONAL
                            and merged[key]["effect"] != INFORMATIONAL):
                        continue  # the parent's fatal XID outranks the device's informational
                    merged[key] = t
            for key, t in derived.get(_gpu_of(device), {}).items():
                merged.setdefault(key, t)
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
        self._poll_failed = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 + WAIT_MS / 1000)

    def _run(self) -> None:
        try:
            self._watch()
        except pynvml.NVMLError as err:  # health is an extra: the plugin keeps serving
            log.warning("NVML events unavailable, reading GPU state only: %s", err)
            self.ready.set()
            self._poll_only()
        finally:
            self.ready.set()

    def _poll_only(self) -> None:
        """Without events, faults are still seen (and lifted) from the GPUs' state."""
        try:
            with discovery.nvml_lock:
                pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            log.warning("cannot read GPU state either: %s", err)
            return
        try:
            while not self._stop.is_set():
                self.poll()
                self._stop.wait(WAIT_MS / 1000)
        finally:
            with discovery.nvml_lock:
                pynvml.nvmlShutdown()

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
                        self._handle(data, by_address)
                    except pynvml.NVMLError_Timeout:
                        pass
                    # No event says a fault is over (nor announces NVLink or fabric faults):
                    # read the GPUs' state at every turn, and wake the publisher on a change.
                    self.poll()
            finally:
                pynvml.nvmlEventSetFree(event_set)
        finally:
            with discovery.nvml_lock:
                pynvml.nvmlShutdown()

    def poll(self) -> None:
        """Read every GPU's faults; wake the publisher when a taint may have changed."""
        try:
            faults = read_all_faults()
        except pynvml.NVMLError as err:
            log.debug("cannot read GPU faults: %s", err)
            return
        except Exception:  # a bug here must not end event watching; say it once
            if not self._poll_failed:
                self._poll_failed = True
                log.exception("reading GPU faults failed")
            return
        if self._health.update_faults(faults):
            self._on_change()

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
