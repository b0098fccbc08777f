"""The NIC driver on a DGX H100: a claim for a GPU and a NIC with ``matchAttribute:
resource.kubernetes.io/pcieRoot`` gets a GPU and its compute NIC under one root; the pod sees
the NIC as a network interface (its name and MAC as the slice publishes them, with its
address, and the MTU where the driver publishes one) and its RDMA verbs node; the claim's
status carries the interface's network data, the addresses the pod sees. A storage NIC shares
a root with no GPU, so asking for one beside a GPU under one root stays pending. A
``nic-link-down`` fault taints the NIC in its slice; clearing it lifts the taint. A pod using
the NIC sees its interface lose its carrier during the fault and regain it after, and its
status shows the NIC unhealthy meanwhile (KEP-4680, where the kubelet reports device health).

Observes only the API (slices, the claim, the pod's conditions) and what the pod sees, in the
words of the cluster's NIC driver: fakegpu's, or DRANET's (the NVIDIA-compatible pass runs
the NICs as dra.net).
"""

from __future__ import annotations

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import ResourceApi, attribute_value, node_devices
from fakegpu.testkit.nics import (
    PCIE_ROOT,
    NicWords,
    addresses,
    assert_pending,
    carrier,
    interfaces,
    mtu,
    rdma_nodes,
    running_claim,
    start_pod,
)
from fakegpu.testkit.wait import until_true, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.topology("dgx-h100")]


def test_a_gpu_and_its_nic_under_one_root_and_the_pod_sees_the_interface(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic", PCIE_ROOT)
    claim, gpu, nic = running_claim(fakegpu_cluster, core_v1, resource_api, namespace,
                                    "gpu-nic")
    root = attribute_value(nic, PCIE_ROOT)
    assert root and attribute_value(gpu, PCIE_ROOT) == root, (gpu["name"], nic["name"])
    assert nic_words.role(nic) == "compute"
    name, mac = attribute_value(nic, nic_words.interface), attribute_value(nic, nic_words.mac)
    # What the pod sees: the interface, named and addressed as published, and one verbs node.
    seen = interfaces(core_v1, namespace, "gpu-nic")
    assert seen.get(name) == mac, seen
    ips = addresses(core_v1, namespace, "gpu-nic", name)
    assert ips, f"interface {name} has no address in the pod"
    if nic_words.mtu:  # a driver that publishes the MTU: the pod's interface has it
        assert mtu(core_v1, namespace, "gpu-nic", name) == attribute_value(nic, nic_words.mtu)
    if nic_words.ipv4:  # a driver that publishes the addresses: the pod's are those
        published = str(attribute_value(nic, nic_words.ipv4)).split(",")
        assert sorted(ip for ip in ips if ":" not in ip) == sorted(published), (ips, published)
    verbs = rdma_nodes(core_v1, namespace, "gpu-nic")
    assert len(verbs) == 1 and "uverbs" in verbs[0] and " 231," in verbs[0], verbs
    # The claim's status: the NIC driver's entry with the network data the pod sees.
    entries = [e for e in (claim.get("status") or {}).get("devices") or []
               if e.get("driver") == nic_words.driver]
    assert [e["device"] for e in entries] == [nic["name"]], entries
    assert entries[0]["networkData"] == {"interfaceName": name, "hardwareAddress": mac,
                                         "ips": ips}
    ready = {c["type"]: c["status"] for c in entries[0].get("conditions") or []}
    assert ready.get("Ready") == "True", entries[0]


def test_a_storage_nic_shares_no_root_with_a_gpu_so_the_claim_stays_pending(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-storage", PCIE_ROOT,
              "storage")
    assert_pending(core_v1, resource_api, namespace, "gpu-storage",
                   "a GPU and a storage NIC under one root")


def _taints(api: ResourceApi, driver: str, node: str, device: str) -> list[str]:
    [found] = [d for d in node_devices(api, driver)[node] if d["name"] == device]
    return [t["key"] for t in (found.get("basic") or found).get("taints") or []]


# A storage NIC: no other test here allocates one, so the taint cannot change their choice.
def test_nic_link_down_taints_the_nic_and_clearing_lifts_it(
    fakegpu_cluster: ClusterInfo, resource_api: ResourceApi, nic_words: NicWords,
) -> None:
    driver = nic_words.driver
    [(node, devices)] = node_devices(resource_api, driver).items()
    nic = next(d for d in devices if nic_words.role(d) == "storage")
    name, key = str(attribute_value(nic, nic_words.interface)), nic_words.link_down_taint
    assert _taints(resource_api, driver, node, nic["name"]) == []
    faults.nic_link(fakegpu_cluster, node, name, up=False)
    try:
        wait_for(until_true(lambda: _taints(resource_api, driver, node, nic["name"]) == [key]),
                 what=f"the NIC plugin to taint {name} with {key}", timeout=60)
    finally:
        faults.nic_link(fakegpu_cluster, node, name, up=True)
    wait_for(until_true(lambda: _taints(resource_api, driver, node, nic["name"]) == []),
             what=f"the taint on {name} to be lifted", timeout=60)


def test_a_running_pod_sees_its_nic_lose_its_link_and_get_it_back(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, nic_words: NicWords,
) -> None:
    """The fault reaches the interface the pod already has, not only the slice: the pod's
    ``carrier`` goes to 0 (``ip link``: NO-CARRIER) and comes back when the fault is cleared,
    and the pod's status shows the NIC Unhealthy meanwhile, its GPU Healthy (where the kubelet
    runs with ResourceHealthStatus). The NIC is this pod's, so its taint changes no other
    test's allocation."""
    start_pod(fakegpu_cluster, core_v1, resource_api, namespace, "gpu-nic-fault", PCIE_ROOT)
    claim, _gpu, nic = running_claim(fakegpu_cluster, core_v1, resource_api, namespace,
                                     "gpu-nic-fault")
    name = str(attribute_value(nic, nic_words.interface))
    [node] = {e["pool"] for e in claim["status"]["allocation"]["devices"]["results"]
              if e["driver"] == nic_words.driver}
    assert carrier(core_v1, namespace, "gpu-nic-fault", name)
    # The pod's status: its GPU and its NIC, both healthy, then only the NIC unhealthy.
    health = k8s.kubelet_reports_health(core_v1, node)

    def shown() -> list[str]:
        pod = k8s.pod_json(core_v1, namespace, "gpu-nic-fault")
        return sorted(k8s.device_health(pod).values())

    if health:
        wait_for(until_true(lambda: shown() == ["Healthy", "Healthy"]),
                 what="the pod's GPU and NIC to show Healthy", timeout=120)
    faults.nic_link(fakegpu_cluster, node, name, up=False)
    try:
        wait_for(until_true(lambda: not carrier(core_v1, namespace, "gpu-nic-fault", name)),
                 what=f"the pod's {name} to lose its carrier", timeout=60)
        if health:
            wait_for(until_true(lambda: shown() == ["Healthy", "Unhealthy"]),
                     what=f"the pod's status to show {name} Unhealthy", timeout=60)
    finally:
        faults.nic_link(fakegpu_cluster, node, name, up=True)
    wait_for(until_true(lambda: carrier(core_v1, namespace, "gpu-nic-fault", name)),
             what=f"the pod's {name} to get its carrier back", timeout=60)
    if health:
        wait_for(until_true(lambda: shown() == ["Healthy", "Healthy"]),
                 what=f"the pod's status to show {name} Healthy again", timeout=60)
