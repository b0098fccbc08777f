"""Kubernetes helpers for suites: client, namespaces, pod waits, exec, logs, manifests, diagnostics.

Everything takes an explicit client (no global kubeconfig state), so two clusters can be driven
from one process and nothing is read from the environment at import time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from fakegpu.errors import FakegpuError
from fakegpu.kube import api as kubeapi

# Re-exported (``X as X``): the suites' names for generic API access that lives in fakegpu.kube.
from fakegpu.kube.execstream import ExecFailed as ExecFailed
from fakegpu.kube.execstream import ExecResult as ExecResult
from fakegpu.kube.execstream import exec_in_pod as exec_in_pod
from fakegpu.kube.manifests import load_manifests as load_manifests
from fakegpu.kube.resource import GROUP, newest_served
from fakegpu.kube.transient import TRANSIENT as _TRANSIENT
from fakegpu.kube.transient import is_transient_api_error as is_transient_api_error

from .wait import NotYet, wait_for

FIELD_MANAGER = "fakegpu-testkit"
# The test kit's waits poll the apiserver: a read every half second is nothing to it, and a wait
# overshoots the event it waits for by half the interval on average (0.5 s a wait at 1 s).
POLL_S = 0.5


class PodFailed(FakegpuError):
    """A pod reached a terminal phase while we waited for it to run."""


def new_api_client(kubeconfig: Path) -> Any:
    """An ApiClient for the cluster of ``kubeconfig`` (its current context)."""
    return kubeapi.connect(kubeconfig)


# --- namespaces ---------------------------------------------------------------------------------


def create_namespace(
    core: kclient.CoreV1Api, prefix: str = "fakegpu-e2e", labels: Mapping[str, str] | None = None
) -> str:
    """Create a uniquely named namespace and return its name."""
    # A random suffix instead of generateName: the name is known before the call, so a retry
    # after a lost response cannot leak a second namespace.
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    body = kclient.V1Namespace(
        metadata=kclient.V1ObjectMeta(name=name, labels=dict(labels or {})))
    core.create_namespace(body)
    return name


def delete_namespace(core: kclient.CoreV1Api, name: str, *, timeout: float = 180.0) -> None:
    """Delete a namespace and wait until nothing in it holds a device any more: its pods gone
    (terminated, their claims unprepared) and its ResourceClaims gone (deallocated).

    The namespace object itself is left to the namespace controller: it goes once the
    controller's next discovery round finds it empty, which frees nothing a later test needs
    and cost 2-5 s a test (measured on the 2-core CI VM, 2026-11-30)."""
    try:
        # Pods first, directly: the namespace controller deletes them only after a discovery
        # round over every resource type (pods gone after 8.8 s that way, 4.4 s like this).
        core.delete_collection_namespaced_pod(name)
    except ApiException as err:
        if err.status != 404:
            raise
    try:
        core.delete_namespace(name)
    except ApiException as err:
        if err.status == 404:
            return
        raise
    claims = _ResourceClaims(core.api_client)

    def released() -> None:
        try:
            ns: Any = core.read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        pods: list[Any] = core.list_namespaced_pod(name).items
        left = claims.names(name)
        if pods or left:
            raise NotYet(f"namespace {name} phase {ns.status.phase}, {len(pods)} pod(s) left: "
                         + ", ".join(f"{p.metadata.name}={p.status.phase}" for p in pods)
                         + f"; claims left: {left}")

    wait_for(released, what=f"namespace {name} to release its devices", timeout=timeout,
             interval=POLL_S, transient=_TRANSIENT, is_transient=is_transient_api_error)


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
    body: Any = dict(manifest)  # the client takes dicts as they are, whatever its stubs say
    return core.create_namespaced_pod(namespace, body)


def read_pod(core: kclient.CoreV1Api, namespace: str, name: str) -> Any:
    return core.read_namespaced_pod(name, namespace)


def pod_condition(pod: Any, ctype: str) -> Any | None:
    for cond in pod.status.conditions or ():
        if cond.type == ctype:
            return cond
    return None


def _pod_state(pod: Any) -> str:
    parts = [f"phase={pod.status.phase}"]
    for cond in pod.status.conditions or ():
        if cond.status != "True":
            parts.append(f"{cond.type}={cond.status}({cond.reason}: {cond.message})")
    for cs in pod.status.container_statuses or ():
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None:
            parts.append(f"{cs.name} waiting {waiting.reason}: {waiting.message}")
    return " ".join(parts)


def wait_pod_running(
    core: kclient.CoreV1Api, namespace: str, name: str, *, timeout: float = 180.0
) -> Any:
    """Wait until the pod is Running with all containers ready; a terminal phase fails at once."""

    def running() -> Any:
        pod = read_pod(core, namespace, name)
        phase = pod.status.phase
        if phase in ("Failed", "Succeeded"):
            raise PodFailed(f"pod {namespace}/{name} ended ({_pod_state(pod)}) instead of running")
        ready = pod_condition(pod, "Ready")
        if phase == "Running" and ready is not None and ready.status == "True":
            return pod
        raise NotYet(_pod_state(pod))

    return wait_for(running, what=f"pod {namespace}/{name} to run", timeout=timeout,
                    interval=POLL_S, transient=_TRANSIENT, is_transient=is_transient_api_error)


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

    def has() -> Any:
        pod = read_pod(core, namespace, name)
        cond = pod_condition(pod, ctype)
        if cond is not None and cond.status == status:
            return pod
        raise NotYet(_pod_state(pod))

    return wait_for(has, what=f"pod {namespace}/{name} condition {ctype}={status}",
                    timeout=timeout, interval=POLL_S, transient=_TRANSIENT,
                    is_transient=is_transient_api_error)


# The DRA scheduler plugin's reason when no node can satisfy a pod's claims (stable since 1.26;
# the suites check it against the message of the release under test).
CANNOT_ALLOCATE = "cannot allocate all claims"


def claims_refused(pod: Any) -> bool:
    """Whether the scheduler has tried to allocate the pod's claims and could not:
    ``PodScheduled=False`` with the DRA plugin's CANNOT_ALLOCATE in its message. Before that it
    waits for the claim controller to create the pod's claims (another message): no verdict."""
    cond = pod_condition(pod, "PodScheduled")
    return cond is not None and cond.status == "False" and CANNOT_ALLOCATE in (
        cond.message or "")


