"""The apiserver through the official ``kubernetes`` client: the one way fakegpu talks to it.

Cluster bring-up (readiness, nodes, ResourceSlices, manifests), the plugin (credentials and
the served ``resource.k8s.io`` version) and the test kit connect and read here. Objects are
plain dicts, the shape the apiserver returns, with no generated model in between that lags
behind new fields. ``kubectl`` stays only where the user-facing thing is kubectl itself.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from fakegpu.errors import FakegpuError, InvalidInput, printable
from fakegpu.kube.errors import CLIENT_ERRORS
from fakegpu.kube.resource import GROUP, VERSIONS, newest_served

TIMEOUT_S = 10.0
FIELD_MANAGER = "fakegpu"
POOL_SIZE = 64  # connections kept open to the apiserver, per client
# What a raw client call can fail with (the apiserver refused it, or was not reached);
# ``fakegpu.kube.errors.translate`` names them.
ERRORS = CLIENT_ERRORS


def connect(kubeconfig: Path | None = None, *, retries: bool = True) -> client.ApiClient:
    """A client for the cluster of ``kubeconfig`` (its current context).

    ``None``: the pod's service account when running in a cluster, else ``$KUBECONFIG`` or
    ``~/.kube/config``. Nothing is read from the environment before this is called.
    ``retries=False``: a refused connection fails the call at once, for callers that poll on
    fakegpu's one loop (``fakegpu.wait``) instead of urllib3's hidden retries and warnings.
    """
    cfg = client.Configuration()
    if not retries:
        cfg.retries = False
    if kubeconfig is not None:
        config.load_kube_config(str(kubeconfig),  # type: ignore[no-untyped-call]
                                client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    # Callers run many requests at once (the DRA plugin: one per in-flight kubelet call plus
    # its status writes); past the client's default pool (5 per CPU) urllib3 opens and then
    # discards a TLS connection for every extra request.
    cfg.connection_pool_maxsize = POOL_SIZE
    return client.ApiClient(cfg)


@contextlib.contextmanager
def session(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """``connect`` for one short use (a poll, a bring-up step): no hidden retries, the
    connection pool closed afterwards."""
    api = connect(kubeconfig, retries=False)
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]


def get(api: client.ApiClient, path: str, timeout: float = TIMEOUT_S) -> bytes:
    """GET ``path`` (e.g. ``/readyz``) with the client's credentials; the body as bytes."""
    cfg = api.configuration
    headers = {"Accept": "application/json, */*"}
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if token:
        prefix = cfg.api_key_prefix.get("authorization", "")
        headers["Authorization"] = f"{prefix} {token}".strip()
    res = api.rest_client.request(  # type: ignore[no-untyped-call]
        "GET", f"{cfg.host}{path}", headers=headers, _request_timeout=timeout)
    status = int(getattr(res, "status", 200))
    if not 200 <= status < 300:  # newer clients return the response, older ones raise
        raise ApiException(status=status, reason=str(getattr(res, "reason", "")))
    data = res.data if hasattr(res, "data") and res.data is not None else res.read()
    return data if isinstance(data, bytes) else str(data).encode()


def get_json(api: client.ApiClient, path: str, timeout: float = TIMEOUT_S) -> Any:
    """GET ``path`` and decode the JSON body (``/version``, ``/apis``, any object)."""
    return json.loads(get(api, path, timeout))


def served_versions(api: client.ApiClient, group: str) -> list[str]:
    """The versions of API ``group`` the apiserver serves (empty: it does not serve it)."""
    doc = get_json(api, "/apis")
    return [v["version"] for g in doc.get("groups") or [] if g.get("name") == group
            for v in g.get("versions") or []]


def version_serving(api: client.ApiClient, plural: str,
                    candidates: Iterable[str] = (*VERSIONS, "v1alpha3")) -> str | None:
    """The newest of ``candidates`` (newest first) in which resource.k8s.io serves ``plural``
    (None: none does). A kind can be served in fewer versions than its group: DeviceTaintRule
    was v1alpha3 only while claims were v1beta1."""
    for version in candidates:
        try:
            doc = get_json(api, f"/apis/{GROUP}/{version}")
        except ERRORS:
            continue
        if any(r.get("name") == plural for r in doc.get("resources") or ()):
            return version
    return None


def resource_version(api: client.ApiClient) -> str:
    """The ``resource.k8s.io`` version to speak with this apiserver (``kube.resource``'s rule)."""
    return newest_served(served_versions(api, GROUP))


# --- reads ---------------------------------------------------------------------------------------


def is_ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node object has condition Ready=True."""
    conds = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def nodes(api: client.ApiClient) -> list[dict[str, Any]]:
    return list(get_json(api, "/api/v1/nodes").get("items") or [])


def node_ready(api: client.ApiClient, name: str) -> bool:
    return is_ready(get_json(api, f"/api/v1/nodes/{name}"))


def node_ready_on(api: client.ApiClient, name: str, kubelet_version: str) -> bool:
    """Whether node ``name`` is Ready and its kubelet reports ``kubelet_version`` ("1.38.0"
    or "v1.38.0"): the kubelet of that version has taken the node over."""
    node = get_json(api, f"/api/v1/nodes/{name}")
    reported = str(node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", ""))
    return is_ready(node) and reported.removeprefix("v") == kubelet_version.removeprefix("v")


_FEATURE_ENABLED = re.compile(r'^kubernetes_feature_enabled\{name="([A-Za-z0-9]+)",'
                              r'stage="([A-Z]*)"\}\s+([01])\s*$', re.M)


def parse_feature_gates(metrics: str) -> dict[str, bool]:
    """Feature gate -> enabled, from a component's Prometheus text (its /metrics'
    ``kubernetes_feature_enabled``: the apiserver's, a kubelet's)."""
    return {m.group(1): m.group(3) == "1" for m in _FEATURE_ENABLED.finditer(metrics)}


def kubelet_metrics(api: client.ApiClient, node: str) -> str:
    """The Prometheus text of ``node``'s kubelet /metrics, through the API server's proxy."""
    return get(api, f"/api/v1/nodes/{node}/proxy/metrics", timeout=30).decode(errors="replace")


def kubelet_minor(node: Mapping[str, Any]) -> int | None:
    """The minor of a Node's kubelet (``status.nodeInfo.kubeletVersion``), None if unreadable.
    Lenient on purpose: a vendor's kubelet may say ``v1.34.4+k3s1``."""
    version = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))
    m = re.match(r"v?1\.(\d+)", version)
    return int(m.group(1)) if m else None


