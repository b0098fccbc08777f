"""GPUs inside containers as NVIDIA's driver gives them (issue 13): a pod's `nvidia-smi`
shows exactly the GPUs its claim got, with the UUIDs the ResourceSlice publishes, and nothing
else of the node.

Both providers: the embedded one's plugins run on the host, so the CDI spec mounts the node's
NVML state and the tools by their own paths; kind's plugin pods name the node's paths (the
state volume's, and the tools the provider copies onto each node: fakegpu/plugin/nvmlmounts.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    attribute_value,
    in_nvml_order,
    pod_claim_name,
    published_device,
    run_gpu_pod,
)

pytestmark = pytest.mark.e2e


def _claim_gpus(fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api,
                resource_api: ResourceApi, namespace: str, count: int
                ) -> tuple[Any, list[dict[str, Any]]]:
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "p", fakegpu_cluster.workload_image,
                           driver, count=count, template="gpus", claim="gpus")
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpus"))
    devices = [published_device(resource_api, driver, r["pool"], r["device"])
               for r in allocation_results(claim, driver)]
    assert len(devices) == count
    return pod, devices


def test_nvidia_smi_lists_exactly_the_claims_gpus(fakegpu_cluster: ClusterInfo,
                                                 core_v1: kclient.CoreV1Api,
                                                 resource_api: ResourceApi,
                                                 namespace: str) -> None:
    _, devices = _claim_gpus(fakegpu_cluster, core_v1, resource_api, namespace, 2)
    listed = k8s.exec_in_pod(core_v1, namespace, "p", ["nvidia-smi", "-L"]).stdout
    # In the node's order, numbered from 0 in the container, as NVIDIA's runtime shows them.
    ordered = in_nvml_order(devices)
    assert listed.splitlines() == [
        f"GPU {i}: {attribute_value(d, 'productName')} (UUID: {attribute_value(d, 'uuid')})"
        for i, d in enumerate(ordered)]


def test_nvml_in_the_pod_hides_the_other_gpus_of_the_node(fakegpu_cluster: ClusterInfo,
                                                         core_v1: kclient.CoreV1Api,
                                                         resource_api: ResourceApi,
                                                         namespace: str) -> None:
    pod, devices = _claim_gpus(fakegpu_cluster, core_v1, resource_api, namespace, 1)
    mine = str(attribute_value(devices[0], "uuid"))
    others = [str(attribute_value(d, "uuid"))
              for s in resource_api.slices(fakegpu_cluster.driver_name, pod.spec.node_name)
              for d in s["spec"].get("devices") or ()
              if attribute_value(d, "type") == "gpu" and attribute_value(d, "uuid") != mine]
    assert others, "the node has no other GPU to hide"
    out = k8s.exec_in_pod(core_v1, namespace, "p", [
        "nvidia-smi", "--query-gpu=count,index,uuid", "--format=csv,noheader"]).stdout
    assert out.splitlines() == [f"1, 0, {mine}"]


_PYNVML = ("import json, pynvml as n; n.nvmlInit(); "
           "print(json.dumps([n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i)) "
           "for i in range(n.nvmlDeviceGetCount())]))")


def _python_image(core_v1: kclient.CoreV1Api) -> str | None:
    """An image with Python and pynvml that every worker holds, if any: kind workers hold
    fakegpu's plugin image (a venv with nvidia-ml-py); embedded nodes only pause and busybox."""
    held = []
    for node in core_v1.list_node(label_selector="!node-role.kubernetes.io/control-plane").items:
        status: Any = node.status
        names = {n for image in status.images or () for n in image.names or ()
                 if "/fakegpu-plugin:" in n and "@" not in n}
        held.append(names)
    common = set.intersection(*held) if held else set()
    return min(common) if common else None


def test_pynvml_in_a_python_pod_sees_the_claims_gpus(fakegpu_cluster: ClusterInfo,
                                                    core_v1: kclient.CoreV1Api,
                                                    resource_api: ResourceApi,
                                                    namespace: str) -> None:
    image = _python_image(core_v1)
    if image is None:
        pytest.skip("MISSING PREREQUISITE: no image with Python and pynvml on the workers "
                    "(kind workers hold fakegpu's plugin image; embedded nodes do not)")
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "py", image, driver, count=2,
                           template="gpus", claim="gpus", command=[
                               "/opt/fakegpu/bin/python", "-c", "import time; time.sleep(3600)"])
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpus"))
    devices = [published_device(resource_api, driver, r["pool"], r["device"])
               for r in allocation_results(claim, driver)]
    out = k8s.exec_in_pod(core_v1, namespace, "py", ["/opt/fakegpu/bin/python", "-c",
                                                     _PYNVML]).stdout
    ordered = in_nvml_order(devices)
    assert json.loads(out) == [attribute_value(d, "uuid") for d in ordered]
