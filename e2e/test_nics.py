"""The NIC driver on a DGX H100: a claim for a GPU and a NIC with ``matchAttribute:
resource.kubernetes.io/pcieRoot`` gets a GPU and its compute NIC under one root; the pod sees
the NIC as a network interface (its name and MAC as the slice publishes them) and its RDMA
verbs node; the claim's status carries the interface's network data. A storage NIC shares a
root with no GPU, so asking for one beside a GPU under one root stays pending.

Observes only the API (slices, the claim, the pod's conditions) and what the pod sees.
"""

from __future__ import annotations

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit.dra import ResourceApi, attribute_value
from fakegpu.testkit.nics import (
    NIC_DRIVER,
    PCIE_ROOT,
    assert_pending,
    interfaces,
    rdma_nodes,
    running_claim,
    start_pod,
)

# The embedded provider runs the NIC plugin; the kind provider does not yet (docs/nics.md).
pytestmark = [pytest.mark.e2e, pytest.mark.provider("embedded"),
              pytest.mark.topology("dgx-h100")]


def test_a_gpu_and_its_nic_under_one_root_and_the_pod_sees_the_interface(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str,
) -> None:
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic", PCIE_ROOT)
    claim, gpu, nic = running_claim(fakegpu_cluster, core_v1, resource_api, namespace,
                                    "gpu-nic")
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
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-storage", PCIE_ROOT,
              "storage")
    assert_pending(core_v1, resource_api, namespace, "gpu-storage",
                   "a GPU and a storage NIC under one root")
