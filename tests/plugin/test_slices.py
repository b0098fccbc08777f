from __future__ import annotations

import dataclasses

import pytest

from fakegpu.plugin import slices
from fakegpu.plugin.discovery import Device, Inventory, MigInfo, mig_device_name

from .helpers import DRIVER, NODE, gpu, inventory


def test_v1_slice_has_nvidia_attribute_names() -> None:
    [obj] = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 3)
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    spec = obj["spec"]
    assert spec["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert spec["nodeName"] == NODE and spec["driver"] == DRIVER
    dev = spec["devices"][1]
    assert dev["name"] == "gpu-1"
    attrs = dev["attributes"]
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["driverVersion"] == {"version": "580.159.3"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["cudaDriverVersion"] == {"version": "13.0.0"}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:19:00.0"}
    assert attrs["fakegpu.dev/nvlinkPeers"] == {"int": 7}
    assert dev["capacity"] == {"memory": {"value": "81559Mi"}}


def test_v1beta1_nests_under_basic() -> None:
    [obj] = slices.build_slices(DRIVER, NODE, inventory(1), "v1beta1", 1)
    dev = obj["spec"]["devices"][0]
    assert set(dev) == {"name", "basic"}
    assert dev["basic"]["attributes"]["uuid"]["string"].startswith("GPU-")


def test_large_pools_split_into_slices_of_128() -> None:
    inv = Inventory("580.1", "13.0", tuple(dataclasses.replace(gpu(0), name=f"gpu-{i}")
                                           for i in range(300)))
    objs = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    assert [len(o["spec"]["devices"]) for o in objs] == [128, 128, 44]
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in objs} == {3}
    assert len({o["metadata"]["name"] for o in objs}) == 3


def test_same_devices_ignores_generation_and_server_defaults() -> None:
    desired = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 0)
    published = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 5)
    published[0]["metadata"]["resourceVersion"] = "42"
    published[0]["spec"]["devices"][0]["allowMultipleAllocations"] = False  # a server default
    assert slices.same_devices(published, desired)
    fewer = slices.build_slices(DRIVER, NODE, inventory(1), "v1", 5)
    assert not slices.same_devices(fewer, desired)
    assert not slices.same_devices([], desired)


@pytest.mark.parametrize(("nbytes", "text"), [(80 << 30, "80Gi"), (81559 << 20, "81559Mi"),
                                               (1000, "1000"), (3 << 40, "3Ti")])
def test_quantity(nbytes: int, text: str) -> None:
    assert slices.quantity(nbytes) == text


def test_slice_names_are_dns_labels() -> None:
    name = slices.slice_name("gpu.fakegpu.dev", "a-very-long-node-name-" * 4, 0)
    assert len(name) <= 63 and name == name.lower() and "." not in name


def mig(gi: int, profile_id: int, start: int, size: int, ci: int = 0,
        shared: bool = False) -> Device:
    parent = gpu(2)
    info = MigInfo(gi_id=gi, ci_id=ci, profile_id=profile_id, placement_start=start,
                   placement_size=size, multiprocessors=16 * size, copy_engines=size,
                   decoders=size, encoders=0, jpeg_engines=size // 2, ofa_engines=0,
                   shared_gi=shared)
    return dataclasses.replace(parent, name=mig_device_name(parent.minor, info), type="mig",
                               uuid=f"MIG-{gi}-{ci}", parent_uuid=parent.uuid,
                               profile=f"{size}g.{10 * size}gb", memory_bytes=size * 10 << 30,
                               mig=info)


def test_mig_device_names_follow_nvidia_and_stay_unique() -> None:
    assert mig(1, 9, 0, 4).name == "gpu-2-mig-9-0-4"
    assert mig(3, 19, 6, 1).name == "gpu-2-mig-19-6-1"
    # Two compute instances of one GPU instance: NVIDIA's name alone would repeat.
    a, b = mig(1, 9, 0, 4, ci=0, shared=True), mig(1, 9, 0, 4, ci=1, shared=True)
    assert (a.name, b.name) == ("gpu-2-mig-9-0-4-ci0", "gpu-2-mig-9-0-4-ci1")


def test_mig_device_entry_has_nvidia_attributes_and_capacities() -> None:
    dev = mig(2, 14, 4, 2)
    inv = Inventory("580.1", "13.0", (dev,))
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    [entry] = obj["spec"]["devices"]
    assert entry["name"] == "gpu-2-mig-14-4-2"
    attrs = entry["attributes"]
    assert attrs["type"] == {"string": "mig"}
    assert attrs["uuid"] == {"string": "MIG-2-0"}
    assert attrs["parentUUID"] == {"string": gpu(2).uuid}
    assert attrs["profile"] == {"string": "2g.20gb"}
    assert attrs["fakegpu.dev/gpuInstance"] == {"int": 2}
    assert entry["capacity"] == {
        "memory": {"value": "20Gi"}, "multiprocessors": {"value": "32"},
        "copyEngines": {"value": "2"}, "decoders": {"value": "2"}, "encoders": {"value": "0"},
        "jpegEngines": {"value": "1"}, "ofaEngines": {"value": "0"},
        "memorySlice4": {"value": "1"}, "memorySlice5": {"value": "1"},
    }


def test_taints_lost_devices_and_the_smaller_slice_limit() -> None:
    devices = [dataclasses.replace(gpu(0), name=f"gpu-{i}", minor=i) for i in range(100)]
    devices[5] = dataclasses.replace(devices[5], lost=True)
    inv = Inventory("580.1", "13.0", tuple(devices))
    xid = slices.taint(DRIVER, slices.TAINT_XID, "48")
    objs = slices.build_slices(DRIVER, NODE, inv, "v1", 1, {"gpu-7": [xid]})
    assert [len(o["spec"]["devices"]) for o in objs] == [64, 36]
    by_name = {d["name"]: d for o in objs for d in o["spec"]["devices"]}
    assert by_name["gpu-5"]["taints"] == [{"key": f"{DRIVER}/gpu-lost", "effect": "NoSchedule"}]
    assert by_name["gpu-7"]["taints"] == [{"key": f"{DRIVER}/xid", "value": "48",
                                           "effect": "NoSchedule"}]
    assert "taints" not in by_name["gpu-6"]
    beta = slices.build_slices(DRIVER, NODE, inv, "v1beta1", 1, {"gpu-7": [xid]})
    assert next(d for o in beta for d in o["spec"]["devices"]
            if d["name"] == "gpu-7")["basic"]["taints"][0]["value"] == "48"
    # Without taint support the unhealthy devices leave the pool instead.
    plain = slices.build_slices(DRIVER, NODE, inv, "v1", 1, {"gpu-7": [xid]}, use_taints=False)
    names = [d["name"] for o in plain for d in o["spec"]["devices"]]
    assert len(names) == 98 and "gpu-5" not in names and "gpu-7" not in names
    assert [len(o["spec"]["devices"]) for o in plain] == [98]


def test_same_devices_sees_a_taint_go_away() -> None:
    xid = slices.taint(DRIVER, slices.TAINT_XID, "79")
    tainted = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 4, {"gpu-0": [xid]})
    tainted[0]["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2025-01-01T00:00:00Z"
    assert slices.same_devices(tainted, slices.build_slices(DRIVER, NODE, inventory(2), "v1", 0,
                                                            {"gpu-0": [xid]}))
    assert not slices.same_devices(tainted, slices.build_slices(DRIVER, NODE, inventory(2),
                                                                "v1", 0))
