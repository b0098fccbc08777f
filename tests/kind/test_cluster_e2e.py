"""On a kind cluster (``--fakegpu-provider kind``): what the kind provider and the Helm chart
promise beyond the shared e2e suite. Skipped on the embedded provider, which installs neither.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fakegpu.cluster.kind.provider import NAMESPACE
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.topology.model import Topology

pytestmark = [pytest.mark.e2e, pytest.mark.provider("kind")]

PROBE = """
import json, sys
from kubernetes import client, config
config.load_incluster_config()
node = sys.argv[1]
body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "fakegpu-probe-" + node},
        "spec": {"driver": sys.argv[2], "nodeName": node, "devices": [],
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}
try:
    client.CustomObjectsApi().create_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", body, dry_run="All")
    print(json.dumps({"allowed": True}))
except client.ApiException as err:
    print(json.dumps({"allowed": False, "status": err.status, "body": err.body}))
"""


@pytest.fixture
def kind_cluster(fakegpu_cluster: ClusterInfo) -> ClusterInfo:
    if fakegpu_cluster.provider != "kind":
        pytest.skip("the Helm chart and the kind provider are only used with "
                    "--fakegpu-provider kind")
    return fakegpu_cluster


def plugin_pods(core: Any) -> dict[str, str]:
    """The GPU plugin's running pod per node (its container is named plugin; the
    compute-domain pieces share the namespace)."""
    pods = core.list_namespaced_pod(NAMESPACE).items
    return {p.spec.node_name: p.metadata.name for p in pods if p.status.phase == "Running"
            and any(c.name == "plugin" for c in p.spec.containers)}


def test_every_worker_is_ready_and_publishes_its_topology_gpus(
        kind_cluster: ClusterInfo, fakegpu_topology: Topology, core_v1: Any,
        resource_api: Any) -> None:
    ready = {n.metadata.name for n in core_v1.list_node().items
             if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)}
    want = {n.name: len(n.gpus) for n in fakegpu_topology.nodes}
    assert set(want) <= ready
    got: dict[str, int] = {}
    for s in resource_api.slices(driver=kind_cluster.driver_name):
        spec = s["spec"]
        if spec["driver"] == kind_cluster.driver_name:
            got[spec["nodeName"]] = got.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
    assert got == want


def test_a_nodes_plugin_may_write_only_its_own_nodes_slices(
        kind_cluster: ClusterInfo, core_v1: Any) -> None:
    pods = plugin_pods(core_v1)
    workers = [n.name for n in kind_cluster.nodes]
    here, other = workers[0], workers[1]

    def attempt(node: str) -> dict[str, Any]:
        res = k8s.exec_in_pod(core_v1, NAMESPACE, pods[here],
                              ["python", "-c", PROBE, node, kind_cluster.driver_name])
        result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
        return result

    assert attempt(here) == {"allowed": True}
    denied = attempt(other)
    assert denied["allowed"] is False and denied["status"] in (403, 422)
    assert f"the plugin on node {here} may not write" in denied["body"]


def test_rolling_restart_of_the_plugin_never_loses_a_nodes_slices(
        kind_cluster: ClusterInfo, k8s_client: Any, core_v1: Any, resource_api: Any) -> None:
    """maxSurge 1 / maxUnavailable 0 and per-pod sockets: the new plugin registers beside the
    old one, and the old one, seeing another instance, leaves the slices in place."""
    import datetime

    from kubernetes import client as kclient

    from fakegpu.testkit.wait import NotYet, wait_for

    apps = kclient.AppsV1Api(k8s_client)
    # The GPU plugin's DaemonSet (its container is named plugin): the compute-domain plugin,
    # the ComputeDomain controller and IMEX daemons share the namespace.
    (ds,) = [d for d in apps.list_namespaced_daemon_set(NAMESPACE).items
             if any(c.name == "plugin" for c in d.spec.template.spec.containers)]
    selector = ",".join(f"{k}={v}" for k, v in ds.spec.selector.match_labels.items())

    def daemon_set_pods() -> list[Any]:
        return list(core_v1.list_namespaced_pod(NAMESPACE, label_selector=selector).items)

    before = {p.metadata.uid for p in daemon_set_pods()}
    want = {n.name for n in kind_cluster.nodes}
    stamp = datetime.datetime.now(datetime.UTC).isoformat()
    apps.patch_namespaced_daemon_set(ds.metadata.name, NAMESPACE, {"spec": {"template": {
        "metadata": {"annotations": {"fakegpu.dev/restarted-at": stamp}}}}})

    gaps: list[str] = []

    def rolled() -> bool:
        nodes = {s["spec"]["nodeName"] for s in
                 resource_api.slices(driver=kind_cluster.driver_name)}
        if nodes != want:
            gaps.append(f"slices only for {sorted(nodes)}")
        pods = daemon_set_pods()
        fresh = [p for p in pods if p.metadata.uid not in before
                 and p.status.phase == "Running"
                 and all(c.ready for c in p.status.container_statuses or [])]
        if len(fresh) < len(want) or len(pods) != len(want):
            raise NotYet(f"{len(fresh)} new plugin pods ready, {len(pods)} pods")
        return True

    wait_for(rolled, what="the plugin DaemonSet to roll over", timeout=600, interval=0.5)
    assert not gaps, gaps[:5]
