"""Basic DRA allocation against a real cluster of fake GPUs (default topology: gb200-mini).

Written for any topology: what to ask for is derived from the topology model (a product name,
the largest node's GPU count), so CI's matrix of topologies runs the same suite.

Every check observes as a user does: through the Kubernetes API (claims, ResourceSlices, pod
conditions) and what a pod sees (its environment), never through fakegpu's own files (NVML
state, CDI specs, the plugin's checkpoint): the same checks hold for any driver's slices. The
topology only says what to ask for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_node,
    allocation_results,
    attribute_value,
    cel_string,
    pod_claim_name,
    pod_manifest,
    published_device,
)
from fakegpu.testkit.wait import NotYet, wait_for
from fakegpu.topology.model import Topology

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def device_class(fakegpu_cluster: ClusterInfo, resource_api: ResourceApi) -> str:
    """The plugin's DeviceClass for whole GPUs: named after the driver (see plugin/manifests)."""
    name = fakegpu_cluster.driver_name
    classes = resource_api.device_classes()
    assert name in classes, f"DeviceClass {name} is not installed (classes: {classes})"
    return name


def whole_gpu_product(topology: Topology) -> str:
    """A product name (as NVML reports it) of some GPU not in MIG mode: the CEL selector's target.

    The suite runs on any topology (CI runs it on gb200-mini, dgx-h100 and mixed); a GPU in MIG
    mode is handed out as MIG devices, not as a whole GPU, so it is not a candidate.
    """
    for node in topology.nodes:
        for gpu in node.gpus:
            if not gpu.mig.enabled:
                return gpu.product.name
    pytest.fail(f"topology {topology.name} has no GPU outside MIG mode to claim whole")


def product_selector(driver: str, product: str) -> str:
    return f"device.attributes[{cel_string(driver)}].productName == {cel_string(product)}"


def allocated_gpus(resource_api: ResourceApi, driver: str, claim: dict[str, Any]
                   ) -> list[dict[str, Any]]:
    """The devices allocated to ``claim``, as the driver's ResourceSlices publish them."""
    results = allocation_results(claim, driver)
    assert results, f"claim {claim['metadata']['name']} has no allocation of {driver}"
    return [published_device(resource_api, driver, r["pool"], r["device"]) for r in results]


def uuids(devices: Sequence[dict[str, Any]]) -> list[str]:
    return [str(attribute_value(d, "uuid")) for d in devices]


def visible_gpus(env: dict[str, str]) -> list[str]:
    assert "NVIDIA_VISIBLE_DEVICES" in env, f"no NVIDIA_VISIBLE_DEVICES in the pod's env: {env}"
    return [u for u in env["NVIDIA_VISIBLE_DEVICES"].split(",") if u]


def create_pods(core: kclient.CoreV1Api, namespace: str, image: str,
                specs: Sequence[tuple[str, PodClaim]]) -> None:
    for name, claim in specs:
        core.create_namespaced_pod(
            namespace, pod_manifest(name, image, k8s.PRINT_ENV_AND_WAIT, [claim]))  # type: ignore[arg-type]


def test_product_selector_claim_runs_with_the_gpu_its_slice_publishes(
    fakegpu_cluster: ClusterInfo,
    fakegpu_topology: Topology,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    device_class: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    product = whole_gpu_product(fakegpu_topology)
    request = resource_api.device_request("gpu", device_class, count=1,
                                          cel=[product_selector(driver, product)])
    resource_api.create("resourceclaimtemplates",
                        resource_api.claim_template("one-gpu", [request]), namespace)
    create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                [("gpu-pod", PodClaim("gpu", template="one-gpu"))])

    pod: Any = k8s.wait_pod_running(core_v1, namespace, "gpu-pod")
    visible = visible_gpus(k8s.logged_env(core_v1, namespace, "gpu-pod"))
    assert len(visible) == 1, f"one GPU claimed, pod sees {visible}"

    # What the pod sees is the device the claim got, as the ResourceSlice publishes it.
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
    assert allocated_node(claim) == pod.spec.node_name
    devices = allocated_gpus(resource_api, driver, claim)
    assert uuids(devices) == visible, (
        f"pod sees {visible}, its claim got {[d['name'] for d in devices]} {uuids(devices)}")
    assert attribute_value(devices[0], "productName") == product


