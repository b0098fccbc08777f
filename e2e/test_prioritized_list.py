"""Prioritized alternatives (DRAPrioritizedList): a request with ``firstAvailable`` [an H100,
an A100] gets an H100 while one is free and an A100 once none is; the allocation names the
subrequest that was used, and a config for that subrequest reaches the container.

Runs on the ``mixed`` topology: whole H100s (Hopper) on two nodes, whole A100s (Ampere) on two.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster import featuregates
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_match,
    config_api_version,
    pod_manifest,
    subrequest,
)
from fakegpu.topology.model import Topology

pytestmark = [pytest.mark.e2e, pytest.mark.topology("mixed")]

SLEEP = ["sleep", "3600"]


def whole_gpus(topology: Topology, architecture: str) -> dict[str, int]:
    """Node -> how many whole GPUs (not in MIG mode) of ``architecture`` it has."""
    out = {}
    for node in topology.nodes:
        count = sum(1 for g in node.gpus
                    if not g.mig.enabled and g.product.architecture == architecture)
        if count:
            out[node.name] = count
    return out


# serial: every H100 held: parallel tests' GPUs would change which alternative it gets.
@pytest.mark.serial
def test_first_available_takes_an_h100_then_an_a100_when_none_is_free(
    fakegpu_cluster: ClusterInfo,
    fakegpu_topology: Topology,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    image = fakegpu_cluster.workload_image
    hoppers = whole_gpus(fakegpu_topology, "hopper")
    if not hoppers or not whole_gpus(fakegpu_topology, "ampere"):
        pytest.fail(f"topology {fakegpu_topology.name} needs whole H100s and A100s")
    hopper = cel_match(driver, "architecture", "Hopper")
    ampere = cel_match(driver, "architecture", "Ampere")
    choice = resource_api.first_available("gpu", [
        subrequest("h100", driver, cel=[hopper]), subrequest("a100", driver, cel=[ampere])])
    interval = {"apiVersion": config_api_version(driver), "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}

    def claim(name: str) -> dict[str, Any]:
        body = resource_api.claim_manifest(name, [choice])
        body["spec"]["devices"]["config"] = [{"requests": ["gpu/a100"], "opaque": {
            "driver": driver, "parameters": interval}}]
        return body

    # An H100 is free: the first alternative. Before 1.35 the scheduler does not score nodes
    # by the best alternative they satisfy (kubernetes/kubernetes#134711 added that), so any
    # node with a free A100 may be chosen (seen on kind 1.34.4); there the pod goes to an H100
    # node, where the allocator still tries the alternatives in their order.
    pinned = (sorted(hoppers)[0]
              if featuregates.parse_minor(fakegpu_cluster.k8s_version) < 35 else None)
    resource_api.create("resourceclaims", claim("first"), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "first", image, SLEEP, [PodClaim("gpu", claim="first")], node=pinned))
    k8s.wait_pod_running(core_v1, namespace, "first")
    [got] = allocation_results(resource_api.claim(namespace, "first"), driver)
    assert got["request"] == "gpu/h100", got
    assert got["pool"] in hoppers
    core_v1.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    k8s.wait_pod_gone(core_v1, namespace, "first")
    resource_api.delete("resourceclaims", "first", namespace)

    # Every whole H100 taken (one pod per node holding all of its H100s) ...
    for i, (node, count) in enumerate(sorted(hoppers.items())):
        resource_api.create("resourceclaims", resource_api.claim_manifest(
            f"hog-{i}", [resource_api.device_request("h100s", driver, count=count,
                                                     cel=[hopper])]), namespace)
        k8s.create_pod(core_v1, namespace, pod_manifest(
            f"hog-{i}", image, SLEEP, [PodClaim("gpus", claim=f"hog-{i}")], node=node))
    for i in range(len(hoppers)):
        k8s.wait_pod_running(core_v1, namespace, f"hog-{i}")

    # ... the same request falls back to an A100, and the A100's config reaches the container.
    resource_api.create("resourceclaims", claim("second"), namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "second", image, SLEEP, [PodClaim("gpu", claim="second")]))
    k8s.wait_pod_running(core_v1, namespace, "second")
    [fallback] = allocation_results(resource_api.claim(namespace, "second"), driver)
    assert fallback["request"] == "gpu/a100", fallback
    assert fallback["pool"] in whole_gpus(fakegpu_topology, "ampere")
    env = k8s.exec_env(core_v1, namespace, "second")
    strategies = {k: v for k, v in env.items() if k.endswith("_SHARING_STRATEGY")}
    intervals = {k: v for k, v in env.items() if k.endswith("_TIMESLICE_INTERVAL")}
    assert list(strategies.values()) == ["TimeSlicing"], env
    assert list(intervals.values()) == ["Long"], env
