"""Suite policy on top of ``fakegpu.kube``: what a test waits for, and how long; a namespace per
test; pods' environments; manifests; the diagnostics attached to a failing report.

The mechanics (pods, exec through the API's stream, logs, namespaces, events, the error
vocabulary) are ``fakegpu.kube``'s; these functions keep the suites' signature (a
``CoreV1Api``) and add the suites' timeouts and poll interval. Everything takes an explicit
client (no global kubeconfig state), so two clusters can be driven from one process and
nothing is read from the environment at import time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client as kclient

from fakegpu.kube import api as kubeapi
from fakegpu.kube import events as kevents
from fakegpu.kube import namespaces, pods
from fakegpu.kube.errors import is_transient
from fakegpu.kube.manifests import load_manifests as load_manifests
from fakegpu.kube.pods import ExecFailed, ExecResult, PodFailed
from fakegpu.kube.resource import GROUP, newest_served

from .wait import NotYet

__all__ = ["ExecFailed", "ExecResult", "PodFailed"]

FIELD_MANAGER = "fakegpu-testkit"
# The test kit's waits poll the apiserver: a read every half second is nothing to it, and a wait
# overshoots the event it waits for by half the interval on average (0.5 s a wait at 1 s).
POLL_S = 0.5
NAMESPACE_READY_S = 60.0


def new_api_client(kubeconfig: Path) -> Any:
    """An ApiClient for the cluster of ``kubeconfig`` (its current context)."""
    return kubeapi.connect(kubeconfig)


def is_transient_api_error(err: BaseException) -> bool:
    """Errors worth retrying inside a wait: throttling, server-side trouble, connection resets."""
    return is_transient(err)


# --- namespaces ---------------------------------------------------------------------------------


def create_namespace(
    core: kclient.CoreV1Api, prefix: str = "fakegpu-e2e", labels: Mapping[str, str] | None = None
) -> str:
    """Create a uniquely named namespace and return its name once pods can be made there."""
    # A random suffix instead of generateName: the name is known before the call, so a retry
    # after a lost response cannot leak a second namespace.
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    namespaces.create(core.api_client, name, labels)

    # The apiserver refuses a pod ("serviceaccount default not found") until the
    # controller-manager has made the namespace's default ServiceAccount, a moment later (more
    # on a loaded cluster); Kubernetes' own e2e framework waits for it the same way. Where no
    # controller makes them (a bare apiserver: namespace "default" has none either) there is
    # nothing to wait for.
    if not namespaces.has_default_account(core.api_client, "default"):
        return name

    def account() -> None:
        if not namespaces.has_default_account(core.api_client, name):
            raise NotYet(f"namespace {name} has no default ServiceAccount yet (the "
                         "controller-manager makes it)")

    pods.poll(account, what=f"namespace {name}'s default ServiceAccount",
              timeout=NAMESPACE_READY_S, interval=POLL_S)
    return name


def delete_namespace(core: kclient.CoreV1Api, name: str, *, timeout: float = 180.0) -> None:
    """Delete a namespace and wait until nothing in it holds a device any more: its pods gone
    (terminated, their claims unprepared) and its ResourceClaims gone (deallocated).

    The namespace object itself is left to the namespace controller: it goes once the
    controller's next discovery round finds it empty, which frees nothing a later test needs
    and cost 2-5 s a test (measured on the 2-core CI VM, 2026-11-30)."""
    api = core.api_client
    # Pods first, directly: the namespace controller deletes them only after a discovery
    # round over every resource type (pods gone after 8.8 s that way, 4.4 s like this).
    pods.delete_all(api, name)
    if not namespaces.delete(api, name):
        return
    claims = _ResourceClaims(api)

    def released() -> None:
        ns = namespaces.read(api, name)
        if ns is None:
            return
        left_pods = pods.list_in(api, name)
        left = claims.names(name)
        if left_pods or left:
            raise NotYet(f"namespace {name} phase {ns.status.phase}, {len(left_pods)} pod(s) "
                         "left: " + ", ".join(f"{p.metadata.name}={p.status.phase}"
                                              for p in left_pods)
                         + f"; claims left: {left}")

    pods.poll(released, what=f"namespace {name} to release its devices", timeout=timeout,
              interval=POLL_S)


class _ResourceClaims:
    """The names of a namespace's ResourceClaims, at the resource.k8s.io version served
    (looked up on first use: an apiserver without the group has no claims to wait for)."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self._version: str | None = None

    def names(self, namespace: str) -> list[str]:
        if self._version is None:
            versions = kubeapi.served_versions(self._api, GROUP)
            if not versions:
                return []
            self._version = newest_served(versions)
        listed: Any = kclient.CustomObjectsApi(self._api).list_namespaced_custom_object(
            GROUP, self._version, namespace, "resourceclaims")
        return [str(c["metadata"]["name"]) for c in listed.get("items") or ()]


