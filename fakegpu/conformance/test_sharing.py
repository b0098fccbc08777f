"""One claim, several consumers: containers of one pod, and pods."""

from __future__ import annotations

from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi, allocated_node

from . import kit
from .target import Target


def test_claim_shared_by_containers(target: Target, core: kclient.CoreV1Api,
                                    rapi: ResourceApi, ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("shared", [req]), ns)
    kit.create_pod(core, ns, kit.pod("p", target.image, {"dev": {"resourceClaimName": "shared"}},
                                     containers=2))
    pod: Any = k8s.wait_pod_running(core, ns, "p")
    claim = rapi.claim(ns, "shared")
    assert allocated_node(claim) == pod.spec.node_name
    devices = kit.allocated(rapi, target, claim)
    for container in ("c0", "c1"):
        kit.assert_sees(core, target, ns, "p", devices, container)


def test_claim_shared_by_pods(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                              ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("shared", [req]), ns)
    for name in ("first", "second"):
        kit.create_pod(core, ns, kit.pod(name, target.image,
                                         {"dev": {"resourceClaimName": "shared"}}))
    pods: list[Any] = [k8s.wait_pod_running(core, ns, n) for n in ("first", "second")]
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 1, f"pods sharing one claim run on different nodes: {nodes}"
    claim = rapi.claim(ns, "shared")
    assert allocated_node(claim) == next(iter(nodes))
    devices = kit.allocated(rapi, target, claim)
    for name in ("first", "second"):
        kit.assert_sees(core, target, ns, name, devices)
    reserved = {r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or ()}
    assert reserved == {"first", "second"}
