"""PodGroups (KEP-4671, GenericWorkload; scheduling.k8s.io/v1beta1 from 1.37) for the suites:
a PodGroup's manifest, a pod put in one, and the PodGroups of a namespace through the API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit.dra import PodClaim
from fakegpu.testkit.minors import skip_without

GROUP, VERSION = "scheduling.k8s.io", "v1beta1"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


def skip_below_first_minor(cluster: ClusterInfo) -> None:
    """Skip, saying why, on a minor without PodGroups in this API version and their claims
    (GenericWorkload and DRAWorkloadResourceClaims are turned on together)."""
    skip_without(cluster, "DRAWorkloadResourceClaims",
                 f"PodGroups in {GROUP}/{VERSION} and the claims they share")


def pod_group(name: str, min_count: int, claims: Sequence[PodClaim] = ()) -> dict[str, Any]:
    """A PodGroup scheduled as a gang of at least ``min_count`` pods, making ``claims`` for
    its pods to share."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if claims:
        spec["resourceClaims"] = [c.manifest() for c in claims]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": spec}


def in_group(manifest: dict[str, Any], group: str) -> dict[str, Any]:
    """A pod manifest put in PodGroup ``group``."""
    manifest["spec"]["schedulingGroup"] = {"podGroupName": group}
    return manifest


class PodGroups:
    """PodGroups of one namespace through the custom objects API (the Python client has no
    typed scheduling.k8s.io/v1beta1)."""

    def __init__(self, k8s_client: Any, namespace: str) -> None:
        self.api = kclient.CustomObjectsApi(k8s_client)
        self.namespace = namespace

    def create(self, body: dict[str, Any]) -> None:
        self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "podgroups",
                                                 body)

    def get(self, name: str) -> dict[str, Any]:
        found: Any = self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                           "podgroups", name)
        return dict(found)

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "podgroups",
                                                 name)

    def condition(self, name: str, kind: str = INITIALLY_SCHEDULED) -> dict[str, Any] | None:
        for c in (self.get(name).get("status") or {}).get("conditions") or ():
            if c.get("type") == kind:
                return dict(c)
        return None
