"""Dynamic MIG through NVML: create a partition's GPU + compute instance at prepare, destroy
it at unprepare, reconcile at start.

A partition device (``Device.partition``) names one placement: GPU minor, GPU-instance profile
id and first memory slice (``gpu-<minor>-mig-<profile>-<profileId>-<start>``). The scheduler
gives a placement to one claim at a time (the counters see to that), so the GPU instance at
that placement *is* that claim's device: ownership needs no record of its own beyond the
claim's record, which lists its device names.

- ``create``: MIG mode on if it is off, the GPU instance with exactly that placement
  (``nvmlDeviceCreateGpuInstanceWithPlacement``), one compute instance spanning it; an instance
  already there with that profile and placement (a prepare killed before its record was
  written) is taken over, never created twice. A failure destroys what this call made.
- ``destroy``: the compute instances of the GPU instance at that placement, then the GPU
  instance.
- ``reconcile``: every GPU instance on a partitionable GPU that no prepared claim's device
  names is destroyed (what a killed prepare or unprepare left behind).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import pynvml

from .discovery import Device, MigInfo, nvml_lock, text

log = logging.getLogger(__name__)
T = TypeVar("T")

# NVML_COMPUTE_INSTANCE_PROFILE_* index for a compute instance of N compute slices (index and
# id coincide for compute-instance profiles).
_CI_PROFILE_FOR_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
# More than any GPU has of one GPU-instance (or compute-instance) profile: 7 on every MIG GPU.
_MAX_INSTANCES = 16


class PartitionError(Exception):
    """A partition could not be created; the message becomes the claim's error."""


@contextmanager
def _nvml() -> Iterator[None]:
    with nvml_lock:
        pynvml.nvmlInit()
        try:
            yield
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as err:  # nothing to undo; say it and go on
                log.debug("nvmlShutdown: %s", err)


def _instances(handle: Any, profile_id: int | None = None) -> list[tuple[Any, Any]]:
    """(GPU-instance handle, its info) for every GPU instance, of one profile or all."""
    out: list[tuple[Any, Any]] = []
    ids = [profile_id] if profile_id is not None else _profile_ids(handle)
    for pid in ids:
        buf = (pynvml.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(_MAX_INSTANCES)  # in: the buffer's size (as go-nvml passes it)
        try:
            pynvml.nvmlDeviceGetGpuInstances(handle, pid, buf, ctypes.byref(count))
        except pynvml.NVMLError:
            continue
        out.extend((buf[i], pynvml.nvmlGpuInstanceGetInfo(buf[i])) for i in range(count.value))
    return out


def _profile_ids(handle: Any) -> list[int]:
    ids = []
    for index in range(int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)) or 16):
        try:
            ids.append(int(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index).id))
        except pynvml.NVMLError:
            continue
    return sorted(set(ids))


def _at(handle: Any, mig: MigInfo) -> tuple[Any, Any] | None:
    for gi, info in _instances(handle, mig.profile_id):
        if int(info.placement.start) == mig.placement_start:
            return gi, info
    return None


def _compute_instances(gi: Any, ci_profile: int) -> list[Any]:
    buf = (pynvml.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
    count = ctypes.c_uint(_MAX_INSTANCES)  # in: the buffer's size (as go-nvml passes it)
    try:
        pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_profile, buf, ctypes.byref(count))
    except pynvml.NVMLError:
        return []
    return [buf[i] for i in range(count.value)]


def _destroy_gi(gi: Any) -> None:
    for ci_profile in sorted(set(_CI_PROFILE_FOR_SLICES.values())):
        for ci in _compute_instances(gi, ci_profile):
            pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)


def _mig_uuid(handle: Any, gi_id: int, ci_id: int) -> str:
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue
        if (int(pynvml.nvmlDeviceGetGpuInstanceId(mig)) == gi_id
                and int(pynvml.nvmlDeviceGetComputeInstanceId(mig)) == ci_id):
            return text(pynvml.nvmlDeviceGetUUID(mig))
    raise PartitionError(f"NVML lists no MIG device for GPU instance {gi_id}, compute "
                         f"instance {ci_id}")


def _full_ci(gi: Any) -> Any:
    """The compute instance spanning the whole GPU instance: an existing one, else the largest
    compute-instance profile NVML lets this GPU instance create (that is its own size)."""
    by_size = sorted(_CI_PROFILE_FOR_SLICES.items(), reverse=True)
    for _slices, ci_profile in by_size:
        existing = _compute_instances(gi, ci_profile)
        if existing:
            return existing[0]
    last: Exception | None = None
    for _slices, ci_profile in by_size:
        try:
            return pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        except pynvml.NVMLError as err:
            last = err
    raise PartitionError(f"cannot create a compute instance: {last}")


