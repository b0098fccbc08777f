"""The pure parts of health: which NVML events taint what."""

from __future__ import annotations

import dataclasses

import pynvml

from fakegpu.plugin.discovery import Inventory, MigInfo
from fakegpu.plugin.health import WHOLE_GPU, Health, classify, target_uuid

from .helpers import DRIVER, gpu


def test_critical_xids_and_uncorrectable_ecc_taint_application_xids_only_inform() -> None:
    xid = pynvml.nvmlEventTypeXidCriticalError
    assert classify(xid, 48) == ("xid", "48", "NoSchedule")
    assert classify(xid, 79) == ("xid", "79", "NoSchedule")
    # NVIDIA's ignored XIDs (the application's fault): an informational taint, effect None.
    for app in (13, 31, 43, 45, 68, 109):
        assert classify(xid, app) == ("xid", str(app), "None")
        assert classify(xid, app, nvidia_compatible=True) == ("xid", str(app), "None")
    assert classify(pynvml.nvmlEventTypeDoubleBitEccError, 0) == ("ecc", "dbe", "NoSchedule")
    assert classify(pynvml.nvmlEventTypeSingleBitEccError, 0) is None  # corrected
    # NVIDIA's driver acts on XID events only.
    assert classify(pynvml.nvmlEventTypeDoubleBitEccError, 0, nvidia_compatible=True) is None


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


def test_nvidia_compatible_ignores_events_naming_no_published_device() -> None:
    inv = _mig_inventory()
    parent, whole = gpu(1).uuid, gpu(0).uuid
    assert target_uuid(parent, 2, 0, inv.by_name(), nvidia_compatible=True) == "MIG-2"
    # A GPU-wide XID on a GPU in MIG mode: NVIDIA does not publish that GPU, so ignores it.
    assert target_uuid(parent, WHOLE_GPU, WHOLE_GPU, inv.by_name(), nvidia_compatible=True) == ""
    assert target_uuid(parent, 5, 0, inv.by_name(), nvidia_compatible=True) == ""
    assert target_uuid(whole, WHOLE_GPU, WHOLE_GPU, inv.by_name(), nvidia_compatible=True) == whole


def test_a_gpu_taint_covers_its_mig_devices_and_newer_xids_replace_older() -> None:
    inv = _mig_inventory()
    health = Health(DRIVER)
    assert health.record(gpu(1).uuid, "xid", "48") is True
    assert health.record(gpu(1).uuid, "xid", "48") is False  # nothing new
    assert health.record("MIG-2", "xid", "94") is True
    got = {name: [(t["key"], t["value"]) for t in ts] for name, ts in health.taints(inv).items()}
    assert got == {"gpu-1-mig-1": [(f"{DRIVER}/xid", "48")],
                   "gpu-1-mig-2": [(f"{DRIVER}/xid", "94")]}


def effects(health: Health, inv: Inventory) -> dict[str, list[tuple[str, str]]]:
    return {n: [(t["value"], t["effect"]) for t in ts] for n, ts in health.taints(inv).items()}


def test_an_informational_xid_never_lifts_a_fatal_one_in_fakegpus_mode() -> None:
    inv = _mig_inventory()
    health = Health(DRIVER)
    assert health.record("MIG-1", "xid", "13", "None") is True
    assert effects(health, inv) == {"gpu-1-mig-1": [("13", "None")]}
    assert health.record("MIG-1", "xid", "48") is True
    assert health.record("MIG-1", "xid", "13", "None") is False  # 48 stays
    assert health.record(gpu(1).uuid, "xid", "79") is True
    assert health.record("MIG-2", "xid", "31", "None") is True  # below the GPU's fatal 79
    assert effects(health, inv) == {"gpu-1-mig-1": [("48", "NoSchedule")],
                                    "gpu-1-mig-2": [("79", "NoSchedule")]}


