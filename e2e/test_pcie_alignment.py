"""Alignment by the standard attributes: ``matchAttribute`` on ``resource.kubernetes.io/pcieRoot``
and ``resource.kubernetes.io/numaNode`` lands the devices of one claim under one PCIe root (one
NUMA node), and a claim whose constraint no node can meet stays pending.

Runs on ``mixed``: its DGX A100 nodes pair two GPUs under each PCIe switch and root complex
(the catalog's tree), its H100 nodes give each GPU a root of its own. What to ask for is derived
from what the ResourceSlices publish (how many whole GPUs share a root or a NUMA node on the
best node); every check observes the API and what the pod sees, never fakegpu's files.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    assert_pending,
    attribute_value,
    cel_string,
    match_attribute,
    node_devices,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import visible_gpus

pytestmark = [pytest.mark.e2e, pytest.mark.topology("mixed")]

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"


def _whole_gpu(driver: str) -> str:
    # MIG devices carry their GPU's root too: whole GPUs only, so the counts below are exact.
    return f"device.attributes[{cel_string(driver)}].type == 'gpu'"


def most_sharing(api: ResourceApi, driver: str, attribute: str) -> int:
    """The most whole GPUs one node publishes with one value of ``attribute``."""
    best = 0
    for devices in node_devices(api, driver).values():
        values = Counter(attribute_value(d, attribute) for d in devices
                         if attribute_value(d, "type") == "gpu")
        values.pop(None, None)
        best = max([best, *values.values()])
    return best


def _claim(api: ResourceApi, namespace: str, name: str, driver: str, attribute: str,
           counts: list[int]) -> None:
    requests = [api.device_request(f"gpu{i}", driver, count=n, cel=[_whole_gpu(driver)])
                for i, n in enumerate(counts)]
    api.create("resourceclaimtemplates", api.claim_template(
        name, requests, constraints=[match_attribute(attribute)]), namespace)


def _aligned_pair(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
                  namespace: str, attribute: str) -> None:
    driver = cluster.driver_name
    assert most_sharing(api, driver, attribute) >= 2, \
        f"no node of mixed publishes two whole GPUs with one {attribute}"
    _claim(api, namespace, "pair", driver, attribute, [1, 1])
    k8s.create_pod(core, namespace, pod_manifest(
        "pair-pod", cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpus", template="pair")]))
    pod: Any = k8s.wait_pod_running(core, namespace, "pair-pod")
    claim = api.claim(namespace, pod_claim_name(pod, "gpus"))
    devices = allocated_devices(api, driver, claim)
    assert len(devices) == 2, [d["name"] for d in devices]
    values = {attribute_value(d, attribute) for d in devices}
    assert len(values) == 1 and None not in values, \
        f"{attribute} of the two devices: {[attribute_value(d, attribute) for d in devices]}"
    # The pod sees exactly the two devices the claim got.
    visible = visible_gpus(k8s.logged_env(core, namespace, "pair-pod"))
    assert sorted(visible) == sorted(str(attribute_value(d, "uuid")) for d in devices)


def _refused(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
             namespace: str, attribute: str) -> None:
    driver = cluster.driver_name
    most = most_sharing(api, driver, attribute)
    assert most >= 1, f"no whole GPU of mixed publishes {attribute}"
    # Each node has more whole GPUs than this: only the constraint makes it unsatisfiable.
    _claim(api, namespace, "too-close", driver, attribute, [most, 1])
    k8s.create_pod(core, namespace, pod_manifest(
        "too-close-pod", cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpus", template="too-close")]))
    pod = assert_pending(core, api, namespace, "too-close-pod", "gpus",
                         f"{most + 1} GPUs with one {attribute}")
    cond = k8s.pod_condition(pod, "PodScheduled")
    assert cond is not None and cond.reason == "Unschedulable", cond


# serial: it needs two free whole GPUs under one root, of which mixed has a handful.
@pytest.mark.serial
def test_two_gpu_requests_matching_pcie_root_land_under_one_root(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    _aligned_pair(fakegpu_cluster, core_v1, resource_api, namespace, PCIE_ROOT)


def test_more_gpus_than_any_root_holds_stay_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    _refused(fakegpu_cluster, core_v1, resource_api, namespace, PCIE_ROOT)


# serial: as the root test, two free whole GPUs of one NUMA node.
@pytest.mark.serial
def test_two_gpu_requests_matching_numa_node_land_on_one_numa_node(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    _aligned_pair(fakegpu_cluster, core_v1, resource_api, namespace, NUMA_NODE)


def test_more_gpus_than_any_numa_node_holds_stay_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    _refused(fakegpu_cluster, core_v1, resource_api, namespace, NUMA_NODE)
