"""Dynamic MIG counters (fakegpu/plugin/partitions.py) against every MIG table in the catalog.

The scheduler allocates partitionable devices by counter arithmetic alone; these tests hold the
CounterSet to the hardware's rules (as the catalog states them and the fake NVML enforces them):
two placements the hardware cannot hold at once never fit together, ones it can always do, and
the whole GPU fits beside nothing.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from fakegpu.kubeletplugin import slicepool
from fakegpu.plugin import partitions
from fakegpu.plugin.partitions import GpuPartitions, Profile
from fakegpu.topology import catalog
from fakegpu.topology.model import Product

MIG_PRODUCTS = sorted((p for p in catalog.products().values() if p.mig is not None),
                      key=lambda p: p.key)


def gpu_of(product: Product, minor: int = 0) -> GpuPartitions:
    mig = product.mig
    assert mig is not None
    return GpuPartitions(minor=minor, memory_slices=mig.memory_slices, profiles=tuple(
        Profile(name=p.name, index=p.id, profile_id=p.smi_id if p.smi_id is not None else p.id,
                instance_count=p.instance_count, compute_slices=p.slice_count,
                memory_mib=p.memory_mib, multiprocessors=p.sm_count,
                copy_engines=p.copy_engines, decoders=p.decoders, encoders=p.encoders,
                jpeg_engines=p.jpegs, ofa_engines=p.ofas,
                placements=tuple((pl.start, pl.size) for pl in p.placements))
        for p in mig.profiles))


def test_the_catalog_has_mig_tables() -> None:
    assert {p.key for p in MIG_PRODUCTS} >= {"A100-SXM4-40GB", "H100-SXM5-80GB"}


@pytest.mark.parametrize("product", MIG_PRODUCTS, ids=lambda p: p.key)
def test_counters_admit_a_pair_of_placements_exactly_when_the_hardware_does(
        product: Product) -> None:
    gpu = gpu_of(product)
    counters = gpu.counters()
    placements = gpu.placements()
    overlapping = admitted = 0
    for a, b in itertools.combinations_with_replacement(placements, 2):
        both = [a, b] if a != b else [a, a]
        fit = partitions.fits(counters, [gpu.consumption(p) for p in both])
        assert fit == partitions.hardware_allows(gpu, both), (
            f"{product.key}: {a.profile.name}@{a.start} + {b.profile.name}@{b.start}: "
            f"counters say {fit}")
        if partitions.overlapping(a, b):
            overlapping += 1
            assert not fit
        admitted += fit
    assert overlapping and admitted  # both kinds of pair exist on every MIG GPU


@pytest.mark.parametrize("product", MIG_PRODUCTS, ids=lambda p: p.key)
def test_every_placement_fits_alone_and_the_whole_gpu_beside_none(product: Product) -> None:
    gpu = gpu_of(product)
    counters = gpu.counters()
    assert partitions.fits(counters, [gpu.full_consumption()])
    for placement in gpu.placements():
        assert partitions.fits(counters, [gpu.consumption(placement)]), placement
        assert not partitions.fits(counters, [gpu.full_consumption(),
                                              gpu.consumption(placement)]), placement


@pytest.mark.parametrize("product", MIG_PRODUCTS, ids=lambda p: p.key)
def test_greedy_fill_with_the_smallest_profile_stops_where_the_hardware_does(
        product: Product) -> None:
    # Seven 1g instances fill a GPU (7 compute slices); the counters must refuse an eighth of
    # any profile, as NVML does.
    gpu = gpu_of(product)
    counters = gpu.counters()
    smallest = min(gpu.profiles, key=lambda p: (p.compute_slices, p.memory_mib, p.index))
    taken: list[partitions.Placement] = []
    for placement in (p for p in gpu.placements() if p.profile == smallest):
        if partitions.fits(counters, [gpu.consumption(p) for p in [*taken, placement]]):
            taken.append(placement)
    assert len(taken) == smallest.instance_count
    for other in gpu.placements():
        together = [*taken, other]
        assert partitions.fits(counters, [gpu.consumption(p) for p in together]) == \
            partitions.hardware_allows(gpu, together)


def test_names_follow_nvidias_driver() -> None:
    h100 = gpu_of(catalog.products()["H100-SXM5-80GB"], minor=3)
    counters = h100.counters()
    assert partitions.counter_set_name(3) == "gpu-3-counter-set"
    assert set(counters) == {"multiprocessors", "copy-engines", "decoders", "encoders",
                             "jpeg-engines", "ofa-engines", "memory", "compute-slices",
                             *(f"memory-slice-{i}" for i in range(8))}
    assert counters["compute-slices"] == 7
    assert counters["multiprocessors"] == 132
    one_g = next(p for p in h100.placements() if p.profile.name == "1g.10gb" and p.start == 2)
    used = h100.consumption(one_g)
    assert used["memory-slice-2"] == 1 and "memory-slice-1" not in used
    assert used["compute-slices"] == 1 and used["multiprocessors"] == 16


# --- the slices that carry them ---------------------------------------------------------------


def _dynamic_inventory(gpus: int) -> Any:
    """``gpus`` partitionable H100s, devices and sets as discovery builds them (from the
    catalog's table instead of NVML)."""
    from dataclasses import replace

    from fakegpu.plugin.discovery import Inventory, MigInfo, mig_device_name

    from .helpers import gpu

    h100 = catalog.products()["H100-SXM5-80GB"]
    devices = []
    sets = []
    for minor in range(gpus):
        whole = gpu(minor)
        parts = gpu_of(h100, minor)
        devices.append(replace(whole, consumes=tuple(sorted(parts.full_consumption().items()))))
        for placement in parts.placements():
            p = placement.profile
            info = MigInfo(gi_id=-1, ci_id=-1, profile_id=p.profile_id,
                           placement_start=placement.start, placement_size=placement.size,
                           multiprocessors=p.multiprocessors, copy_engines=p.copy_engines,
                           decoders=p.decoders, encoders=p.encoders,
                           jpeg_engines=p.jpeg_engines, ofa_engines=p.ofa_engines)
            devices.append(replace(
                whole, name=mig_device_name(minor, p.name, info), type="mig", uuid="",
                memory_bytes=p.memory_mib << 20, parent_uuid=whole.uuid, profile=p.name, mig=info,
                consumes=tuple(sorted(parts.consumption(placement).items()))))
        sets.append((partitions.counter_set_name(minor), tuple(sorted(parts.counters().items()))))
    return Inventory(driver_version="580.159.03", cuda_driver_version="13.0",
                     devices=tuple(devices), counter_sets=tuple(sets))


def test_from_1_35_counters_have_slices_of_their_own() -> None:
    from fakegpu.plugin import slices

    from .helpers import DRIVER, NODE

    inv = _dynamic_inventory(gpus=8)  # 8 x 26 devices
    out = slices.build_slices(DRIVER, NODE, inv, "v1", 1, separate_counters=True)
    counters_only = [s for s in out if "sharedCounters" in s["spec"]]
    assert len(counters_only) == 1 and "devices" not in counters_only[0]["spec"]
    assert [c["name"] for c in counters_only[0]["spec"]["sharedCounters"]] == [
        f"gpu-{i}-counter-set" for i in range(8)]
    device_slices = [s for s in out if "sharedCounters" not in s["spec"]]
    assert all(len(s["spec"]["devices"]) <= 64 for s in device_slices)
    assert sum(len(s["spec"]["devices"]) for s in device_slices) == 8 * 26
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in out} == {len(out)}
    part = next(d for s in device_slices for d in s["spec"]["devices"]
                if d["name"] == "gpu-2-mig-1g10gb-19-5")
    assert "uuid" not in part["attributes"]  # it does not exist yet
    assert part["consumesCounters"] == [{"counterSet": "gpu-2-counter-set", "counters": {
        **{k: {"value": str(v)} for k, v in {
            "multiprocessors": 16, "copy-engines": 1, "decoders": 1, "encoders": 0,
            "jpeg-engines": 1, "ofa-engines": 0, "compute-slices": 1}.items()},
        "memory": {"value": "9984Mi"},  # canonical binary, as the apiserver stores it
        "memory-slice-5": {"value": "1"}}}]
    assert slicepool.same_devices(out, slices.build_slices(DRIVER, NODE, inv, "v1", 2))


