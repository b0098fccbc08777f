"""ComputeDomains on the GB200 cluster (gb200-mini: 4 nodes x 4 GPUs in one NVLink clique).

Everything is observed as a user would: the ComputeDomain's status and events, the objects
the controller makes, what a pod with the channel claim sees, the pod's events when a node
cannot join. Faults go in through the test kit (fault injection), the IMEX daemon is killed
through `kubectl exec` into its pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.computedomain.names import (
    ENV_CHANNEL,
    ENV_DOMAIN,
    PLURAL,
    VERSION,
    Names,
    for_gpu_driver,
)
from fakegpu.deploy.manifests import NAMESPACE as DRIVER_NAMESPACE
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import PodClaim, ResourceApi, pod_manifest
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.topology("fixtures/gb200-mini.yaml")]

TEMPLATE = "imex-channel"
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def names(fakegpu_cluster: ClusterInfo) -> Names:
    return for_gpu_driver(fakegpu_cluster.driver_name)


@pytest.fixture(scope="module")
def gpu_nodes(fakegpu_cluster: ClusterInfo, resource_api: ResourceApi) -> list[str]:
    """Nodes whose GPU plugin published devices, in name order."""
    pools = {s["spec"]["pool"]["name"]
             for s in resource_api.slices(fakegpu_cluster.driver_name)}
    found = sorted(pools)
    if len(found) < 4:
        pytest.skip(f"needs 4 GPU nodes (gb200-mini), the cluster has {found}")
    return found


@pytest.fixture
def domains(k8s_client: Any, names: Names) -> Iterator[Callable[[str, str, int], dict[str, Any]]]:
    """Create ComputeDomains; each is deleted (and waited for) after the test."""
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    made: list[tuple[str, str]] = []

    def create(namespace: str, name: str, num_nodes: int) -> dict[str, Any]:
        body = {"apiVersion": names.api_version, "kind": "ComputeDomain",
                "metadata": {"name": name},
                "spec": {"numNodes": num_nodes,
                         "channel": {"resourceClaimTemplate": {"name": TEMPLATE}}}}
        made.append((namespace, name))
        out: dict[str, Any] = custom.create_namespaced_custom_object(
            names.group, VERSION, namespace, PLURAL, body)
        return out

    yield create
    for namespace, name in made:
        try:
            custom.delete_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, name)
        except kclient.ApiException as err:
            if err.status != 404:
                raise
    for namespace, name in made:
        wait_for(_gone_check(custom, names, namespace, name),
                 what=f"ComputeDomain {namespace}/{name} to be gone", timeout=TIMEOUT)


def _gone_check(custom: Any, names: Names, namespace: str, name: str) -> Callable[[], None]:
    return lambda: _gone(custom, names, namespace, name)


def _gone(custom: Any, names: Names, namespace: str, name: str) -> None:
    try:
        custom.get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, name)
    except kclient.ApiException as err:
        if err.status == 404:
            return
        raise
    raise NotYet("still there")


def get_domain(k8s_client: Any, names: Names, namespace: str, name: str) -> dict[str, Any]:
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    out: dict[str, Any] = custom.get_namespaced_custom_object(names.group, VERSION, namespace,
                                                              PLURAL, name)
    return out


def wait_domain(k8s_client: Any, names: Names, namespace: str, name: str,
                check: Callable[[dict[str, Any]], str], what: str,
                interval: float = 1.0) -> dict[str, Any]:
    """Wait until ``check`` (which returns why not, or "") passes on the domain."""

    def ok() -> dict[str, Any]:
        cd = get_domain(k8s_client, names, namespace, name)
        if why := check(cd):
            raise NotYet(f"{why}; status: {cd.get('status')}")
        return cd

    return wait_for(ok, what=f"ComputeDomain {namespace}/{name} {what}", timeout=TIMEOUT,
                    interval=interval, is_transient=k8s.is_transient_api_error)


def node_entry(cd: dict[str, Any], node: str) -> dict[str, Any]:
    return next((n for n in (cd.get("status") or {}).get("nodes") or []
                 if n.get("name") == node), {})


def ready(n: int) -> Callable[[dict[str, Any]], str]:
    def check(cd: dict[str, Any]) -> str:
        status = cd.get("status") or {}
        up = [x for x in status.get("nodes") or [] if x.get("status") == "Ready"]
        if status.get("status") != "Ready" or len(up) < n:
            return f"{len(up)} of {n} nodes ready, domain {status.get('status')}"
        return ""
    return check


def channel_pod(name: str, image: str, node: str) -> dict[str, Any]:
    pod = pod_manifest(name, image, ["sleep", "3600"], [PodClaim("imex", template=TEMPLATE)])
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def gpu_cliques(resource_api: ResourceApi, driver: str, node: str) -> set[str]:
    """The clique IDs the node's GPU plugin publishes (attribute fakegpu.dev/cliqueID)."""
    return {d["attributes"]["fakegpu.dev/cliqueID"]["string"]
            for s in resource_api.slices(driver, node) for d in s["spec"].get("devices") or []
            if "fakegpu.dev/cliqueID" in (d.get("attributes") or {})}


