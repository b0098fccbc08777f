"""Extended resources through DRA (DRAExtendedResource): the GPU DeviceClass names an extended
resource (``fakegpu.dev/gpu``; ``nvidia.com/gpu`` in NVIDIA-compatible mode), so a pod that asks
the old way, ``limits: {<that name>: N}``, without any ResourceClaim, gets N whole GPUs that the
scheduler allocates through DRA and the plugin prepares like any claim's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi, allocation_results, pod_manifest

pytestmark = pytest.mark.e2e


def test_a_pod_asking_for_the_extended_resource_gets_gpus_through_dra(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    gpu_class = resource_api.get("deviceclasses", driver)
    name = (gpu_class.get("spec") or {}).get("extendedResourceName")
    if not name:
        pytest.skip(f"DeviceClass {driver} has no extendedResourceName: this apiserver drops "
                    "it (DRAExtendedResource off, or Kubernetes before 1.34)")
    assert name == driver.removeprefix("gpu.") + "/gpu"

    manifest = pod_manifest("legacy", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT)
    manifest["spec"]["containers"][0]["resources"] = {"limits": {name: "2"}}
    k8s.create_pod(core_v1, namespace, manifest)
    k8s.wait_pod_running(core_v1, namespace, "legacy")

    # The scheduler made a claim for the pod and names it in the pod's status.
    pod = k8s.pod_json(core_v1, namespace, "legacy")
    status: dict[str, Any] = pod["status"].get("extendedResourceClaimStatus") or {}
    claim_name = status.get("resourceClaimName")
    assert claim_name, json.dumps(pod["status"])[:2000]
    results = allocation_results(resource_api.claim(namespace, claim_name), driver)
    assert len(results) == 2, results
    assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}

    env = k8s.exec_env(core_v1, namespace, "legacy")
    visible = [u for u in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u]
    assert len(visible) == 2, env
    # The GPUs the pod sees are the allocated devices, as the node's slice publishes them.
    published = {d["name"]: d["attributes"]["uuid"]["string"]
                 for s in resource_api.slices(driver, pod["spec"]["nodeName"])
                 for d in s["spec"].get("devices") or []}
    assert sorted(visible) == sorted(published[r["device"]] for r in results)
