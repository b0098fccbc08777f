"""What the checks share beyond the test kit (``fakegpu.testkit``): the suite's pods, what a pod
sees as the capabilities file says it sees it, and a selector for one device. Kubernetes API
only; pods, requests and the devices a claim got come from the test kit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    attribute_value,
    cel_string,
    node_devices,
    pod_manifest,
)

from .target import Target

# Any image the suite runs has sh: `exec` makes sleep PID 1, which ends at once on delete.
IDLE = ("sh", "-c", "exec sleep 3600")


def pod(target: Target, name: str, claim: PodClaim, *,
        containers: Sequence[str] = ("main",)) -> dict[str, Any]:
    """A pod of the target's image idling with ``claim``, used by each of ``containers``."""
    return pod_manifest(name, target.image, IDLE, [claim], containers=containers)


def seen(core: kclient.CoreV1Api, target: Target, ns: str, pod_name: str,
         container: str | None = None) -> list[str] | None:
    """The devices the container (None: the pod's first) sees, as the capabilities file says
    it sees them (None when it does not say)."""
    how = target.capabilities.pod_sees
    if how is None:
        return None
    if how.command:
        ran = k8s.exec_in_pod(core, ns, pod_name, list(how.command), container=container)
        return how.output_devices(ran.stdout)
    env = k8s.parse_env(k8s.exec_in_pod(core, ns, pod_name, ["env"],
                                        container=container).stdout)
    got = how.devices(env)
    assert got is not None, f"container {container or 'main'} of {pod_name} has no {how.env}"
    return got


def expected_seen(target: Target, devices: Sequence[Mapping[str, Any]]) -> list[str] | None:
    how = target.capabilities.pod_sees
    if how is None:
        return None
    return [str(attribute_value(d, how.attribute)) for d in devices]


def assert_sees(core: kclient.CoreV1Api, target: Target, ns: str, pod_name: str,
                devices: Sequence[Mapping[str, Any]], container: str | None = None) -> None:
    got = seen(core, target, ns, pod_name, container)
    want = expected_seen(target, devices)
    assert sorted(got or []) == sorted(want or []), (
        f"{pod_name}/{container or 'main'} sees {got}, its claim got "
        f"{[d['name'] for d in devices]} ({want})")


def selector_for(rapi: ResourceApi, target: Target, device: Mapping[str, Any]) -> str:
    """A CEL selector that matches ``device`` and no other device of the driver: on the
    capabilities' device attribute when it is unique, else on any attribute that is."""
    everyone = [d for devs in node_devices(rapi, target.driver).values() for d in devs]
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
