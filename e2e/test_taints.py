"""Device taints end to end: a GPU fault taints the device in its node's ResourceSlice, the
scheduler keeps new claims off it unless they tolerate the taint, clearing the fault lifts it,
and a DeviceTaintRule with NoExecute evicts the pods that do not tolerate it.

Observed as a cluster operator would: the faults go in through ``fakegpu fault`` by cluster
and node (``fakegpu.testkit.faults``), everything else is read from the Kubernetes API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube.resource import GROUP
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_match,
    pod_claim_name,
    pod_manifest,
    run_gpu_pod,
    slice_device,
    toleration,
    wait_claims_released,
)
from fakegpu.testkit.minors import known_bug_before
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = pytest.mark.e2e

SLEEP = ["sleep", "3600"]
MAINTENANCE = "fakegpu.dev/e2e-maintenance"


def taints_of(resource_api: ResourceApi, driver: str, node: str, device: str
              ) -> list[dict[str, Any]]:
    entry = slice_device(resource_api.slices(driver, node), node, device)
    assert entry is not None, f"device {device} is not published for node {node}"
    return [dict(t) for t in entry.get("taints") or []]


def wait_taints(resource_api: ResourceApi, driver: str, node: str, device: str,
                want: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Wait until the device carries a taint with the fields of ``want`` (None: no taint)."""

    def check() -> list[dict[str, Any]]:
        found = taints_of(resource_api, driver, node, device)
        ok = (not found) if want is None else any(
            all(t.get(k) == v for k, v in want.items()) for t in found)
        if not ok:
            raise NotYet(f"taints of {node}/{device}: {found}")
        return found

    return wait_for(check, what=f"taints {want} on {node}/{device}", timeout=60, interval=0.5)


# serial: it frees one exact GPU and waits for its own pending claim to land there once the taint
# lifts: a parallel test could take it.
@pytest.mark.serial
def test_xid_taints_the_device_new_claims_avoid_it_tolerating_ones_get_it(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    fault_guard: list[tuple[str, int]],
) -> None:
    driver = fakegpu_cluster.driver_name
    image = fakegpu_cluster.workload_image
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "holder", image, driver)
    node = pod.spec.node_name
    held = pod_claim_name(pod, "gpu")
    [result] = allocation_results(resource_api.claim(namespace, held), driver)
    assert result["pool"] == node
    device = result["device"]
    entry = slice_device(resource_api.slices(driver, node), node, device)
    assert entry is not None and not entry.get("taints"), entry
    uuid = entry["attributes"]["uuid"]["string"]
    index = faults.gpu_index(fakegpu_cluster, node, uuid)

    # XID 79 (the GPU fell off the bus) on the GPU the pod holds.
    faults.inject(fakegpu_cluster, node, index, "xid", 79)
    fault_guard.append((node, index))
    wait_taints(resource_api, driver, node, device,
                {"key": f"{driver}/xid", "value": "79", "effect": "NoSchedule"})
    # NoSchedule keeps new claims off; the running pod stays (evicting is NoExecute's job).
    assert k8s.read_pod(core_v1, namespace, "holder").status.phase == "Running"

    core_v1.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "holder")
    # The device is free: only the taint remains.
    wait_claims_released(resource_api, namespace, gone=[held])

    # A claim for exactly that device (by UUID) cannot be allocated while it is tainted ...
    that_gpu = cel_match(driver, "uuid", uuid)
    resource_api.create("resourceclaims", resource_api.claim_manifest(
        "plain", [resource_api.device_request("gpu", driver, cel=[that_gpu])]), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "plain", image, SLEEP, [PodClaim("gpu", claim="plain")]))
    k8s.wait_unschedulable(core_v1, namespace, "plain")
    assert not (resource_api.claim(namespace, "plain").get("status") or {}).get("allocation")

    # ... a claim that tolerates the taint gets it.
    tolerant = resource_api.device_request("gpu", driver, cel=[that_gpu], tolerations=[
        toleration(f"{driver}/xid", "NoSchedule")])
    resource_api.create("resourceclaims", resource_api.claim_manifest("tolerant", [tolerant]),
                        namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "tolerant", image, SLEEP, [PodClaim("gpu", claim="tolerant")]))
    k8s.wait_pod_running(core_v1, namespace, "tolerant")
    [got] = allocation_results(resource_api.claim(namespace, "tolerant"), driver)
    assert (got["pool"], got["device"]) == (node, device)
    core_v1.delete_namespaced_pod("tolerant", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "tolerant")
    resource_api.delete("resourceclaims", "tolerant", namespace)
    wait_claims_released(resource_api, namespace, gone=["tolerant"])

    # Clearing the fault lifts the taint, and the waiting claim lands on the device.
    faults.clear(fakegpu_cluster, node, index)
    wait_taints(resource_api, driver, node, device, None)
    k8s.wait_pod_running(core_v1, namespace, "plain")
    [landed] = allocation_results(resource_api.claim(namespace, "plain"), driver)
    assert (landed["pool"], landed["device"]) == (node, device)


