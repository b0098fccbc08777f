"""Pods through the API: create, read, wait, exec (the API's exec stream), logs.

Functions over an explicit ``ApiClient``, like the rest of ``fakegpu.kube``. A pod comes back
as the client's ``V1Pod`` model (core/v1 is complete in the client, and the suites read pods
that way); ``read_json`` gives the apiserver's own JSON where a field is newer than the model
(``allocatedResourcesStatus``). Failures are ``fakegpu.kube.errors``; the waits retry the
transient ones on ``fakegpu.wait``'s loop.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.stream import stream

from fakegpu.errors import FakegpuError
from fakegpu.kube.errors import CLIENT_ERRORS, KubeError, NotFound, call, is_transient
from fakegpu.wait import NotYet, wait_for

T = TypeVar("T")
TIMEOUT_S = 30.0  # one request
POLL_S = 0.5  # a read every half second is nothing to an apiserver
# What a wait retries (narrowed by errors.is_transient): the vocabulary and raw client errors.
TRANSIENT: tuple[type[BaseException], ...] = (KubeError, *CLIENT_ERRORS)


class ExecFailed(FakegpuError):
    """A command run in a pod exited non-zero or did not finish (message: its output)."""


class PodFailed(FakegpuError):
    """A pod reached a terminal phase while we waited for it to run."""


def _core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def create(api: client.ApiClient, namespace: str, manifest: Mapping[str, Any]) -> Any:
    """Create a pod from a plain manifest; the pod as stored."""
    body: Any = dict(manifest)  # the client takes dicts as they are, whatever its stubs say
    name = manifest.get("metadata", {}).get("name") or manifest.get("metadata", {}).get(
        "generateName", "")
    return call(f"cannot create pod {namespace}/{name}", lambda: _core(api).create_namespaced_pod(
        namespace, body, _request_timeout=TIMEOUT_S))


def read(api: client.ApiClient, namespace: str, name: str) -> Any:
    """The pod (``V1Pod``); ``NotFound`` when it does not exist."""
    return call(f"cannot read pod {namespace}/{name}", lambda: _core(api).read_namespaced_pod(
        name, namespace, _request_timeout=TIMEOUT_S))


def read_json(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The pod as the apiserver sends it (fields newer than the client's models included)."""
    resp: Any = call(f"cannot read pod {namespace}/{name}", lambda: _core(api).read_namespaced_pod(
        name, namespace, _preload_content=False, _request_timeout=TIMEOUT_S))
    return dict(json.loads(resp.data))


def list_in(api: client.ApiClient, namespace: str) -> list[Any]:
    """The namespace's pods (``V1Pod``)."""
    listed: Any = call(f"cannot list pods in {namespace}", lambda: _core(api).list_namespaced_pod(
        namespace, _request_timeout=TIMEOUT_S))
    return list(listed.items)


def delete_all(api: client.ApiClient, namespace: str) -> None:
    """Delete every pod of the namespace (none, or no namespace: nothing to do)."""
    with contextlib.suppress(NotFound):
        call(f"cannot delete the pods of {namespace}",
             lambda: _core(api).delete_collection_namespaced_pod(
                 namespace, _request_timeout=TIMEOUT_S))


def log(api: client.ApiClient, namespace: str, name: str, container: str | None = None) -> str:
    """The pod's log (of ``container``, or its only one)."""
    kwargs: dict[str, Any] = {"container": container} if container else {}
    return str(call(f"cannot read the log of pod {namespace}/{name}",
                    lambda: _core(api).read_namespaced_pod_log(
                        name, namespace, _request_timeout=TIMEOUT_S, **kwargs)))


def condition(pod: Any, ctype: str) -> Any | None:
    """The pod's condition of type ``ctype`` (``V1PodCondition``), None when it has none."""
    for cond in pod.status.conditions or ():
        if cond.type == ctype:
            return cond
    return None


def summary(pod: Any) -> str:
    """One line: phase, conditions not True, waiting containers (what a wait reports)."""
    parts = [f"phase={pod.status.phase}"]
    for cond in pod.status.conditions or ():
        if cond.status != "True":
            parts.append(f"{cond.type}={cond.status}({cond.reason}: {cond.message})")
    for cs in pod.status.container_statuses or ():
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None:
            parts.append(f"{cs.name} waiting {waiting.reason}: {waiting.message}")
    return " ".join(parts)


