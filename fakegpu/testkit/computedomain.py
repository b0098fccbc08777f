"""ComputeDomains for suites, as a user sees them through the Kubernetes API: create one,
wait on its status, and check that deleting it left nothing of it anywhere (its templates,
IMEX DaemonSet and daemon pods, claims, node labels).

Shared by the ComputeDomain and GB200 suites (4 nodes and the full 18-node rack).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kubernetes import client as kclient

from fakegpu.computedomain.names import PLURAL, VERSION, Names
from fakegpu.deploy.manifests import NAMESPACE as DRIVER_NAMESPACE
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube.resource import GROUP

from . import k8s
from .dra import ResourceApi
from .wait import NotYet, wait_for

TIMEOUT = 180.0
CLIQUE_ATTRIBUTE = "fakegpu.dev/cliqueID"  # what the GPU plugin publishes per device


def body(names: Names, name: str, num_nodes: int, template: str) -> dict[str, Any]:
    """A ComputeDomain over ``num_nodes`` whose channel template is ``template``."""
    return {"apiVersion": names.api_version, "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": {"numNodes": num_nodes,
                     "channel": {"resourceClaimTemplate": {"name": template}}}}


def create(k8s_client: Any, names: Names, namespace: str, name: str, num_nodes: int,
           template: str, *, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Create the domain and return it once the controller has made its channel template.

    Pods naming the template before it exists get no claim: kube-controller-manager's claim
    controller retries them with an exponential backoff, which under load had reached minutes
    (14 failed tries) by the time the template came, so the pods' claims, and the pods, started
    that much later (CI, 2026-12-06). Users should wait the same way (docs/gb200.md)."""
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    out: dict[str, Any] = errors.call(
        f"cannot create ComputeDomain {namespace}/{name}",
        lambda: custom.create_namespaced_custom_object(
            names.group, VERSION, namespace, PLURAL, body(names, name, num_nodes, template)))
    version = kubeapi.resource_version(k8s_client)

    def made() -> None:
        try:
            errors.call(f"cannot read ResourceClaimTemplate {namespace}/{template}",
                        lambda: custom.get_namespaced_custom_object(
                            GROUP, version, namespace, "resourceclaimtemplates", template))
        except errors.NotFound as err:
            raise NotYet(f"no ResourceClaimTemplate {namespace}/{template} yet") from err

    wait_for(made, what=f"ComputeDomain {namespace}/{name}'s channel template {template}",
             timeout=timeout, is_transient=k8s.is_transient_api_error)
    return out


def get(k8s_client: Any, names: Names, namespace: str, name: str) -> dict[str, Any]:
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    out: dict[str, Any] = errors.call(
        f"cannot read ComputeDomain {namespace}/{name}",
        lambda: custom.get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL,
                                                    name))
    return out


def delete(k8s_client: Any, names: Names, namespace: str, name: str) -> None:
    """Ask for the domain's deletion (the controller's finalizer then cleans up); a domain
    already gone is fine."""
    with contextlib.suppress(errors.NotFound):
        errors.call(f"cannot delete ComputeDomain {namespace}/{name}", lambda: kclient
                    .CustomObjectsApi(k8s_client).delete_namespaced_custom_object(
                        names.group, VERSION, namespace, PLURAL, name))


def gone(k8s_client: Any, names: Names, namespace: str, name: str) -> None:
    """A check: the domain no longer exists (NotYet while it does)."""
    try:
        get(k8s_client, names, namespace, name)
    except errors.NotFound:
        return
    raise NotYet("still there")


def wait_gone(k8s_client: Any, names: Names, namespace: str, name: str, *,
              timeout: float = TIMEOUT) -> None:
    wait_for(lambda: gone(k8s_client, names, namespace, name),
             what=f"ComputeDomain {namespace}/{name} to be gone", timeout=timeout,
             is_transient=k8s.is_transient_api_error)


