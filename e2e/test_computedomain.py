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
    Names,
    daemon_template_name,
    for_gpu_driver,
)
from fakegpu.deploy.manifests import NAMESPACE as DRIVER_NAMESPACE
from fakegpu.kube import errors
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.computedomain import (
    create,
    delete,
    get,
    gpu_cliques,
    node_entry,
    ready,
    wait_domain,
    wait_gone,
    wait_nothing_left,
)
from fakegpu.testkit.dra import PodClaim, ResourceApi, pod_manifest
from fakegpu.testkit.dra import publishing_nodes as publishing_nodes_of
from fakegpu.testkit.wait import NotYet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.topology("gb200-mini")]

TEMPLATE = "imex-channel"
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def names(fakegpu_cluster: ClusterInfo) -> Names:
    return for_gpu_driver(fakegpu_cluster.driver_name)


@pytest.fixture(scope="module")
def publishing_nodes(fakegpu_cluster: ClusterInfo, resource_api: ResourceApi) -> list[str]:
    """Nodes whose GPU plugin published devices, in name order."""
    found = publishing_nodes_of(resource_api, fakegpu_cluster.driver_name)
    if len(found) < 4:
        pytest.skip(f"needs 4 GPU nodes (gb200-mini), the cluster has {found}")
    return found


@pytest.fixture
def domains(k8s_client: Any, names: Names) -> Iterator[Callable[[str, str, int], dict[str, Any]]]:
    """Create ComputeDomains; each is deleted (and waited for) after the test."""
    made: list[tuple[str, str]] = []

    def create_domain(namespace: str, name: str, num_nodes: int,
                      template: str = TEMPLATE) -> dict[str, Any]:
        made.append((namespace, name))
        return create(k8s_client, names, namespace, name, num_nodes, template)

    yield create_domain
    for namespace, name in made:
        delete(k8s_client, names, namespace, name)
    for namespace, name in made:
        wait_gone(k8s_client, names, namespace, name, timeout=TIMEOUT)


def channel_pod(name: str, image: str, node: str, template: str = TEMPLATE) -> dict[str, Any]:
    pod = pod_manifest(name, image, ["sleep", "3600"], [PodClaim("imex", template=template)])
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def test_a_four_node_domain_gets_ready_and_its_pods_see_the_channel_then_leave_nothing(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
) -> None:
    cd = domains(namespace, "four", 4)
    uid = cd["metadata"]["uid"]
    nodes = publishing_nodes[:4]
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
    delete(k8s_client, names, namespace, "four")
    wait_nothing_left(k8s_client, names, namespace, "four", uid, timeout=TIMEOUT)


# serial: a degraded fabric and a killed IMEX daemon take their node out of every parallel test's
# domain.
@pytest.mark.serial
def test_a_degraded_fabric_and_a_killed_imex_daemon_show_in_the_domain_status(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
    fault_guard: list[tuple[str, int]],
) -> None:
    cd = domains(namespace, "pair", 2)
    uid = cd["metadata"]["uid"]
    a, b = publishing_nodes[0], publishing_nodes[1]
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
    assert node_entry(get(k8s_client, names, namespace, "pair"), a)["status"] == "Ready"
    # The pod on b sees its channel Unhealthy in its status (KEP-4680), the one on a not.
    health = k8s.kubelet_reports_health(core_v1, b)
    if health:
        k8s.wait_device_health(core_v1, namespace, "w1", "Unhealthy", timeout=TIMEOUT)
        assert set(k8s.device_health(k8s.pod_json(core_v1, namespace, "w0")).values()) == {
            "Healthy"}
    # ...until it heals.
    faults.clear(fakegpu_cluster, b, 1)
    wait_domain(k8s_client, names, namespace, "pair", ready(2), "Ready again")
    if health:
        k8s.wait_device_health(core_v1, namespace, "w1", "Healthy", timeout=TIMEOUT)

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


# serial: a degraded fabric keeps its node out of every parallel test's domain.
@pytest.mark.serial
def test_a_node_whose_fabric_is_degraded_cannot_join(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[[str, str, int], dict[str, Any]],
    fault_guard: list[tuple[str, int]],
) -> None:
    node = publishing_nodes[3]
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


def test_a_claim_naming_another_namespaces_domain_is_refused(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[..., dict[str, Any]],
) -> None:
    # Tenant B's domain; tenant A (the test's namespace) copies its channel template, with
    # B's domain UID in the opaque config, into a template of its own.
    other = k8s.create_namespace(core_v1, prefix="e2e-cd-tenant-b",
                                 labels={"fakegpu.dev/test": "e2e"})
    try:
        cd = domains(other, "tenant-b", 1)
        uid = cd["metadata"]["uid"]
        _copy_template(resource_api, other, TEMPLATE, namespace, "copied")
        node = publishing_nodes[0]
        k8s.create_pod(core_v1, namespace, channel_pod(
            "intruder", fakegpu_cluster.workload_image, node, template="copied"))
        event = k8s.wait_event(core_v1, namespace, "FailedPrepareDynamicResources",
                               involved="intruder", containing="of another namespace",
                               timeout=TIMEOUT)
        assert f"names ComputeDomain {other}/tenant-b of another namespace" in event.message, \
            event.message
        assert k8s.read_pod(core_v1, namespace, "intruder").status.phase == "Pending"
        # Refused before anything of B's domain moved: the node is not labelled for it.
        node_obj: Any = core_v1.read_node(node)
        assert (node_obj.metadata.labels or {}).get(names.label_key) != uid
    finally:
        core_v1.delete_namespaced_pod("intruder", namespace, grace_period_seconds=0)
        k8s.delete_namespace(core_v1, other)