def test_nvidias_shape_of_dynamic_mig() -> None:
    # NVIDIA's partitions.go: the whole GPU's capacity is the largest of each MIG capacity (its
    # memory the 7g.80gb's, not NVML's total) and a partition has no memorySlice<i> capacity;
    # fakegpu's own shape keeps both (total memory; slices for CEL).
    from fakegpu.plugin import slices
    from fakegpu.plugin.shape import Shape

    from .helpers import DRIVER, NODE

    inv = _dynamic_inventory(gpus=1)
    nvidia = {d["name"]: d for s in slices.build_slices(DRIVER, NODE, inv, "v1", 1,
                                                         shape=Shape(nvidia=True))
              for d in s["spec"].get("devices") or ()}
    assert nvidia["gpu-0"]["capacity"] == {k: {"value": v} for k, v in {
        "multiprocessors": "132", "copyEngines": "8", "decoders": "7", "encoders": "0",
        "jpegEngines": "7", "ofaEngines": "1", "memory": "81152Mi"}.items()}
    part = nvidia["gpu-0-mig-3g40gb-9-4"]["capacity"]
    assert not [k for k in part if k.startswith("memorySlice")], part
    assert part["memory"] == {"value": "40448Mi"}
    own = {d["name"]: d for s in slices.build_slices(DRIVER, NODE, inv, "v1", 1)
           for d in s["spec"].get("devices") or ()}
    assert own["gpu-0"]["capacity"] == {"memory": {"value": "81559Mi"}}  # NVML total
    assert own["gpu-0-mig-3g40gb-9-4"]["capacity"]["memorySlice4"] == {"value": "1"}


