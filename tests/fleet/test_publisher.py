"""The fleet publisher publishes each simulated node as the plugin's own code would, follows
faults in the node's NVML state, and withdraws a stopped node's slices. Real fake NVML
(the library, in a subprocess), an in-memory slice store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakegpu.fleet import nodes, stages
from fakegpu.nvml import env, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SMALL = FIXTURES / "fleet-small.yaml"
PICK = ("sim-h100-00", "sim-a100-0", "sim-h100-bad")


def _run(tmp_path: Path, steps: list[list[Any]], driver: str = "gpu.fakegpu.dev"
         ) -> dict[str, Any]:
    topo = load_topology(SMALL)
    states = {n: str(state.render(topo, n, tmp_path / f"{n}.state")) for n in PICK}
    environ = {**os.environ, "LD_LIBRARY_PATH": str(env.libdir()), "PYTHONPATH": str(ROOT)}
    environ.pop("FAKEGPU_NVML_STATE", None)
    environ.pop("FAKEGPU_SYSFS", None)
    req = {"topology": str(SMALL), "states": states, "steps": steps, "driver": driver}
    proc = subprocess.run([sys.executable, "-m", "tests.fleet.probe"], input=json.dumps(req),
                          env=environ, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def _taints(devices: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    return {d["name"]: [(t["key"], t.get("value", ""), t["effect"]) for t in d["taints"]]
            for d in devices if d.get("taints")}


def _untainted(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in d.items() if k != "taints"} for d in devices]


@pytest.mark.integration
@pytest.mark.parametrize("driver", ["gpu.fakegpu.dev", "gpu.nvidia.com"])
def test_each_simulated_node_is_published_as_the_plugin_would(tmp_path: Path,
                                                                driver: str) -> None:
    out = _run(tmp_path, [["sync", False]], driver)
    published, plugin = out["steps"][0], out["plugin"]
    for node in PICK:
        assert published[node], f"{node} has no devices"
        # The same device entries as the plugin's discovery + slice building on that node.
        assert _untainted(published[node]) == plugin[node], node
    names = [d["name"] for d in published["sim-a100-0"]]
    assert any("-mig-" in n for n in names), names  # MIG devices of the A100 node
    prefix = driver
    # The topology's XID 79 on GPU 0 of sim-h100-bad: that GPU only, NoSchedule.
    assert _taints(published["sim-h100-bad"]) == {"gpu-0": [(f"{prefix}/xid", "79",
                                                             "NoSchedule")]}
    assert _taints(published["sim-h100-00"]) == {}


@pytest.mark.integration
def test_faults_become_taints_and_stopped_nodes_are_withdrawn(tmp_path: Path) -> None:
    out = _run(tmp_path, [
        ["sync", False],
        ["inject", "sim-h100-00", 3, "xid", 48],
        ["sync", True],
        ["inject", "sim-h100-00", 5, "gpu-lost", None],
        ["sync", True],
        ["clear", "sim-h100-00", 3],
        ["sync", True],
        ["stop", "sim-a100-0"],
        ["sync", True],
        ["start", "sim-a100-0"],
        ["sync", True],
    ])
    steps = out["steps"]
    x = "gpu.fakegpu.dev"
    assert _taints(steps[2]["sim-h100-00"]) == {"gpu-3": [(f"{x}/xid", "48", "NoSchedule")]}
    lost = _taints(steps[4]["sim-h100-00"])
    assert lost["gpu-5"] == [(f"{x}/gpu-lost", "", "NoSchedule")]
    assert _taints(steps[6]["sim-h100-00"]) == {"gpu-5": [(f"{x}/gpu-lost", "", "NoSchedule")]}
    # Other nodes never changed.
    assert steps[6]["sim-h100-bad"] == steps[0]["sim-h100-bad"]
    assert steps[8]["sim-a100-0"] == []
    assert steps[10]["sim-a100-0"] == steps[0]["sim-a100-0"]


def test_node_object_is_kwok_managed_tainted_and_labelled() -> None:
    topo = load_topology(SMALL)
    obj = nodes.node_object(topo.node("sim-a100-3"))
    meta = obj["metadata"]
    assert meta["annotations"] == {nodes.MANAGED_ANNOTATION: nodes.MANAGED_VALUE}
    assert meta["labels"][nodes.SIMULATED_LABEL] == "true"
    assert meta["labels"]["kubernetes.io/hostname"] == "sim-a100-3"
    assert meta["labels"][nodes.SYSTEM_LABEL] == "DGX-A100"
    assert obj["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake",
                                      "effect": "NoSchedule"}]
    assert not topo.node("dgx-0").simulated
    assert [n.name for n in topo.real_nodes] == ["dgx-0", "dgx-1"]
    assert len(topo.simulated_nodes) == 50


def test_kwok_stages_cover_nodes_and_pods() -> None:
    docs = stages.stages()
    kinds = sorted((d["spec"]["resourceRef"]["kind"], d["metadata"]["name"]) for d in docs)
    assert [k for k, _ in kinds] == ["Node", "Node", "Pod", "Pod"]
    assert stages.config_text().count('"kind": "Stage"') == 4
    gone = next(d for d in docs if d["metadata"]["name"] == "fakegpu-pod-gone")
    assert gone["spec"]["next"] == {"delete": True}
