"""What the NIC suites share: the words of the cluster's NIC driver, a claim for one GPU and one
NIC aligned by an attribute, and what a pod sees of its NIC (through the apiserver's exec, as a
user would look)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kclient

from fakegpu import drivers
from fakegpu.cluster.provider import ClusterInfo

from . import dra, k8s
from .dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    attribute_value,
    cel_string,
    match_attribute,
    pod_claim_name,
    pod_manifest,
)

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
# DRANET publishes no role: on the catalog's systems the compute NICs are the InfiniBand ones
# (one per GPU under its switch), the storage NICs Ethernet.
_DRANET_ENCAPSULATION = {"compute": "infiniband", "storage": "ether"}


@dataclass(frozen=True)
class NicWords:
    """How the cluster's NIC driver names what the suites select and read: fakegpu's own
    (``role``, ``interfaceName``, ``macAddress``) or DRANET's (``dra.net/ifName``,
    ``dra.net/mac``; a role is its encapsulation), so one suite runs against either."""

    driver: str

    @property
    def dranet(self) -> bool:
        return drivers.is_dranet(self.driver)

    @property
    def interface(self) -> str:
        """The attribute naming the NIC's network interface."""
        return f"{drivers.DRANET}/ifName" if self.dranet else "interfaceName"

    @property
    def mac(self) -> str:
        """The attribute holding its MAC address."""
        return f"{drivers.DRANET}/mac" if self.dranet else "macAddress"

    @property
    def mtu(self) -> str | None:
        """The attribute holding the interface's MTU (DRANET's; fakegpu's own publishes none)."""
        return f"{drivers.DRANET}/mtu" if self.dranet else None

    @property
    def ipv4(self) -> str | None:
        """The attribute listing the port's IPv4 addresses (DRANET's, comma-separated CIDRs;
        fakegpu's own publishes none: the claim's networkData carries them)."""
        return f"{drivers.DRANET}/ipv4" if self.dranet else None

    @property
    def link_down_taint(self) -> str:
        return f"{self.driver}/link-down"

    def role_selector(self, role: str) -> str:
        """A CEL selector for NICs of ``role`` (compute, storage)."""
        attrs = f"device.attributes[{cel_string(self.driver)}]"
        if self.dranet:
            return f"{attrs}.encapsulation == {cel_string(_DRANET_ENCAPSULATION[role])}"
        return f"{attrs}.role == {cel_string(role)}"

    def role(self, device: Mapping[str, Any]) -> str | None:
        """The role of a published NIC, as role_selector reads it."""
        if not self.dranet:
            value = attribute_value(device, "role")
            return None if value is None else str(value)
        encapsulation = attribute_value(device, f"{drivers.DRANET}/encapsulation")
        return next((r for r, e in _DRANET_ENCAPSULATION.items() if e == encapsulation), None)


def words(cluster: ClusterInfo) -> NicWords | None:
    """The words of the cluster's NIC driver; None when it runs no NIC plugin."""
    return NicWords(cluster.nic_driver) if cluster.nic_driver else None


def gpu_nic_template(api: ResourceApi, name: str, gpu_driver: str, nic: NicWords,
                     attribute: str, nic_role: str = "compute") -> dict[str, Any]:
    """A claim template: one whole GPU and one NIC of ``nic_role``, both with one value of
    ``attribute``."""
    whole_gpu = f"device.attributes[{cel_string(gpu_driver)}].type == 'gpu'"
    return api.claim_template(name, [
        api.device_request("gpu", gpu_driver, cel=[whole_gpu]),
        api.device_request("nic", nic.driver, cel=[nic.role_selector(nic_role)]),
    ], constraints=[match_attribute(attribute)])


def interfaces(core: kclient.CoreV1Api, namespace: str, pod: str) -> dict[str, str]:
    """Interface name -> MAC, as the pod's /sys/class/net shows them."""
    out = k8s.exec_in_pod(core, namespace, pod, [
        "sh", "-c", "for i in /sys/class/net/*; do echo \"${i##*/} $(cat $i/address)\"; done"])
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def link_file(core: kclient.CoreV1Api, namespace: str, pod: str, interface: str,
              name: str) -> str:
    """A file of the interface in the pod's /sys/class/net (``mtu``, ``carrier``,
    ``operstate``)."""
    out = k8s.exec_in_pod(core, namespace, pod, ["cat", f"/sys/class/net/{interface}/{name}"])
    return out.stdout.strip()


def mtu(core: kclient.CoreV1Api, namespace: str, pod: str, interface: str) -> int:
    """The interface's MTU as the pod's /sys/class/net shows it."""
    return int(link_file(core, namespace, pod, interface, "mtu"))


def carrier(core: kclient.CoreV1Api, namespace: str, pod: str, interface: str) -> bool:
    """Whether the pod's interface has a link (its ``carrier``; ``ip link`` shows NO-CARRIER
    without one)."""
    return link_file(core, namespace, pod, interface, "carrier") == "1"


def addresses(core: kclient.CoreV1Api, namespace: str, pod: str, interface: str) -> list[str]:
    """The interface's addresses (CIDR) as ``ip addr`` shows them in the pod."""
    out = k8s.exec_in_pod(core, namespace, pod, ["ip", "-o", "addr", "show", "dev", interface])
    words = out.stdout.split()
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("inet", "inet6")
            and not words[i + 1].startswith("fe80:")]  # the kernel's link-local, not the NIC's


def rdma_nodes(core: kclient.CoreV1Api, namespace: str, pod: str) -> list[str]:
    """``ls -l /dev/infiniband`` lines of character devices (none: [])."""
    out = k8s.exec_in_pod(core, namespace, pod, ["sh", "-c", "ls -l /dev/infiniband 2>&1"],
                          check=False)
    return [line for line in out.stdout.splitlines() if line.startswith("c")]


def start_pod(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi, namespace: str,
              name: str, attribute: str, nic_role: str = "compute") -> None:
    """A claim template ``name`` (a GPU and a NIC with one value of ``attribute``) and a pod
    ``name`` using it."""
    nic = words(cluster)
    assert nic is not None, f"cluster {cluster.name} runs no NIC driver"
    api.create("resourceclaimtemplates",
               gpu_nic_template(api, name, cluster.driver_name, nic, attribute, nic_role),
               namespace)
    k8s.create_pod(core, namespace, pod_manifest(
        name, cluster.workload_image, k8s.PRINT_ENV_AND_WAIT, [PodClaim("net", template=name)]))


def running_claim(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
                  namespace: str, name: str
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Once pod ``name`` runs: its claim, and the GPU and the NIC allocated to it as their
    slices publish them."""
    pod: Any = k8s.wait_pod_running(core, namespace, name)
    claim = api.claim(namespace, pod_claim_name(pod, "net"))
    [gpu] = allocated_devices(api, cluster.driver_name, claim)
    [nic] = allocated_devices(api, cluster.nic_driver, claim)
    return claim, gpu, nic


def assert_pending(core: kclient.CoreV1Api, api: ResourceApi, namespace: str, name: str,
                   why: str) -> None:
    """Pod ``name`` (``start_pod``'s) is refused by the scheduler for its claim, which stays
    unallocated."""
    dra.assert_pending(core, api, namespace, name, "net", why)
