"""CEL selectors on what the slices publish: architecture, compute capability, memory capacity,
driver version and NVLink clique each pick exactly the GPUs the topology says match.

Each check asks, on one node, for *all* whole GPUs matching a selector (``allocationMode:
All``) and compares the allocation with the GPUs of that node the topology model says match;
the node is the first one where some (ideally not all) of its GPUs do. Runs on the ``mixed``
topology (A100s of two sizes, MIG and whole GPUs, H100s in two NVLink cliques).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_string,
    pod_manifest,
)
from fakegpu.topology.model import Gpu, Node, Topology

pytestmark = [pytest.mark.e2e, pytest.mark.topology("mixed")]

MIB = 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    cel: Callable[[str, Topology], str]  # driver, topology -> the selector
    matches: Callable[[Gpu, Topology], bool]  # what the topology says it should pick


def _clique(gpu: Gpu) -> str:
    return f"{gpu.fabric.cluster_uuid}.{gpu.fabric.clique_id}" if gpu.fabric else ""


def _first_clique(topology: Topology) -> str:
    for node in topology.nodes:
        for gpu in node.gpus:
            if gpu.fabric is not None and not gpu.mig.enabled:
                return _clique(gpu)
    pytest.skip(f"topology {topology.name} has no whole GPU in an NVLink clique")


CASES = [
    Case("architecture",
         lambda d, _t: f"device.attributes[{cel_string(d)}].architecture == 'Ampere'",
         lambda g, _t: g.product.architecture == "ampere"),
    Case("compute capability",
         lambda d, _t: (f"device.attributes[{cel_string(d)}].cudaComputeCapability"
                        ".compareTo(semver('9.0.0')) >= 0"),
         lambda g, _t: g.product.cuda_compute_capability >= (9, 0)),
    Case("memory capacity",
         lambda d, _t: f"device.capacity[{cel_string(d)}].memory.compareTo(quantity('60Gi')) > 0",
         lambda g, _t: g.product.memory_mib * MIB > 60 * 1024 * MIB),
    Case("driver version",
         lambda d, t: (f"device.attributes[{cel_string(d)}].driverVersion"
                       f".compareTo(semver({cel_string(_semver(t.driver.version))})) == 0"),
         lambda g, _t: True),
    Case("clique",
         lambda d, t: (f"device.attributes['fakegpu.dev'].cliqueID == "
                       f"{cel_string(_first_clique(t))}"),
         lambda g, t: _clique(g) == _first_clique(t)),
]


def _semver(version: str) -> str:
    parts = [str(int(p)) for p in version.split(".")[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def whole(node: Node) -> list[Gpu]:
    """The node's GPUs the GPU class offers (a GPU in MIG mode is offered as MIG devices)."""
    return [g for g in node.gpus if not g.mig.enabled]


def pick_node(topology: Topology, case: Case) -> tuple[Node, set[str]]:
    """A node with matching GPUs, preferring one where only some match; its expected devices."""
    candidates = []
    for node in topology.nodes:
        hit = {f"gpu-{g.minor}" for g in whole(node) if case.matches(g, topology)}
        if hit:
            candidates.append((len(hit) == len(whole(node)), node.index, node, hit))
    if not candidates:
        pytest.fail(f"topology {topology.name} has no GPU for selector {case.name}")
    _all, _index, node, hit = min(candidates, key=lambda c: (c[0], c[1]))
    return node, hit


def all_matching(resource_api: ResourceApi, driver: str, cel: str) -> dict[str, Any]:
    return resource_api.device_request("gpus", driver, count=None, cel=[cel])


# serial: allocationMode: All on one node: every matching GPU of that node must be free.
@pytest.mark.serial
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_selector_picks_exactly_the_gpus_the_topology_says(
    case: Case,
    fakegpu_cluster: ClusterInfo,
    fakegpu_topology: Topology,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    node, expected = pick_node(fakegpu_topology, case)
    cel = case.cel(driver, fakegpu_topology)
    resource_api.create("resourceclaims", resource_api.claim_manifest(
        "picked", [all_matching(resource_api, driver, cel)]), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "picker", fakegpu_cluster.workload_image, ["sleep", "3600"],
        [PodClaim("gpus", claim="picked")], node=node.name))
    k8s.wait_pod_running(core_v1, namespace, "picker")
    results = allocation_results(resource_api.claim(namespace, "picked"), driver)
    assert {r["pool"] for r in results} == {node.name}
    assert {r["device"] for r in results} == expected, f"{case.name}: {cel}"
