"""What the plugin may do with exactly the rights both providers install (the Helm chart's
RBAC and admission policy, deploy/helm/fakegpu/files): record device status on the claims it
prepared, and make its node the owner of the node's ResourceSlices.

Both failed unnoticed before: the embedded provider granted everything, and with the chart's
rules a 1.36+ apiserver refuses status.devices writes without resourceclaims/driver (422).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit.dra import (
    ResourceApi,
    allocated_node,
    allocation_results,
    pod_claim_name,
    run_gpu_pod,
)
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = pytest.mark.e2e


def test_prepared_claim_carries_the_plugins_device_status(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "status-pod",
                           fakegpu_cluster.workload_image, driver, template="one-gpu")
    name = pod_claim_name(pod, "gpu")

    def recorded() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        claim = resource_api.claim(namespace, name)
        devices = [d for d in (claim.get("status") or {}).get("devices") or []
                   if d.get("driver") == driver]
        if not devices:
            raise NotYet(f"claim {namespace}/{name} has no device status of {driver} "
                         "(the plugin's log says why its status write failed)")
        return claim, devices

    claim, devices = wait_for(recorded, what=f"device status on claim {namespace}/{name}",
                              timeout=60)
    results = allocation_results(claim, driver)
    assert {(d["pool"], d["device"]) for d in devices} == \
        {(r["pool"], r["device"]) for r in results}
    assert allocated_node(claim) == pod.spec.node_name


def test_each_nodes_slices_are_owned_by_that_node(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi
) -> None:
    """The plugin reads its Node (get on nodes) and names it as the owner of its slices; the
    admission policy would refuse any other Node."""
    driver = fakegpu_cluster.driver_name
    nodes: Any = core_v1.list_node().items
    uids = {n.metadata.name: n.metadata.uid for n in nodes}
    slices = [s for s in resource_api.slices(driver) if s["spec"].get("nodeName")]
    assert slices, f"no ResourceSlices of {driver}"
    for s in slices:
        node = s["spec"]["nodeName"]
        owners = [o for o in s["metadata"].get("ownerReferences") or [] if o["kind"] == "Node"]
        assert [(o["name"], o["uid"]) for o in owners] == [(node, uids[node])], (
            f"slice {s['metadata']['name']} of node {node} has Node owners {owners}")
