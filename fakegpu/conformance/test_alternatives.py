"""Prioritized alternatives (firstAvailable) and admin access."""

from __future__ import annotations

from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    allocation_results,
    node_devices,
    pod_claim_name,
)

from . import kit
from .target import Target

# The namespace label that allows adminAccess claims (1.34+; 1.33 used resource.k8s.io/...).
ADMIN_LABELS = {"resource.kubernetes.io/admin-access": "true",
                "resource.k8s.io/admin-access": "true"}


def test_prioritized_alternative_allocated(target: Target, core: kclient.CoreV1Api,
                                           rapi: ResourceApi, ns: str) -> None:
    most = max(len(devs) for devs in node_devices(rapi, target.driver).values())
    request = {"name": "dev", "firstAvailable": [
        {"name": "impossible", "deviceClassName": target.device_class,
         "allocationMode": "ExactCount", "count": most + 1},
        {"name": "one", "deviceClassName": target.device_class,
         "allocationMode": "ExactCount", "count": 1},
    ]}
    rapi.create("resourceclaimtemplates", rapi.claim_template("alt", [request]), ns)
    k8s.create_pod(core, ns, kit.pod(target, "p", PodClaim("dev", template="alt")))
    pod: Any = k8s.wait_pod_running(core, ns, "p")
    claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
    results = allocation_results(claim, target.driver)
    assert [r["request"] for r in results] == ["dev/one"], results
    kit.assert_sees(core, target, ns, "p", allocated_devices(rapi, target.driver, claim))


def test_admin_access_shares_an_allocated_device(target: Target, core: kclient.CoreV1Api,
                                                 rapi: ResourceApi, ns: str) -> None:
    # The holder first, in an ordinary namespace (this one, labelled only afterwards would
    # do too; a second namespace keeps the two roles apart).
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("held", [req]), ns)
    k8s.create_pod(core, ns, kit.pod(target, "holder", PodClaim("dev", claim="held")))
    holder: Any = k8s.wait_pod_running(core, ns, "holder")
    (device,) = allocated_devices(rapi, target.driver, rapi.claim(ns, "held"))

    admin_ns = k8s.create_namespace(core, prefix="conf-admin",
                                    labels={"fakegpu.dev/test": "conformance", **ADMIN_LABELS})
    try:
        admin = rapi.device_request("dev", target.device_class, admin_access=True,
                                    cel=[kit.selector_for(rapi, target, device)])
        rapi.create("resourceclaims", rapi.claim_manifest("monitor", [admin]), admin_ns)
        k8s.create_pod(core, admin_ns, kit.pod(target, "monitor", PodClaim("dev", claim="monitor")))
        pod: Any = k8s.wait_pod_running(core, admin_ns, "monitor")
        assert pod.spec.node_name == holder.spec.node_name
        claim = rapi.claim(admin_ns, "monitor")
        results = allocation_results(claim, target.driver)
        assert [(r["pool"], r["device"], r.get("adminAccess")) for r in results] == [
            (device["pool"], device["name"], True)], results
        kit.assert_sees(core, target, admin_ns, "monitor", [device])
    finally:
        k8s.delete_namespace(core, admin_ns)
