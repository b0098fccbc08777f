"""Basic DRA allocation against a real cluster of fake GPUs (default topology: gb200-mini).

Written for any topology: what to ask for is derived from the topology model (a product name),
so CI's matrix of topologies runs the same suite. Sharing a claim, an unsatisfiable claim and
unprepare on delete are conformance checks (fakegpu/conformance: ``claim_shared_by_pods``,
``unsatisfiable_claim_stays_pending``, ``deallocated_after_use``), run in the same session.

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
    allocated_devices,
    allocated_node,
    attribute_value,
    cel_string,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import visible_gpus
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


def uuids(devices: Sequence[dict[str, Any]]) -> list[str]:
    return [str(attribute_value(d, "uuid")) for d in devices]


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
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "gpu-pod", fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT,
        [PodClaim("gpu", template="one-gpu")]))

    pod: Any = k8s.wait_pod_running(core_v1, namespace, "gpu-pod")
    visible = visible_gpus(k8s.logged_env(core_v1, namespace, "gpu-pod"))
    assert len(visible) == 1, f"one GPU claimed, pod sees {visible}"

    # What the pod sees is the device the claim got, as the ResourceSlice publishes it.
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpu"))
    assert allocated_node(claim) == pod.spec.node_name
    devices = allocated_devices(resource_api, driver, claim)
    assert uuids(devices) == visible, (
        f"pod sees {visible}, its claim got {[d['name'] for d in devices]} {uuids(devices)}")
    assert attribute_value(devices[0], "productName") == product
