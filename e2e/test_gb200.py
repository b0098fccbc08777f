"""The bandwidth job on a fake GB200 (gb200-mini: 4 nodes x 4 GPUs, one NVLink clique), as a
user runs it: one worker pod per node holding all its GPUs (and, with a ComputeDomain, the
domain's IMEX channel), the simulated nvbandwidth started in each by the launcher, the
ranks meeting over the pod network. The matrix must be what the rules give for the topology
(fakegpu/bandwidth/model.py: the catalog's NVLink speed, the topology's network speed), the
GPUs those the claims were allocated.

Both providers: the program reads NVML through the claim's CDI mounts (on kind, the node's
copies of the library and state that the plugin pod names in its CDI specs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.computedomain.names import ENV_DAEMON, Names, daemon_endpoint, for_gpu_driver
from fakegpu.deploy.manifests import NAMESPACE as DRIVER_NAMESPACE
from fakegpu.kube import errors
from fakegpu.testkit import computedomain as cdkit
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.bandwidth import allocated_uuids, expected, run, start_workers
from fakegpu.testkit.dra import ResourceApi
from fakegpu.testkit.wait import NotYet, wait_for
from fakegpu.topology.model import Topology

pytestmark = [pytest.mark.e2e, pytest.mark.topology("gb200-mini")]

CHANNEL_TEMPLATE = "bw-imex-channel"
TIMEOUT = 180.0


# serial: one pod per node holds all its GPUs (every GPU of the cluster).
@pytest.mark.serial
def test_without_a_domain_nvlink_stays_inside_each_node_and_a_degraded_gpu_shows(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    namespace: str, fakegpu_topology: Topology, fault_guard: list[tuple[str, int]],
) -> None:
    pods = start_workers(fakegpu_cluster, core_v1, resource_api, namespace, fakegpu_topology,
                         timeout=TIMEOUT)
    doc = run(core_v1, namespace, pods, fakegpu_topology)
    assert doc["simulation"] is True
    assert [g["uuid"] for g in doc["gpus"]] == allocated_uuids(
        fakegpu_cluster, resource_api, namespace, pods)
    values, paths = expected(fakegpu_topology)
    assert doc["paths"] == paths
    assert doc["bandwidth"] == values
    assert {p for row in doc["paths"] for p in row} == {"self", "nvlink-local", "network"}

    # Degrade one GPU's fabric; the same pods rerun the job and see it.
    node, gpu = fakegpu_topology.nodes[1].name, 2
    fault_guard.append((node, gpu))
    faults.inject(fakegpu_cluster, node, gpu, "fabric-degraded")
    again = run(core_v1, namespace, pods, fakegpu_topology)
    values, paths = expected(fakegpu_topology, degraded=[(node, gpu)])
    assert again["bandwidth"] == values and again["paths"] == paths
    sick = 4 * 1 + gpu
    assert again["gpus"][sick]["fabric_degraded"] is True
    assert again["bandwidth"][sick] != doc["bandwidth"][sick]


@pytest.fixture
def compute_domain(fakegpu_cluster: ClusterInfo, k8s_client: Any, namespace: str
                   ) -> Iterator[dict[str, Any]]:
    """A ComputeDomain over the 4 nodes whose channel template the workers use."""
    names = for_gpu_driver(fakegpu_cluster.driver_name)
    try:
        cd = cdkit.create(k8s_client, names, namespace, "bandwidth", 4, CHANNEL_TEMPLATE)
    except errors.NotFound:
        pytest.skip(f"the cluster has no ComputeDomain API ({names.api_version}): "
                        "started without ComputeDomain support")
        raise
    yield cd
    # The workers (and their channel claims) go first, then the domain, as a user would.
    core: Any = kclient.CoreV1Api(k8s_client)
    for pod in core.list_namespaced_pod(namespace).items:
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    for pod in core.list_namespaced_pod(namespace).items:
        k8s.wait_pod_gone(core, namespace, pod.metadata.name, timeout=TIMEOUT)
    cdkit.delete(k8s_client, names, namespace, "bandwidth")
    cdkit.wait_gone(k8s_client, names, namespace, "bandwidth", timeout=TIMEOUT)


# serial: one pod per node holds all its GPUs, and it kills an IMEX daemon other domains need.
@pytest.mark.serial
def test_with_a_domain_every_pair_gets_nvlink_and_a_degraded_gpu_or_a_killed_imex_daemon_shows(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, fakegpu_topology: Topology,
    compute_domain: dict[str, Any], fault_guard: list[tuple[str, int]],
) -> None:
    pods = start_workers(fakegpu_cluster, core_v1, resource_api, namespace, fakegpu_topology,
                         channel_template=CHANNEL_TEMPLATE, timeout=TIMEOUT)
    doc = run(core_v1, namespace, pods, fakegpu_topology)
    uid = compute_domain["metadata"]["uid"]
    assert {g["compute_domain"] for g in doc["gpus"]} == {uid}
    assert all(g["imex_channel"] for g in doc["gpus"])
    full = values, paths = expected(fakegpu_topology, compute_domain=uid)
    assert doc["paths"] == paths
    assert doc["bandwidth"] == values
    n = len(doc["gpus"])
    assert n == 16 and all(doc["bandwidth"][i][j] == values[0][1]
                           for i in range(n) for j in range(n) if i != j)
    # Each worker was told where its node's IMEX daemon answers (the daemon pod's endpoint),
    # and every rank found it answering.
    names = for_gpu_driver(fakegpu_cluster.driver_name)
    for pod in pods:
        daemon = _imex_daemon_pod(core_v1, names, uid, pod.spec.node_name)
        env = k8s.parse_env(k8s.exec_in_pod(core_v1, namespace, pod.metadata.name,
                                            ["env"]).stdout)
        assert env.get(ENV_DAEMON) == daemon_endpoint(daemon.status.pod_ip), env
    assert {g["imex_daemon"] for g in doc["gpus"]} == {True}

    # A GPU whose fabric degrades: the domain's status says so, and a rerun in the same pods
    # gives that GPU half its NVLink, across nodes too (its channel still works).
    node, gpu = fakegpu_topology.nodes[1].name, 2
    fault_guard.append((node, gpu))
    faults.inject(fakegpu_cluster, node, gpu, "fabric-degraded")
    cdkit.wait_domain(k8s_client, names, namespace, "bandwidth", _not_ready(node),
                      f"NotReady for {node}", timeout=TIMEOUT)
    again = run(core_v1, namespace, pods, fakegpu_topology)
    values, paths = expected(fakegpu_topology, compute_domain=uid, degraded=[(node, gpu)])
    assert again["bandwidth"] == values and again["paths"] == paths
    sick = 4 * 1 + gpu
    assert again["gpus"][sick]["fabric_degraded"] is True
    assert again["paths"][0][sick] == "nvlink-fabric"
    assert again["bandwidth"][0][sick] < doc["bandwidth"][0][sick]
    faults.clear(fakegpu_cluster, node, gpu)

    # The IMEX daemon of one node killed: while it is down, a rerun gives that node's GPUs
    # the network to every other node (their channel needs the daemon), NVLink inside it.
    # The daemon pod restarts it after 5 s, so kill and rerun until a run falls in an outage.
    silent = fakegpu_topology.nodes[2].name
    daemon = _imex_daemon_pod(core_v1, names, uid, silent)

    def rerun_while_killed() -> dict[str, Any]:
        k8s.exec_in_pod(core_v1, DRIVER_NAMESPACE, daemon.metadata.name,
                        ["killall", "httpd"], check=False)  # already down: nothing to kill
        out = run(core_v1, namespace, pods, fakegpu_topology)
        seen = {g["imex_daemon"] for g in out["gpus"] if g["node"] == silent}
        if seen != {False}:
            raise NotYet(f"the rerun found {silent}'s IMEX daemon answering ({seen})")
        return out

    again = wait_for(rerun_while_killed, what=f"a rerun while {silent}'s IMEX daemon is down",
                     timeout=TIMEOUT, is_transient=k8s.is_transient_api_error)
    values, paths = expected(fakegpu_topology, compute_domain=uid, imex_down=[silent])
    assert again["bandwidth"] == values and again["paths"] == paths
    assert {g["imex_daemon"] for g in again["gpus"] if g["node"] != silent} == {True}
    down = [i for i, g in enumerate(again["gpus"]) if g["node"] == silent]
    assert {again["paths"][down[0]][j] for j in range(n) if j not in down} == {"network"}

    # Once the domain is Ready again (the daemon back, the domain re-formed), full NVLink.
    def rerun_when_ready() -> dict[str, Any]:
        cdkit.wait_domain(k8s_client, names, namespace, "bandwidth", cdkit.ready(4),
                          "Ready again", timeout=TIMEOUT)
        out = run(core_v1, namespace, pods, fakegpu_topology)
        if any(g["imex_daemon"] is False for g in out["gpus"]):
            raise NotYet(f"{silent}'s IMEX daemon still silent to the rerun")
        return out

    again = wait_for(rerun_when_ready, what="a full-NVLink rerun once the domain is Ready",
                     timeout=TIMEOUT, is_transient=k8s.is_transient_api_error)
    assert (again["bandwidth"], again["paths"]) == full


def _imex_daemon_pod(core: kclient.CoreV1Api, names: Names, uid: str, node: str) -> Any:
    """The domain's IMEX daemon pod on ``node`` (the controller's DaemonSet, by its label)."""
    pods: Any = core.list_namespaced_pod(DRIVER_NAMESPACE,
                                         label_selector=f"{names.label_key}={uid}",
                                         field_selector=f"spec.nodeName={node}")
    [pod] = pods.items
    return pod


def _not_ready(node: str) -> Callable[[dict[str, Any]], str]:
    def check(cd: dict[str, Any]) -> str:
        status = cdkit.node_entry(cd, node).get("status")
        return "" if status == "NotReady" else f"{node} still {status}"
    return check
