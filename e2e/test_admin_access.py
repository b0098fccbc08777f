"""Admin access (DRAAdminAccess): a claim with ``adminAccess: true`` is refused by the
apiserver in a namespace without the admin-access label and accepted with it; it gets a device
another pod already uses (admin access does not make a device unavailable), and the container
is told so (``DRA_ADMIN_ACCESS=true``) beside the same GPU the other pod sees.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.kube import errors
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    cel_match,
    pod_claim_name,
    pod_manifest,
    run_gpu_pod,
)

pytestmark = pytest.mark.e2e

# The namespace label the apiserver requires for admin access (1.34 on; 1.33 used
# resource.k8s.io/admin-access). The test checks it against the apiserver: without it the
# claim is refused, with it accepted.
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
SLEEP = ["sleep", "3600"]


def test_admin_access_needs_the_namespace_label_and_shares_a_device_in_use(
    fakegpu_cluster: ClusterInfo,
    core_v1: kclient.CoreV1Api,
    resource_api: ResourceApi,
    namespace: str,
) -> None:
    driver = fakegpu_cluster.driver_name
    image = fakegpu_cluster.workload_image
    # A pod using a GPU the ordinary way.
    user: Any = run_gpu_pod(core_v1, resource_api, namespace, "user", image, driver)
    [used] = allocation_results(resource_api.claim(namespace, pod_claim_name(user, "gpu")),
                                driver)
    seen = k8s.exec_env(core_v1, namespace, "user")["NVIDIA_VISIBLE_DEVICES"]

    # An admin claim for exactly that GPU.
    admin = resource_api.claim_manifest("admin", [resource_api.device_request(
        "gpu", driver, cel=[cel_match(driver, "uuid", seen)], admin_access=True)])
    with pytest.raises((errors.Forbidden, errors.Invalid)) as refused:
        resource_api.create("resourceclaims", admin, namespace)
    # The apiserver's own reason (its Status message) names the label that is missing.
    assert ADMIN_LABEL in str(refused.value), refused.value

    core_v1.patch_namespace(namespace, {"metadata": {"labels": {ADMIN_LABEL: "true"}}})
    created = resource_api.create("resourceclaims", admin, namespace)
    requests = created["spec"]["devices"]["requests"]
    asked = requests[0].get("exactly", requests[0])
    if not asked.get("adminAccess"):
        pytest.skip("the apiserver dropped adminAccess from the claim (DRAAdminAccess off)")

    k8s.create_pod(core_v1, namespace, pod_manifest(
        "admin", image, SLEEP, [PodClaim("gpu", claim="admin")]))
    pod: Any = k8s.wait_pod_running(core_v1, namespace, "admin")
    assert pod.spec.node_name == user.spec.node_name
    [got] = allocation_results(resource_api.claim(namespace, "admin"), driver)
    assert (got["pool"], got["device"]) == (used["pool"], used["device"])
    assert got.get("adminAccess") is True, got
    env = k8s.exec_env(core_v1, namespace, "admin")
    assert env.get("DRA_ADMIN_ACCESS") == "true", env
    assert env["NVIDIA_VISIBLE_DEVICES"] == seen
    # The ordinary pod keeps its GPU, unaware of the admin.
    assert "DRA_ADMIN_ACCESS" not in k8s.exec_env(core_v1, namespace, "user")