# --- pods ---------------------------------------------------------------------------------------


def create_pod(core: kclient.CoreV1Api, namespace: str, manifest: Mapping[str, Any]) -> Any:
    """Create a pod from a plain manifest (``dra.pod_manifest``)."""
    return pods.create(core.api_client, namespace, manifest)


def read_pod(core: kclient.CoreV1Api, namespace: str, name: str) -> Any:
    return pods.read(core.api_client, namespace, name)


pod_condition = pods.condition


def wait_pod_running(
    core: kclient.CoreV1Api, namespace: str, name: str, *, timeout: float = 180.0
) -> Any:
    """Wait until the pod is Running with all containers ready; a terminal phase fails at once."""
    return pods.wait_running(core.api_client, namespace, name, timeout=timeout, interval=POLL_S)


def wait_pod_condition(
    core: kclient.CoreV1Api,
    namespace: str,
    name: str,
    ctype: str,
    status: str,
    *,
    timeout: float = 120.0,
) -> Any:
    """Wait until the pod has condition ``ctype`` with ``status``; return the pod."""
    return pods.wait_condition(core.api_client, namespace, name, ctype, status, timeout=timeout,
                               interval=POLL_S)


# The DRA scheduler plugin's reason when no node can satisfy a pod's claims (stable since 1.26;
# the suites check it against the message of the release under test).
CANNOT_ALLOCATE = "cannot allocate all claims"


def claims_refused(pod: Any) -> bool:
    """Whether the scheduler has tried to allocate the pod's claims and could not:
    ``PodScheduled=False`` with the DRA plugin's CANNOT_ALLOCATE in its message. Before that it
    waits for the claim controller to create the pod's claims (another message): no verdict."""
    cond = pods.condition(pod, "PodScheduled")
    return cond is not None and cond.status == "False" and CANNOT_ALLOCATE in (
        cond.message or "")


def wait_unschedulable(core: kclient.CoreV1Api, namespace: str, name: str, *,
                       what: str | None = None, timeout: float = 120.0) -> Any:
    """Wait until the scheduler refuses the pod for its claims (:func:`claims_refused`);
    return the pod. ``what`` says what the refusal means, for the timeout message."""

    def refused() -> Any:
        pod = read_pod(core, namespace, name)
        if not claims_refused(pod):
            raise NotYet(f"PodScheduled: {pods.condition(pod, 'PodScheduled')}")
        return pod

    return pods.poll(refused, what=what or f"the scheduler to refuse pod {namespace}/{name}",
                     timeout=timeout, interval=POLL_S)


def wait_pod_gone(
    core: kclient.CoreV1Api, namespace: str, name: str, *, timeout: float = 120.0
) -> None:
    pods.wait_gone(core.api_client, namespace, name, timeout=timeout, interval=POLL_S)


