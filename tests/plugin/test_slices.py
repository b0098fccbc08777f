from __future__ import annotations

import dataclasses
import re

import pytest

from fakegpu.kubeletplugin import slicepool
from fakegpu.plugin import slices
from fakegpu.plugin.discovery import (
    Device,
    Inventory,
    MigInfo,
    mig_device_name,
    nvlib_profile_name,
    rfc1123,
)
from fakegpu.plugin.shape import Shape, parse_shares

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
    assert slicepool.same_devices(published, desired)
    fewer = slices.build_slices(DRIVER, NODE, inventory(1), "v1", 5)
    assert not slicepool.same_devices(fewer, desired)
    assert not slicepool.same_devices([], desired)


@pytest.mark.parametrize(("nbytes", "text"), [(80 << 30, "80Gi"), (81559 << 20, "81559Mi"),
                                               (1000, "1000"), (3 << 40, "3Ti")])
def test_quantity(nbytes: int, text: str) -> None:
    assert slices.quantity(nbytes) == text


def test_slice_names_are_dns_labels() -> None:
    name = slicepool.slice_name("gpu.fakegpu.dev", "a-very-long-node-name-" * 4, 0)
    assert len(name) <= 63 and name == name.lower() and "." not in name


def mig(gi: int, profile_id: int, start: int, size: int, ci: int = 0,
        shared: bool = False, profile: str = "") -> Device:
    parent = gpu(2)
    info = MigInfo(gi_id=gi, ci_id=ci, profile_id=profile_id, placement_start=start,
                   placement_size=size, multiprocessors=16 * size, copy_engines=size,
                   decoders=size, encoders=0, jpeg_engines=size // 2, ofa_engines=0,
                   shared_gi=shared)
    profile = profile or f"{size}g.{10 * size}gb"
    return dataclasses.replace(parent, name=mig_device_name(parent.minor, profile, info),
                               type="mig", uuid=f"MIG-{gi}-{ci}", parent_uuid=parent.uuid,
                               profile=profile, memory_bytes=size * 10 << 30, mig=info)


# NVIDIA's driver parses its MIG device names back with this (cmd/gpu-kubelet-plugin/mig.go).
NVIDIA_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


def test_mig_device_names_follow_nvidia_and_stay_unique() -> None:
    # NVIDIA's current scheme: profile without dots ('+' as '-'), GI profile id, start.
    assert mig(1, 9, 0, 4, profile="3g.20gb").name == "gpu-2-mig-3g20gb-9-0"
    assert mig(3, 20, 1, 1, profile="1g.10gb+me").name == "gpu-2-mig-1g10gb-me-20-1"
    assert mig(3, 19, 6, 1, profile="1g.10gb").name == "gpu-2-mig-1g10gb-19-6"
    parsed = NVIDIA_MIG_NAME.match("gpu-2-mig-1g10gb-me-20-1")
    assert parsed is not None and parsed.groups() == ("2", "1g10gb-me", "20", "1")
    # Two compute instances of one GPU instance (fakegpu's own mode): NVIDIA's name repeats.
    a, b = mig(1, 9, 0, 4, ci=0, shared=True), mig(1, 9, 0, 4, ci=1, shared=True)
    assert (a.name, b.name) == ("gpu-2-mig-4g40gb-9-0-ci0", "gpu-2-mig-4g40gb-9-0-ci1")


@pytest.mark.parametrize(("index", "mib", "total_mib", "name"), [
    # GB200 (189471 MiB): production 1g (22 GiB) and the pre-production 20 GiB both round to
    # 23 GB; 45.50 GiB is 46.5 -> 47 (Go's math.Round: half away from zero, not to even).
    (0, 22528, 189471, "1g.23gb"), (7, 22528, 189471, "1g.23gb+me"),
    (0, 20480, 189471, "1g.23gb"), (1, 46592, 189471, "2g.47gb"), (4, 188416, 189471, "7g.186gb"),
    (0, 9984, 81559, "1g.10gb"), (2, 40448, 81559, "3g.40gb"), (4, 81152, 81559, "7g.80gb"),
    (0xF, 9984, 81559, "1g.10gb+me.all"), (0xD, 9984, 81559, "1g.10gb-me"),
    (0xC, 40448, 81559, "4g.40gb+gfx"), (0x11, 9984, 81559, ""),  # unknown to go-nvlib
])
def test_profile_names_computed_as_go_nvlib_does(index: int, mib: int, total_mib: int,
                                                 name: str) -> None:
    assert nvlib_profile_name(index, mib, total_mib << 20) == name