def wait_domain(k8s_client: Any, names: Names, namespace: str, name: str,
                check: Callable[[dict[str, Any]], str], what: str, *,
                interval: float = 1.0, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Wait until ``check`` (which returns why not, or "") passes on the domain."""

    def ok() -> dict[str, Any]:
        cd = get(k8s_client, names, namespace, name)
        if why := check(cd):
            raise NotYet(f"{why}; status: {cd.get('status')}")
        return cd

    return wait_for(ok, what=f"ComputeDomain {namespace}/{name} {what}", timeout=timeout,
                    interval=interval, is_transient=k8s.is_transient_api_error)


def node_entry(cd: dict[str, Any], node: str) -> dict[str, Any]:
    return next((n for n in (cd.get("status") or {}).get("nodes") or []
                 if n.get("name") == node), {})


def ready(n: int) -> Callable[[dict[str, Any]], str]:
    """A check for ``wait_domain``: the domain Ready with at least ``n`` Ready nodes."""
    def check(cd: dict[str, Any]) -> str:
        status = cd.get("status") or {}
        up = [x for x in status.get("nodes") or [] if x.get("status") == "Ready"]
        if status.get("status") != "Ready" or len(up) < n:
            return f"{len(up)} of {n} nodes ready, domain {status.get('status')}"
        return ""
    return check


def gpu_cliques(resource_api: ResourceApi, driver: str, node: str) -> set[str]:
    """The clique IDs the node's GPU plugin publishes (attribute fakegpu.dev/cliqueID)."""
    return {d["attributes"][CLIQUE_ATTRIBUTE]["string"]
            for s in resource_api.slices(driver, node) for d in s["spec"].get("devices") or []
            if CLIQUE_ATTRIBUTE in (d.get("attributes") or {})}


def leftovers(k8s_client: Any, names: Names, namespace: str, name: str, uid: str) -> list[str]:
    """What is left of the domain ``uid`` (``namespace/name``): the domain itself, templates,
    DaemonSets, pods and node labels carrying its UID, claims in its namespace, and daemon
    claims naming it in the driver's namespace."""
    custom: Any = kclient.CustomObjectsApi(k8s_client)
    core: Any = kclient.CoreV1Api(k8s_client)
    apps: Any = kclient.AppsV1Api(k8s_client)
    selector = f"{names.label_key}={uid}"
    version = kubeapi.resource_version(k8s_client)
    left = []
    try:
        gone(k8s_client, names, namespace, name)
    except NotYet:
        left.append("the ComputeDomain")
    left += [f"template {t['metadata']['namespace']}/{t['metadata']['name']}"
             for t in custom.list_cluster_custom_object(
                 GROUP, version, "resourceclaimtemplates",
                 label_selector=selector)["items"]]
    left += [f"daemon set {d.metadata.name}" for d in apps
             .list_daemon_set_for_all_namespaces(label_selector=selector).items]
    left += [f"pod {p.metadata.namespace}/{p.metadata.name}"
             for p in core.list_pod_for_all_namespaces(label_selector=selector).items]
    left += [f"node label on {n.metadata.name}"
             for n in core.list_node(label_selector=selector).items]
    for ns in (namespace, DRIVER_NAMESPACE):
        for claim in custom.list_namespaced_custom_object(GROUP, version, ns,
                                                          "resourceclaims")["items"]:
            configs = ((claim.get("spec") or {}).get("devices") or {}).get("config") or []
            if ns == namespace or any((c.get("opaque") or {}).get("parameters", {})
                                      .get("domainID") == uid for c in configs):
                left.append(f"claim {ns}/{claim['metadata']['name']}")
    return left


def wait_nothing_left(k8s_client: Any, names: Names, namespace: str, name: str, uid: str, *,
                      timeout: float = TIMEOUT) -> None:
    def nothing() -> None:
        if left := leftovers(k8s_client, names, namespace, name, uid):
            raise NotYet(", ".join(left))

    wait_for(nothing, what=f"nothing left of ComputeDomain {namespace}/{name} ({uid})",
             timeout=timeout, is_transient=k8s.is_transient_api_error)
