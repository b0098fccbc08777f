"""ComputeDomain reads and writes through the official client (CustomObjectsApi), shared by
the controller, the plugin and the daemon."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .names import PLURAL, VERSION, Names

log = logging.getLogger(__name__)
TIMEOUT_S = 30
CONFLICT_RETRIES = 8


def core(api: client.ApiClient) -> Any:
    """The typed APIs as Any: their models are read like the dicts of custom objects."""
    return client.CoreV1Api(api)


def apps(api: client.ApiClient) -> Any:
    return client.AppsV1Api(api)


def custom(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def not_found(err: BaseException) -> bool:
    return isinstance(err, ApiException) and err.status == 404


def list_domains(api: client.ApiClient, names: Names) -> list[dict[str, Any]]:
    out = custom(api).list_cluster_custom_object(
        names.group, VERSION, PLURAL, _request_timeout=TIMEOUT_S)
    return list(out.get("items") or [])


def get_domain(api: client.ApiClient, names: Names, namespace: str, name: str
               ) -> dict[str, Any]:
    return dict(custom(api).get_namespaced_custom_object(
        names.group, VERSION, namespace, PLURAL, name, _request_timeout=TIMEOUT_S))


def find_domain(api: client.ApiClient, names: Names, uid: str) -> dict[str, Any] | None:
    return next((d for d in list_domains(api, names) if d["metadata"].get("uid") == uid), None)


def replace(api: client.ApiClient, names: Names, cd: dict[str, Any]) -> dict[str, Any]:
    meta = cd["metadata"]
    return dict(custom(api).replace_namespaced_custom_object(
        names.group, VERSION, meta["namespace"], PLURAL, meta["name"], cd,
        _request_timeout=TIMEOUT_S))


def update_status(api: client.ApiClient, names: Names, namespace: str, name: str,
                  change: Callable[[dict[str, Any]], dict[str, Any] | None]
                  ) -> dict[str, Any] | None:
    """Read the domain, let ``change`` edit its status (None: nothing to write), write it
    with the read resourceVersion; on a conflict (the controller and every node's daemon
    write here) read again and retry. None when the domain is gone."""
    api_ = custom(api)
    for _ in range(CONFLICT_RETRIES):
        try:
            cd = get_domain(api, names, namespace, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        status = change(dict(cd.get("status") or {}))
        if status is None or status == cd.get("status"):
            return cd
        cd["status"] = status
        try:
            return dict(api_.replace_namespaced_custom_object_status(
                names.group, VERSION, namespace, PLURAL, name, cd, _request_timeout=TIMEOUT_S))
        except ApiException as err:
            if err.status == 404:
                return None
            if err.status != 409:
                raise
    raise RuntimeError(f"ComputeDomain {namespace}/{name}: status changed under every one of "
                       f"{CONFLICT_RETRIES} writes")


def event(api: client.ApiClient, names: Names, cd: dict[str, Any], reason: str,
          message: str, warning: bool = False, component: str = "fakegpu") -> None:
    """An Event on the ComputeDomain (what `kubectl describe computedomain` shows). Best
    effort: a lost event never stops the caller."""
    meta = cd["metadata"]
    now = datetime.datetime.now(datetime.UTC)
    body = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.",
                                     namespace=meta["namespace"]),
        involved_object=client.V1ObjectReference(
            api_version=names.api_version, kind="ComputeDomain", name=meta["name"],
            namespace=meta["namespace"], uid=meta["uid"]),
        reason=reason, message=message, type="Warning" if warning else "Normal",
        first_timestamp=now, last_timestamp=now, count=1,
        source=client.V1EventSource(component=component))
    try:
        core(api).create_namespaced_event(meta["namespace"], body,
                                                      _request_timeout=TIMEOUT_S)
    except Exception as err:  # events are best effort
        log.warning("cannot record event %s on ComputeDomain %s/%s: %s", reason,
                    meta["namespace"], meta["name"], err)


def label_node(api: client.ApiClient, node: str, key: str, value: str | None) -> None:
    """Set (or, with None, remove) one label of a node."""
    core(api).patch_node(node, {"metadata": {"labels": {key: value}}},
                                     _request_timeout=TIMEOUT_S)
