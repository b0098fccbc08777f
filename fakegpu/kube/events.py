"""Events through the API: list a namespace's, describe them one line each, record one.

Recording is best effort (a lost event never stops the caller: it explains, it does not
decide), as the Kubernetes components' own event recorders are.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from fakegpu.kube.errors import CLIENT_ERRORS, call, translate

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


def list_in(api: client.ApiClient, namespace: str) -> list[Any]:
    """The namespace's events (``CoreV1Event``)."""
    listed: Any = call(f"cannot list events in {namespace}",
                       lambda: client.CoreV1Api(api).list_namespaced_event(
                           namespace, _request_timeout=TIMEOUT_S))
    return list(listed.items)


def find(events: list[Any], reason: str, involved: str | None = None) -> Any | None:
    """The first event of ``reason`` (about the object named ``involved``, if given)."""
    return next((ev for ev in events if ev.reason == reason
                 and (involved is None or ev.involved_object.name == involved)), None)


def when(ev: Any) -> datetime.datetime:
    """When the event last happened (the newest timestamp it carries)."""
    t = (ev.last_timestamp or ev.event_time or ev.first_timestamp
         or ev.metadata.creation_timestamp)
    return t if isinstance(t, datetime.datetime) else datetime.datetime.min.replace(
        tzinfo=datetime.UTC)


def describe(api: client.ApiClient, namespace: str) -> str:
    """The namespace's events, oldest first, one line each (like ``kubectl get events``)."""
    lines = []
    for ev in sorted(list_in(api, namespace), key=when):
        obj = ev.involved_object
        lines.append(f"{when(ev).isoformat()} {ev.type} {ev.reason} {obj.kind}/{obj.name} "
                     f"(x{ev.count or 1}): {ev.message}")
    return "\n".join(lines) or f"(no events in namespace {namespace})"


def record(api: client.ApiClient, involved: Mapping[str, Any], reason: str, message: str, *,
           warning: bool = False, component: str = "fakegpu") -> None:
    """An Event about object ``involved`` (``apiVersion``, ``kind``, ``metadata``: what
    ``kubectl describe`` then shows under it). Best effort: a failure is logged."""
    meta = involved["metadata"]
    now = datetime.datetime.now(datetime.UTC)
    body = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.",
                                     namespace=meta["namespace"]),
        involved_object=client.V1ObjectReference(
            api_version=involved["apiVersion"], kind=involved["kind"], name=meta["name"],
            namespace=meta["namespace"], uid=meta.get("uid")),
        reason=reason, message=message, type="Warning" if warning else "Normal",
        first_timestamp=now, last_timestamp=now, count=1,
        source=client.V1EventSource(component=component))
    try:
        client.CoreV1Api(api).create_namespaced_event(meta["namespace"], body,
                                                      _request_timeout=TIMEOUT_S)
    except CLIENT_ERRORS as err:  # events are best effort
        log.warning("%s", translate(f"cannot record event {reason} on {involved['kind']} "
                                    f"{meta['namespace']}/{meta['name']}", err))