def test_on_1_34_each_slice_holds_whole_gpus_with_their_counters() -> None:
    from fakegpu.plugin import slices

    from .helpers import DRIVER, NODE

    inv = _dynamic_inventory(gpus=3)
    out = slices.build_slices(DRIVER, NODE, inv, "v1", 1, separate_counters=False)
    assert len(out) == 2  # 26 + 26 devices, then the third GPU's
    for s in out:
        minors = {int(d["name"].split("-")[1]) for d in s["spec"]["devices"]}
        assert [c["name"] for c in s["spec"]["sharedCounters"]] == [
            f"gpu-{m}-counter-set" for m in sorted(minors)]
        assert len(s["spec"]["devices"]) <= 64


# --- an apiserver without the gates ---------------------------------------------------------------


def _store_dropping(*fields: str) -> Any:
    """The apiserver's slice store with DRAPartitionableDevices / DRAConsumableCapacity off:
    it silently drops the fields, as the real one does."""
    import copy

    from .test_publish import SliceStore

    class Dropping(SliceStore):
        def _store(self, body: dict[str, Any]) -> dict[str, Any]:
            self.rv += 1
            self.writes += 1
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if "sharedCounters" in fields:
                obj["spec"].pop("sharedCounters", None)
            for dev in obj["spec"].get("devices") or ():
                for field in fields:
                    dev.pop(field, None)
                if "compatibilityGroups" in fields:  # DRADeviceCompatibilityGroups off
                    for consumption in dev.get("consumesCounters") or ():
                        consumption.pop("compatibilityGroups", None)
                if "allowMultipleAllocations" in fields:  # the same gate's field
                    for capacity in (dev.get("capacity") or {}).values():
                        capacity.pop("requestPolicy", None)
            self.objs[obj["metadata"]["name"]] = obj
            return copy.deepcopy(obj)

    return Dropping()


def test_without_partitionable_devices_no_partition_is_published() -> None:
    from fakegpu.plugin.driver import Devices
    from fakegpu.plugin.publish import SlicePublisher

    from .helpers import DRIVER, NODE

    store = _store_dropping("sharedCounters", "consumesCounters")
    pub = SlicePublisher(store, Devices(lambda: _dynamic_inventory(gpus=2)), DRIVER, NODE)
    assert pub.sync() is True  # counters sent, dropped: noticed
    assert pub.use_counters is False
    pub.sync()
    names = [d["name"] for o in store.objs.values() for d in o["spec"].get("devices") or ()]
    assert sorted(names) == ["gpu-0", "gpu-1"]  # whole GPUs only: nothing can overlap
    assert not any("sharedCounters" in o["spec"] for o in store.objs.values())
    assert pub.sync() is False  # and stable from then on


