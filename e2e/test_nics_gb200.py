"""The NIC driver on GB200 trays: each GPU sits alone in its Grace PCIe domain, so no NIC
shares a root with a GPU and a claim for a GPU and a NIC under one root stays pending (as on
the real tray, where GPUDirect RDMA crosses the CPU); under one NUMA node it is met.

Observes only the API and what the pod sees.
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
    attribute_value,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.nics import NIC_DRIVER, NUMA_NODE, PCIE_ROOT, gpu_nic_template, interfaces

# The embedded provider runs the NIC plugin; the kind provider does not yet (docs/nics.md).
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("gb200-mini")]


def test_no_gpu_shares_a_root_with_a_nic_so_the_claim_stays_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    resource_api.create("resourceclaimtemplates", gpu_nic_template(
        resource_api, "gpu-nic", fakegpu_cluster.driver_name, PCIE_ROOT), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "gpu-nic", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("net", template="gpu-nic")]))
    pod: Any = k8s.wait_unschedulable(core_v1, namespace, "gpu-nic",
                                      what="the scheduler to refuse a GPU and a NIC under "
                                           "one root on GB200")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = resource_api.claim(namespace, pod_claim_name(pod, "net"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")


def test_a_gpu_and_a_nic_of_one_numa_node(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    gpu_driver = fakegpu_cluster.driver_name
    resource_api.create("resourceclaimtemplates", gpu_nic_template(
        resource_api, "gpu-nic-numa", gpu_driver, NUMA_NODE), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "gpu-nic-numa", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("net", template="gpu-nic-numa")]))
    pod: Any = k8s.wait_pod_running(core_v1, namespace, "gpu-nic-numa")
    claim = resource_api.claim(namespace, pod_claim_name(pod, "net"))
    [gpu] = allocated_devices(resource_api, gpu_driver, claim)
    [nic] = allocated_devices(resource_api, NIC_DRIVER, claim)
    assert attribute_value(gpu, NUMA_NODE) == attribute_value(nic, NUMA_NODE) is not None
    assert attribute_value(gpu, PCIE_ROOT) != attribute_value(nic, PCIE_ROOT)
    seen = interfaces(core_v1, namespace, "gpu-nic-numa")
    assert seen.get(attribute_value(nic, "interfaceName")) == attribute_value(nic, "macAddress")