def test_every_catalog_profile_name_is_what_nvidia_computes() -> None:
    """NVIDIA's driver names profiles from their memory; the catalog's NVML names must agree
    (GB200's pre-production 1g.24gb, 20 GiB, did not: production boards say 1g.23gb)."""
    from fakegpu.topology import catalog

    for key, product in catalog.products().items():
        for p in product.mig.profiles if product.mig else ():
            assert nvlib_profile_name(p.id, p.memory_mib, product.memory_mib << 20) == p.name, key


def test_device_names_are_dns_labels_for_every_profile_suffix() -> None:
    assert rfc1123("1g10gb+me.all".replace(".", "")) == "1g10gb-meall"
    assert rfc1123("-1G.5GB+ME-") == "1g.5gb-me"


def test_mig_device_entry_has_nvidia_attributes_and_capacities() -> None:
    dev = dataclasses.replace(mig(2, 14, 4, 2), addressing_mode="HMM")
    inv = Inventory("580.1", "13.0", (dev,))
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    [entry] = obj["spec"]["devices"]
    assert entry["name"] == "gpu-2-mig-2g20gb-14-4"
    attrs = entry["attributes"]
    assert attrs["type"] == {"string": "mig"}
    assert attrs["uuid"] == {"string": "MIG-2-0"}
    assert attrs["parentUUID"] == {"string": gpu(2).uuid}
    assert attrs["profile"] == {"string": "2g.20gb"}
    assert attrs["addressingMode"] == {"string": "HMM"}
    assert attrs["fakegpu.dev/gpuInstance"] == {"int": 2}
    assert entry["capacity"] == {
        "memory": {"value": "20Gi"}, "multiprocessors": {"value": "32"},
        "copyEngines": {"value": "2"}, "decoders": {"value": "2"}, "encoders": {"value": "0"},
        "jpegEngines": {"value": "1"}, "ofaEngines": {"value": "0"},
        "memorySlice4": {"value": "1"}, "memorySlice5": {"value": "1"},
    }


def test_unknown_pcie_root_and_addressing_mode_are_left_out() -> None:
    """NVIDIA publishes neither when it cannot tell (no sysfs node; NVML NOT_SUPPORTED): an
    invented root (the GPU's own bus, pci0000:18) would claim a topology that is not there."""
    bare = dataclasses.replace(gpu(0), pcie_root="", addressing_mode="", numa_node=None)
    known = dataclasses.replace(gpu(1), pcie_root="pci0000:17", addressing_mode="ATS",
                                numa_node=0)
    [obj] = slices.build_slices(DRIVER, NODE, Inventory("580.1", "13.0", (bare, known)), "v1", 1)
    first, second = (d["attributes"] for d in obj["spec"]["devices"])
    assert "resource.kubernetes.io/pcieRoot" not in first and "addressingMode" not in first
    assert "resource.kubernetes.io/numaNode" not in first
    assert second["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:17"}
    # NUMA node 0 is a value, not "unknown": the standard's scalar int form.
    assert second["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert second["addressingMode"] == {"string": "ATS"}


def test_slices_are_owned_by_their_node() -> None:
    owner = slicepool.node_owner(NODE, "1234-uid")
    objs = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 1, owner=owner)
    assert objs[0]["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "1234-uid", "controller": True}]
    # A slice published without the owner (before it was known) is not "the same".
    unowned = slices.build_slices(DRIVER, NODE, inventory(2), "v1", 1)
    assert not slicepool.same_devices(unowned, objs)
    assert slicepool.same_devices(objs, unowned)  # no owner known: whatever is there is kept


def test_informational_taints_keep_the_device_in_a_pool_without_taints() -> None:
    inv = inventory(3)
    note = slices.taint(DRIVER, slices.TAINT_XID, "13", slices.INFORMATIONAL)
    fatal = slices.taint(DRIVER, slices.TAINT_XID, "48")
    plain = slices.build_slices(DRIVER, NODE, inv, "v1", 1, {"gpu-0": [note], "gpu-1": [fatal]},
                                use_taints=False)
    assert [d["name"] for d in plain[0]["spec"]["devices"]] == ["gpu-0", "gpu-2"]


def test_nvidia_compatible_gpu_lost_taints_every_device_of_the_node() -> None:
    inv = dataclasses.replace(inventory(3), lost_indices=(1,))
    lost = {"key": f"{DRIVER}/gpu-lost", "effect": "NoSchedule"}
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1, node_wide_lost=True)
    assert [d.get("taints") for d in obj["spec"]["devices"]] == [[lost]] * 3
    [own] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)  # fakegpu: only the lost GPU's
    assert [d.get("taints") for d in own["spec"]["devices"]] == [None] * 3


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
    assert slicepool.same_devices(tainted, slices.build_slices(DRIVER, NODE, inventory(2), "v1", 0,
                                                            {"gpu-0": [xid]}))
    assert not slicepool.same_devices(tainted, slices.build_slices(DRIVER, NODE, inventory(2),
                                                                "v1", 0))


