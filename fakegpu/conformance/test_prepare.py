"""Prepare and unprepare as a user sees them: pods with claims from templates and standalone
claims run where their claim was allocated, see its devices, and release them when deleted."""

from __future__ import annotations

from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi, allocated_node, pod_claim_name
from fakegpu.testkit.wait import NotYet, wait_for

from . import kit
from .target import Target


def _run_with(core: kclient.CoreV1Api, rapi: ResourceApi, target: Target, ns: str,
              pod_name: str, source: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    kit.create_pod(core, ns, kit.pod(pod_name, target.image, {"dev": source}))
    pod: Any = k8s.wait_pod_running(core, ns, pod_name)
    claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
    return pod, claim


def _check_prepared(core: kclient.CoreV1Api, rapi: ResourceApi, target: Target, ns: str,
                    pod: Any, claim: dict[str, Any]) -> list[dict[str, Any]]:
    assert allocated_node(claim) == pod.spec.node_name, (
        f"pod runs on {pod.spec.node_name}, its claim is allocated on {allocated_node(claim)}")
    devices = kit.allocated(rapi, target, claim)
    slices_here = kit.node_devices(rapi, target).get(pod.spec.node_name, [])
    pools_here = {d["pool"] for d in slices_here}
    assert {d["pool"] for d in devices} <= pools_here, (
        f"devices {[d['name'] for d in devices]} are not in a pool of node {pod.spec.node_name}")
    reserved = [r.get("name") for r in claim["status"].get("reservedFor") or ()]
    assert pod.metadata.name in reserved, f"claim reserved for {reserved}"
    kit.assert_sees(core, target, ns, pod.metadata.name, devices)
    return devices


def test_template_claim_prepared(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                                 ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    pod, claim = _run_with(core, rapi, target, ns, "p", {"resourceClaimTemplateName": "one"})
    assert len(_check_prepared(core, rapi, target, ns, pod, claim)) == 1


def test_standalone_claim_prepared(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                                   ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("mine", [req]), ns)
    pod, claim = _run_with(core, rapi, target, ns, "p", {"resourceClaimName": "mine"})
    assert len(_check_prepared(core, rapi, target, ns, pod, claim)) == 1


def test_deallocated_after_use(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                               ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    rapi.create("resourceclaims", rapi.claim_manifest("mine", [req]), ns)
    held: dict[str, tuple[str, str, dict[str, Any]]] = {}  # pod -> (claim, node, device)
    for pod_name, source in (("from-template", {"resourceClaimTemplateName": "one"}),
                             ("from-claim", {"resourceClaimName": "mine"})):
        pod, claim = _run_with(core, rapi, target, ns, pod_name, source)
        (device,) = _check_prepared(core, rapi, target, ns, pod, claim)
        held[pod_name] = (claim["metadata"]["name"], pod.spec.node_name, device)

    for pod_name in held:
        core.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)
    for pod_name in held:
        k8s.wait_pod_gone(core, ns, pod_name)
    generated = held["from-template"][0]

    def released() -> None:
        claims = {c["metadata"]["name"]: c for c in rapi.items("resourceclaims", ns)}
        if generated in claims:
            raise NotYet(f"generated claim {generated} still exists")
        status = claims["mine"].get("status") or {}
        if status.get("reservedFor") or status.get("allocation"):
            raise NotYet(f"claim mine still reserved or allocated: {status}")

    wait_for(released, what="the deleted pods' claims to be released", timeout=120)

    # Each freed device serves a new pod on its node (a driver that never unprepared would
    # still hold it in a way the new pod shows: it would not start, or see something else).
    for pod_name, (_, node, device) in held.items():
        again = f"again-{pod_name}"
        pinned = kit.request(rapi, "dev", target.device_class,
                             cel=[kit.selector_for(rapi, target, device)])
        rapi.create("resourceclaimtemplates", rapi.claim_template(again, [pinned]), ns)
        kit.create_pod(core, ns, kit.pod(again, target.image,
                                         {"dev": {"resourceClaimTemplateName": again}}))
        again_pod: Any = k8s.wait_pod_running(core, ns, again)
        assert again_pod.spec.node_name == node
        claim = rapi.claim(ns, pod_claim_name(again_pod, "dev"))
        got = _check_prepared(core, rapi, target, ns, again_pod, claim)
        assert [(d["pool"], d["name"]) for d in got] == [(device["pool"], device["name"])]


def test_claim_status_devices(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                              ns: str) -> None:
    req = kit.request(rapi, "dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    _, claim = _run_with(core, rapi, target, ns, "p", {"resourceClaimTemplateName": "one"})
    name = claim["metadata"]["name"]

    def recorded() -> list[dict[str, Any]]:
        status = rapi.claim(ns, name).get("status") or {}
        devices = [d for d in status.get("devices") or () if d.get("driver") == target.driver]
        if not devices:
            raise NotYet(f"claim {name} has no status.devices of {target.driver}")
        return devices

    devices = wait_for(recorded, what=f"status.devices on claim {name}", timeout=60)
    results = {(d["pool"], d["name"]) for d in kit.allocated(rapi, target, claim)}
    assert {(d["pool"], d["device"]) for d in devices} == results


def test_unsatisfiable_claim_stays_pending(target: Target, core: kclient.CoreV1Api,
                                           rapi: ResourceApi, ns: str) -> None:
    most = max(len(devs) for devs in kit.node_devices(rapi, target).values())
    req = kit.request(rapi, "dev", target.device_class, count=most + 1)
    rapi.create("resourceclaimtemplates", rapi.claim_template("too-many", [req]), ns)
    kit.create_pod(core, ns, kit.pod("greedy", target.image,
                                     {"dev": {"resourceClaimTemplateName": "too-many"}}))

    pod: Any = k8s.wait_unschedulable(core, ns, "greedy",
                                      what=f"the scheduler to refuse {most + 1} devices")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
