"""Prepare and unprepare as a user sees them: pods with claims from templates and standalone
claims run where their claim was allocated, see its devices, and release them when deleted."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.kube import api as kubeapi
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    allocated_node,
    node_devices,
    pod_claim_name,
    wait_claims_released,
)
from fakegpu.testkit.wait import NotYet, wait_for

from . import kit, kubelet
from .target import Target

# Seconds to keep looking for unprepare failures after the claims are released.
UNPREPARE_SETTLE_S = 10.0


def _run_with(core: kclient.CoreV1Api, rapi: ResourceApi, target: Target, ns: str,
              pod_name: str, source: PodClaim) -> tuple[Any, dict[str, Any]]:
    k8s.create_pod(core, ns, kit.pod(target, pod_name, source))
    pod: Any = k8s.wait_pod_running(core, ns, pod_name)
    claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
    return pod, claim


def _check_prepared(core: kclient.CoreV1Api, rapi: ResourceApi, target: Target, ns: str,
                    pod: Any, claim: dict[str, Any]) -> list[dict[str, Any]]:
    assert allocated_node(claim) == pod.spec.node_name, (
        f"pod runs on {pod.spec.node_name}, its claim is allocated on {allocated_node(claim)}")
    devices = allocated_devices(rapi, target.driver, claim)
    slices_here = node_devices(rapi, target.driver).get(pod.spec.node_name, [])
    pools_here = {d["pool"] for d in slices_here}
    assert {d["pool"] for d in devices} <= pools_here, (
        f"devices {[d['name'] for d in devices]} are not in a pool of node {pod.spec.node_name}")
    reserved = [r.get("name") for r in claim["status"].get("reservedFor") or ()]
    assert pod.metadata.name in reserved, f"claim reserved for {reserved}"
    kit.assert_sees(core, target, ns, pod.metadata.name, devices)
    return devices


def test_template_claim_prepared(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                                 ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    pod, claim = _run_with(core, rapi, target, ns, "p", PodClaim("dev", template="one"))
    assert len(_check_prepared(core, rapi, target, ns, pod, claim)) == 1


def test_standalone_claim_prepared(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                                   ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaims", rapi.claim_manifest("mine", [req]), ns)
    pod, claim = _run_with(core, rapi, target, ns, "p", PodClaim("dev", claim="mine"))
    assert len(_check_prepared(core, rapi, target, ns, pod, claim)) == 1


# serial: it frees two devices and claims exactly those again: a parallel test could take them
# in between.
@pytest.mark.serial
def test_deallocated_after_use(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                               ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    rapi.create("resourceclaims", rapi.claim_manifest("mine", [req]), ns)
    held: dict[str, tuple[str, str, dict[str, Any]]] = {}  # pod -> (claim, node, device)
    for pod_name, source in (("from-template", PodClaim("dev", template="one")),
                             ("from-claim", PodClaim("dev", claim="mine"))):
        pod, claim = _run_with(core, rapi, target, ns, pod_name, source)
        (device,) = _check_prepared(core, rapi, target, ns, pod, claim)
        held[pod_name] = (claim["metadata"]["name"], pod.spec.node_name, device)

    for pod_name in held:
        core.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)
    for pod_name in held:
        k8s.wait_pod_gone(core, ns, pod_name)
    generated = held["from-template"][0]

    wait_claims_released(rapi, ns, gone=[generated], unreserved=["mine"])

    # Each freed device serves a new pod on its node (a driver that never unprepared would
    # still hold it in a way the new pod shows: it would not start, or see something else).
    for pod_name, (_, node, device) in held.items():
        again = f"again-{pod_name}"
        pinned = rapi.device_request("dev", target.device_class,
                                     cel=[kit.selector_for(rapi, target, device)])
        rapi.create("resourceclaimtemplates", rapi.claim_template(again, [pinned]), ns)
        k8s.create_pod(core, ns, kit.pod(target, again, PodClaim("dev", template=again)))
        again_pod: Any = k8s.wait_pod_running(core, ns, again)
        assert again_pod.spec.node_name == node
        claim = rapi.claim(ns, pod_claim_name(again_pod, "dev"))
        got = _check_prepared(core, rapi, target, ns, again_pod, claim)
        assert [(d["pool"], d["name"]) for d in got] == [(device["pool"], device["name"])]


def _unprepare_errors(kube: Any, driver: str, nodes: list[str]) -> dict[str, dict[str, float]]:
    found = {}
    minors = {n["metadata"]["name"]: kubeapi.kubelet_minor(n) for n in kubeapi.nodes(kube)}
    for node in nodes:
        try:
            found[node] = kubelet.unprepare_errors(driver, kubeapi.kubelet_metrics(kube, node),
                                                   minors.get(node))
        except kubeapi.ERRORS as err:
            first = (str(err).splitlines() or [type(err).__name__])[0]
            raise AssertionError(f"node {node}: its kubelet's /metrics cannot be read through "
                                 f"the API server's node proxy (needs get on nodes/proxy): "
                                 f"{first}") from None
    return found


def test_unprepared_without_failures(target: Target, core: kclient.CoreV1Api,
                                     rapi: ResourceApi, kube: Any, ns: str) -> None:
    nodes = sorted(node_devices(rapi, target.driver))
    before = _unprepare_errors(kube, target.driver, nodes)
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    rapi.create("resourceclaims", rapi.claim_manifest("mine", [req]), ns)
    generated = ""
    for pod_name, source in (("from-template", PodClaim("dev", template="one")),
                             ("from-claim", PodClaim("dev", claim="mine"))):
        _, claim = _run_with(core, rapi, target, ns, pod_name, source)
        generated = generated or claim["metadata"]["name"]
    for pod_name in ("from-template", "from-claim"):
        core.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)
    for pod_name in ("from-template", "from-claim"):
        k8s.wait_pod_gone(core, ns, pod_name)

    wait_claims_released(rapi, ns, gone=[generated], unreserved=["mine"])
    # A short watch after the release catches an event that lags the pod's removal.
    deadline = time.monotonic() + UNPREPARE_SETTLE_S
    while True:
        listed: Any = core.list_namespaced_event(ns).items
        failed = kubelet.failed_unprepares(listed)
        assert not failed, (f"deleting the pods left {kubelet.FAILED_UNPREPARE} events: "
                            + "; ".join(failed))
        if time.monotonic() >= deadline:
            break
        time.sleep(2)
    after = _unprepare_errors(kube, target.driver, nodes)
    more = [line for node in nodes for line in kubelet.grown(node, before[node], after[node])]
    assert not more, "the kubelets counted failed unprepares while the pods went: " + "; ".join(
        more)


def test_claim_status_devices(target: Target, core: kclient.CoreV1Api, rapi: ResourceApi,
                              ns: str) -> None:
    req = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("one", [req]), ns)
    _, claim = _run_with(core, rapi, target, ns, "p", PodClaim("dev", template="one"))
    name = claim["metadata"]["name"]

    def recorded() -> list[dict[str, Any]]:
        status = rapi.claim(ns, name).get("status") or {}
        devices = [d for d in status.get("devices") or () if d.get("driver") == target.driver]
        if not devices:
            raise NotYet(f"claim {name} has no status.devices of {target.driver}")
        return devices

    devices = wait_for(recorded, what=f"status.devices on claim {name}", timeout=60)
    results = {(d["pool"], d["name"]) for d in allocated_devices(rapi, target.driver, claim)}
    assert {(d["pool"], d["device"]) for d in devices} == results


def test_unsatisfiable_claim_stays_pending(target: Target, core: kclient.CoreV1Api,
                                           rapi: ResourceApi, ns: str) -> None:
    most = max(len(devs) for devs in node_devices(rapi, target.driver).values())
    req = rapi.device_request("dev", target.device_class, count=most + 1)
    rapi.create("resourceclaimtemplates", rapi.claim_template("too-many", [req]), ns)
    k8s.create_pod(core, ns, kit.pod(target, "greedy", PodClaim("dev", template="too-many")))

    pod: Any = k8s.wait_unschedulable(core, ns, "greedy",
                                      what=f"the scheduler to refuse {most + 1} devices")
    cond = k8s.pod_condition(pod, "PodScheduled")
    assert cond is not None and cond.reason == "Unschedulable", cond
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
