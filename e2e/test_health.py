"""Device health in pod status (KEP-4680): a GPU fault shows ``Unhealthy`` in the status of
the pod using that GPU (``status.containerStatuses[].allocatedResourcesStatus``), clearing it
shows ``Healthy`` again. The kubelet fills that field from the driver's DRAResourceHealth
stream, only with its ResourceHealthStatus feature gate on.
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
    slice_device,
)

pytestmark = pytest.mark.e2e


def test_a_fault_shows_unhealthy_in_pod_status_and_clearing_it_healthy(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    fault_guard: list[tuple[str, int]],
) -> None:
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "watched",
                           fakegpu_cluster.workload_image, driver)
    node = pod.spec.node_name
    if not k8s.kubelet_reports_health(core_v1, node):
        pytest.skip(f"the kubelet of {node} runs without the {k8s.HEALTH_GATE} feature gate: "
                    "it does not open the health stream nor fill allocatedResourcesStatus")
    [result] = allocation_results(resource_api.claim(namespace, pod_claim_name(pod, "gpu")),
                                  driver)
    entry = slice_device(resource_api.slices(driver, node), result["pool"], result["device"])
    assert entry is not None, result
    index = faults.gpu_index(fakegpu_cluster, node, entry["attributes"]["uuid"]["string"])

    before = k8s.wait_device_health(core_v1, namespace, "watched", "Healthy")
    assert len(k8s.device_health(before)) == 1, k8s.device_health(before)
    faults.inject(fakegpu_cluster, node, index, "xid", 79)
    fault_guard.append((node, index))
    k8s.wait_device_health(core_v1, namespace, "watched", "Unhealthy")
    faults.clear(fakegpu_cluster, node, index)
    k8s.wait_device_health(core_v1, namespace, "watched", "Healthy")