def test_a_four_node_domain_gets_ready_and_its_pods_see_the_channel_then_leave_nothing(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, names: Names, gpu_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
) -> None:
    cd = domains(namespace, "four", 4)
    uid = cd["metadata"]["uid"]
    nodes = gpu_nodes[:4]
    for i, node in enumerate(nodes):
        k8s.create_pod(core_v1, namespace, channel_pod(f"w{i}", fakegpu_cluster.workload_image,
                                                       node))
    for i in range(len(nodes)):
        k8s.wait_pod_running(core_v1, namespace, f"w{i}", timeout=TIMEOUT)
    cd = wait_domain(k8s_client, names, namespace, "four", ready(4), "Ready on 4 nodes")
    entries = {n["name"]: n for n in cd["status"]["nodes"]}
    assert sorted(entries) == nodes
    assert sorted(n["index"] for n in entries.values()) == [0, 1, 2, 3]
    for node, entry in entries.items():
        # The clique the node's GPUs report (through the GPU plugin's slices), and an address.
        assert {entry["cliqueID"]} == gpu_cliques(resource_api, fakegpu_cluster.driver_name,
                                                  node), entry
        assert entry["ipAddress"], entry

    for i in range(len(nodes)):
        seen = k8s.exec_in_pod(core_v1, namespace, f"w{i}", [
            "sh", "-c", "ls -l /dev/nvidia-caps-imex-channels/; env"]).stdout
        env = k8s.parse_env(seen)
        assert env.get(ENV_DOMAIN) == uid, seen
        assert env.get(ENV_CHANNEL) == "0", seen
        line = next(x for x in seen.splitlines() if x.endswith("channel0"))
        assert line.startswith("c"), line  # a character device, as the real channel is

    # Deleting the workloads and then the domain leaves nothing of it anywhere.
    for i in range(len(nodes)):
        core_v1.delete_namespaced_pod(f"w{i}", namespace, grace_period_seconds=0)
    kclient.CustomObjectsApi(k8s_client).delete_namespaced_custom_object(
        names.group, VERSION, namespace, PLURAL, "four")
    wait_for(lambda: _nothing_left(k8s_client, names, namespace, uid),
             what=f"nothing left of ComputeDomain {uid}", timeout=TIMEOUT,
             is_transient=k8s.is_transient_api_error)


def _nothing_left(k8s_client: Any, names: Names, namespace: str, uid: str) -> None:
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    core: Any = kclient.CoreV1Api(k8s_client)
    apps: Any = kclient.AppsV1Api(k8s_client)
    selector = f"{names.label_key}={uid}"
    left = []
    try:
        custom.get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, "four")
        left.append("the ComputeDomain")
    except kclient.ApiException as err:
        if err.status != 404:
            raise
    left += [f"template {t['metadata']['namespace']}/{t['metadata']['name']}"
             for t in custom.list_cluster_custom_object(
                 "resource.k8s.io", "v1", "resourceclaimtemplates",
                 label_selector=selector)["items"]]
    left += [f"daemon set {d.metadata.name}" for d in apps
             .list_daemon_set_for_all_namespaces(label_selector=selector).items]
    left += [f"pod {p.metadata.namespace}/{p.metadata.name}"
             for p in core.list_pod_for_all_namespaces(label_selector=selector).items]
    left += [f"node label on {n.metadata.name}"
             for n in core.list_node(label_selector=selector).items]
    for ns in (namespace, DRIVER_NAMESPACE):
        for claim in custom.list_namespaced_custom_object("resource.k8s.io", "v1", ns,
                                                          "resourceclaims")["items"]:
            configs = ((claim.get("spec") or {}).get("devices") or {}).get("config") or []
            if ns == namespace or any((c.get("opaque") or {}).get("parameters", {})
                                      .get("domainID") == uid for c in configs):
                left.append(f"claim {ns}/{claim['metadata']['name']}")
    if left:
        raise NotYet(", ".join(left))