def internal_ip(node: Mapping[str, Any]) -> str:
    for addr in node.get("status", {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return str(addr["address"])
    raise FakegpuError(f"node {node.get('metadata', {}).get('name')!r} has no InternalIP yet")


def pods(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(api, f"/api/v1/namespaces/{namespace}/pods").get("items") or [])


def resource_slices(api: client.ApiClient, *, driver: str | None = None,
                    node: str | None = None, version: str | None = None
                    ) -> list[dict[str, Any]]:
    """ResourceSlices, optionally of one driver and one node (selected by the apiserver)."""
    selectors = [f"spec.driver={driver}" if driver else "",
                 f"spec.nodeName={node}" if node else ""]
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        GROUP, version or resource_version(api), "resourceslices",
        field_selector=",".join(s for s in selectors if s), _request_timeout=TIMEOUT_S)
    return [dict(i) for i in cast(dict[str, Any], listed).get("items") or []]


def complete_pools(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """Nodes whose ResourceSlice pool is whole: every slice of its newest generation is listed.

    This is how the scheduler itself decides a pool is usable (``spec.pool.resourceSliceCount``
    slices of one generation), so it holds for any driver and any shape of slice: whole GPUs,
    MIG devices only, counters in a slice of their own.
    """
    pools: dict[str, dict[int, list[int]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        node, pool = spec.get("nodeName"), spec.get("pool") or {}
        if not node:
            continue
        gens = pools.setdefault(node, {})
        gens.setdefault(int(pool.get("generation", 0)), []).append(
            int(pool.get("resourceSliceCount", 1)))
    done = set()
    for node, gens in pools.items():
        counts = gens[max(gens)]
        if len(counts) == counts[0] and len(set(counts)) == 1:
            done.add(node)
    return done


# --- writes --------------------------------------------------------------------------------------


def path_segment_problem(name: str) -> str:
    """Why ``name`` cannot be one segment of a request path, or "": the apiserver's rule for
    every object name (IsValidPathSegmentName); each kind's own rule is stricter."""
    if name in ("", ".", ".."):
        return "must not be empty, '.' or '..'"
    if "/" in name or "%" in name:
        return "must not contain '/' or '%'"
    return ""


def _checked(objects: Iterable[Mapping[str, Any]], namespace: str | None
             ) -> list[Mapping[str, Any]]:
    """The objects, once each one's name and namespace are safe in a request path: the client
    puts them into the URL unescaped (``../x`` would reach another resource)."""
    out = list(objects)
    for obj in out:
        meta = obj.get("metadata") or {}
        what = f"{obj.get('kind', 'object')} {printable(str(meta.get('name', '')))!r}"
        for field, value in (("metadata.name", meta.get("name")),
                             ("metadata.namespace", meta.get("namespace") or namespace)):
            if value is None and field == "metadata.namespace":
                continue
            if not isinstance(value, str) or (why := path_segment_problem(value)):
                raise InvalidInput(f"{what}: {field} {printable(str(value))!r} "
                                   f"{why or 'must be a string'}")
    return out


def apply(api: client.ApiClient, objects: Iterable[Mapping[str, Any]], *,
          namespace: str | None = None, field_manager: str = FIELD_MANAGER
          ) -> list[dict[str, Any]]:
    """Server-side apply each object (idempotent, like ``kubectl apply --server-side``)."""
    objects = _checked(objects, namespace)
    dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
    applied: list[dict[str, Any]] = []
    for obj in objects:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = (obj["metadata"].get("namespace") or namespace) if res.namespaced else None
        out = res.server_side_apply(body=dict(obj), name=obj["metadata"]["name"], namespace=ns,
                                    field_manager=field_manager, force_conflicts=True)
        applied.append(out.to_dict())
    return applied


def scale_deployment(api: client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    client.AppsV1Api(api).patch_namespaced_deployment_scale(
        name, namespace, {"spec": {"replicas": replicas}}, _request_timeout=TIMEOUT_S)


def pod_log(api: client.ApiClient, namespace: str, name: str) -> str:
    return str(client.CoreV1Api(api).read_namespaced_pod_log(name, namespace,
                                                               _request_timeout=TIMEOUT_S))


def service_account_token(api: client.ApiClient, namespace: str, name: str, *, node: str,
                          seconds: int) -> str:
    """A token of service account ``namespace/name`` bound to Node ``node`` (TokenRequest).

    The apiserver then puts the node in the user's extra ``authentication.kubernetes.io/
    node-name``, as for a pod's token, and revokes the token with the Node object.
    """
    body: Any = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": node}}}
    out = client.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, body, _request_timeout=TIMEOUT_S)
    if out.status is None:
        raise FakegpuError(f"TokenRequest for {namespace}/{name}: the apiserver sent no token")
    return str(out.status.token)
