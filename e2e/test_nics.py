"""The NIC driver on a DGX H100: a claim for a GPU and a NIC with ``matchAttribute:
resource.kubernetes.io/pcieRoot`` gets a GPU and its compute NIC under one root; the pod sees
the NIC as a network interface (its name and MAC as the slice publishes them) and its RDMA
verbs node; the claim's status carries the interface's network data. A storage NIC shares a
root with no GPU, so asking for one beside a GPU under one root stays pending.

Observes only the API (slices, the claim, events) and what the pod sees.
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
from fakegpu.testkit.nics import (
    NIC_DRIVER,
    PCIE_ROOT,
    gpu_nic_template,
    interfaces,
    rdma_nodes,
)

# The embedded provider runs the NIC plugin; the kind provider does not yet (docs/nics.md).
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("dgx-h100")]


def test_a_gpu_and_its_nic_under_one_root_and_the_pod_sees_the_interface(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    gpu_driver = fakegpu_cluster.driver_name
    resource_api.create("resourceclaimtemplates",
                        gpu_nic_template(resource_api, "gpu-nic", gpu_driver, PCIE_ROOT),
                        namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "gpu-nic", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("net", template="gpu-nic")]))
    pod: Any = k8s.wait_pod_running(core_v1, namespace, "gpu-nic")
    claim = resource_api.claim(namespace, pod_claim_name(pod, "net"))
    [gpu] = allocated_devices(resource_api, gpu_driver, claim)
    [nic] = allocated_devices(resource_api, NIC_DRIVER, claim)
    root = attribute_value(nic, PCIE_ROOT)
    assert root and attribute_value(gpu, PCIE_ROOT) == root, (gpu["name"], nic["name"])
    assert attribute_value(nic, "role") == "compute"
    name, mac = attribute_value(nic, "interfaceName"), attribute_value(nic, "macAddress")
    # What the pod sees: the interface, named and addressed as published, and one verbs node.
    seen = interfaces(core_v1, namespace, "gpu-nic")
    assert seen.get(name) == mac, seen
    verbs = rdma_nodes(core_v1, namespace, "gpu-nic")
    assert len(verbs) == 1 and "uverbs" in verbs[0] and " 231," in verbs[0], verbs
    # The claim's status: the NIC driver's entry with the interface's network data.
    entries = [e for e in (claim.get("status") or {}).get("devices") or []
               if e.get("driver") == NIC_DRIVER]
    assert [e["device"] for e in entries] == [nic["name"]], entries
    assert entries[0]["networkData"] == {"interfaceName": name, "hardwareAddress": mac}
    ready = {c["type"]: c["status"] for c in entries[0].get("conditions") or []}
    assert ready.get("Ready") == "True", entries[0]


def test_a_storage_nic_shares_no_root_with_a_gpu_so_the_claim_stays_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    resource_api.create("resourceclaimtemplates", gpu_nic_template(
        resource_api, "gpu-storage", fakegpu_cluster.driver_name, PCIE_ROOT, "storage"),
        namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "gpu-storage", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("net", template="gpu-storage")]))
    pod: Any = k8s.wait_unschedulable(core_v1, namespace, "gpu-storage",
                                      what="the scheduler to refuse a GPU and a storage NIC "
                                           "under one root")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = resource_api.claim(namespace, pod_claim_name(pod, "net"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
