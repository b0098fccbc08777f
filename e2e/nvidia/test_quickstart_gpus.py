"""NVIDIA's quickstart demos of whole GPUs (manifests/gpu-test1..3, 6) on an NVIDIA-compatible
cluster: what `nvidia-smi -L` prints in each container is exactly its claim's GPUs, with the
UUIDs and product names the ResourceSlice publishes (see conftest.py for the prerequisites).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.testkit import k8s
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


def test_a_selector_on_index_stays_pending_as_on_nvidias_driver(quickstart: Any) -> None:
    # gpu-test6 selects on `index`, which NVIDIA's driver dropped after v25.3 (its own
    # quickstart still does): on its current driver, and so here, the replicas stay Pending and
    # the scheduler names the missing attribute (`--nvidia-compat-release v25.3` restores it).
    quickstart.apply("gpu-test6")
    event = k8s.wait_event(quickstart.core, quickstart.namespace, "FailedScheduling",
                           containing="no such key: index", timeout=120.0)
    assert event.involved_object.kind == "Pod", event
    pods = quickstart.core.list_namespaced_pod(quickstart.namespace,
                                               label_selector="app=pod").items
    assert len(pods) == 2 and all(p.status.phase == "Pending" for p in pods), \
        [(p.metadata.name, p.status.phase) for p in pods]