def poll(check: Callable[[], T], *, what: str, timeout: float, interval: float = POLL_S) -> T:
    """``fakegpu.wait.wait_for`` with the API's transient errors retried."""
    return wait_for(check, what=what, timeout=timeout, interval=interval, transient=TRANSIENT,
                    is_transient=is_transient)


# A container waiting for one of these does not start until someone changes the pod or the
# node's images: ImagePullBackOff comes after a pull has failed and been retried (a bare
# ErrImagePull may be a registry's hiccup). Without this an offline cluster's missing image
# held every wait for its whole timeout.
STUCK_REASONS = frozenset({"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})


def stuck(pod: Any) -> str | None:
    """Why a container of the pod cannot start (its waiting reason, message and image), or
    None."""
    statuses = [*(pod.status.init_container_statuses or ()),
                *(pod.status.container_statuses or ())]
    for cs in statuses:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None and waiting.reason in STUCK_REASONS:
            return f"container {cs.name} (image {cs.image}): {waiting.reason}: {waiting.message}"
    return None


def wait_running(api: client.ApiClient, namespace: str, name: str, *, timeout: float,
                 interval: float = POLL_S) -> Any:
    """Wait until the pod is Running with all containers ready; a terminal phase, or a
    container whose image cannot be had (:func:`stuck`), fails at once."""

    def running() -> Any:
        pod = read(api, namespace, name)
        phase = pod.status.phase
        if phase in ("Failed", "Succeeded"):
            raise PodFailed(f"pod {namespace}/{name} ended ({summary(pod)}) instead of running")
        why = stuck(pod)
        if why is not None:
            raise PodFailed(f"pod {namespace}/{name} cannot run: {why}")
        ready = condition(pod, "Ready")
        if phase == "Running" and ready is not None and ready.status == "True":
            return pod
        raise NotYet(summary(pod))

    return poll(running, what=f"pod {namespace}/{name} to run", timeout=timeout,
                interval=interval)


def wait_condition(api: client.ApiClient, namespace: str, name: str, ctype: str, status: str,
                   *, timeout: float, interval: float = POLL_S) -> Any:
    """Wait until the pod has condition ``ctype`` with ``status``; return the pod."""

    def has() -> Any:
        pod = read(api, namespace, name)
        cond = condition(pod, ctype)
        if cond is not None and cond.status == status:
            return pod
        raise NotYet(summary(pod))

    return poll(has, what=f"pod {namespace}/{name} condition {ctype}={status}", timeout=timeout,
                interval=interval)


def wait_gone(api: client.ApiClient, namespace: str, name: str, *, timeout: float,
              interval: float = POLL_S) -> None:
    """Wait until the pod no longer exists."""

    def gone() -> None:
        try:
            pod = read(api, namespace, name)
        except NotFound:
            return
        raise NotYet(summary(pod))

    poll(gone, what=f"pod {namespace}/{name} to be deleted", timeout=timeout, interval=interval)


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


def exec_(api: client.ApiClient, namespace: str, name: str, command: Sequence[str], *,
          container: str | None = None, timeout: float = 60.0, check: bool = True
          ) -> ExecResult:
    """Run ``command`` in the pod through the apiserver's exec stream (as ``kubectl exec``
    does, without a kubectl process). ``check``: a non-zero exit raises ``ExecFailed``;
    not finishing within ``timeout`` always does."""
    kwargs: dict[str, Any] = {"container": container} if container else {}
    resp = call(f"cannot exec in pod {namespace}/{name}", lambda: stream(
        _core(api).connect_get_namespaced_pod_exec, name, namespace, command=list(command),
        stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False, **kwargs))
    try:
        # run_forever buffers every frame per channel until the command ends (or the timeout),
        # so large outputs are read whole afterwards.
        resp.run_forever(timeout=timeout)
        finished = not resp.is_open()
        stdout = str(resp.read_stdout(timeout=0))
        stderr = str(resp.read_stderr(timeout=0))
        code = resp.returncode if finished else None
    finally:
        resp.close()
    if code is None:
        raise ExecFailed(f"`{' '.join(command)}` in pod {namespace}/{name} did not finish "
                         f"within {timeout:.0f}s; output so far: {stdout.strip()[-500:]}")
    result = ExecResult(int(code), stdout, stderr)
    if check and result.returncode != 0:
        raise ExecFailed(f"`{' '.join(command)}` in pod {namespace}/{name} exited "
                         f"{result.returncode}: {result.stderr.strip() or result.stdout.strip()}")
    return result
