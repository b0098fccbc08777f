"""The kubelet's PodResources API lists DRA devices (KEP-3695, issue 24): what a monitoring agent
such as a GPU exporter reads to map GPUs to pods, read from a pod on the node.

The reader is a pod of the workload image with the kubelet's pod-resources directory mounted
(hostPath), running the image's ``podresources`` client (fakegpu/podresources): ``get`` and
``list`` must name, for the GPU pod's container, its ResourceClaim and the driver, pool and
device the claim was allocated, with the claim's CDI device; once the GPU pod is gone, the
kubelet stops listing it. The gates (KubeletPodResourcesGet, KubeletPodResourcesDynamicResources)
exist on every minor fakegpu supports: no skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.podresources import IN_IMAGE, SOCKET_IN_KUBELET_ROOT
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    pod_claim_name,
    pod_manifest,
    run_gpu_pod,
)
from fakegpu.wait import until_true, wait_for

pytestmark = pytest.mark.e2e

# Where the reader pod mounts the directory: the kubelet's default, which the client also uses.
READER_DIR = "/var/lib/kubelet/pod-resources"


def _kubelet_root_on_node(cluster: ClusterInfo, node: str) -> str:
    """The kubelet's --root-dir as the node itself sees it (what a hostPath names). kind nodes
    keep the default; each embedded kubelet has its own root on this host (docs/cluster.md)."""
    if cluster.provider == "kind":
        return "/var/lib/kubelet"
    root = cluster.node(node).kubelet_root
    assert root is not None, f"the provider names no kubelet root for {node}"
    return str(root)


def _start_reader(cluster: ClusterInfo, core_v1: kclient.CoreV1Api, namespace: str,
                  node: str) -> None:
    manifest = pod_manifest("reader", cluster.workload_image, ["sleep", "3600"], node=node)
    pod_dir = (Path(_kubelet_root_on_node(cluster, node)) / SOCKET_IN_KUBELET_ROOT).parent
    manifest["spec"]["volumes"] = [{"name": "pod-resources", "hostPath": {
        "path": str(pod_dir), "type": "Directory"}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{
        "name": "pod-resources", "mountPath": READER_DIR, "readOnly": True}]
    k8s.create_pod(core_v1, namespace, manifest)
    k8s.wait_pod_running(core_v1, namespace, "reader")


def _ask(core_v1: kclient.CoreV1Api, namespace: str, *args: str) -> dict[str, Any]:
    out = k8s.exec_in_pod(core_v1, namespace, "reader", [IN_IMAGE, *args]).stdout
    reply: dict[str, Any] = json.loads(out)
    return reply


def _claimed_devices(pod: dict[str, Any], container: str) -> list[dict[str, Any]]:
    """The dynamicResources of one container of a PodResources entry."""
    found = [c for c in pod.get("containers", []) if c.get("name") == container]
    assert len(found) == 1, pod
    return list(found[0].get("dynamicResources", []))


def _gpu_pod(cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
             namespace: str, count: int) -> tuple[str, str, list[dict[str, Any]]]:
    """Run pod "gpu" with a claim for ``count`` GPUs: its node, claim name and allocation."""
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "gpu", cluster.workload_image,
                           cluster.driver_name, count=count)
    claim_name = pod_claim_name(pod, "gpu")
    results = allocation_results(resource_api.claim(namespace, claim_name), cluster.driver_name)
    assert len(results) == count
    return str(pod.spec.node_name), claim_name, results


def test_get_names_the_claim_driver_pool_and_devices_of_a_gpu_pod(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    node, claim_name, results = _gpu_pod(fakegpu_cluster, core_v1, resource_api, namespace, 2)
    _start_reader(fakegpu_cluster, core_v1, namespace, node)

    got = _ask(core_v1, namespace, "get", namespace, "gpu")["podResources"]
    assert (got["name"], got["namespace"]) == ("gpu", namespace)
    dynamic = _claimed_devices(got, "main")
    assert [(d["claimName"], d["claimNamespace"]) for d in dynamic] == [(claim_name, namespace)]
    listed = dynamic[0]["claimResources"]
    assert sorted((r["driverName"], r["poolName"], r["deviceName"]) for r in listed) == sorted(
        (r["driver"], r["pool"], r["device"]) for r in results)
    for r in listed:
        # The CDI device the kubelet handed the runtime for it: the driver's kind.
        names = [c["name"] for c in r["cdiDevices"]]
        assert names and all(n.startswith(f"{fakegpu_cluster.driver_name}/") for n in names), r


def test_list_shows_gpu_pods_on_the_node_and_forgets_them_when_they_are_gone(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    node, claim_name, results = _gpu_pod(fakegpu_cluster, core_v1, resource_api, namespace, 1)
    _start_reader(fakegpu_cluster, core_v1, namespace, node)

    def mine() -> dict[str, dict[str, Any]]:
        pods = _ask(core_v1, namespace, "list").get("podResources", [])
        return {p["name"]: p for p in pods if p.get("namespace") == namespace}

    listed = mine()
    assert set(listed) == {"gpu", "reader"}
    assert _claimed_devices(listed["reader"], "main") == []  # no claim, no device
    [dynamic] = _claimed_devices(listed["gpu"], "main")
    assert dynamic["claimName"] == claim_name
    [device] = dynamic["claimResources"]
    assert (device["driverName"], device["poolName"], device["deviceName"]) == (
        results[0]["driver"], results[0]["pool"], results[0]["device"])

    core_v1.delete_namespaced_pod("gpu", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "gpu")
    # The kubelet lists active pods only: a deleted pod leaves the answer with its devices
    # (its pod workers finish the pod a moment after the API object is gone).
    wait_for(until_true(lambda: set(mine()) == {"reader"}, "the deleted pod is still listed"),
             what="the kubelet to stop listing the deleted GPU pod", timeout=30, interval=0.5)
