"""Kubernetes version skew with DRA: 1.37 -> 1.38 -> 1.37 under a running GPU pod (issue 24).

Upstream's test/e2e/dra/versionskew.go is the reference: a claim prepared and a pod running on
the older release; `fakegpu cluster upgrade-kubernetes --to 1.38` moves the control plane, then
the kubelets node by node; every node's ResourceSlices are published again (the plugin
registers with the new kubelet), the pods that ran are untouched (same UID, no restart, the
same container start), and a new claim runs on every node. Then the downgrade back to 1.37
(kubelets first, then the control plane), with the same checks.

The cluster is this module's own (two nodes, so "node by node" means something), named after
--fakegpu-cluster-name with ``-skew``: upgrading the session's cluster would pull Kubernetes
out from under the other suites. Everything is observed through the Kubernetes API.

It needs the binaries of both minors: without either it is skipped, naming the one missing
(`fakegpu cluster binaries --k8s-version 1.N` builds it). About 95 s on the project's 2-core
VM (bring-up 10 s, both moves and the pods 73 s, down 11 s): it runs in `make test`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster import get_provider
from fakegpu.cluster.artifacts import binaries
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import PodClaim, ResourceApi, pod_manifest
from fakegpu.testkit.wait import NotYet, wait_for

# Not `e2e`: that marker brings up the session's cluster, and this module needs only its own.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

OLD, NEW = "1.37", "1.38"
NODES = ("skew-0", "skew-1")
TOPOLOGY = f"""\
# Two nodes of four H100s each: three claims per node (before, between and after the moves).
name: version-skew
seed: 1
driver: {{version: "580.95.05", cuda_version: "13.0"}}
nodes:
  - name: {NODES[0]}
    gpus: {{product: H100-SXM5-80GB, count: 4}}
  - name: {NODES[1]}
    gpus: {{product: H100-SXM5-80GB, count: 4}}
"""


def missing_minors() -> list[str]:
    return [f"{m} ({binaries.resolve_version(m)})" for m in (OLD, NEW)
            if not binaries.is_cached(m)]


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ClusterInfo]:
    if missing := missing_minors():
        pytest.skip(f"version skew needs Kubernetes {OLD} and {NEW} cached; not cached: "
                    f"{', '.join(missing)} (`fakegpu cluster binaries --k8s-version 1.N`)")
    topology = tmp_path_factory.mktemp("skew") / "version-skew.yaml"
    topology.write_text(TOPOLOGY)
    clusters = get_provider("embedded")
    name = f"{request.config.getoption('fakegpu_cluster_name')}-skew"
    clusters.down(name)
    try:
        yield clusters.up(name, topology, OLD)
    finally:
        if not request.config.getoption("fakegpu_keep_cluster"):
            clusters.down(name)


@pytest.fixture(scope="module")
def api(cluster: ClusterInfo) -> Any:
    return k8s.new_api_client(cluster.kubeconfig)


@pytest.fixture(scope="module")
def core(api: Any) -> kclient.CoreV1Api:
    return kclient.CoreV1Api(api)


@pytest.fixture(scope="module")
def ns(core: kclient.CoreV1Api) -> Iterator[str]:
    name = k8s.create_namespace(core, prefix="e2e-skew", labels={"fakegpu.dev/test": "e2e"})
    yield name
    k8s.delete_namespace(core, name)


def upgrade_kubernetes(cluster: ClusterInfo, to: str) -> None:
    """The user's command; its output goes into the failure message."""
    res = subprocess.run([sys.executable, "-m", "fakegpu", "cluster", "upgrade-kubernetes",
                          "--cluster", cluster.name, "--to", to],
                         capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, f"upgrade-kubernetes --to {to}: {res.stdout}{res.stderr}"


def run_pods(core: kclient.CoreV1Api, api: ResourceApi, ns: str, cluster: ClusterInfo,
             tag: str) -> dict[str, Any]:
    """One pod with a claim for one GPU of its own on each node; node -> the running pod."""
    request = api.device_request("gpu", cluster.driver_name, count=1)
    for node in NODES:
        claim = f"{tag}-{node}"
        api.create("resourceclaims", api.claim_manifest(claim, [request]), ns)
        k8s.create_pod(core, ns, pod_manifest(claim, cluster.workload_image, ("sleep", "3600"),
                                              [PodClaim("gpu", claim=claim)], node=node))
    return {node: k8s.wait_pod_running(core, ns, f"{tag}-{node}") for node in NODES}


def fingerprint(pod: Any) -> tuple[str, str, int, str]:
    """What stays the same for a pod nothing touched: UID, phase, restarts, container start."""
    status = pod.status.container_statuses[0]
    started = status.state.running.started_at if status.state.running else None
    return (pod.metadata.uid, pod.status.phase, status.restart_count, str(started))


def kubelet_versions(core: kclient.CoreV1Api) -> dict[str, str]:
    nodes: Any = core.list_node().items
    return {n.metadata.name: n.status.node_info.kubelet_version for n in nodes}


def published(api: ResourceApi, driver: str) -> dict[str, list[str]]:
    """Node -> its published device names, once every node's pool is whole."""
    def whole() -> dict[str, list[str]]:
        by_node: dict[str, list[str]] = {}
        for s in api.slices(driver):
            by_node.setdefault(s["spec"]["nodeName"], []).extend(
                d["name"] for d in s["spec"].get("devices") or ())
        if sorted(by_node) != sorted(NODES):
            raise NotYet(f"slices of nodes {sorted(by_node)}, expected {sorted(NODES)}")
        return {n: sorted(d) for n, d in by_node.items()}

    return wait_for(whole, timeout=120, interval=1.0, what="every node's slices")


def check_moved(core: kclient.CoreV1Api, api: Any, ns: str, cluster: ClusterInfo,
                running: dict[str, Any], devices: dict[str, list[str]], minor: str,
                tag: str) -> dict[str, Any]:
    """After a move to ``minor``: versions, slices, untouched pods, a new claim per node.
    Returns the new pods."""
    patch = binaries.resolve_version(minor)
    versions = {n: v.removeprefix("v") for n, v in kubelet_versions(core).items()}
    assert versions == dict.fromkeys(NODES, patch), versions
    server = kclient.VersionApi(api).get_code().git_version
    assert server.removeprefix("v") == patch, server
    resource_api = ResourceApi(api)
    assert published(resource_api, cluster.driver_name) == devices
    for node, pod in running.items():
        now = k8s.read_pod(core, ns, pod.metadata.name)
        assert fingerprint(now) == fingerprint(pod), (node, now.status)
    return run_pods(core, resource_api, ns, cluster, tag)


def test_claims_and_pods_survive_kubernetes_upgrade_and_downgrade(
        cluster: ClusterInfo, api: Any, core: kclient.CoreV1Api, ns: str) -> None:
    resource_api = ResourceApi(api)
    devices = published(resource_api, cluster.driver_name)
    before = run_pods(core, resource_api, ns, cluster, "old")

    upgrade_kubernetes(cluster, NEW)
    after_up = check_moved(core, api, ns, cluster, before, devices, NEW, "new")

    upgrade_kubernetes(cluster, OLD)
    check_moved(core, api, ns, cluster, {**{f"old-{n}": p for n, p in before.items()},
                                         **{f"new-{n}": p for n, p in after_up.items()}},
                devices, OLD, "back")
    # What `node start` and `down` go by: the cluster says it runs the older minor again.
    info = get_provider("embedded").status(cluster.name)
    assert info is not None and info.k8s_version == binaries.resolve_version(OLD)
