"""Slice publishing logic against an in-memory stand-in for the apiserver's slice store."""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any

import pytest

from fakegpu.kube.errors import KubeError
from fakegpu.plugin.discovery import Inventory
from fakegpu.plugin.driver import Devices
from fakegpu.plugin.health import Health
from fakegpu.plugin.publish import SlicePublisher
from fakegpu.plugin.shape import Shape

from .helpers import DRIVER, NODE, inventory


class SliceStore:
    """The apiserver's slice store; ``drop_taints`` plays one whose DRADeviceTaints gate is off
    (it silently wipes the field, as the real one does)."""

    def __init__(self, version: str = "v1", drop_taints: bool = False, minor: int = 37,
                 node_uid: str | None = "node-uid-1") -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        self.served, self.writes, self.rv = version, 0, 0
        self.drop_taints = drop_taints
        self.minor = minor
        self.uid = node_uid  # None: the plugin may not read Nodes (403)
        self.node_reads = 0

    def version(self) -> str:
        return self.served

    def server_minor(self) -> int:
        return self.minor

    def node_uid(self, name: str) -> str:
        self.node_reads += 1
        if self.uid is None:
            raise KubeError(f"cannot read Node {name}: HTTP 403 Forbidden", 403)
        return self.uid

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objs.values()
                if o["spec"]["driver"] == driver and o["spec"]["nodeName"] == node]

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        assert body["metadata"]["name"] not in self.objs
        return self._store(body)

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        assert body["metadata"]["resourceVersion"] == self.objs[body["metadata"]["name"]][
            "metadata"]["resourceVersion"]
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        for dev in obj["spec"]["devices"]:
            if self.drop_taints:
                dev.pop("taints", None)
            for t in dev.get("taints", []):
                t["timeAdded"] = "2025-01-01T00:00:00Z"  # the apiserver's default
        self.objs[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    def delete_slice(self, name: str) -> None:
        self.objs.pop(name, None)


def test_generation_bumps_only_when_devices_change() -> None:
    count = {"n": 4}
    store = SliceStore()
    pub = SlicePublisher(store, Devices(lambda: inventory(count["n"])), DRIVER, NODE)
    assert pub.sync() is True
    [obj] = store.objs.values()
    assert obj["spec"]["pool"]["generation"] == 1 and len(obj["spec"]["devices"]) == 4
    assert pub.sync() is False and store.writes == 1  # nothing changed: nothing written
    # A second instance publishing the same devices agrees with the first.
    other = SlicePublisher(store, Devices(lambda: inventory(4)), DRIVER, NODE)
    assert other.sync() is False
    count["n"] = 3  # a GPU is lost
    assert pub.sync() is True
    [obj] = store.objs.values()
    assert obj["spec"]["pool"]["generation"] == 2 and len(obj["spec"]["devices"]) == 3
    assert pub.cleanup() is True and store.objs == {}


def test_publishes_the_negotiated_version_shape() -> None:
    store = SliceStore("v1beta1")
    SlicePublisher(store, Devices(lambda: inventory(1)), DRIVER, NODE).sync()
    [obj] = store.objs.values()
    assert obj["apiVersion"] == "resource.k8s.io/v1beta1"
    assert "basic" in obj["spec"]["devices"][0]


def taints_of(store: SliceStore) -> dict[str, list[tuple[str, str]]]:
    return {d["name"]: [(t["key"], t.get("value", "")) for t in d.get("taints", [])]
            for o in store.objs.values() for d in o["spec"]["devices"]}


def generation(store: SliceStore) -> int:
    return int(next(iter(store.objs.values()))["spec"]["pool"]["generation"])


def lose(inv: Inventory, index: int) -> Inventory:
    """What discovery returns once GPU ``index`` answers GPU_IS_LOST."""
    return dataclasses.replace(inv, devices=tuple(d for d in inv.devices if d.minor != index),
                               lost_indices=(index,))


def test_xid_taint_is_published_and_kept_by_an_instance_that_never_saw_it() -> None:
    store = SliceStore()
    health = Health(DRIVER)
    inv = Inventory("580.1", "13.0", tuple(dataclasses.replace(d, index=d.minor)
                                           for d in inventory(3).devices))
    pub = SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE, health=health.taints)
    assert pub.sync() is True and taints_of(store)["gpu-1"] == []
    assert health.record(inv.devices[1].uuid, "xid", "48") is True
    assert pub.sync() is True and generation(store) == 2
    assert taints_of(store)["gpu-1"] == [(f"{DRIVER}/xid", "48")]
    assert pub.sync() is False  # the apiserver's timeAdded default is no difference
    newcomer = SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE)  # no events seen
    assert newcomer.sync() is False and taints_of(store)["gpu-1"] == [(f"{DRIVER}/xid", "48")]


def test_lost_gpu_is_tainted_then_untainted_when_it_answers_again() -> None:
    store = SliceStore()
    base = Inventory("580.1", "13.0", tuple(dataclasses.replace(d, index=d.minor)
                                            for d in inventory(3).devices))
    now = {"inv": base}
    pub = SlicePublisher(store, Devices(lambda: now["inv"]), DRIVER, NODE)
    pub.sync()
    now["inv"] = lose(base, 2)
    assert pub.sync() is True
    assert taints_of(store)["gpu-2"] == [(f"{DRIVER}/gpu-lost", "")]
    assert len(store.objs) == 1 and generation(store) == 2
    now["inv"] = base
    assert pub.sync() is True and taints_of(store)["gpu-2"] == [] and generation(store) == 3


