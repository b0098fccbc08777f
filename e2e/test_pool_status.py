"""ResourcePoolStatusRequest (KEP-5677, issue 24): an administrator asks the control plane how
full a driver's pools are, and kube-controller-manager answers in the request's status from
the ResourceSlices and the claims' allocations. Observed as a user: the request's status
against the slices and a claim of the test's own. Alpha from Kubernetes 1.36
(DRAResourcePoolStatus, resource.k8s.io/v1alpha3, both switched on by fakegpu's clusters).

Parallel-safe: other tests allocate and taint devices on the same pools meanwhile, so counts
that move with them are checked as bounds and sums, and the exact ones (devices, slices) only
against slices of the generation the answer names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.kube import errors
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    pod_claim_name,
    publishing_nodes,
    run_gpu_pod,
)
from fakegpu.testkit.minors import skip_without
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = pytest.mark.e2e

PLURAL = "resourcepoolstatusrequests"


@pytest.fixture
def pool_status(fakegpu_cluster: ClusterInfo, k8s_client: Any,
                namespace: str) -> Iterator[tuple[ResourceApi, list[str]]]:
    """The v1alpha3 API and the names of the requests made (cluster-scoped: deleted after)."""
    skip_without(fakegpu_cluster, "DRAResourcePoolStatus", "ResourcePoolStatusRequests")
    api, made = ResourceApi(k8s_client, version="v1alpha3"), list[str]()
    yield api, made
    for name in made:
        with contextlib.suppress(errors.KubeError):
            api.delete(PLURAL, name)


def _ask(api: ResourceApi, made: list[str], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create a request and wait for the controller's answer (status set, Complete)."""
    api.create(PLURAL, {"metadata": {"name": name}, "spec": spec})
    made.append(name)

    def answered() -> dict[str, Any]:
        got = api.get(PLURAL, name)
        status = got.get("status") or {}
        if not any(c.get("type") == "Complete" and c.get("status") == "True"
                   for c in status.get("conditions") or []):
            raise NotYet(f"status {status or 'not set yet'}")
        return dict(status)

    out: dict[str, Any] = wait_for(answered, what=f"ResourcePoolStatusRequest {name} answered",
                                   timeout=60)
    return out


def test_the_answer_counts_a_pools_devices_and_the_claim_on_it(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str, pool_status: tuple[ResourceApi, list[str]]) -> None:
    api, made = pool_status
    driver = fakegpu_cluster.driver_name
    pod = run_gpu_pod(core_v1, resource_api, namespace, "p", fakegpu_cluster.workload_image,
                      driver, count=1, template="gpu", claim="gpu")
    [result] = allocation_results(resource_api.claim(namespace, pod_claim_name(pod, "gpu")),
                                  driver)
    pool = result["pool"]

    status = _ask(api, made, f"{namespace}-one", {"driver": driver, "poolName": pool})
    [answer] = status["pools"]
    assert (answer["driver"], answer["poolName"], answer.get("nodeName")) == (
        driver, pool, pod.spec.node_name)
    assert "validationError" not in answer, answer
    total, allocated = answer["totalDevices"], answer["allocatedDevices"]
    unavailable, available = answer["unavailableDevices"], answer["availableDevices"]
    assert allocated >= 1  # ours, at least
    assert available == max(0, total - allocated - unavailable)
    slices = [s for s in resource_api.slices(driver, pod.spec.node_name)
              if s["spec"]["pool"]["name"] == pool]
    newest = max(s["spec"]["pool"]["generation"] for s in slices)
    if newest == answer["generation"]:
        current = [s for s in slices if s["spec"]["pool"]["generation"] == newest]
        assert answer["resourceSliceCount"] == len(current)
        assert total == sum(len(s["spec"].get("devices") or []) for s in current)
    else:  # republished meanwhile (a parallel test's fault): the answer named an older one
        assert answer["generation"] < newest


def test_a_driver_wide_answer_has_a_pool_per_publishing_node_and_a_missing_pool_none(
        fakegpu_cluster: ClusterInfo, resource_api: ResourceApi, namespace: str,
        pool_status: tuple[ResourceApi, list[str]]) -> None:
    api, made = pool_status
    driver = fakegpu_cluster.driver_name
    nodes = publishing_nodes(resource_api, driver)
    status = _ask(api, made, f"{namespace}-all", {"driver": driver})
    assert status["poolCount"] == len(nodes)
    assert sorted(p["poolName"] for p in status["pools"]) == sorted(nodes)
    assert sorted(p["nodeName"] for p in status["pools"]) == sorted(nodes)
    none = _ask(api, made, f"{namespace}-none", {"driver": driver, "poolName": "no-such-pool"})
    assert not none.get("pools") and none.get("poolCount", 0) == 0
