"""Device binding conditions (KEP-5007, issue 24): a GPU that must be attached before use holds
its pod's binding until the attach is done, and a failed attach makes the scheduler pick again.

The `attach` topology's node has GPUs behind a fabric switch: its plugin publishes them with
``bindingConditions`` and attaches each a few seconds after a claim gets it, setting the
condition on the claim's device status (fakegpu/plugin/attach.py); GPU 0's attach fails.
Observed as a user would: the claim, the pod, its events and the ResourceSlice.
DRADeviceBindingConditions exists from Kubernetes 1.34 (beta from 1.36, GA in 1.38).
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
    allocation_results,
    cel_match,
    pod_manifest,
    published_device,
)
from fakegpu.testkit.minors import skip_without
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.topology("attach")]

ATTACHED = "fakegpu.dev/Attached"
ATTACH_FAILED = "fakegpu.dev/AttachFailed"


@pytest.fixture(autouse=True)
def _needs_binding_conditions(fakegpu_cluster: ClusterInfo) -> None:
    skip_without(fakegpu_cluster, "DRADeviceBindingConditions", "binding conditions")


def _start(cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
           namespace: str, cel: str) -> str:
    """Claim "gpu" for one GPU matching ``cel`` and pod "p" using it; returns the claim name."""
    driver = cluster.driver_name
    request = resource_api.device_request("gpu", driver, cel=[cel])
    resource_api.create("resourceclaims", resource_api.claim_manifest("gpu", [request]),
                        namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "p", cluster.workload_image, ["sleep", "3600"], [PodClaim("gpu", claim="gpu")]))
    return "gpu"


def _condition(claim: dict[str, Any], driver: str, device: str, ctype: str
               ) -> dict[str, Any] | None:
    for entry in (claim.get("status") or {}).get("devices") or []:
        if entry.get("driver") == driver and entry.get("device") == device:
            for c in entry.get("conditions") or []:
                if c.get("type") == ctype:
                    return dict(c)
    return None


def test_the_pod_binds_only_once_its_gpu_is_attached(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    driver = fakegpu_cluster.driver_name
    claim = _start(fakegpu_cluster, core_v1, resource_api, namespace,
                   cel_match("fakegpu.dev", "attach", "hotplug"))

    def allocated_waiting() -> tuple[dict[str, Any], dict[str, Any]]:
        obj = resource_api.claim(namespace, claim)
        results = allocation_results(obj, driver)
        if not results:
            raise NotYet("claim not allocated")
        return obj, results[0]

    obj, result = wait_for(allocated_waiting, what="the claim's allocation", timeout=120,
                           interval=0.25)
    # The allocation carries the slice's conditions; the pod is not bound while the attach
    # runs (the plugin waits 5 s before it attaches).
    assert result["bindingConditions"] == [ATTACHED]
    assert result["bindingFailureConditions"] == [ATTACH_FAILED]
    assert _condition(obj, driver, result["device"], ATTACHED) is None
    assert not k8s.read_pod(core_v1, namespace, "p").spec.node_name
    k8s.wait_event(core_v1, namespace, "BindingConditionsPending", involved="p")

    pod = k8s.wait_pod_running(core_v1, namespace, "p")
    attached = _condition(resource_api.claim(namespace, claim), driver, result["device"],
                          ATTACHED)
    assert attached is not None and attached["status"] == "True", attached
    assert pod.spec.node_name == result["pool"]
    device = published_device(resource_api, driver, result["pool"], result["device"])
    assert device["attributes"]["fakegpu.dev/attach"] == {"string": "hotplug"}


def test_a_failed_attach_makes_the_scheduler_pick_another_gpu(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    driver = fakegpu_cluster.driver_name
    broken = [d for s in resource_api.slices(driver) for d in s["spec"].get("devices") or []
              if d.get("attributes", {}).get("fakegpu.dev/attach") == {"string": "broken"}]
    assert len(broken) == 1, "the attach topology has one GPU whose attach fails"
    if any(t.get("key") == f"{driver}/attach-failed" for t in broken[0].get("taints") or ()):
        pytest.skip("MISSING PREREQUISITE: the broken GPU already failed an attach on this "
                    "cluster (kept from an earlier run): bring up a fresh one")
    # Any GPU attached before use; the allocator tries the broken one (GPU 0) first.
    claim = _start(fakegpu_cluster, core_v1, resource_api, namespace,
                   'has(device.attributes["fakegpu.dev"].attach)')
    k8s.wait_event(core_v1, namespace, "FailedScheduling", involved="p",
                   containing="AttachFailed")

    pod = k8s.wait_pod_running(core_v1, namespace, "p")
    [result] = allocation_results(resource_api.claim(namespace, claim), driver)
    assert result["device"] != broken[0]["name"]
    got = published_device(resource_api, driver, result["pool"], result["device"])
    assert got["attributes"]["fakegpu.dev/attach"] == {"string": "hotplug"}
    assert pod.spec.node_name == result["pool"]
    # The GPU whose attach failed is tainted, so no claim gets it again.
    tainted = published_device(resource_api, driver, result["pool"], broken[0]["name"])
    assert any(t["key"] == f"{driver}/attach-failed" and t["effect"] == "NoSchedule"
               for t in tainted.get("taints") or ()), tainted
