"""Device taints from the cluster's side: a DeviceTaintRule keeps new claims off a device,
and a claim that tolerates the taint gets it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.kube import api as kubeapi
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    pod_claim_name,
    wait_claims_released,
)

from . import kit
from .target import Target

TAINT = {"key": "conformance.fakegpu.dev/probe", "value": "taint-rule", "effect": "NoSchedule"}


# serial: it pins a claim to one device, which a parallel test could hold when the rule goes.
@pytest.mark.serial
def test_device_taint_rule_keeps_new_claims_off(target: Target, kube: Any,
                                                core: kclient.CoreV1Api, rapi: ResourceApi,
                                                ns: str) -> None:
    if target.facts.gate("DRADeviceTaints") is False:
        pytest.skip(f"not applicable: feature gate DRADeviceTaints is off on "
                    f"{target.facts.version}")
    version = kubeapi.version_serving(kube, "devicetaintrules")
    if version is None:
        pytest.skip(f"not applicable: {target.facts.version} serves no DeviceTaintRule")
    # A device the device class selects: the one a probe claim of the class is allocated (not
    # any device of the driver: NVIDIA's also publishes MIG devices its gpu class never takes).
    any_one = rapi.device_request("dev", target.device_class)
    rapi.create("resourceclaimtemplates", rapi.claim_template("probe", [any_one]), ns)
    k8s.create_pod(core, ns, kit.pod(target, "probe", PodClaim("dev", template="probe")))
    probe: Any = k8s.wait_pod_running(core, ns, "probe")
    generated = pod_claim_name(probe, "dev")
    (device,) = allocated_devices(rapi, target.driver, rapi.claim(ns, generated))
    node = probe.spec.node_name
    core.delete_namespaced_pod("probe", ns, grace_period_seconds=0)
    k8s.wait_pod_gone(core, ns, "probe")

    wait_claims_released(rapi, ns, gone=[generated])
    rules = ResourceApi(kube, version)
    name = f"conf-{uuid.uuid4().hex[:8]}"
    rules.create("devicetaintrules", {"kind": "DeviceTaintRule", "metadata": {"name": name},
                                      "spec": {"deviceSelector": {
                                          "driver": target.driver, "pool": device["pool"],
                                          "device": device["name"]}, "taint": TAINT}})
    try:
        pinned = [kit.selector_for(rapi, target, device)]
        plain = rapi.device_request("dev", target.device_class, cel=pinned)
        rapi.create("resourceclaimtemplates", rapi.claim_template("plain", [plain]), ns)
        k8s.create_pod(core, ns, kit.pod(target, "kept-off", PodClaim("dev", template="plain")))

        k8s.wait_unschedulable(core, ns, "kept-off",
                               what=f"the scheduler to keep a claim off tainted {device['name']}")

        tolerant = rapi.device_request("dev", target.device_class, cel=pinned, tolerations=[
            {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}])
        rapi.create("resourceclaimtemplates", rapi.claim_template("tolerant", [tolerant]), ns)
        k8s.create_pod(core, ns, kit.pod(target, "tolerates", PodClaim("dev", template="tolerant")))
        pod: Any = k8s.wait_pod_running(core, ns, "tolerates")
        assert pod.spec.node_name == node
        claim = rapi.claim(ns, pod_claim_name(pod, "dev"))
        got = allocated_devices(rapi, target.driver, claim)
        assert [(d["pool"], d["name"]) for d in got] == [(device["pool"], device["name"])]
        kit.assert_sees(core, target, ns, "tolerates", got)
    finally:
        rules.delete("devicetaintrules", name)
