"""Driver-owned claim status (DRAResourceClaimDeviceStatus): the allocated device's entry in
``status.devices`` carries the GPU the pod sees (``data``) and conditions (``Ready``, and
``Healthy`` following the device's health: ``False`` on a fault, ``True`` once cleared).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    pod_claim_name,
    run_gpu_pod,
)
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = pytest.mark.e2e


def device_entry(resource_api: ResourceApi, namespace: str, claim: str, driver: str
                 ) -> dict[str, Any]:
    [result] = allocation_results(resource_api.claim(namespace, claim), driver)
    entries = (resource_api.claim(namespace, claim).get("status") or {}).get("devices") or []
    for e in entries:
        if (e.get("driver"), e.get("pool"), e.get("device")) == (
                driver, result["pool"], result["device"]):
            return dict(e)
    raise NotYet(f"no status entry for {result['pool']}/{result['device']}: {entries}")


def wait_condition(resource_api: ResourceApi, namespace: str, claim: str, driver: str,
                   ctype: str, status: str) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        entry = device_entry(resource_api, namespace, claim, driver)
        found = {c["type"]: c for c in entry.get("conditions") or []}
        if found.get(ctype, {}).get("status") != status:
            raise NotYet(f"conditions: {list(found.values())}")
        return entry

    return wait_for(check, what=f"claim {namespace}/{claim} condition {ctype}={status}",
                    timeout=120)


def test_device_status_names_the_gpu_and_follows_its_health(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    fault_guard: list[tuple[str, int]],
) -> None:
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "user",
                           fakegpu_cluster.workload_image, driver)
    claim = pod_claim_name(pod, "gpu")
    env = k8s.parse_env(k8s.exec_in_pod(core_v1, namespace, "user", ["env"]).stdout)

    entry = wait_condition(resource_api, namespace, claim, driver, "Ready", "True")
    assert entry["data"]["uuid"] == env["NVIDIA_VISIBLE_DEVICES"]
    assert entry["data"]["productName"] and entry["data"]["pciBusID"]
    healthy = {c["type"]: c for c in entry["conditions"]}["Healthy"]
    assert (healthy["status"], healthy["reason"]) == ("True", "DeviceHealthy")

    node = pod.spec.node_name
    index = faults.gpu_index(fakegpu_cluster, node, entry["data"]["uuid"])
    faults.inject(fakegpu_cluster, node, index, "xid", 79)
    fault_guard.append((node, index))
    sick = wait_condition(resource_api, namespace, claim, driver, "Healthy", "False")
    cond = {c["type"]: c for c in sick["conditions"]}["Healthy"]
    assert cond["reason"] == "DeviceUnhealthy" and f"{driver}/xid=79" in cond["message"]
    faults.clear(fakegpu_cluster, node, index)
    wait_condition(resource_api, namespace, claim, driver, "Healthy", "True")
