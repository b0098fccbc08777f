"""Run in a subprocess that loaded the fake libnvidia-ml.so.1 (LD_LIBRARY_PATH): the fleet
publisher and, for comparison, the plugin's own discovery + slice building, against an
in-memory slice store. Reads a JSON request on stdin, prints a JSON answer."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

from fakegpu import drivers
from fakegpu.fleet.publisher import FleetPublisher, SimNode
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import faults
from fakegpu.plugin import discovery, slices
from fakegpu.plugin.shape import Shape
from fakegpu.topology.load import load_topology


class Store:
    """The apiserver's slice store, as far as the publisher uses it."""

    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        self.rv = 0

    def version(self) -> str:
        return "v1"

    def server_minor(self) -> int:
        return 37

    def node_uid(self, name: str) -> str:
        return f"uid-{name}"

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objs.values()
                if o["spec"]["driver"] == driver and o["spec"]["nodeName"] == node]

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._store(body)

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objs[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    def delete_slice(self, name: str) -> None:
        self.objs.pop(name, None)

    def devices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [d for o in sorted(self.list_slices(driver, node),
                                  key=lambda o: o["metadata"]["name"])
                for d in o["spec"].get("devices") or []]


def plugin_devices(state: Path, driver: str) -> list[dict[str, Any]]:
    """What the plugin's own code publishes for a node whose NVML is ``state``."""
    # The plugin's environment for that node: its NVML state and its sysfs view.
    os.environ.pop("FAKEGPU_SYSFS", None)
    os.environ.update(nvml_env.env(state))
    nvidia = drivers.is_nvidia(driver)
    inventory = discovery.discover(nvidia)
    built = slices.build_slices(driver, "n", inventory, "v1", 1, shape=Shape(nvidia=nvidia))
    return [d for s in built for d in s["spec"].get("devices") or []]


def main() -> None:
    req = json.load(sys.stdin)
    topo = load_topology(req["topology"])
    driver = req.get("driver", drivers.FAKEGPU)
    sims = [SimNode(topo.node(n), Path(p)) for n, p in req["states"].items()]
    store = Store()
    stopped: set[str] = set()
    fleet = FleetPublisher(sims, store, driver, lambda: set(stopped), workers=2)
    out: dict[str, Any] = {"steps": []}
    for step in req["steps"]:
        if step[0] == "sync":
            fleet.sync_all(only_changed=bool(step[1]))
        elif step[0] == "stop":
            stopped.add(step[1])
        elif step[0] == "start":
            stopped.discard(step[1])
        elif step[0] == "inject":
            faults.inject(req["states"][step[1]], step[2], step[3], step[4])
        elif step[0] == "clear":
            faults.clear(req["states"][step[1]], step[2])
        out["steps"].append({n: store.devices(driver, n) for n in req["states"]})
    out["plugin"] = {n: plugin_devices(Path(p), driver) for n, p in req["states"].items()}
    out["generations"] = {o["metadata"]["name"]: o["spec"]["pool"]["generation"]
                          for o in store.objs.values()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
