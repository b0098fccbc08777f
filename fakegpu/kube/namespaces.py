"""Namespaces through the API: create, read, delete. What a suite waits for after a delete
(its pods gone, its claims released) is the test kit's policy, on top of these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from fakegpu.kube.errors import NotFound, call

TIMEOUT_S = 30.0


def create(api: client.ApiClient, name: str, labels: Mapping[str, str] | None = None) -> None:
    """Create namespace ``name``; ``Conflict`` when it exists."""
    body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=dict(labels or {})))
    call(f"cannot create namespace {name}", lambda: client.CoreV1Api(api).create_namespace(
        body, _request_timeout=TIMEOUT_S))


def has_default_account(api: client.ApiClient, name: str) -> bool:
    """Whether namespace ``name``'s ``default`` ServiceAccount exists yet (the controller-manager
    makes it just after the namespace; until then the apiserver refuses pods there)."""
    try:
        call(f"cannot read serviceaccount {name}/default", lambda: client.CoreV1Api(
            api).read_namespaced_service_account("default", name, _request_timeout=TIMEOUT_S))
    except NotFound:
        return False
    return True


def read(api: client.ApiClient, name: str) -> Any | None:
    """The namespace (``V1Namespace``), None when it does not exist."""
    try:
        return call(f"cannot read namespace {name}", lambda: client.CoreV1Api(api).read_namespace(
            name, _request_timeout=TIMEOUT_S))
    except NotFound:
        return None


def delete(api: client.ApiClient, name: str) -> bool:
    """Ask for namespace ``name``'s deletion (the namespace controller finishes it); False
    when it did not exist."""
    try:
        call(f"cannot delete namespace {name}", lambda: client.CoreV1Api(api).delete_namespace(
            name, _request_timeout=TIMEOUT_S))
    except NotFound:
        return False
    return True
