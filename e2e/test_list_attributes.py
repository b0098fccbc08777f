"""List-type attributes (KEP-5491, DRAListTypeAttributes, alpha in 1.36-1.38): the standard
``resource.kubernetes.io/numaNode`` in its list form, the device's NUMA node followed by the
other NUMA nodes of its socket, and what the scheduler makes of lists: ``matchAttribute`` holds
when the lists of all devices share a value, ``distinctAttribute`` when they are pairwise
disjoint, and CEL's ``includes()`` looks inside.

Runs on ``numa-sockets``: a node of two sockets with four NUMA nodes each, whose GPU and NIC
plugins publish the list form; no GPU shares a NUMA node with a NIC, so a GPU and a NIC can
only match on their socket. Every check reads the API (slices, claims, the pod's conditions),
never fakegpu's files: another driver that publishes the list form passes it too.
"""

from __future__ import annotations

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
    distinct_attribute,
    match_attribute,
    node_devices,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.minors import skip_without
from fakegpu.testkit.nics import NicWords

pytestmark = [pytest.mark.e2e, pytest.mark.topology("numa-sockets")]

NUMA_NODE = "resource.kubernetes.io/numaNode"


@pytest.fixture(autouse=True)
def _needs_list_attributes(fakegpu_cluster: ClusterInfo) -> None:
    skip_without(fakegpu_cluster, "DRAListTypeAttributes", "list-type attributes")


def _whole_gpu(driver: str) -> str:
    return f"device.attributes[{cel_string(driver)}].type == 'gpu'"


def _lists(api: ResourceApi, driver: str, whole_gpus: bool = False
           ) -> list[tuple[dict[str, Any], list[int]]]:
    """Each device of ``driver`` with its numaNode list, asserting the list form."""
    out = []
    for devices in node_devices(api, driver).values():
        for d in devices:
            if whole_gpus and attribute_value(d, "type") != "gpu":
                continue
            value = attribute_value(d, NUMA_NODE)
            assert isinstance(value, list) and value, \
                f"{d['name']} publishes numaNode {value!r}, expected a non-empty list"
            out.append((d, value))
    return out


def _run_claim(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
               namespace: str, name: str, requests: list[dict[str, Any]],
               constraints: list[dict[str, Any]]) -> None:
    """A claim template and a pod ``name`` using it."""
    api.create("resourceclaimtemplates",
               api.claim_template(name, requests, constraints=constraints), namespace)
    k8s.create_pod(core, namespace, pod_manifest(
        name, cluster.workload_image, k8s.PRINT_ENV_AND_WAIT, [PodClaim("devs", template=name)]))


def _running_claim(api: ResourceApi, core: kclient.CoreV1Api, namespace: str, name: str
                   ) -> dict[str, Any]:
    """Once pod ``name`` runs, its claim."""
    pod: Any = k8s.wait_pod_running(core, namespace, name)
    return api.claim(namespace, pod_claim_name(pod, "devs"))


def test_gpus_and_nics_publish_their_numa_node_then_their_sockets(
    fakegpu_cluster: ClusterInfo, resource_api: ResourceApi, nic_words: NicWords,
) -> None:
    devices = _lists(resource_api, fakegpu_cluster.driver_name) + \
        _lists(resource_api, nic_words.driver)
    for d, numa in devices:
        assert len(set(numa)) == len(numa), f"{d['name']}: {numa} repeats a NUMA node"
    # Each list is its device's socket (node first): any two are the same set or disjoint,
    # and this node has two sockets of several NUMA nodes each.
    sockets = {frozenset(numa) for _d, numa in devices}
    assert len(sockets) == 2 and all(len(s) > 1 for s in sockets), sockets
    assert not frozenset.intersection(*sockets), sockets


def test_a_gpu_and_a_nic_on_one_socket_match_by_numa_node(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    driver = fakegpu_cluster.driver_name
    gpus = _lists(resource_api, driver, whole_gpus=True)
    nics = _lists(resource_api, nic_words.driver)
    # No GPU sits on a NIC's NUMA node: the scalar form could not match any pair.
    assert not {g[0] for _d, g in gpus} & {n[0] for _d, n in nics}, (gpus, nics)
    _run_claim(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic", [
        resource_api.device_request("gpu", driver, cel=[_whole_gpu(driver)]),
        resource_api.device_request("nic", nic_words.driver),
    ], [match_attribute(NUMA_NODE)])
    claim = _running_claim(resource_api, core_v1, namespace, "gpu-nic")
    [gpu] = allocated_devices(resource_api, driver, claim)
    [nic] = allocated_devices(resource_api, nic_words.driver, claim)
    gpu_numa, nic_numa = attribute_value(gpu, NUMA_NODE), attribute_value(nic, NUMA_NODE)
    assert set(gpu_numa) & set(nic_numa), (gpu["name"], gpu_numa, nic["name"], nic_numa)
    assert gpu_numa[0] != nic_numa[0]  # on one socket, not one NUMA node


def test_more_gpus_than_a_socket_holds_stay_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    gpus = _lists(resource_api, driver, whole_gpus=True)
    per_socket: dict[frozenset[int], int] = {}
    for _d, numa in gpus:
        per_socket[frozenset(numa)] = per_socket.get(frozenset(numa), 0) + 1
    most = max(per_socket.values())
    # The node has more whole GPUs than that: only the intersection rule refuses the claim.
    assert len(gpus) > most, per_socket
    _run_claim(fakegpu_cluster, core_v1, resource_api, namespace, "one-socket", [
        resource_api.device_request("gpus", driver, count=most + 1, cel=[_whole_gpu(driver)]),
    ], [match_attribute(NUMA_NODE)])
    assert_pending(core_v1, resource_api, namespace, "one-socket", "devs",
                   f"{most + 1} GPUs whose numaNode lists share a value")


# serial: it needs a free whole GPU on each socket, of which the node has two.
@pytest.mark.serial
def test_distinct_numa_node_puts_two_gpus_on_two_sockets(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    _run_claim(fakegpu_cluster, core_v1, resource_api, namespace, "two-sockets", [
        resource_api.device_request("gpus", driver, count=2, cel=[_whole_gpu(driver)]),
    ], [distinct_attribute(NUMA_NODE)])
    claim = _running_claim(resource_api, core_v1, namespace, "two-sockets")
    first, second = (attribute_value(d, NUMA_NODE)
                     for d in allocated_devices(resource_api, driver, claim))
    assert not set(first) & set(second), (first, second)


def test_cel_includes_finds_a_numa_node_in_the_list(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    gpus = _lists(resource_api, driver, whole_gpus=True)
    # A NUMA node that is in some GPUs' lists but is none of theirs: only a look inside the
    # list (not at the device's own node) finds it.
    wanted = min(n for _d, numa in gpus for n in numa[1:]
                 if all(n != g[0] for _e, g in gpus))
    selector = (f"device.attributes[{cel_string('resource.kubernetes.io')}]"
                f".numaNode.includes({wanted})")
    _run_claim(fakegpu_cluster, core_v1, resource_api, namespace, "includes", [
        resource_api.device_request("gpu", driver, cel=[_whole_gpu(driver), selector]),
    ], [])
    claim = _running_claim(resource_api, core_v1, namespace, "includes")
    [gpu] = allocated_devices(resource_api, driver, claim)
    numa = attribute_value(gpu, NUMA_NODE)
    assert wanted in numa and numa[0] != wanted, (gpu["name"], numa)
