"""One claim, several consumers: containers of one pod, and pods."""

from __future__ import annotations

from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import PodClaim, ResourceApi, allocated_devices, allocated_node

from . import kit
from .target import Target


def test_claim_shared_by_containers(target: Target, core: kclient.CoreV1Api,
                                    rapi: ResourceApi, ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("shared", [req]), ns)
    k8s.create_pod(core, ns, kit.pod(target, "p", PodClaim("dev", claim="shared"),
                                     containers=("c0", "c1")))
    pod: Any = k8s.wait_pod_running(core, ns, "p")
    claim = rapi.claim(ns, "shared")
    assert allocated_node(claim) == pod.spec.node_name
    devices = allocated_devices(rapi, target.driver, claim)
    for container in ("c0", "c1"):
        kit.assert_sees(core, target, ns, "p", devices, container)


def test_claim_shared_by_pods(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                              ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("shared", [req]), ns)
    for name in ("first", "second"):
        k8s.create_pod(core, ns, kit.pod(target, name, PodClaim("dev", claim="shared")))
    pods: list[Any] = [k8s.wait_pod_running(core, ns, n) for n in ("first", "second")]
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 1, f"pods sharing one claim run on different nodes: {nodes}"
    claim = rapi.claim(ns, "shared")
    assert allocated_node(claim) == next(iter(nodes))
    devices = allocated_devices(rapi, target.driver, claim)
    for name in ("first", "second"):
        kit.assert_sees(core, target, ns, name, devices)
    reserved = {r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or ()}
    assert reserved == {"first", "second"}
