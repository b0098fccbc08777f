"""Slice publishing logic against an in-memory stand-in for the apiserver's slice store."""

from __future__ import annotations

import copy
from typing import Any

from fakegpu.plugin.driver import Devices
from fakegpu.plugin.publish import SlicePublisher

from .helpers import DRIVER, NODE, inventory


class SliceStore:
    def __init__(self, version: str = "v1") -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        self.served, self.writes, self.rv = version, 0, 0

    def version(self) -> str:
        return self.served

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objs.values()
                if o["spec"]["driver"] == driver and o["spec"]["nodeName"] == node]

    def create_slice(self, body: dict[str, Any]) -> None:
        assert body["metadata"]["name"] not in self.objs
        self._store(body)

    def replace_slice(self, body: dict[str, Any]) -> None:
        assert body["metadata"]["resourceVersion"] == self.objs[body["metadata"]["name"]][
            "metadata"]["resourceVersion"]
        self._store(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.rv += 1
        self.writes += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objs[obj["metadata"]["name"]] = obj

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
