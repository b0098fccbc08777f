"""Basic DRA allocation against a real cluster of fake GPUs (default topology: gb200-mini).

Written for any topology: what to ask for is derived from the topology model (a product name,
the largest node's GPU count), so CI's matrix of topologies runs the same suite.

Every check compares what Kubernetes did with what the fake hardware reports through NVML on
the node the pod ran on (pynvml over the node's state file), never with the topology YAML: the
topology only says what to ask for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo, NodeInfo
from fakegpu.plugin import cdi, checkpoint
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_string,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import NvmlGpu, read_node_gpus
from fakegpu.testkit.wait import NotYet, wait_for
from fakegpu.topology.model import Topology

pytestmark = pytest.mark.e2e

ENV_DONE = "FAKEGPU_E2E_ENV_DONE"
# Print the environment once, then idle; the marker tells the log reader `env` has finished.
PRINT_ENV_AND_WAIT = ["sh", "-c", f"env; echo {ENV_DONE}; exec sleep 3600"]
# The DRA scheduler plugin's reason when no node can satisfy a pod's claims (stable since 1.26,
# checked against the message of the release under test).
SCHEDULER_CANNOT_ALLOCATE = "cannot allocate all claims"


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


def gpu_node(info: ClusterInfo, node_name: str) -> NodeInfo:
    node = info.node(node_name)
    assert node.nvml_state is not None, f"node {node_name} has no NVML state file"
    return node


def nvml_gpus(info: ClusterInfo, node_name: str) -> dict[str, NvmlGpu]:
    """UUID -> GPU, as NVML reports it on ``node_name``."""
    state = gpu_node(info, node_name).nvml_state
    assert state is not None
    gpus = {gpu.uuid: gpu for gpu in read_node_gpus(state)}
    assert gpus, f"NVML reports no GPUs on node {node_name}"
    return gpus


def logged_env(core: kclient.CoreV1Api, namespace: str, pod: str) -> dict[str, str]:
    """The environment the pod printed at start (waits until the print is complete)."""

    def complete() -> str:
        text = k8s.pod_log(core, namespace, pod)
        if ENV_DONE not in text:
            raise NotYet(f"log so far: {text[-300:]!r}")
        return text

    return k8s.parse_env(wait_for(complete, what=f"pod {namespace}/{pod} to print its env",
                                  timeout=60))


def exec_env(core: kclient.CoreV1Api, namespace: str, pod: str) -> dict[str, str]:
    return k8s.parse_env(k8s.exec_in_pod(core, namespace, pod, ["env"]).stdout)


def visible_gpus(env: dict[str, str]) -> list[str]:
    assert "NVIDIA_VISIBLE_DEVICES" in env, f"no NVIDIA_VISIBLE_DEVICES in the pod's env: {env}"
    return [u for u in env["NVIDIA_VISIBLE_DEVICES"].split(",") if u]


def create_pods(core: kclient.CoreV1Api, namespace: str, image: str,
                specs: Sequence[tuple[str, PodClaim]]) -> None:
    for name, claim in specs:
        core.create_namespaced_pod(
            namespace, pod_manifest(name, image, PRINT_ENV_AND_WAIT, [claim]))  # type: ignore[arg-type]


def test_product_selector_claim_runs_with_a_gpu_nvml_reports(
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
    visible = visible_gpus(logged_env(core_v1, namespace, "gpu-pod"))
    assert len(visible) == 1, f"one GPU claimed, pod sees {visible}"

    on_node = nvml_gpus(fakegpu_cluster, pod.spec.node_name)
    assert visible[0] in on_node, (
        f"pod sees GPU {visible[0]}, NVML on node {pod.spec.node_name} reports {sorted(on_node)}")
    gpu = on_node[visible[0]]
    assert gpu.name == product
    # The allocated device is that GPU: the plugin names devices gpu-<minor>.
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
    results = allocation_results(claim, driver)
    assert [r["device"] for r in results] == [f"gpu-{gpu.minor}"]
    assert results[0]["pool"], "allocation result names no pool"


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
    seen = [visible_gpus(exec_env(core_v1, namespace, p.metadata.name)) for p in pods]
    assert seen[0] == seen[1], f"pods sharing one claim see different GPUs: {seen}"
    assert len(seen[0]) == 1
    on_node = nvml_gpus(fakegpu_cluster, nodes.pop())
    assert seen[0][0] in on_node

    claim = resource_api.claim(namespace, "shared")
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

    def refused() -> Any:
        # The scheduler first waits for the claim controller to create the pod's claim (a
        # different message); the verdict that matters comes once it has tried to allocate.
        pod: Any = k8s.read_pod(core_v1, namespace, "greedy")
        cond = k8s.pod_condition(pod, "PodScheduled")
        if cond is None or cond.status != "False" or SCHEDULER_CANNOT_ALLOCATE not in (
                cond.message or ""):
            raise NotYet(f"PodScheduled: {cond}")
        return pod

    pod: Any = wait_for(refused, what=f"the scheduler to refuse {wanted} GPUs", timeout=120)
    cond = k8s.pod_condition(pod, "PodScheduled")
    assert cond is not None and cond.reason == "Unschedulable", cond
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpus"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")


def _prepared_state(node: NodeInfo, driver: str, claim_uid: str) -> tuple[bool, bool]:
    """(CDI spec file present, checkpoint lists the claim) for ``claim_uid`` on ``node``."""
    assert node.cdi_dir is not None and node.plugin_state_dir is not None
    spec = Path(node.cdi_dir) / cdi.spec_filename(driver, claim_uid)
    listed = claim_uid in checkpoint.load(node.plugin_state_dir).claims
    return spec.is_file(), listed


def test_deleting_pods_unprepares_their_claims(
    fakegpu_cluster: ClusterInfo,
    k8s_client: Any,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
    device_class: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    request = resource_api.device_request("gpu", device_class, count=1)
    # Server-side apply, as `kubectl apply` would (the other tests create objects directly).
    k8s.apply_manifests(k8s_client, [resource_api.claim_template("one-gpu", [request]),
                                     resource_api.claim_manifest("direct", [request])],
                        namespace=namespace)
    create_pods(core_v1, namespace, fakegpu_cluster.workload_image,
                [("from-template", PodClaim("gpu", template="one-gpu")),
                 ("from-claim", PodClaim("gpu", claim="direct"))])

    prepared: dict[str, tuple[NodeInfo, str]] = {}  # pod -> (node, claim UID)
    for name in ("from-template", "from-claim"):
        pod: Any = k8s.wait_pod_running(core_v1, namespace, name)
        claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
        uid = claim["metadata"]["uid"]
        node = gpu_node(fakegpu_cluster, pod.spec.node_name)
        # A running pod's claim is prepared: without this the check below could not fail.
        assert _prepared_state(node, driver, uid) == (True, True), (
            f"claim {uid} of running pod {name} is not prepared on {node.name}")
        prepared[name] = (node, uid)

    for name in prepared:
        core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    for name, (node, uid) in prepared.items():
        k8s.wait_pod_gone(core_v1, namespace, name)

        def unprepared(node: NodeInfo = node, uid: str = uid) -> None:
            state = _prepared_state(node, driver, uid)
            if state != (False, False):
                raise NotYet(f"CDI spec present={state[0]}, in checkpoint={state[1]}")

        wait_for(unprepared, what=f"claim {uid} of pod {name} to be unprepared on {node.name}",
                 timeout=120)
