"""The NIC driver on GB200 trays: each GPU sits alone in its Grace PCIe domain, so no NIC
shares a root with a GPU and a claim for a GPU and a NIC under one root stays pending (as on
the real tray, where GPUDirect RDMA crosses the CPU); under one NUMA node it is met.

Observes only the API and what the pod sees.
"""

from __future__ import annotations

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit.dra import ResourceApi, attribute_value
from fakegpu.testkit.nics import (
    NUMA_NODE,
    PCIE_ROOT,
    NicWords,
    assert_pending,
    interfaces,
    running_claim,
    start_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.topology("gb200-mini")]


def test_no_gpu_shares_a_root_with_a_nic_so_the_claim_stays_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic", PCIE_ROOT)
    assert_pending(core_v1, resource_api, namespace, "gpu-nic",
                   "a GPU and a NIC under one root on GB200")


def test_a_gpu_and_a_nic_of_one_numa_node(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic-numa", NUMA_NODE)
    _claim, gpu, nic = running_claim(fakegpu_cluster, core_v1, resource_api, namespace,
                                     "gpu-nic-numa")
    assert attribute_value(gpu, NUMA_NODE) == attribute_value(nic, NUMA_NODE) is not None
    assert attribute_value(gpu, PCIE_ROOT) != attribute_value(nic, PCIE_ROOT)
    seen = interfaces(core_v1, namespace, "gpu-nic-numa")
    assert seen.get(attribute_value(nic, nic_words.interface)) == attribute_value(nic,
                                                                              nic_words.mac)
