"""What the checks share: pods and requests in the served API's shape, what a pod sees, and
the devices a claim got as the driver's ResourceSlices publish them. Kubernetes API only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    attribute_value,
    cel_string,
    published_device,
)

from .target import Target

IDLE = ["sh", "-c", "exec sleep 3600"]


def request(rapi: ResourceApi, name: str, device_class: str, *, count: int | None = 1,
            cel: Sequence[str] = (), admin: bool = False,
            tolerations: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One device request; ``count=None``: every matching device (allocationMode All)."""
    return rapi.device_request(name, device_class, count=count, cel=cel,
                               tolerations=tolerations, admin_access=admin)


def pod(name: str, image: str, claims: Mapping[str, Mapping[str, str]], *,
        containers: int = 1, node: str | None = None) -> dict[str, Any]:
    """A pod whose ``containers`` all use every claim of ``claims`` (pod claim name ->
    ``{"resourceClaimTemplateName": ...}`` or ``{"resourceClaimName": ...}``)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "resourceClaims": [{"name": n, **dict(src)} for n, src in claims.items()],
        "containers": [{
            "name": f"c{i}", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": list(IDLE), "resources": {"claims": [{"name": n} for n in claims]},
        } for i in range(containers)],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pod(core: kclient.CoreV1Api, ns: str, manifest: dict[str, Any]) -> None:
    core.create_namespaced_pod(ns, manifest)  # type: ignore[arg-type]


def seen(core: kclient.CoreV1Api, target: Target, ns: str, pod_name: str,
         container: str = "c0") -> list[str] | None:
    """The devices the container sees, as the capabilities file says it sees them (None when
    it does not say)."""
    how = target.capabilities.pod_sees
    if how is None:
        return None
    env = k8s.parse_env(k8s.exec_in_pod(core, ns, pod_name, ["env"],
                                        container=container).stdout)
    got = how.devices(env)
    assert got is not None, f"container {container} of {pod_name} has no {how.env}"
    return got


def allocated(rapi: ResourceApi, target: Target, claim: Mapping[str, Any]
              ) -> list[dict[str, Any]]:
    """The claim's devices of the driver, as its ResourceSlices publish them."""
    results = allocation_results(claim, target.driver)
    assert results, (f"claim {claim['metadata']['name']} has no allocation of "
                     f"{target.driver}: {claim.get('status')}")
    return [{**published_device(rapi, target.driver, r["pool"], r["device"]),
             "pool": r["pool"]} for r in results]


def expected_seen(target: Target, devices: Sequence[Mapping[str, Any]]) -> list[str] | None:
    how = target.capabilities.pod_sees
    if how is None:
        return None
    return [str(attribute_value(d, how.attribute)) for d in devices]


def assert_sees(core: kclient.CoreV1Api, target: Target, ns: str, pod_name: str,
                devices: Sequence[Mapping[str, Any]], container: str = "c0") -> None:
    got = seen(core, target, ns, pod_name, container)
    want = expected_seen(target, devices)
    assert sorted(got or []) == sorted(want or []), (
        f"{pod_name}/{container} sees {got}, its claim got {[d['name'] for d in devices]} "
        f"({want})")


def node_devices(rapi: ResourceApi, target: Target) -> dict[str, list[dict[str, Any]]]:
    """Node -> the devices the driver publishes there (newest generation of each pool)."""
    slices = rapi.slices(target.driver)
    newest: dict[str, int] = {}
    for s in slices:
        pool = s["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), int(pool["generation"]))
    out: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        pool = s["spec"]["pool"]
        node = s["spec"].get("nodeName")
        if node and int(pool["generation"]) == newest[pool["name"]]:
            out.setdefault(node, []).extend(
                {**d, "pool": pool["name"]} for d in s["spec"].get("devices") or ())
    return out


def selector_for(rapi: ResourceApi, target: Target, device: Mapping[str, Any]) -> str:
    """A CEL selector that matches ``device`` and no other device of the driver: on the
    capabilities' device attribute when it is unique, else on any attribute that is."""
    everyone = [d for devs in node_devices(rapi, target).values() for d in devs]
    fields = device.get("basic") or device
    names = list((fields.get("attributes") or {}).keys())
    how = target.capabilities.pod_sees
    if how is not None and how.attribute in names:
        names.remove(how.attribute)
        names.insert(0, how.attribute)
    for name in names:
        raw = (fields.get("attributes") or {}).get(name) or {}
        if "string" not in raw and "int" not in raw:  # versions and bools are not unique
            continue
        value = attribute_value(device, name)
        if sum(attribute_value(d, name) == value for d in everyone) == 1:
            qualified = name if "/" in name else f"{target.driver}/{name}"
            domain, _, short = qualified.partition("/")
            literal = str(value) if isinstance(value, int) else cel_string(str(value))
            return f"device.attributes[{cel_string(domain)}][{cel_string(short)}] == {literal}"
    raise AssertionError(f"no attribute tells device {device['name']} apart from the "
                         f"driver's other devices: cannot select it")