def test_an_apiserver_dropping_taints_gets_unhealthy_devices_removed() -> None:
    store = SliceStore(drop_taints=True)
    base = Inventory("580.1", "13.0", tuple(dataclasses.replace(d, index=d.minor)
                                            for d in inventory(3).devices))
    now = {"inv": base}
    pub = SlicePublisher(store, Devices(lambda: now["inv"]), DRIVER, NODE)
    pub.sync()
    now["inv"] = lose(base, 0)
    pub.sync()  # taints sent, wiped by the store: noticed
    assert pub.use_taints is False
    pub.sync()
    assert sorted(taints_of(store)) == ["gpu-1", "gpu-2"]
    assert pub.sync() is False  # and stable from then on


def _indexed(count: int) -> Inventory:
    return Inventory("580.1", "13.0", tuple(dataclasses.replace(d, index=d.minor)
                                            for d in inventory(count).devices))


def owners(store: SliceStore) -> list[Any]:
    return [o["metadata"].get("ownerReferences") for o in store.objs.values()]


def test_slices_are_owned_by_the_node_and_an_unreadable_node_is_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    store = SliceStore()
    SlicePublisher(store, Devices(lambda: _indexed(2)), DRIVER, NODE).sync()
    assert owners(store) == [[{"apiVersion": "v1", "kind": "Node", "name": NODE,
                               "uid": "node-uid-1", "controller": True}]]
    # Without get on nodes: published all the same, without an owner, and said once.
    blind = SliceStore(node_uid=None)
    pub = SlicePublisher(blind, Devices(lambda: _indexed(2)), DRIVER, NODE)
    with caplog.at_level(logging.WARNING, logger="fakegpu.kubeletplugin.slicepool"):
        assert pub.sync() is True
        pub.wake()
        assert pub.sync() is False
    assert owners(blind) == [None]
    assert [r.getMessage() for r in caplog.records].count(
        f"cannot read Node {NODE} (cannot read Node {NODE}: HTTP 403 Forbidden): publishing "
        "ResourceSlices without an owner (the plugin needs get on nodes)") == 1
    # Once the Node can be read (RBAC fixed), the slices get their owner.
    blind.uid = "node-uid-2"
    assert pub.sync() is True and owners(blind)[0][0]["uid"] == "node-uid-2"


def test_an_instance_that_cannot_read_the_node_keeps_the_owner_another_set() -> None:
    store = SliceStore()
    now = {"inv": _indexed(2)}
    SlicePublisher(store, Devices(lambda: now["inv"]), DRIVER, NODE).sync()
    store.uid = None
    now["inv"] = _indexed(3)  # a change the blind instance publishes
    assert SlicePublisher(store, Devices(lambda: now["inv"]), DRIVER, NODE).sync() is True
    assert owners(store)[0][0]["uid"] == "node-uid-1"


@pytest.mark.parametrize(("minor", "published"), [(34, []), (35, [("13", "None")])])
def test_informational_taints_only_where_the_apiserver_has_the_effect(
        minor: int, published: list[tuple[str, str]]) -> None:
    store = SliceStore(minor=minor)
    health = Health(DRIVER)
    inv = _indexed(2)
    pub = SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE, health=health.taints)
    pub.sync()
    health.record(inv.devices[0].uuid, "xid", "13", "None")
    health.record(inv.devices[1].uuid, "xid", "48")
    pub.sync()
    got = {d["name"]: [(t["value"], t["effect"]) for t in d.get("taints", [])]
           for o in store.objs.values() for d in o["spec"]["devices"]}
    assert got == {"gpu-0": published, "gpu-1": [("48", "NoSchedule")]}
    assert pub.sync() is False  # stable


def test_nvidia_compatible_gpu_lost_taints_the_whole_node_until_it_answers() -> None:
    store = SliceStore()
    base = _indexed(3)
    now = {"inv": base}
    pub = SlicePublisher(store, Devices(lambda: now["inv"]), DRIVER, NODE,
                         shape=Shape(nvidia=True))
    pub.sync()
    now["inv"] = lose(base, 2)
    assert pub.sync() is True
    lost = [(f"{DRIVER}/gpu-lost", "")]
    assert taints_of(store) == {"gpu-0": lost, "gpu-1": lost, "gpu-2": lost}
    now["inv"] = base
    assert pub.sync() is True and taints_of(store) == {"gpu-0": [], "gpu-1": [], "gpu-2": []}


def test_a_fatal_published_xid_is_not_lifted_by_a_later_informational_one() -> None:
    store = SliceStore()
    inv = _indexed(1)
    first = Health(DRIVER)
    SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE, health=first.taints).sync()
    first.record(inv.devices[0].uuid, "xid", "48")
    SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE, health=first.taints).sync()
    later = Health(DRIVER)  # another instance, which only saw XID 13
    later.record(inv.devices[0].uuid, "xid", "13", "None")
    assert SlicePublisher(store, Devices(lambda: inv), DRIVER, NODE,
                          health=later.taints).sync() is False
    assert taints_of(store) == {"gpu-0": [(f"{DRIVER}/xid", "48")]}
