"""Device metadata files in containers (KEP-5304, issue 24): a container reads, at the
well-known path, the devices its claim's request got with the attributes their ResourceSlice
publishes (fakegpu/plugin/devmetadata.py). No feature gate: the driver writes them, on every
minor. Observed from inside the pod and compared with the claim and the slices.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    pod_claim_name,
    pod_manifest,
    published_device,
    run_gpu_pod,
)

pytestmark = pytest.mark.e2e

ROOT = "/var/run/kubernetes.io/dra-device-attributes"


def _read(core_v1: kclient.CoreV1Api, namespace: str, pod: str, path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(k8s.exec_in_pod(core_v1, namespace, pod,
                                                     ["cat", path]).stdout)
    return doc


def _check(doc: dict[str, Any], claim: dict[str, Any], request: str,
           resource_api: ResourceApi, driver: str) -> None:
    assert (doc["apiVersion"], doc["kind"]) == ("metadata.resource.k8s.io/v1beta1",
                                                "DeviceMetadata")
    meta = claim["metadata"]
    assert {k: doc["metadata"][k] for k in ("name", "namespace", "uid")} == {
        "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}
    [got] = doc["requests"]
    assert got["name"] == request
    results = allocation_results(claim, driver)
    assert sorted((d["driver"], d["pool"], d["name"]) for d in got["devices"]) == sorted(
        (r["driver"], r["pool"], r["device"]) for r in results)
    for device in got["devices"]:
        published = published_device(resource_api, driver, device["pool"], device["name"])
        assert device["attributes"] == published["attributes"], device["name"]


def test_a_template_claims_file_names_the_pods_claim_and_lists_its_devices(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    driver = fakegpu_cluster.driver_name
    pod: Any = run_gpu_pod(core_v1, resource_api, namespace, "p", fakegpu_cluster.workload_image,
                           driver, count=2, template="gpus", claim="gpus")
    claim = resource_api.claim(namespace, pod_claim_name(pod, "gpus"))
    # A generated claim's name is not the pod's to know: the file is under its pod claim name.
    doc = _read(core_v1, namespace, "p",
                f"{ROOT}/resourceclaimtemplates/gpus/gpus/{driver}-metadata.json")
    assert doc["podClaimName"] == "gpus"
    _check(doc, claim, "gpus", resource_api, driver)


def test_a_named_claims_file_is_under_the_claims_name(
        fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api, resource_api: ResourceApi,
        namespace: str) -> None:
    driver = fakegpu_cluster.driver_name
    request = resource_api.device_request("gpu", driver)
    resource_api.create("resourceclaims", resource_api.claim_manifest("mine", [request]),
                        namespace)
    k8s.create_pod(core_v1, namespace, pod_manifest(
        "p", fakegpu_cluster.workload_image, ["sleep", "3600"], [PodClaim("c", claim="mine")]))
    k8s.wait_pod_running(core_v1, namespace, "p")
    doc = _read(core_v1, namespace, "p", f"{ROOT}/resourceclaims/mine/gpu/{driver}-metadata.json")
    assert "podClaimName" not in doc
    _check(doc, resource_api.claim(namespace, "mine"), "gpu", resource_api, driver)
    listed = k8s.exec_in_pod(core_v1, namespace, "p", ["ls", "-R", ROOT]).stdout
    assert "resourceclaimtemplates" not in listed  # only this pod's claim is there