def _copy_template(resource_api: ResourceApi, namespace: str, name: str,
                   to_namespace: str, to_name: str) -> None:
    """Copy the controller's ResourceClaimTemplate ``namespace/name`` (once it is made), its
    spec as it is (the domain's UID in its opaque config), to ``to_namespace/to_name``."""
    def template() -> dict[str, Any]:
        try:
            return resource_api.get("resourceclaimtemplates", name, namespace)
        except errors.NotFound as err:
            raise NotYet(f"template {namespace}/{name} not made yet") from err

    theirs = wait_for(template, what=f"the template {namespace}/{name}", timeout=TIMEOUT,
                      is_transient=k8s.is_transient_api_error)
    resource_api.create("resourceclaimtemplates", {
        "apiVersion": theirs["apiVersion"], "kind": "ResourceClaimTemplate",
        "metadata": {"name": to_name}, "spec": theirs["spec"]}, to_namespace)


def test_a_daemon_claim_outside_the_drivers_namespace_is_refused(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi, namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[..., dict[str, Any]],
) -> None:
    # A user copies the daemon claim template the controller made for their own domain (in
    # the driver's namespace) into their namespace: its pod would be an IMEX daemon of the
    # domain. Only the controller's daemon claims, in the driver's namespace, start one.
    cd = domains(namespace, "own", 1)
    uid = cd["metadata"]["uid"]
    _copy_template(resource_api, DRIVER_NAMESPACE, daemon_template_name(uid),
                   namespace, "copied-daemon")
    node = publishing_nodes[0]
    pod = pod_manifest("fake-daemon", fakegpu_cluster.workload_image, ["sleep", "3600"],
                       [PodClaim("daemon", template="copied-daemon")])
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    k8s.create_pod(core_v1, namespace, pod)
    try:
        # (The compute-domain plugin of a cluster just up may not be registered yet: the
        # kubelet's first events can say so, so the one with the reason is waited for.)
        event = k8s.wait_event(core_v1, namespace, "FailedPrepareDynamicResources",
                               involved="fake-daemon", containing="a daemon claim must be",
                               timeout=TIMEOUT)
        assert ("is a ComputeDomainDaemonConfig claim: a daemon claim must be in the driver's "
                f"namespace ({DRIVER_NAMESPACE})") in event.message, event.message
        assert k8s.read_pod(core_v1, namespace, "fake-daemon").status.phase == "Pending"
        # No daemon started for it: no entry of the node in the domain's status.
        assert (get(k8s_client, names, namespace, "own").get("status") or {}).get(
            "nodes") in (None, []), get(k8s_client, names, namespace, "own")
    finally:
        core_v1.delete_namespaced_pod("fake-daemon", namespace, grace_period_seconds=0)


def test_a_second_domain_waits_for_a_node_the_first_one_holds(
    fakegpu_cluster: ClusterInfo, k8s_client: Any, core_v1: kclient.CoreV1Api,
    namespace: str, names: Names, publishing_nodes: list[str],
    domains: Callable[..., dict[str, Any]],
) -> None:
    node = publishing_nodes[1]
    domains(namespace, "first", 1)
    domains(namespace, "second", 1, "second-channel")
    image = fakegpu_cluster.workload_image
    k8s.create_pod(core_v1, namespace, channel_pod("w1", image, node))
    k8s.wait_pod_running(core_v1, namespace, "w1", timeout=TIMEOUT)
    wait_domain(k8s_client, names, namespace, "first", ready(1), "first Ready")

    # The second domain's pod on the same node: refused per claim, said on the domain...
    k8s.create_pod(core_v1, namespace, channel_pod("w2", image, node, "second-channel"))
    event = k8s.wait_event(core_v1, namespace, "FailedPrepareDynamicResources",
                           involved="w2", timeout=TIMEOUT)
    assert f"node {node} is in ComputeDomain {namespace}/first" in event.message, event.message
    said = k8s.wait_event(core_v1, namespace, "NodeInOtherDomain", involved="second",
                          timeout=TIMEOUT)
    assert f"node {node} is in ComputeDomain {namespace}/first" in said.message, said.message
    # ...and the first domain keeps its node (before: it lost the label, NotReady for good).
    first = get(k8s_client, names, namespace, "first")
    assert first["status"]["status"] == "Ready", first["status"]
    node_obj: Any = core_v1.read_node(node)
    assert node_obj.metadata.labels[names.label_key] == first["metadata"]["uid"]

    # Once the first domain's workload left the node, the kubelet's retry gets it.
    core_v1.delete_namespaced_pod("w1", namespace, grace_period_seconds=0)
    k8s.wait_pod_running(core_v1, namespace, "w2", timeout=TIMEOUT)
    wait_domain(k8s_client, names, namespace, "second", ready(1), "second Ready")
