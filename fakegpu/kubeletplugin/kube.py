"""The apiserver, through the official kubernetes client: version negotiation, claims, slices.

Everything here may fail with ``fakegpu.kube.errors.KubeError`` (apiserver unreachable,
forbidden, conflict: the one vocabulary); callers decide whether to retry (slices) or report
it on the claim (prepare). A class, not module functions as elsewhere in ``fakegpu.kube``: the
plugin negotiates the resource.k8s.io version and reads the server's minor once, then every
call of its threads shares them and one connection pool.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube.errors import KubeError, call
from fakegpu.kube.resource import GROUP, NoResourceApi, newest_served

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0


class Kube:
    """A thread-safe handle on resource.k8s.io at the newest version both sides speak."""

    def __init__(self, kubeconfig: Path | None) -> None:
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._api: client.ApiClient | None = None
        self._version: str | None = None
        self._minor: int | None = None

    def _client(self) -> client.ApiClient:
        with self._lock:
            if self._api is None:
                try:
                    # None: a DaemonSet pod's service account, else $KUBECONFIG / ~/.kube.
                    self._api = kubeapi.connect(self._kubeconfig)
                except Exception as err:  # no credentials: a missing file, a bad config
                    first = (str(err).splitlines() or [type(err).__name__])[0]
                    raise KubeError(f"cannot load Kubernetes credentials: {first}") from err
            return self._api

    def version(self) -> str:
        """The newest resource.k8s.io version served (v1 > v1beta2 > v1beta1); cached once known."""
        if self._version is not None:
            return self._version
        served = call("cannot list API groups",
                      lambda: kubeapi.served_versions(self._client(), GROUP))
        try:
            version = newest_served(served)  # the rule cluster and test kit use too
        except NoResourceApi as err:
            raise KubeError(str(err)) from None
        log.info("using %s/%s (served: %s)", GROUP, version, ",".join(sorted(served)))
        self._version = version
        return version

    def server_minor(self) -> int:
        """The apiserver's minor version (37 for v1.37.2); cached once known. What a minor
        accepts (the taint effect None from 1.35) follows from it."""
        if self._minor is not None:
            return self._minor
        info = call("cannot read the apiserver's version",
                    lambda: client.VersionApi(self._client()).get_code(_request_timeout=TIMEOUT_S))
        digits = re.match(r"\d+", str(info.minor or ""))
        if digits is None:
            raise KubeError(f"the apiserver reports no minor version ({info.git_version})")
        self._minor = int(digits.group())
        return self._minor

    def node_uid(self, name: str) -> str:
        """The UID of Node ``name`` (the owner of its slices); needs ``get`` on nodes."""
        node = call(f"cannot read Node {name}", lambda: client.CoreV1Api(self._client()).read_node(
            name, _request_timeout=TIMEOUT_S))
        uid = node.metadata.uid if node.metadata is not None else None
        if not uid:
            raise KubeError(f"Node {name} has no UID")
        return str(uid)

    def _objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._client())

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        version = self.version()
        obj = call(f"cannot read ResourceClaim {namespace}/{name}",
                   lambda: self._objects().get_namespaced_custom_object(
                       GROUP, version, namespace, "resourceclaims", name,
                       _request_timeout=TIMEOUT_S))
        return cast(dict[str, Any], obj)

    def replace_claim_status(self, claim: dict[str, Any]) -> None:
        """Write ``claim``'s ``status.devices`` (the part of the status a driver owns), if the
        claim is still at the resourceVersion it was read at (else HTTP 409).

        A merge patch of that list, not a replace of the status: a replace sends
        ``status.allocation`` back too, and its opaque config parameters come back from JSON
        re-serialized (other spacing); the apiserver compares them byte for byte with the
        stored ones and refuses the "change" to an immutable field (HTTP 422), so no claim
        with a config (time-slicing, MPS, ...) could get device status.

        The patch is applied to the server's own re-encoding of the claim, which is compact
        JSON; a claim whose config was created with other spacing (the Python client's
        ``json.dumps`` puts spaces after separators, kubectl does not) fails that comparison
        the other way round. For those the apiserver answers 422 naming status.allocation,
        and the replace of the status as read, which sends the config back in the Python
        client's own spacing, is what keeps the bytes equal."""
        meta = claim["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"devices": (claim.get("status") or {}).get("devices") or []}}
        objects = self._objects()
        args = (GROUP, self.version(), meta["namespace"], "resourceclaims", meta["name"])
        what = f"cannot update status of ResourceClaim {meta['name']}"
        try:
            call(what, lambda: objects.patch_namespaced_custom_object_status(
                *args, body, _content_type="application/merge-patch+json",
                _request_timeout=TIMEOUT_S))
        except errors.Invalid as err:
            # The message carries the apiserver's Status message, which names the field.
            if err.status != 422 or "status.allocation" not in str(err):
                raise
            call(what, lambda: objects.replace_namespaced_custom_object_status(
                *args, claim, _request_timeout=TIMEOUT_S))

    def list_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim of the cluster (attach.py looks for its node's allocations)."""
        version = self.version()
        listed = call("cannot list ResourceClaims",
                      lambda: self._objects().list_cluster_custom_object(
                          GROUP, version, "resourceclaims", _request_timeout=TIMEOUT_S))
        return [dict(i) for i in cast(dict[str, Any], listed).get("items") or []]

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        version = self.version()
        listed = call("cannot list ResourceSlices",
                      lambda: self._objects().list_cluster_custom_object(
                          GROUP, version, "resourceslices",
                          field_selector=f"spec.driver={driver},spec.nodeName={node}",
                          _request_timeout=TIMEOUT_S))
        return [dict(i) for i in cast(dict[str, Any], listed).get("items") or []]

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create; returns the object as stored (fields the apiserver dropped are missing)."""
        version = self.version()
        made = call(f"cannot create ResourceSlice {body['metadata']['name']}",
                    lambda: self._objects().create_cluster_custom_object(
                        GROUP, version, "resourceslices", body, _request_timeout=TIMEOUT_S))
        return cast(dict[str, Any], made)

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        """Replace; returns the object as stored."""
        version = self.version()
        stored = call(f"cannot replace ResourceSlice {body['metadata']['name']}",
                      lambda: self._objects().replace_cluster_custom_object(
                          GROUP, version, "resourceslices", body["metadata"]["name"], body,
                          _request_timeout=TIMEOUT_S))
        return cast(dict[str, Any], stored)

    def delete_slice(self, name: str) -> None:
        version = self.version()
        try:
            call(f"cannot delete ResourceSlice {name}",
                 lambda: self._objects().delete_cluster_custom_object(
                     GROUP, version, "resourceslices", name, _request_timeout=TIMEOUT_S))
        except errors.NotFound:
            return