INDEX_KEYS = ("index", "minor", "parentIndex")


def test_fakegpus_shape_publishes_index_and_minor_attributes() -> None:
    # fakegpu's own driver: a GPU's NVML `index` and `minor`, a MIG device's GPU's index as
    # `parentIndex` (selectors on them work: issue 13).
    whole = dataclasses.replace(gpu(3), index=1)
    attrs = slices.device_attributes(whole, inventory(1))
    assert attrs["index"] == {"int": 1} and attrs["minor"] == {"int": 3}
    part = dataclasses.replace(mig(2, 14, 4, 2), index=2)
    attrs = slices.device_attributes(part, inventory(1))
    assert attrs["parentIndex"] == {"int": 2}
    assert "index" not in attrs and "minor" not in attrs


def test_nvidias_current_shape_has_no_index_attributes() -> None:
    # NVIDIA's driver dropped them after v25.3 (commit 36fc80ab): none of them on any device.
    current = Shape(nvidia=True)
    for device in (dataclasses.replace(gpu(3), index=1),
                   dataclasses.replace(mig(2, 14, 4, 2), index=2)):
        attrs = slices.device_attributes(device, inventory(1), current)
        assert not set(INDEX_KEYS) & set(attrs), attrs
        assert attrs["resource.kubernetes.io/pciBusID"] == {"string": device.pci_bus_id}


def test_nvidias_v25_3_shape_keeps_them() -> None:
    old = Shape(nvidia=True, release="v25.3")
    attrs = slices.device_attributes(dataclasses.replace(gpu(3), index=1), inventory(1), old)
    assert attrs["index"] == {"int": 1} and attrs["minor"] == {"int": 3}
    attrs = slices.device_attributes(dataclasses.replace(mig(2, 14, 4, 2), index=2),
                                     inventory(1), old)
    assert attrs["parentIndex"] == {"int": 2}


def test_an_unknown_nvidia_release_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--nvidia-compat-release: 'v25\.8' is not one of"):
        Shape(nvidia=True, release="v25.8")


@pytest.mark.parametrize("policy", ["memory", "unlimited", "4"])
def test_nvidias_consumable_shares_publish_every_gpu_and_mig_device_shared(policy: str) -> None:
    # NVIDIA main's --consumable-shares (consumable_shares.go): memory in whole MiB with a 1Mi
    # step; `memory` defaults to all of it, `unlimited` and N to none; N adds `shares`.
    odd = dataclasses.replace(gpu(0), memory_bytes=(81559 << 20) + 12345)
    inv = Inventory("580.1", "13.0", (odd, mig(2, 14, 4, 2)))
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1,
                                shape=Shape(nvidia=True, consumable_shares=policy))
    for entry in obj["spec"]["devices"]:
        assert entry["allowMultipleAllocations"] is True
        memory = entry["capacity"]["memory"]
        top = "81559Mi" if entry["name"] == "gpu-0" else "20Gi"
        assert memory["value"] == top
        assert memory["requestPolicy"] == {
            "default": top if policy == "memory" else "0",
            "validRange": {"min": "1Mi" if policy == "memory" else "0", "max": top,
                           "step": "1Mi"}}
        shares = entry["capacity"].get("shares")
        assert shares == (None if policy != "4" else {"value": "4", "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}}})
    off = slices.build_slices(DRIVER, NODE, inv, "v1", 1, use_shared=False,
                              shape=Shape(nvidia=True, consumable_shares=policy))
    assert not any("allowMultipleAllocations" in e for e in off[0]["spec"]["devices"])


@pytest.mark.parametrize(("text", "ok"), [("memory", True), ("unlimited", True), ("8", True),
                                          ("disabled", True), ("0", False), ("-1", False),
                                          ("all", False)])
def test_consumable_shares_values_are_nvidias(text: str, ok: bool) -> None:
    if ok:
        assert parse_shares(text) == text
    else:
        with pytest.raises(ValueError, match=r"--consumable-shares: .* is not one of"):
            parse_shares(text)
