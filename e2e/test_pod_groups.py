"""Claims a PodGroup's pods share (KEP-5729, DRAWorkloadResourceClaims, with GenericWorkload's
PodGroups; beta and off by default in 1.37-1.38, on in fakegpu's clusters): the claim a
PodGroup makes from a template is one ResourceClaim for all its pods, owned by the PodGroup,
reserved for it (not for each pod) and named in its status; every pod sees the same GPU; the
claim outlives the pods and goes with the PodGroup.

Observes the API (PodGroups, claims, pods) and what the pods see, never fakegpu's files.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    attribute_value,
    cel_string,
    pod_claim_name,
    pod_manifest,
)
from fakegpu.testkit.gpus import visible_gpus
from fakegpu.testkit.podgroups import PodGroups, in_group, pod_group, skip_below_first_minor
from fakegpu.testkit.wait import until_true, wait_for

pytestmark = [pytest.mark.e2e]


@pytest.fixture(autouse=True)
def _needs_pod_groups(fakegpu_cluster: ClusterInfo) -> None:
    skip_below_first_minor(fakegpu_cluster)


def test_a_pod_groups_claim_is_one_claim_its_pods_share(
    fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
    k8s_client: Any, namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    groups = PodGroups(k8s_client, namespace)
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "shared", [resource_api.device_request("gpu", driver, cel=[
            f"device.attributes[{cel_string(driver)}].type == 'gpu'"])]),
        namespace)
    claim = PodClaim("gpu", template="shared")
    groups.create(pod_group("pair", 2, [claim]))
    for name in ("first", "second"):
        k8s.create_pod(core_v1, namespace, in_group(pod_manifest(
            name, fakegpu_cluster.workload_image, k8s.PRINT_ENV_AND_WAIT, [claim]), "pair"))
    pods = [k8s.wait_pod_running(core_v1, namespace, name) for name in ("first", "second")]
    names = {pod_claim_name(p, "gpu") for p in pods}
    assert len(names) == 1, names
    claim_name = names.pop()
    shared = resource_api.claim(namespace, claim_name)
    owners = [(o["kind"], o["name"]) for o in shared["metadata"].get("ownerReferences") or ()]
    assert owners == [("PodGroup", "pair")], owners
    reserved = [(r.get("resource"), r.get("name")) for r in shared["status"]["reservedFor"]]
    assert reserved == [("podgroups", "pair")], reserved
    status = groups.get("pair").get("status") or {}
    assert status.get("resourceClaimStatuses") == [
        {"name": "gpu", "resourceClaimName": claim_name}], status
    # Both pods see the one GPU the claim got.
    [gpu] = allocated_devices(resource_api, driver, shared)
    for pod in ("first", "second"):
        assert visible_gpus(k8s.logged_env(core_v1, namespace, pod)) == \
            [str(attribute_value(gpu, "uuid"))]
    scheduled = groups.condition("pair")
    assert scheduled is not None and scheduled["status"] == "True", scheduled
    # The claim lives as long as its PodGroup, not as its pods.
    for pod in ("first", "second"):
        core_v1.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    for pod in ("first", "second"):
        k8s.wait_pod_gone(core_v1, namespace, pod)
    assert resource_api.claim(namespace, claim_name)["metadata"]["name"] == claim_name
    groups.delete("pair")
    wait_for(until_true(lambda: claim_name not in {
        c["metadata"]["name"] for c in resource_api.items("resourceclaims", namespace)}),
        timeout=120, what=f"claim {claim_name} to go with its PodGroup")
