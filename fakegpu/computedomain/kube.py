"""ComputeDomain reads and writes through the official client (CustomObjectsApi), shared by
the controller, the plugin and the daemon, failing in ``fakegpu.kube.errors``' vocabulary;
the resource.k8s.io version they speak; events on a domain (``fakegpu.kube.events``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from fakegpu.errors import FakegpuError
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube import events as kevents
from fakegpu.kube.resource import GROUP

from .names import KIND, PLURAL, VERSION, Names

log = logging.getLogger(__name__)
TIMEOUT_S = 30
CONFLICT_RETRIES = 8
# The shape the ComputeDomain objects are written in (requests' ``exactly``, flat devices) is
# v1's and v1beta2's; v1beta1 nests both otherwise, and a domain's devices need
# allowMultipleAllocations (1.34+) anyway.
RESOURCE_VERSIONS = ("v1", "v1beta2")


def core(api: client.ApiClient) -> Any:
    """The typed APIs as Any: their models are read like the dicts of custom objects."""
    return client.CoreV1Api(api)


def apps(api: client.ApiClient) -> Any:
    return client.AppsV1Api(api)


def custom(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def resource_version(api: client.ApiClient) -> str:
    """The resource.k8s.io version to speak: the one rule's (``kube.resource.newest_served``),
    refused in one line when it is one the ComputeDomain objects' shape is not (v1beta1)."""
    version = errors.call(f"cannot list the {GROUP} versions served",
                          lambda: kubeapi.resource_version(api))
    if version not in RESOURCE_VERSIONS:
        raise FakegpuError(f"ComputeDomains need {GROUP} {' or '.join(RESOURCE_VERSIONS)}; "
                           f"the apiserver's newest is {version}")
    return version


def list_domains(api: client.ApiClient, names: Names) -> list[dict[str, Any]]:
    out = errors.call("cannot list ComputeDomains", lambda: custom(
        api).list_cluster_custom_object(names.group, VERSION, PLURAL, _request_timeout=TIMEOUT_S))
    return list(out.get("items") or [])


def get_domain(api: client.ApiClient, names: Names, namespace: str, name: str
               ) -> dict[str, Any]:
    return dict(errors.call(f"cannot read ComputeDomain {namespace}/{name}", lambda: custom(
        api).get_namespaced_custom_object(names.group, VERSION, namespace, PLURAL, name,
                                          _request_timeout=TIMEOUT_S)))


def find_domain(api: client.ApiClient, names: Names, uid: str) -> dict[str, Any] | None:
    return next((d for d in list_domains(api, names) if d["metadata"].get("uid") == uid), None)


def replace(api: client.ApiClient, names: Names, cd: dict[str, Any]) -> dict[str, Any]:
    meta = cd["metadata"]
    return dict(errors.call(
        f"cannot replace ComputeDomain {meta['namespace']}/{meta['name']}",
        lambda: custom(api).replace_namespaced_custom_object(
            names.group, VERSION, meta["namespace"], PLURAL, meta["name"], cd,
            _request_timeout=TIMEOUT_S)))


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
        except errors.NotFound:
            return None
        status = change(dict(cd.get("status") or {}))
        if status is None or status == cd.get("status"):
            return cd
        cd["status"] = status
        try:
            return dict(errors.call(
                f"cannot write ComputeDomain {namespace}/{name}'s status",
                functools.partial(api_.replace_namespaced_custom_object_status,
                                  names.group, VERSION, namespace, PLURAL, name, cd,
                                  _request_timeout=TIMEOUT_S)))
        except errors.NotFound:
            return None
        except errors.Conflict:
            continue
    raise RuntimeError(f"ComputeDomain {namespace}/{name}: status changed under every one of "
                       f"{CONFLICT_RETRIES} writes")


def event(api: client.ApiClient, names: Names, cd: dict[str, Any], reason: str,
          message: str, warning: bool = False, component: str = "fakegpu") -> None:
    """An Event on the ComputeDomain (what `kubectl describe computedomain` shows). Best
    effort: a lost event never stops the caller."""
    kevents.record(api, {"apiVersion": names.api_version, "kind": KIND,
                         "metadata": cd["metadata"]}, reason, message, warning=warning,
                   component=component)


def label_node(api: client.ApiClient, node: str, key: str, value: str | None) -> None:
    """Set (or, with None, remove) one label of a node."""
    errors.call(f"cannot label Node {node}", lambda: core(api).patch_node(
        node, {"metadata": {"labels": {key: value}}}, _request_timeout=TIMEOUT_S))
