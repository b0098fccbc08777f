"""Gang scheduling (KEP-4671, GenericWorkload's PodGroups; beta and off by default in
1.37-1.38, on in fakegpu's clusters) on the full GB200 NVL72 rack: an 18-pod job of 4 GPUs
per pod with ``minCount: 18`` is held back whole while one GPU is taken (without the gang, 17
pods would start), and starts whole, one pod per compute tray, once that GPU is free.

Observes the API (the PodGroup's condition, the pods), never fakegpu's files.
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
    attribute_value,
    cel_string,
    node_devices,
    pod_manifest,
    run_gpu_pod,
)
from fakegpu.testkit.podgroups import PodGroups, in_group, pod_group, skip_below_first_minor
from fakegpu.testkit.wait import NotYet, wait_for

# Embedded only, as the rack's ComputeDomain suite: 18 kind nodes need more memory than the
# machines this runs on have (test_gb200_nvl72.py says how much).
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("gb200-nvl72")]


@pytest.fixture(autouse=True)
def _needs_pod_groups(fakegpu_cluster: ClusterInfo) -> None:
    skip_below_first_minor(fakegpu_cluster)


def _whole_gpu(driver: str) -> str:
    return f"device.attributes[{cel_string(driver)}].type == 'gpu'"


JOB = "job"
# 18 pods of 4 GPUs prepared on 18 nodes on 2 cores, as the rack's ComputeDomain suite.
RACK_TIMEOUT = 600.0


# serial: it needs all 72 GPUs of the rack.
@pytest.mark.serial
@pytest.mark.timeout(RACK_TIMEOUT + 300)
def test_an_18_node_gang_waits_whole_for_one_gpu_and_then_starts_whole(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    k8s_client: Any, namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    groups = PodGroups(k8s_client, namespace)
    # A pod per node, each with all of its node's whole GPUs (the rack: 18 trays of 4).
    per_node = {node: sum(1 for d in devices if attribute_value(d, "type") == "gpu")
                for node, devices in node_devices(resource_api, driver).items()}
    size, gpus = len(per_node), min(per_node.values())
    assert size == 18 and set(per_node.values()) == {4}, per_node
    # One GPU taken first: the rack then has room for 17 such pods, not 18.
    run_gpu_pod(core_v1, resource_api, namespace, "blocker", fakegpu_cluster.workload_image,
                driver, cel=[_whole_gpu(driver)])
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "tray", [resource_api.device_request("gpus", driver, count=gpus,
                                             cel=[_whole_gpu(driver)])]), namespace)
    groups.create(pod_group(JOB, size))
    members = [f"rank-{i}" for i in range(size)]
    for name in members:
        k8s.create_pod(core_v1, namespace, in_group(pod_manifest(
            name, fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
            [PodClaim("gpus", template="tray")]), JOB))

    def held_back() -> dict[str, Any]:
        found = groups.condition(JOB)
        if found is None or found.get("status") != "False":
            raise NotYet(f"PodGroupInitiallyScheduled: {found}")
        return found

    refused = wait_for(held_back, timeout=RACK_TIMEOUT,
                       what=f"the scheduler to hold back PodGroup {JOB} ({size} pods)")
    assert refused.get("reason") == "Unschedulable", refused
    listed: Any = core_v1.list_namespaced_pod(namespace)
    bound = [p.metadata.name for p in listed.items
             if p.metadata.name in members and p.spec.node_name]
    assert bound == [], f"pods of the gang bound while it cannot start whole: {bound}"
    # The GPU comes free: the whole gang starts, one pod per compute tray.
    core_v1.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    started = [k8s.wait_pod_running(core_v1, namespace, name, timeout=RACK_TIMEOUT)
               for name in members]
    assert len({p.spec.node_name for p in started}) == size
    scheduled = groups.condition(JOB)
    assert scheduled is not None and scheduled["status"] == "True", scheduled