def test_pods_sharing_a_claim_see_the_same_gpu_on_the_same_node(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    device_class: str,
) -> None:
    request = resource_api.device_request("gpu", device_class, count=1)
    resource_api.create("resourceclaims", resource_api.claim_manifest("shared", [request]),
                        namespace)
    create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                [(name, PodClaim("gpu", claim="shared")) for name in ("first", "second")])

    pods: list[Any] = [k8s.wait_pod_running(core_v1, namespace, n) for n in ("first", "second")]
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 1, f"pods sharing one claim landed on different nodes: {nodes}"
    seen = [visible_gpus(k8s.exec_env(core_v1, namespace, p.metadata.name)) for p in pods]
    assert seen[0] == seen[1], f"pods sharing one claim see different GPUs: {seen}"
    assert len(seen[0]) == 1
    claim = resource_api.claim(namespace, "shared")
    assert uuids(allocated_gpus(resource_api, fakegpu_cluster.driver_name, claim)) == seen[0]
    assert allocated_node(claim) == nodes.pop()
    reserved = {r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or []}
    assert reserved == {"first", "second"}


def test_claim_for_more_gpus_than_any_node_has_stays_pending(
    fakegpu_cluster: ClusterInfo,
    fakegpu_topology: Topology,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    device_class: str,
) -> None:
    # One more than the node with the most GPUs has (5 on gb200-mini's 4-GPU nodes); on a
    # multi-node topology the cluster as a whole has enough, so only the per-node limit refuses.
    wanted = max(len(node.gpus) for node in fakegpu_topology.nodes) + 1
    request = resource_api.device_request("gpus", device_class, count=wanted)
    resource_api.create("resourceclaimtemplates",
                        resource_api.claim_template("too-many", [request]), namespace)
    create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                [("greedy", PodClaim("gpus", template="too-many"))])

    pod: Any = k8s.wait_unschedulable(core_v1, namespace, "greedy",
                                      what=f"the scheduler to refuse {wanted} GPUs")
    cond = k8s.pod_condition(pod, "PodScheduled")
    assert cond is not None and cond.reason == "Unschedulable", cond
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpus"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")


# serial: it frees two GPUs and claims exactly those again: a parallel test could take them in
# between.
@pytest.mark.serial
def test_deleting_pods_unprepares_and_frees_their_devices(
    fakegpu_cluster: ClusterInfo,
    k8s_client: Any,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    device_class: str,
) -> None:
    """What a user sees of unprepare: the claims are released (the generated one deleted, the
    standalone one deallocated), and each device is handed to a new pod on the same node, which
    sees exactly that GPU."""
    driver = fakegpu_cluster.driver_name
    request = resource_api.device_request("gpu", device_class, count=1)
    # Server-side apply, as `kubectl apply` would (the other tests create objects directly).
    k8s.apply_manifests(k8s_client, [resource_api.claim_template("one-gpu", [request]),
                                     resource_api.claim_manifest("direct", [request])],
                        namespace=namespace)
    create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                [("from-template", PodClaim("gpu", template="one-gpu")),
                 ("from-claim", PodClaim("gpu", claim="direct"))])

    held: dict[str, tuple[str, str, str]] = {}  # pod -> (claim, node, GPU UUID)
    for name in ("from-template", "from-claim"):
        pod: Any = k8s.wait_pod_running(core_v1, namespace, name)
        claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
        # A running pod's claim is allocated and reserved for it: without this the release
        # below could not fail.
        reserved = [r.get("name") for r in claim["status"].get("reservedFor") or []]
        assert reserved == [name], f"claim of running pod {name} is reserved for {reserved}"
        (uuid,) = uuids(allocated_gpus(resource_api, driver, claim))
        assert visible_gpus(k8s.exec_env(core_v1, namespace, name)) == [uuid]
        held[name] = (claim["metadata"]["name"], pod.spec.node_name, uuid)

    for name in held:
        core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    for name in held:
        k8s.wait_pod_gone(core_v1, namespace, name)

    generated = held["from-template"][0]

    def released() -> None:
        names = {c["metadata"]["name"]: c for c in resource_api.items("resourceclaims",
                                                                        namespace)}
        if generated in names:
            raise NotYet(f"generated claim {generated} still exists")
        status = names["direct"].get("status") or {}
        if status.get("reservedFor") or status.get("allocation"):
            raise NotYet(f"claim direct still reserved or allocated: {status}")

    wait_for(released, what="the pods' claims to be released", timeout=120)

    # Each freed GPU goes to a new pod pinned to its node by a selector on its UUID.
    for name, (_, node, uuid) in held.items():
        again = f"again-{name}"
        pinned = resource_api.device_request(
            "gpu", device_class, count=1,
            cel=[f"device.attributes[{cel_string(driver)}].uuid == {cel_string(uuid)}"])
        resource_api.create("resourceclaimtemplates",
                            resource_api.claim_template(again, [pinned]), namespace)
        create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                    [(again, PodClaim("gpu", template=again))])
        pod = k8s.wait_pod_running(core_v1, namespace, again)
        assert pod.spec.node_name == node
        assert visible_gpus(k8s.logged_env(core_v1, namespace, again)) == [uuid]
