"""The pure parts of health: which NVML events taint what."""

from __future__ import annotations

import dataclasses

import pynvml

from fakegpu.plugin.discovery import Inventory, MigInfo
from fakegpu.plugin.health import WHOLE_GPU, Health, classify, target_uuid

from .helpers import DRIVER, gpu


def test_critical_xids_and_uncorrectable_ecc_taint_application_xids_do_not() -> None:
    assert classify(pynvml.nvmlEventTypeXidCriticalError, 48) == ("xid", "48")
    assert classify(pynvml.nvmlEventTypeXidCriticalError, 79) == ("xid", "79")
    assert classify(pynvml.nvmlEventTypeXidCriticalError, 13) is None  # the app's fault
    assert classify(pynvml.nvmlEventTypeDoubleBitEccError, 0) == ("ecc", "dbe")
    assert classify(pynvml.nvmlEventTypeSingleBitEccError, 0) is None  # corrected


def _mig_inventory() -> Inventory:
    parent = gpu(1)
    migs = tuple(dataclasses.replace(
        parent, name=f"gpu-1-mig-{gi}", type="mig", uuid=f"MIG-{gi}", parent_uuid=parent.uuid,
        mig=MigInfo(gi_id=gi, ci_id=0, profile_id=19, placement_start=gi, placement_size=1))
        for gi in (1, 2))
    return Inventory("580.1", "13.0", (gpu(0), *migs))


def test_an_event_names_a_mig_device_or_the_whole_gpu() -> None:
    inv = _mig_inventory()
    parent = gpu(1).uuid
    assert target_uuid(parent, 2, 0, inv.by_name()) == "MIG-2"
    assert target_uuid(parent, WHOLE_GPU, WHOLE_GPU, inv.by_name()) == parent
    assert target_uuid(parent, 5, 0, inv.by_name()) == parent  # unknown instance: the GPU


def test_a_gpu_taint_covers_its_mig_devices_and_newer_xids_replace_older() -> None:
    inv = _mig_inventory()
    health = Health(DRIVER)
    assert health.record(gpu(1).uuid, "xid", "48") is True
    assert health.record(gpu(1).uuid, "xid", "48") is False  # nothing new
    assert health.record("MIG-2", "xid", "94") is True
    got = {name: [(t["key"], t["value"]) for t in ts] for name, ts in health.taints(inv).items()}
    assert got == {"gpu-1-mig-1": [(f"{DRIVER}/xid", "48")],
                   "gpu-1-mig-2": [(f"{DRIVER}/xid", "94")]}
