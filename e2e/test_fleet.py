"""A fleet (docs/scale.md): 2 real DGX H100 nodes beside 50 simulated ones (fleet-small).

Simulated nodes are Ready (KWOK) and publish the topology's GPUs (the fleet publisher); claims
land on them by device selectors and device taints, and their pods are Running (KWOK marks
them so: nothing runs). A claim for a real node's GPU lands there and the pod really runs,
seeing that GPU. A simulated node's faults become taints on its slices, and stopping it makes
it NotReady and withdraws its slices. Everything is observed through the Kubernetes API and
the CLI a user has.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.kube import api as kubeapi
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_node,
    allocation_results,
    cel_match,
    pod_manifest,
    slice_device,
    toleration,
)
from fakegpu.testkit.wait import NotYet, wait_for
from fakegpu.topology.model import Topology

# kind refuses fleet topologies (simulated nodes need the embedded provider's KWOK; docs/scale.md).
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("fleet-small")]

ENV_DONE = "FAKEGPU_E2E_ENV_DONE"
PRINT_ENV_AND_WAIT = ["sh", "-c", f"env; echo {ENV_DONE}; exec sleep 3600"]
# KWOK's taint on simulated Node objects (pods meant for them tolerate it).
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def _claim_pod(resource_api: ResourceApi, core: kclient.CoreV1Api, namespace: str,
               cluster: ClusterInfo, name: str, request: dict[str, Any], *,
               simulated: bool, command: list[str] | None = None) -> None:
    resource_api.create("resourceclaims", resource_api.claim_manifest(name, [request]),
                        namespace)
    manifest = pod_manifest(name, cluster.workload_image, command or ["sleep", "3600"],
                            [PodClaim("gpu", claim=name)])
    if simulated:
        manifest["spec"]["tolerations"] = [KWOK_TOLERATION]
    k8s.create_pod(core, namespace, manifest)


def _one_gpu(resource_api: ResourceApi, driver: str, cel: str,
             tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return resource_api.device_request("gpu", driver, cel=[cel], tolerations=tolerations or [])


def test_simulated_nodes_are_ready_and_publish_the_topology(
    fakegpu_cluster: ClusterInfo, fakegpu_topology: Topology, resource_api: ResourceApi,
) -> None:
    with kubeapi.session(fakegpu_cluster.kubeconfig) as api:
        listed = {n["metadata"]["name"]: n for n in kubeapi.nodes(api)}
    sims = fakegpu_topology.simulated_nodes
    assert len(sims) == 50
    for node in sims:
        assert kubeapi.is_ready(listed[node.name]), node.name
    uuids = {}
    for obj in resource_api.slices(driver=fakegpu_cluster.driver_name):
        for dev in obj["spec"].get("devices") or []:
            attrs = dev.get("basic", dev).get("attributes") or {}
            if dev["name"].startswith("gpu-") and "-mig-" not in dev["name"]:
                uuids[attrs["uuid"]["string"]] = obj["spec"]["nodeName"]
    for node in fakegpu_topology.nodes:
        for gpu in node.gpus:
            if not gpu.mig.enabled:
                assert uuids.get(gpu.uuid) == node.name, (node.name, gpu.uuid)


def test_selector_schedules_onto_a_simulated_node(
    fakegpu_cluster: ClusterInfo, fakegpu_topology: Topology, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    target = fakegpu_topology.node("sim-h100-17").gpu(5)
    _claim_pod(resource_api, core_v1, namespace, fakegpu_cluster, "by-uuid",
               _one_gpu(resource_api, driver, cel_match(driver, "uuid", target.uuid)),
               simulated=True)
    pod = k8s.wait_pod_running(core_v1, namespace, "by-uuid")
    assert pod.spec.node_name == "sim-h100-17"
    claim = resource_api.claim(namespace, "by-uuid")
    assert allocated_node(claim) == "sim-h100-17"
    assert [r["device"] for r in allocation_results(claim, driver)] == ["gpu-5"]
    # A MIG profile only the simulated A100 nodes have: one of their MIG devices.
    mig_class = "mig." + driver.removeprefix("gpu.")
    request = resource_api.device_request("mig", mig_class,
                                          cel=[cel_match(driver, "profile", "3g.20gb")])
    _claim_pod(resource_api, core_v1, namespace, fakegpu_cluster, "by-profile", request,
               simulated=True)
    k8s.wait_pod_running(core_v1, namespace, "by-profile")
    claim = resource_api.claim(namespace, "by-profile")
    node = allocated_node(claim)
    assert node is not None and node.startswith("sim-a100-"), node


# serial: it injects a fault and pins claims to exact GPUs that parallel tests could hold.
@pytest.mark.serial
def test_device_taints_on_simulated_nodes_keep_claims_off(
    fakegpu_cluster: ClusterInfo, fakegpu_topology: Topology, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, fault_guard: list[tuple[str, int]],
) -> None:
    driver = fakegpu_cluster.driver_name
    # The topology's XID 79 on sim-h100-bad's GPU 0: only a claim tolerating it gets it.
    bad = fakegpu_topology.node("sim-h100-bad").gpu(0)
    tolerating = _one_gpu(resource_api, driver, cel_match(driver, "uuid", bad.uuid),
                          [toleration(f"{driver}/xid")])
    _claim_pod(resource_api, core_v1, namespace, fakegpu_cluster, "tolerates", tolerating,
               simulated=True)
    assert k8s.wait_pod_running(core_v1, namespace, "tolerates").spec.node_name == \
        "sim-h100-bad"
    # A fault injected at run time on another simulated node: its slice gets the taint, and
    # a claim for that GPU without a toleration is not allocated.
    node, index = "sim-h100-03", 2
    gpu = fakegpu_topology.node(node).gpu(index)
    fault_guard.append((node, index))
    faults.inject(fakegpu_cluster, node, index, "xid", 48)

    def tainted() -> list[dict[str, Any]]:
        entry = slice_device(resource_api.slices(driver=driver, node=node), node,
                             f"gpu-{index}")
        found = (entry or {}).get("taints") or []
        if not found:
            raise NotYet("no taint yet")
        return list(found)

    found = wait_for(tainted, what=f"{node} gpu-{index}'s XID taint", timeout=60)
    assert [(t["key"], t.get("value"), t["effect"]) for t in found] == \
        [(f"{driver}/xid", "48", "NoSchedule")]
    _claim_pod(resource_api, core_v1, namespace, fakegpu_cluster, "refused",
               _one_gpu(resource_api, driver, cel_match(driver, "uuid", gpu.uuid)),
               simulated=True)
    k8s.wait_event(core_v1, namespace, "FailedScheduling", involved="refused")
    assert not (resource_api.claim(namespace, "refused").get("status") or {}).get("allocation")


def test_claim_on_a_real_node_really_runs(
    fakegpu_cluster: ClusterInfo, fakegpu_topology: Topology, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    target = fakegpu_topology.node("dgx-1").gpu(3)
    _claim_pod(resource_api, core_v1, namespace, fakegpu_cluster, "real",
               _one_gpu(resource_api, driver, cel_match(driver, "uuid", target.uuid)),
               simulated=False, command=PRINT_ENV_AND_WAIT)
    pod = k8s.wait_pod_running(core_v1, namespace, "real")
    assert pod.spec.node_name == "dgx-1"

    def printed() -> str:
        text = k8s.pod_log(core_v1, namespace, "real")
        if ENV_DONE not in text:
            raise NotYet("the pod has not printed its environment yet")
        return text

    env = k8s.parse_env(wait_for(printed, what="the real pod's environment", timeout=60))
    assert env.get("NVIDIA_VISIBLE_DEVICES") == target.uuid


def _cli(cluster: ClusterInfo, action: str, node: str) -> None:
    subprocess.run([sys.executable, "-m", "fakegpu", "cluster", "node", action, "--node", node,
                    "--cluster", cluster.name, "--provider", cluster.provider],
                   check=True, capture_output=True, text=True, timeout=300)


# serial: node stop/start: the node's pods and slices go away under parallel tests.
@pytest.mark.serial
def test_a_stopped_simulated_node_is_not_ready_and_withdrawn(
    fakegpu_cluster: ClusterInfo, resource_api: ResourceApi,
) -> None:
    node = "sim-h100-30"
    driver = fakegpu_cluster.driver_name
    _cli(fakegpu_cluster, "stop", node)
    try:
        with kubeapi.session(fakegpu_cluster.kubeconfig) as api:
            assert not kubeapi.node_ready(api, node)
        assert resource_api.slices(driver=driver, node=node) == []
    finally:
        _cli(fakegpu_cluster, "start", node)
    with kubeapi.session(fakegpu_cluster.kubeconfig) as api:
        assert kubeapi.node_ready(api, node)
    assert len(kubeapi.complete_pools(resource_api.slices(driver=driver, node=node))) == 1