def pod_json(core: kclient.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    """The pod as the apiserver sends it (fields newer than the client's models included)."""
    return pods.read_json(core.api_client, namespace, name)


def device_health(pod: Mapping[str, Any]) -> dict[str, str]:
    """Resource ID -> health (Healthy, Unhealthy, Unknown) of every device the pod's containers
    were allocated, from ``status.containerStatuses[].allocatedResourcesStatus`` (the kubelet
    fills it from the driver's DRAResourceHealth stream, KEP-4680). The ID is the device's
    first CDI device ID, or ``<driver>/<pool>/<device>`` when it has none."""
    out: dict[str, str] = {}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for entry in cs.get("allocatedResourcesStatus") or []:
            for res in entry.get("resources") or []:
                out[str(res.get("resourceID"))] = str(res.get("health"))
    return out


def wait_device_health(core: kclient.CoreV1Api, namespace: str, name: str, health: str,
                       resource_id: str | None = None, *, timeout: float = 120.0
                       ) -> dict[str, Any]:
    """Wait until the pod's status shows ``health`` for ``resource_id`` (None: for every
    allocated device, at least one); return the pod."""

    def shows() -> dict[str, Any]:
        pod = pod_json(core, namespace, name)
        seen = device_health(pod)
        wanted = [seen.get(resource_id)] if resource_id is not None else list(seen.values())
        if not wanted or any(h != health for h in wanted):
            raise NotYet(f"allocated resources' health: {seen}")
        return pod

    return pods.poll(shows, what=f"pod {namespace}/{name} to show {resource_id or 'its devices'} "
                                 f"{health}",
                     timeout=timeout, interval=POLL_S)


HEALTH_GATE = "ResourceHealthStatus"


def kubelet_reports_health(core: kclient.CoreV1Api, node: str) -> bool:
    """Whether the node's kubelet runs with the ResourceHealthStatus gate on, so it opens the
    drivers' health streams and fills ``allocatedResourcesStatus``: as its own /metrics
    report the gate (``kubernetes_feature_enabled``), whatever set it."""
    gates = kubeapi.parse_feature_gates(kubeapi.kubelet_metrics(core.api_client, node))
    return gates.get(HEALTH_GATE, False)


def wait_event(core: kclient.CoreV1Api, namespace: str, reason: str, *,
               involved: str | None = None, containing: str = "",
               timeout: float = 120.0) -> Any:
    """Wait for an event of ``reason`` in ``namespace`` (about object ``involved``, if given;
    whose message holds ``containing``, if given: an earlier one of the same reason can say
    something else, such as a kubelet plugin not registered yet); return the first one."""

    def seen() -> Any:
        events = kevents.list_in(core.api_client, namespace)
        found = kevents.find([e for e in events if containing in (e.message or "")], reason,
                             involved)
        if found is None:
            raise NotYet("events: " + ", ".join(sorted({f"{e.reason}({e.involved_object.name})"
                                                          for e in events})))
        return found

    return pods.poll(seen, what=f"event {reason} in {namespace}", timeout=timeout,
                     interval=POLL_S)


def pod_log(core: kclient.CoreV1Api, namespace: str, name: str,
            container: str | None = None) -> str:
    return pods.log(core.api_client, namespace, name, container)


def exec_in_pod(
    core: kclient.CoreV1Api,
    namespace: str,
    name: str,
    command: Sequence[str],
    *,
    container: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> ExecResult:
    """Run ``command`` in the pod through the apiserver's exec stream (as kubectl exec does)."""
    return pods.exec_(core.api_client, namespace, name, command, container=container,
                      timeout=timeout, check=check)


ENV_DONE = "FAKEGPU_E2E_ENV_DONE"
# A pod command: print the environment once, then idle; the marker tells the log reader (and
# logged_env) that `env` has finished.
PRINT_ENV_AND_WAIT = ("sh", "-c", f"env; echo {ENV_DONE}; exec sleep 3600")


def logged_env(core: kclient.CoreV1Api, namespace: str, pod: str, *,
               timeout: float = 60.0) -> dict[str, str]:
    """The environment a pod running PRINT_ENV_AND_WAIT printed at start (waits until the
    print is complete)."""

    def complete() -> str:
        text = pod_log(core, namespace, pod)
        if ENV_DONE not in text:
            raise NotYet(f"log so far: {text[-300:]!r}")
        return text

    return parse_env(pods.poll(complete, what=f"pod {namespace}/{pod} to print its env",
                               timeout=timeout, interval=POLL_S))


def exec_env(core: kclient.CoreV1Api, namespace: str, pod: str) -> dict[str, str]:
    """The environment of a running pod's (first) container, from `env` run in it."""
    return parse_env(exec_in_pod(core, namespace, pod, ["env"]).stdout)


def parse_env(text: str) -> dict[str, str]:
    """Parse the output of ``env`` (one NAME=value per line) into a dict."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and name.replace("_", "").isalnum():
            env[name] = value
    return env


# --- manifests ----------------------------------------------------------------------------------


def apply_manifests(
    api: Any,
    source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]],
    *,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """Server-side apply each object (idempotent, like ``kubectl apply --server-side``)."""
    return kubeapi.apply(api, load_manifests(source), namespace=namespace,
                         field_manager=FIELD_MANAGER)


# --- diagnostics (attached to failing e2e reports) ----------------------------------------------


def describe_events(core: kclient.CoreV1Api, namespace: str) -> str:
    """The namespace's events, oldest first, one line each (like ``kubectl get events``)."""
    return kevents.describe(core.api_client, namespace)


def describe_pods(core: kclient.CoreV1Api, namespace: str) -> str:
    """Each pod's node, phase, conditions, container states and claims, in a few lines."""
    out: list[str] = []
    for pod in pods.list_in(core.api_client, namespace):
        st = pod.status
        out.append(f"pod {pod.metadata.name}: node={pod.spec.node_name} phase={st.phase}")
        for cond in st.conditions or ():
            out.append(f"  condition {cond.type}={cond.status} reason={cond.reason} "
                       f"message={cond.message}")
        for cs in st.container_statuses or ():
            out.append(f"  container {cs.name}: ready={cs.ready} restarts={cs.restart_count} "
                       f"state={_container_state(cs.state)}")
        for rc in st.resource_claim_statuses or ():
            out.append(f"  claim {rc.name} -> {rc.resource_claim_name}")
    return "\n".join(out) or f"(no pods in namespace {namespace})"


def _container_state(state: Any) -> str:
    if state is None:
        return "unknown"
    if state.running is not None:
        return f"running since {state.running.started_at}"
    if state.waiting is not None:
        return f"waiting {state.waiting.reason}: {state.waiting.message}"
    if state.terminated is not None:
        t = state.terminated
        return f"terminated {t.reason} exit={t.exit_code}: {t.message}"
    return "unknown"