def wait_unschedulable(core: kclient.CoreV1Api, namespace: str, name: str, *,
                       what: str | None = None, timeout: float = 120.0) -> Any:
    """Wait until the scheduler refuses the pod for its claims (:func:`claims_refused`);
    return the pod. ``what`` says what the refusal means, for the timeout message."""

    def refused() -> Any:
        pod = read_pod(core, namespace, name)
        if not claims_refused(pod):
            raise NotYet(f"PodScheduled: {pod_condition(pod, 'PodScheduled')}")
        return pod

    return wait_for(refused, what=what or f"the scheduler to refuse pod {namespace}/{name}",
                    timeout=timeout, interval=POLL_S, transient=_TRANSIENT,
                    is_transient=is_transient_api_error)


def wait_pod_gone(
    core: kclient.CoreV1Api, namespace: str, name: str, *, timeout: float = 120.0
) -> None:
    def gone() -> None:
        try:
            pod = read_pod(core, namespace, name)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        raise NotYet(_pod_state(pod))

    wait_for(gone, what=f"pod {namespace}/{name} to be deleted", timeout=timeout, interval=POLL_S,
             transient=_TRANSIENT, is_transient=is_transient_api_error)


def pod_json(core: kclient.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    """The pod as the apiserver sends it (fields newer than the client's models included)."""
    resp: Any = core.read_namespaced_pod(name, namespace, _preload_content=False)
    return dict(json.loads(resp.data))


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

    return wait_for(shows, what=f"pod {namespace}/{name} to show {resource_id or 'its devices'} "
                              f"{health}",
                    timeout=timeout, interval=POLL_S, transient=_TRANSIENT,
                    is_transient=is_transient_api_error)


def wait_event(core: kclient.CoreV1Api, namespace: str, reason: str, *,
               involved: str | None = None, timeout: float = 120.0) -> Any:
    """Wait for an event of ``reason`` in ``namespace`` (about object ``involved``, if given);
    return the first one."""

    def seen() -> Any:
        events = core.list_namespaced_event(namespace).items
        for ev in events:
            if ev.reason == reason and (involved is None
                                        or ev.involved_object.name == involved):
                return ev
        raise NotYet("events: " + ", ".join(sorted({f"{e.reason}({e.involved_object.name})"
                                                      for e in events})))

    return wait_for(seen, what=f"event {reason} in {namespace}", timeout=timeout, interval=POLL_S,
                    transient=_TRANSIENT, is_transient=is_transient_api_error)


def pod_log(core: kclient.CoreV1Api, namespace: str, name: str,
            container: str | None = None) -> str:
    kwargs: dict[str, Any] = {"container": container} if container else {}
    return str(core.read_namespaced_pod_log(name, namespace, **kwargs))


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

    return parse_env(wait_for(complete, what=f"pod {namespace}/{pod} to print its env",
                              timeout=timeout, interval=POLL_S, transient=_TRANSIENT,
                              is_transient=is_transient_api_error))


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
    events: list[Any] = core.list_namespaced_event(namespace).items

    def when(ev: Any) -> datetime:
        t = (ev.last_timestamp or ev.event_time or ev.first_timestamp
             or ev.metadata.creation_timestamp)
        return t if isinstance(t, datetime) else datetime.min.replace(tzinfo=UTC)

    lines = []
    for ev in sorted(events, key=when):
        obj = ev.involved_object
        lines.append(f"{when(ev).isoformat()} {ev.type} {ev.reason} {obj.kind}/{obj.name} "
                     f"(x{ev.count or 1}): {ev.message}")
    return "\n".join(lines) or f"(no events in namespace {namespace})"


def describe_pods(core: kclient.CoreV1Api, namespace: str) -> str:
    """Each pod's node, phase, conditions, container states and claims, in a few lines."""
    out: list[str] = []
    pods: list[Any] = core.list_namespaced_pod(namespace).items
    for pod in pods:
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
