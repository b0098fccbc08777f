"""NVIDIA's quickstart demos of whole GPUs (manifests/gpu-test1..3, 6) on an NVIDIA-compatible
cluster: what `nvidia-smi -L` prints in each container is exactly its claim's GPUs, with the
UUIDs and product names the ResourceSlice publishes (see conftest.py for the prerequisites).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.testkit.dra import attribute_value

pytestmark = pytest.mark.e2e


def test_one_gpu_per_pod(quickstart: Any) -> None:  # gpu-test1
    quickstart.apply("gpu-test1")
    seen = {}
    for name in ("pod1", "pod2"):
        pod = quickstart.running(name)
        (device,) = quickstart.devices(pod, "gpu")
        assert quickstart.listing(name) == quickstart.gpu_lines([device])
        seen[name] = (pod.spec.node_name, attribute_value(device, "uuid"))
    assert seen["pod1"] != seen["pod2"], "two claims got the same GPU"


def test_two_containers_share_the_pods_gpu(quickstart: Any) -> None:  # gpu-test2
    quickstart.apply("gpu-test2")
    pod = quickstart.running("pod")
    (device,) = quickstart.devices(pod, "shared-gpu")
    for container in ("ctr0", "ctr1"):
        assert quickstart.listing("pod", container) == quickstart.gpu_lines([device])


def test_two_pods_share_one_claim(quickstart: Any) -> None:  # gpu-test3
    quickstart.apply("gpu-test3")
    pods = [quickstart.running(name) for name in ("pod1", "pod2")]
    (device,) = quickstart.devices(pods[0], "shared-gpu")
    assert pods[0].spec.node_name == pods[1].spec.node_name
    for pod in pods:
        assert quickstart.listing(pod.metadata.name) == quickstart.gpu_lines([device])


def test_selectors_on_product_name_and_index(quickstart: Any) -> None:  # gpu-test6
    quickstart.apply("gpu-test6")
    for pod in quickstart.running_replicas("app=pod", 2):
        (device,) = quickstart.devices(pod, "gpu")
        assert attribute_value(device, "index") in (1, 3)
        assert "gb200" in str(attribute_value(device, "productName")).lower()
        assert quickstart.listing(pod.metadata.name) == quickstart.gpu_lines([device])