def test_nvidia_compatible_health_is_per_device_and_the_latest_xid_wins() -> None:
    """NVIDIA's driver: a GPU record does not reach its MIG devices, and the latest XID
    replaces the previous one, effect included (AddOrUpdateTaint)."""
    inv = _mig_inventory()
    health = Health(DRIVER, nvidia_compatible=True)
    assert health.record(gpu(1).uuid, "xid", "48") is True
    assert health.taints(inv) == {}
    assert health.record("MIG-1", "xid", "48") is True
    assert health.record("MIG-1", "xid", "13", "None") is True
    assert effects(health, inv) == {"gpu-1-mig-1": [("13", "None")]}


def test_taints_adopted_from_slices_go_once_nvml_says_the_fault_is_over() -> None:
    """A second instance adopts published XID/ECC taints; it lifts them when NVML reports the
    fault cleared (fakegpu's last-XID query, the uncorrected ECC count), keeps them while it
    cannot tell (a GPU not read yet, real NVML's XIDs)."""
    from fakegpu.plugin.health import GpuFaults

    inv = _mig_inventory()
    health = Health(DRIVER)
    xid = {"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}
    ecc = {"key": f"{DRIVER}/ecc", "value": "dbe", "effect": "NoSchedule"}
    adopted = {"gpu-0": [xid, ecc], "gpu-1-mig-1": [xid]}
    assert health.still_faulty(inv, adopted) == adopted  # nothing read yet
    assert health.update_faults({gpu(0).uuid: GpuFaults(last_xid=79, ecc_dbe=False),
                                 gpu(1).uuid: GpuFaults(last_xid=0)}) is True
    assert health.still_faulty(inv, adopted) == {"gpu-0": [xid]}
    # GPU 1 answers nothing now (lost): unknown again, its adopted taint stays.
    assert health.update_faults({gpu(0).uuid: GpuFaults(last_xid=None, ecc_dbe=True)}) is True
    assert health.still_faulty(inv, adopted) == adopted
    assert health.update_faults({gpu(0).uuid: GpuFaults(last_xid=None, ecc_dbe=True)}) is False


def test_a_cleared_xid_is_forgotten_on_the_gpu_and_its_mig_devices() -> None:
    from fakegpu.plugin.health import GpuFaults

    inv = _mig_inventory()
    health = Health(DRIVER)
    health.taints(inv)  # learns which MIG devices belong to which GPU
    assert health.record("MIG-2", "xid", "94") is True
    assert health.update_faults({gpu(1).uuid: GpuFaults(last_xid=94)}) is True
    assert effects(health, inv) == {"gpu-1-mig-2": [("94", "NoSchedule")]}
    assert health.update_faults({gpu(1).uuid: GpuFaults(last_xid=0)}) is True
    assert health.taints(inv) == {}
    assert health.record("MIG-2", "xid", "94") is True  # the same fault again is news


def test_nvlink_and_fabric_taints_follow_nvml_and_are_never_adopted() -> None:
    from fakegpu.plugin.health import GpuFaults
    from fakegpu.plugin.publish import sticky_taints
    from fakegpu.plugin.slices import build_slices

    inv = _mig_inventory()
    health = Health(DRIVER)
    health.update_faults({gpu(0).uuid: GpuFaults(links_down=(1, 4), fabric_degraded=True)})
    published = build_slices(DRIVER, "n", inv, "v1", 1, health.taints(inv))
    assert {(t["key"], t.get("value")) for t in published[0]["spec"]["devices"][0]["taints"]} \
        == {(f"{DRIVER}/nvlink-down", "1_4"), (f"{DRIVER}/fabric", "degraded")}
    assert sticky_taints(DRIVER, inv, published) == {}
    nvidia = Health(DRIVER, nvidia_compatible=True)  # NVIDIA's driver watches neither
    nvidia.update_faults({gpu(0).uuid: GpuFaults(links_down=(1,), fabric_degraded=True)})
    assert nvidia.taints(inv) == {}
