from __future__ import annotations

import dataclasses

import pytest

from fakegpu.plugin import slices
from fakegpu.plugin.discovery import Inventory

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