# serial: a NoExecute DeviceTaintRule on a whole node's pool would evict the pods of parallel
# tests.
@pytest.mark.serial
def test_device_taint_rule_no_execute_evicts_only_pods_that_do_not_tolerate_it(
    request: pytest.FixtureRequest,
    fakegpu_cluster: ClusterInfo,
    k8s_client: Any,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    version = kubeapi.version_serving(k8s_client, "devicetaintrules")
    if version is None:
        pytest.skip("this apiserver serves no DeviceTaintRule (its gate off: DRADeviceTaints "
                    "before 1.35, DRADeviceTaintRules from 1.35)")
    # Seen on 1.34.4 (make test-matrix, 2026-12-07): the tolerating pod went too.
    known_bug_before(request, fakegpu_cluster, 35,
                     "the scheduler does not copy a request's tolerations into the allocation, "
                     "so the eviction controller evicts a pod that tolerates the NoExecute taint "
                     "(kubernetes/kubernetes#134434, fixed by #134479 in 1.35)")
    driver = fakegpu_cluster.driver_name
    image = fakegpu_cluster.workload_image
    pools: dict[str, int] = {}
    for obj in resource_api.slices(driver):
        pools[obj["spec"]["pool"]["name"]] = pools.get(obj["spec"]["pool"]["name"], 0) + len(
            obj["spec"].get("devices") or [])
    node = next((n for n, count in sorted(pools.items()) if count >= 2), None)
    if node is None:
        pytest.fail(f"no node publishes two devices of {driver}: {pools}")
    no_execute = toleration(MAINTENANCE, "NoExecute")
    for name, tolerations in (("plain", []), ("tolerant", [no_execute])):
        gpu = resource_api.device_request("gpu", driver, tolerations=tolerations)
        resource_api.create("resourceclaimtemplates", resource_api.claim_template(
            name, [gpu]), namespace)
        k8s.create_pod(core_v1, namespace, pod_manifest(
            name, image, SLEEP, [PodClaim("gpu", template=name)], node=node))
    for name in ("plain", "tolerant"):
        k8s.wait_pod_running(core_v1, namespace, name)

    objects = kclient.CustomObjectsApi(k8s_client)
    rule = f"{namespace}-maintenance"[:63]
    objects.create_cluster_custom_object(GROUP, version, "devicetaintrules", {
        "apiVersion": f"{GROUP}/{version}", "kind": "DeviceTaintRule",
        "metadata": {"name": rule},
        "spec": {"deviceSelector": {"driver": driver, "pool": node},
                 "taint": {"key": MAINTENANCE, "value": "e2e", "effect": "NoExecute"}}})
    try:
        k8s.wait_pod_gone(core_v1, namespace, "plain", timeout=180)
        tolerant: Any = k8s.read_pod(core_v1, namespace, "tolerant")
        assert tolerant.status.phase == "Running" and tolerant.metadata.deletion_timestamp is None
    finally:
        with contextlib.suppress(errors.NotFound):
            errors.call(f"cannot delete DeviceTaintRule {rule}", lambda: objects
                        .delete_cluster_custom_object(GROUP, version, "devicetaintrules", rule))
