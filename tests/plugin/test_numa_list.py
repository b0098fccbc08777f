"""numaNode in its list form (KEP-5491): the topology's sockets, the sysfs view's distances, what
the GPU and NIC plugins read from it, and Kubernetes' own deviceattribute package reading the
same view."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cluster import featuregates, lifecycle
from fakegpu.errors import InvalidInput
from fakegpu.kubeletplugin import pcie
from fakegpu.nic import discovery as nic_discovery
from fakegpu.nic import slices as nic_slices
from fakegpu.node.entrypoint import nic_plugin_args, plugin_args
from fakegpu.nvml import env, state, sysfs
from fakegpu.plugin import slices
from fakegpu.plugin.discovery import Inventory
from fakegpu.plugin.shape import Shape
from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import load_topology

from .helpers import DRIVER, NODE, gpu

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fakegpu" / "topology" / "fixtures"
NUMA = "resource.kubernetes.io/numaNode"
# What the fixture's tree says: GPUs 0-1 on NUMA node 1, 2-3 on 5; NICs on 0 and 4; sockets of
# NUMA nodes 0-3 and 4-7.
SOCKET_0, SOCKET_1 = (1, 0, 2, 3), (5, 4, 6, 7)


def _view(tmp_path: Path, fixture: str = "numa-sockets.yaml") -> tuple[Path, dict[str, str]]:
    topo = load_topology(FIXTURES / fixture)
    path = state.render(topo, topo.nodes[0].name, tmp_path / "s.bin")
    return sysfs.path_for(path), {**os.environ, **env.env(path)}


def test_the_view_carries_the_sockets_distances(tmp_path: Path) -> None:
    view, _ = _view(tmp_path)
    node = view / "devices" / "system" / "node"
    assert sorted(p.name for p in node.iterdir()) == [f"node{n}" for n in range(8)]
    assert (node / "node5" / "distance").read_text() == "32 32 32 32 12 10 12 12\n"
    packages = {n: (view / "devices" / "system" / "cpu" / f"cpu{n}" / "topology" /
                    "physical_package_id").read_text().strip() for n in range(8)}
    assert packages == {n: "0" if n < 4 else "1" for n in range(8)}


def test_one_numa_node_per_socket_lists_only_the_devices_own(tmp_path: Path) -> None:
    # dgx-h100: two sockets of one NUMA node each; the other socket's node is never listed.
    view, _ = _view(tmp_path, "dgx-h100.yaml")
    assert (view / "devices" / "system" / "node" / "node0" / "distance").read_text() == "10 21\n"
    node = load_topology(FIXTURES / "dgx-h100.yaml").nodes[0]
    for g in node.gpus:
        assert pcie.numa_nodes(sysfs.bus_id(g.pci), sysfs.NVIDIA_VENDOR, str(view)) == \
            (g.numa_node,)


def test_gpus_and_nics_list_their_node_then_their_sockets(tmp_path: Path) -> None:
    view, _ = _view(tmp_path)
    node = load_topology(FIXTURES / "numa-sockets.yaml").nodes[0]
    assert [pcie.numa_nodes(sysfs.bus_id(g.pci), sysfs.NVIDIA_VENDOR, str(view))
            for g in node.gpus] == [SOCKET_0, SOCKET_0, SOCKET_1, SOCKET_1]
    nics = {n.name: (n.numa_node, n.numa_list) for n in nic_discovery.discover(str(view))}
    assert nics == {"ibp33s0": (0, (0, 1, 2, 3)), "ibp97s0": (4, (4, 5, 6, 7))}


def test_without_distances_the_list_is_the_devices_own_node(tmp_path: Path) -> None:
    view, _ = _view(tmp_path)
    shutil.rmtree(view / "devices" / "system")
    bus = sysfs.bus_id(load_topology(FIXTURES / "numa-sockets.yaml").nodes[0].gpus[2].pci)
    assert pcie.numa_nodes(bus, sysfs.NVIDIA_VENDOR, str(view)) == (5,)


def test_the_topology_asks_both_plugins_for_the_list_form() -> None:
    node = load_topology(FIXTURES / "numa-sockets.yaml").nodes[0]
    assert "--numa-node-list" in plugin_args(node)
    assert nic_plugin_args(node) == ["--numa-node-list"]
    plain = load_topology(FIXTURES / "dgx-h100.yaml").nodes[0]
    assert "--numa-node-list" not in plugin_args(plain) and nic_plugin_args(plain) == []


def test_slices_publish_the_list_only_when_asked() -> None:
    device = dataclasses.replace(gpu(0), numa_node=5, numa_list=SOCKET_1)
    inv = Inventory("580.1", "13.0", (device,))
    [plain] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    assert plain["spec"]["devices"][0]["attributes"][NUMA] == {"int": 5}
    [listed] = slices.build_slices(DRIVER, NODE, inv, "v1", 1, shape=Shape(numa_list=True))
    assert listed["spec"]["devices"][0]["attributes"][NUMA] == {"ints": [5, 4, 6, 7]}
    # A device without NUMA affinity publishes neither form.
    alone = Inventory("580.1", "13.0", (gpu(1),))
    [none] = slices.build_slices(DRIVER, NODE, alone, "v1", 1, shape=Shape(numa_list=True))
    assert NUMA not in none["spec"]["devices"][0]["attributes"]


def test_slices_with_list_attributes_hold_at_most_64_devices() -> None:
    # The apiserver's limit once a slice uses list attributes (ResourceSliceMaxDevicesWith-
    # AdvancedFeatures); 128 otherwise.
    inv = Inventory("580.1", "13.0", tuple(
        dataclasses.replace(gpu(0), name=f"gpu-{i}", numa_node=0, numa_list=(0, 1))
        for i in range(100)))
    assert [len(o["spec"]["devices"]) for o in
            slices.build_slices(DRIVER, NODE, inv, "v1", 1, shape=Shape(numa_list=True))] == \
        [64, 36]
    assert [len(o["spec"]["devices"]) for o in slices.build_slices(DRIVER, NODE, inv, "v1", 1)] \
        == [100]


def test_nic_slices_publish_the_list_when_asked(tmp_path: Path) -> None:
    view, _ = _view(tmp_path)
    nics = nic_discovery.discover(str(view))
    for numa_list, want in ((False, {"int": 0}), (True, {"ints": [0, 1, 2, 3]})):
        built = nic_slices.build_slice("nic.example.com", NODE, nics, "v1", 1, None, numa_list)
        assert built["spec"]["devices"][0]["attributes"][NUMA] == want


_READ = """
import dataclasses, json
from fakegpu.plugin import discovery
print(json.dumps([dataclasses.asdict(d) for d in discovery.discover().devices]))
"""


@pytest.mark.integration
@pytest.mark.parametrize("fixture", ["numa-sockets.yaml", "dgx-h100.yaml"])
def test_kubernetes_deviceattribute_reads_what_the_plugins_publish(fixture: str,
                                                                    tmp_path: Path) -> None:
    """The Go package drivers use (k8s.io/dynamic-resource-allocation/deviceattribute) reads
    the view: its pcieRoot, scalar numaNode and list numaNode of every GPU (as fakegpu's plugin
    discovers them through the fake NVML) and every NIC are fakegpu's."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("MISSING PREREQUISITE: Go is not installed")
    view, environ = _view(tmp_path, fixture)
    # pynvml binds libnvidia-ml.so.1 once per process: discover in a fresh one.
    gpus = json.loads(subprocess.run([sys.executable, "-c", _READ], env=environ, check=True,
                                     capture_output=True, text=True, timeout=60).stdout)
    devices: list[dict[str, Any]] = [
        {"bus_id": d["pci_bus_id"], "pcie_root": d["pcie_root"], "numa": d["numa_node"],
         "numa_list": d["numa_list"]} for d in gpus if d["type"] == "gpu"]
    devices += [{"bus_id": n.pci_bus_id, "pcie_root": n.pcie_root, "numa": n.numa_node,
                 "numa_list": list(n.numa_list)} for n in nic_discovery.discover(str(view))]
    assert len(devices) >= 4 and all(d["numa_list"] for d in devices)
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(devices))
    proc = subprocess.run(
        [go, "test", "-count=1", "-v", "./deviceattribute/"], cwd=REPO / "tests" / "go",
        env={**environ, "FAKEGPU_EXPECT_ATTRIBUTES": str(expect), "GOFLAGS": "-mod=mod"},
        capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "--- PASS: TestStandardAttributesFromTheView" in proc.stdout


def _topology(tmp_path: Path, pcie_text: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(f"""name: t
nodes:
  - name: n
    gpus: {{product: A100-SXM4-80GB, count: 2}}
    pcie:
{pcie_text}
      roots:
        - {{name: "pci0000:00", numa: 1, switches: [{{gpus: [0, 1]}}]}}
""")
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("      sockets: [[0, 1], [1, 2]]",
     "nodes[0].pcie.sockets[1][0]: NUMA node 1 is also in socket 0, expected each NUMA node "
     "in one socket"),
    ("      sockets: [[0], [2]]",
     "nodes[0].pcie.sockets: names no socket for NUMA node 1 of root pci0000:00, expected "
     "every root's NUMA node in one socket"),
    ("      sockets: [[]]", "nodes[0].pcie.sockets[0]: is a list, expected a non-empty list of "
                            "the socket's NUMA nodes"),
    ("      numa_attribute: lists",
     "nodes[0].pcie.numa_attribute: is 'lists', expected one of scalar, list"),
])
def test_bad_sockets_and_forms_are_refused_naming_the_field(tmp_path: Path, text: str,
                                                            message: str) -> None:
    with pytest.raises(TopologyError) as err:
        load_topology(_topology(tmp_path, text))
    assert message in str(err.value)


@pytest.mark.parametrize(("version", "refused"), [("1.35.4", True), ("1.36.3", False)])
def test_the_list_form_on_a_minor_without_it_is_refused_naming_the_minor(
        version: str, refused: bool) -> None:
    topology = FIXTURES / "numa-sockets.yaml"
    if not refused:
        spec = lifecycle.load_spec("t", topology, version)
        assert spec.k8s_version == version
        return
    with pytest.raises(InvalidInput) as err:
        lifecycle.load_spec("t", topology, version)
    assert str(err.value) == (
        f"{topology}: node epyc-nps4: pcie.numa_attribute list needs Kubernetes 1.36 or newer "
        "(DRAListTypeAttributes); this cluster would run 1.35")
    assert featuregates.first_minor("DRAListTypeAttributes") == 36