class DynamicMig:
    """Create, destroy and reconcile partitions. NVML is opened per call (as discovery does)."""

    def __init__(self, by_name: Callable[[], dict[str, Device]]) -> None:
        self._by_name = by_name  # the published devices (partitions among them)

    def create(self, device: Device) -> Device:
        """Make ``device`` (a partition) exist; return it with its MIG UUID and GI/CI ids. The
        whole GPU of a partitionable GPU gets MIG mode off, as NVIDIA's driver does on Hopper+
        (only such GPUs are offered whole with MIG on)."""
        mig = device.mig
        if device.type == "gpu" and device.consumes:
            try:
                with _nvml():
                    self._whole_locked(device)
            except pynvml.NVMLError as err:
                raise PartitionError(f"cannot turn MIG off on {device.name}: {err}") from err
            return device
        if not device.partition or mig is None:
            return device
        try:
            with _nvml():
                return self._create_locked(device, mig)
        except pynvml.NVMLError as err:
            raise PartitionError(f"cannot create MIG device {device.name}: {err}") from err

    def _whole_locked(self, device: Device) -> None:
        handle = pynvml.nvmlDeviceGetHandleByUUID(device.uuid)
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return
        left = _instances(handle)
        # The counters (and a time-sliced GPU's compatibility groups) keep partitions off a
        # GPU allocated whole: these are leftovers.
        if left:
            raise PartitionError(f"cannot turn MIG off on {device.name}: {len(left)} GPU "
                                 "instance(s) still exist (their claims are being unprepared)")
        pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)
        log.info("turned MIG off on %s for a claim of the whole GPU", device.name)

    def _create_locked(self, device: Device, mig: MigInfo) -> Device:
        handle = pynvml.nvmlDeviceGetHandleByUUID(device.parent_uuid)
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
        made_gi = False
        found = _at(handle, mig)
        if found is None:
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = mig.placement_start, mig.placement_size
            try:
                gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                    handle, mig.profile_id, ctypes.byref(placement))
            except pynvml.NVMLError as err:
                raise PartitionError(
                    f"cannot create MIG device {device.name} (GPU instance profile "
                    f"{mig.profile_id} at memory slice {mig.placement_start}): {err}") from err
            made_gi = True
            gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
        else:
            gi, gi_info = found
            log.info("MIG device %s exists already (a prepare that did not finish): taken over",
                     device.name)
        try:
            ci = _full_ci(gi)
            ci_id = int(pynvml.nvmlComputeInstanceGetInfo(ci).id)
            gi_id = int(gi_info.id)
            uuid = _mig_uuid(handle, gi_id, ci_id)
        except (pynvml.NVMLError, PartitionError):
            if made_gi:  # leave nothing behind
                try:
                    _destroy_gi(gi)
                except pynvml.NVMLError as err:
                    log.error("cannot destroy GPU instance of %s after a failed create: %s",
                              device.name, err)
            raise
        log.info("created MIG device %s uuid=%s gi=%d ci=%d", device.name, uuid, gi_id, ci_id)
        return replace(device, uuid=uuid, mig=replace(mig, gi_id=gi_id, ci_id=ci_id))

    def destroy(self, names: Iterable[str]) -> list[str]:
        """Destroy the partitions named (others are ignored); the errors, one per device."""
        devices = self._by_name()
        wanted = [devices[n] for n in names if n in devices and devices[n].partition]
        if not wanted:
            return []
        errors = []
        with _nvml():
            for device in wanted:
                assert device.mig is not None
                try:
                    handle = pynvml.nvmlDeviceGetHandleByUUID(device.parent_uuid)
                    found = _at(handle, device.mig)
                    if found is not None:
                        _destroy_gi(found[0])
                        log.info("destroyed MIG device %s", device.name)
                except pynvml.NVMLError as err:
                    errors.append(f"cannot destroy MIG device {device.name}: {err}")
        return errors

    def reconcile(self, owned: Iterable[str]) -> list[str]:
        """Destroy every GPU instance on a partitionable GPU that no name in ``owned`` names;
        the names of what was destroyed."""
        devices = self._by_name()
        keep = {(d.parent_uuid, d.mig.profile_id, d.mig.placement_start)
                for n in owned if (d := devices.get(n)) is not None and d.partition
                and d.mig is not None}
        parents = sorted({d.parent_uuid for d in devices.values() if d.partition})
        destroyed: list[str] = []
        if not parents:
            return destroyed
        with _nvml():
            for parent in parents:
                try:
                    handle = pynvml.nvmlDeviceGetHandleByUUID(parent)
                    for gi, info in _instances(handle):
                        key = (parent, int(info.profileId), int(info.placement.start))
                        if key in keep:
                            continue
                        _destroy_gi(gi)
                        destroyed.append(f"{parent}/gi{int(info.id)}")
                except pynvml.NVMLError as err:
                    log.error("cannot reconcile MIG instances of %s: %s", parent, err)
        for what in destroyed:
            log.info("destroyed MIG instance %s: no prepared claim owns it", what)
        return destroyed