def test_a_degraded_fabric_and_a_killed_imex_daemon_show_in_the_domain_status(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    namespace: str, names: Names, gpu_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
    fault_guard: list[tuple[str, int]],
) -> None:
    cd = domains(namespace, "pair", 2)
    uid = cd["metadata"]["uid"]
    a, b = gpu_nodes[0], gpu_nodes[1]
    for i, node in enumerate((a, b)):
        k8s.create_pod(core_v1, namespace, channel_pod(f"w{i}", fakegpu_cluster.workload_image,
                                                       node))
    for i in range(2):
        k8s.wait_pod_running(core_v1, namespace, f"w{i}", timeout=TIMEOUT)
    wait_domain(k8s_client, names, namespace, "pair", ready(2), "Ready on 2 nodes")

    # A GPU of node b whose fabric degrades takes b, and so the domain, out of Ready...
    faults.inject(fakegpu_cluster, b, 1, "fabric-degraded")
    fault_guard.append((b, 1))

    def b_degraded(cd: dict[str, Any]) -> str:
        if node_entry(cd, b).get("status") != "NotReady" or cd["status"]["status"] != "NotReady":
            return f"{b} still {node_entry(cd, b).get('status')}"
        return ""

    wait_domain(k8s_client, names, namespace, "pair", b_degraded, f"NotReady for {b}")
    message = wait_for(_event_about(core_v1, namespace, "pair", "IMEXDaemonNotReady", b),
                       what=f"an IMEXDaemonNotReady event about {b}", timeout=TIMEOUT,
                       is_transient=k8s.is_transient_api_error)
    assert "GPU 1" in message and "degraded" in message, message
    assert node_entry(get_domain(k8s_client, names, namespace, "pair"), a)["status"] == "Ready"
    # ...until it heals.
    faults.clear(fakegpu_cluster, b, 1)
    wait_domain(k8s_client, names, namespace, "pair", ready(2), "Ready again")

    # The IMEX daemon process of node a killed: a is NotReady until it is back.
    pods: Any = core_v1.list_namespaced_pod(
        DRIVER_NAMESPACE, label_selector=f"{names.label_key}={uid}",
        field_selector=f"spec.nodeName={a}")
    [pod] = pods.items
    k8s.exec_in_pod(core_v1, DRIVER_NAMESPACE, pod.metadata.name, ["killall", "httpd"])

    def a_down(cd: dict[str, Any]) -> str:
        entry = node_entry(cd, a)
        if entry.get("status") != "NotReady" or cd["status"]["status"] != "NotReady":
            return f"{a} still {entry.get('status')}"
        return ""

    # The outage lasts the daemon pod's restart pause (5 s): look often.
    wait_domain(k8s_client, names, namespace, "pair", a_down, f"NotReady for {a}",
                interval=0.25)
    message = wait_for(_event_about(core_v1, namespace, "pair", "IMEXDaemonNotReady", a),
                       what=f"an IMEXDaemonNotReady event about {a}", timeout=TIMEOUT,
                       is_transient=k8s.is_transient_api_error)
    assert "does not answer" in message, message
    wait_domain(k8s_client, names, namespace, "pair", ready(2), "Ready again")


def _event_about(core: kclient.CoreV1Api, namespace: str, involved: str, reason: str,
                 node: str) -> Callable[[], str]:
    """A check for an event of ``reason`` on ``involved`` naming ``node``: its message."""
    def seen() -> str:
        for ev in core.list_namespaced_event(namespace).items:
            if (ev.reason == reason and ev.involved_object.name == involved
                    and f"node {node}:" in (ev.message or "")):
                return str(ev.message)
        raise NotYet(f"no {reason} event about {node}")
    return seen


def test_a_node_whose_fabric_is_degraded_cannot_join(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    namespace: str, names: Names, gpu_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
    fault_guard: list[tuple[str, int]],
) -> None:
    node = gpu_nodes[3]
    faults.inject(fakegpu_cluster, node, 2, "fabric-degraded")
    fault_guard.append((node, 2))
    domains(namespace, "refused", 1)
    k8s.create_pod(core_v1, namespace, channel_pod("w", fakegpu_cluster.workload_image, node))

    def refused() -> str:
        for ev in core_v1.list_namespaced_event(namespace).items:
            if ev.involved_object.name == "w" and "cannot join" in (ev.message or ""):
                return str(ev.message)
        raise NotYet("no event says the node cannot join")

    message = wait_for(refused, what=f"pod w's event saying {node} cannot join",
                       timeout=TIMEOUT, is_transient=k8s.is_transient_api_error)
    assert node in message and "GPU 2" in message and "degraded" in message, message
    assert "ComputeDomain" in message and "refused" in message, message
    pod = k8s.read_pod(core_v1, namespace, "w")
    assert pod.status.phase == "Pending", pod.status.phase
    # The refused node never got the domain's label, so no IMEX daemon went there.
    node_obj: Any = core_v1.read_node(node)
    labels = node_obj.metadata.labels or {}
    assert names.label_key not in labels, labels