def test_without_consumable_capacity_a_shared_gpu_is_an_ordinary_one() -> None:
    from dataclasses import replace

    from fakegpu.plugin.driver import Devices
    from fakegpu.plugin.publish import SlicePublisher

    from .helpers import DRIVER, NODE, inventory

    inv = inventory(1)
    inv = replace(inv, devices=(replace(inv.devices[0], shared=True),))
    store = _store_dropping("allowMultipleAllocations")
    pub = SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE)
    pub.sync()
    assert pub.use_shared is False
    pub.sync()
    [obj] = store.objs.values()
    assert "requestPolicy" not in obj["spec"]["devices"][0]["capacity"]["memory"]
    assert pub.sync() is False


# --- a time-sliced GPU (KEP-5963 compatibility groups) ------------------------------------------


def _time_sliced(shares: int) -> Any:
    from fakegpu.plugin.discovery import time_slice_shares

    return time_slice_shares(_dynamic_inventory(gpus=2), {0: shares})


def test_a_time_sliced_gpu_consumes_in_groups_that_alone_keep_shares_from_mig_devices() -> None:
    from fakegpu.plugin import slices

    from .helpers import DRIVER, NODE

    out = slices.build_slices(DRIVER, NODE, _time_sliced(4), "v1", 1)
    entries = {d["name"]: d for s in out for d in s["spec"].get("devices") or ()}
    sets = {c["name"]: c for s in out for c in s["spec"].get("sharedCounters") or ()}

    def groups(name: str) -> list[str] | None:
        [consumption] = entries[name]["consumesCounters"]
        return consumption.get("compatibilityGroups")

    shares = sorted(n for n in entries if "-ts-" in n)
    assert shares == [f"gpu-0-ts-{k}" for k in range(4)]
    assert all(groups(n) == ["time-sliced"] for n in shares)
    assert all(groups(n) == ["mig"] for n in entries if n.startswith("gpu-0-mig-"))
    assert all(groups(n) is None for n in entries if n.startswith("gpu-1-") or n == "gpu-0")
    attrs = entries["gpu-0-ts-2"]["attributes"]
    assert attrs["fakegpu.dev/timeSlice"] == {"int": 2}
    assert attrs["fakegpu.dev/timeSlices"] == {"int": 4}
    # Counters alone admit a share beside a 1g MIG device (and all four shares together):
    # without the groups the scheduler would allocate what the GPU cannot do.
    counters = _parse(sets["gpu-0-counter-set"]["counters"])
    one_g = next(n for n in entries if n.startswith("gpu-0-mig-1g10gb-19-"))
    assert partitions.fits(counters, [_consumed(entries["gpu-0-ts-0"]), _consumed(entries[one_g])])
    assert partitions.fits(counters, [_consumed(entries[n]) for n in shares])
    assert not partitions.fits(counters, [_consumed(entries[n]) for n in shares]
                               + [_consumed(entries["gpu-0"])])


def _parse(counters: dict[str, Any]) -> dict[str, int]:
    from kubernetes.utils.quantity import parse_quantity

    return {k: int(parse_quantity(v["value"]))  # type: ignore[no-untyped-call]
            for k, v in counters.items()}


def _consumed(entry: dict[str, Any]) -> dict[str, int]:
    [consumption] = entry["consumesCounters"]
    return _parse(consumption["counters"])


def test_without_compatibility_groups_no_share_is_published() -> None:
    from fakegpu.plugin.driver import Devices
    from fakegpu.plugin.publish import SlicePublisher

    from .helpers import DRIVER, NODE

    store = _store_dropping("compatibilityGroups")
    pub = SlicePublisher(store, Devices(lambda: _time_sliced(2)), DRIVER, NODE)
    assert pub.sync() is True  # groups sent, dropped: noticed
    assert pub.use_groups is False and pub.use_counters is True
    pub.sync()
    names = [d["name"] for o in store.objs.values() for d in o["spec"].get("devices") or ()]
    assert "gpu-0-ts-0" not in names and "gpu-0-mig-1g10gb-19-0" in names
    assert pub.sync() is False  # and stable from then on
