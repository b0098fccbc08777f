"""Builders of resource.k8s.io objects and pods, and helpers reading claims and env output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakegpu.errors import FakegpuError
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    allocated_devices,
    allocated_node,
    allocation_results,
    cel_string,
    config_api_version,
    device_request,
    node_devices,
    pod_manifest,
    publishing_nodes,
)
from fakegpu.testkit.gpus import visible_gpus
from fakegpu.testkit.k8s import claims_refused, load_manifests, parse_env


def test_request_shape_follows_the_api_version() -> None:
    flat = device_request("v1beta1", "gpu", "gpu.fakegpu.dev", count=2, cel=["true"])
    assert flat == {"name": "gpu", "deviceClassName": "gpu.fakegpu.dev",
                    "allocationMode": "ExactCount", "count": 2,
                    "selectors": [{"cel": {"expression": "true"}}]}
    for version in ("v1beta2", "v1"):
        nested = device_request(version, "gpu", "gpu.fakegpu.dev", count=2, cel=["true"])
        assert nested == {"name": "gpu", "exactly": {k: v for k, v in flat.items()
                                                     if k != "name"}}


def test_request_without_a_count_asks_for_every_matching_device() -> None:
    assert device_request("v1", "gpus", "c", count=None)["exactly"] == {
        "deviceClassName": "c", "allocationMode": "All"}
    assert device_request("v1beta1", "gpus", "c", count=None) == {
        "name": "gpus", "deviceClassName": "c", "allocationMode": "All"}


def test_request_without_selectors_has_none() -> None:
    assert "selectors" not in device_request("v1", "gpu", "c")["exactly"]


def test_cel_string_escapes() -> None:
    assert cel_string("NVIDIA GB200") == "'NVIDIA GB200'"
    assert cel_string("it's \\") == "'it\\'s \\\\'"


def test_templates_and_claims_carry_the_served_version() -> None:
    api = ResourceApi.__new__(ResourceApi)
    api.version = "v1"
    req = api.device_request("gpu", "gpu.fakegpu.dev")
    tmpl = api.claim_template("t", [req])
    assert tmpl["apiVersion"] == "resource.k8s.io/v1"
    assert tmpl["spec"]["spec"]["devices"]["requests"] == [req]
    claim = api.claim_manifest("c", [req])
    assert claim["kind"] == "ResourceClaim" and claim["spec"]["devices"]["requests"] == [req]


def test_pod_manifest_wires_claims_and_never_pulls() -> None:
    pod = pod_manifest("p", "img:local", ["sleep", "1"],
                       [PodClaim("a", template="t"), PodClaim("b", claim="c")])
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "a", "resourceClaimTemplateName": "t"},
                                      {"name": "b", "resourceClaimName": "c"}]
    (container,) = spec["containers"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["resources"]["claims"] == [{"name": "a"}, {"name": "b"}]


def test_pod_manifest_pins_to_a_node_by_affinity_only_when_asked() -> None:
    assert "affinity" not in pod_manifest("p", "img", ["sleep", "1"])["spec"]
    pinned = pod_manifest("p", "img", ["sleep", "1"], node="n1")["spec"]
    # Affinity, not nodeName: the scheduler still runs (and allocates the pod's claims).
    assert "nodeName" not in pinned
    [term] = pinned["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In",
                                     "values": ["n1"]}]}


def _pending(status: str, message: str | None) -> Any:
    from kubernetes import client as kclient

    cond = kclient.V1PodCondition(type="PodScheduled", status=status, message=message)
    return kclient.V1Pod(status=kclient.V1PodStatus(phase="Pending", conditions=[cond]))


def test_claims_refused_only_on_the_dra_plugins_verdict() -> None:
    assert claims_refused(_pending(
        "False", "0/4 nodes are available: 4 cannot allocate all claims."))
    # Waiting for the claim controller to make the pod's claim is not a verdict.
    assert not claims_refused(_pending(
        "False", 'waiting for resource claim "p-gpu" to be created'))
    assert not claims_refused(_pending("True", None))
    assert not claims_refused(_pending("False", None))


def test_pod_claim_names_exactly_one_source() -> None:
    with pytest.raises(ValueError):
        PodClaim("a").manifest()
    with pytest.raises(ValueError):
        PodClaim("a", template="t", claim="c").manifest()


def test_allocation_helpers() -> None:
    claim: dict[str, Any] = {"status": {"allocation": {
        "devices": {"results": [
            {"request": "gpu", "driver": "gpu.fakegpu.dev", "pool": "n1", "device": "gpu-0"},
            {"request": "nic", "driver": "other", "pool": "n1", "device": "nic-0"},
        ]},
        "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
    }}}
    assert [r["device"] for r in allocation_results(claim, "gpu.fakegpu.dev")] == ["gpu-0"]
    assert len(allocation_results(claim)) == 2
    assert allocated_node(claim) == "n1"
    assert allocation_results({}) == [] and allocated_node({}) is None


def test_parse_env_keeps_values_with_equals_signs() -> None:
    env = parse_env("A=1\nB=x=y\nnot a var line\nPATH=/bin:/usr/bin\n")
    assert env == {"A": "1", "B": "x=y", "PATH": "/bin:/usr/bin"}


def test_load_manifests_from_yaml_file_and_dicts(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                 "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
    assert [o["metadata"]["name"] for o in load_manifests(f)] == ["a", "b"]
    assert load_manifests({"apiVersion": "v1", "kind": "X", "metadata": {"name": "c"}})
    with pytest.raises(FakegpuError, match="lacks apiVersion"):
        load_manifests("kind: ConfigMap\nmetadata: {name: a}\n")


def test_shipped_device_classes_parse() -> None:
    import yaml

    from fakegpu.deploy.manifests import Install, device_classes

    shipped = yaml.safe_dump_all(device_classes(Install(driver="gpu.fakegpu.dev")))
    names = {o["metadata"]["name"] for o in load_manifests(shipped)}
    assert "gpu.fakegpu.dev" in names


def test_tolerations_admin_access_and_first_available_shapes() -> None:
    from fakegpu.testkit.dra import cel_match, first_available, subrequest, toleration

    tol = toleration("gpu.fakegpu.dev/xid", "NoSchedule")
    assert tol == {"key": "gpu.fakegpu.dev/xid", "operator": "Exists", "effect": "NoSchedule"}
    assert toleration("k", value="v") == {"key": "k", "operator": "Equal", "value": "v"}
    v1 = device_request("v1", "gpu", "c", tolerations=[tol], admin_access=True)
    assert v1["exactly"]["tolerations"] == [tol] and v1["exactly"]["adminAccess"] is True
    flat = device_request("v1beta1", "gpu", "c", tolerations=[tol], admin_access=True)
    assert flat["tolerations"] == [tol] and flat["adminAccess"] is True
    assert "adminAccess" not in device_request("v1", "gpu", "c")["exactly"]
    choice = first_available("v1", "gpu", [subrequest("big", "c", cel=["true"]),
                                           subrequest("small", "c", count=2)])
    assert choice == {"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "c", "allocationMode": "ExactCount", "count": 1,
         "selectors": [{"cel": {"expression": "true"}}]},
        {"name": "small", "deviceClassName": "c", "allocationMode": "ExactCount", "count": 2}]}
    assert cel_match("d", "uuid", "GPU-1") == "device.attributes['d'].uuid == 'GPU-1'"
    assert cel_match("d", "minor", 3) == "device.attributes['d'].minor == 3"
    assert cel_match("d", "shared", True) == "device.attributes['d'].shared == true"


def test_slice_device_and_device_health_read_what_the_apiserver_returns() -> None:
    from fakegpu.testkit.dra import slice_device
    from fakegpu.testkit.k8s import device_health

    slices = [{"spec": {"pool": {"name": "n1"}, "devices": [
                  {"name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule"}]}]}},
              {"spec": {"pool": {"name": "n2"}, "devices": [
                  {"name": "gpu-0", "basic": {"attributes": {"uuid": {"string": "U"}}}}]}}]
    assert slice_device(slices, "n1", "gpu-0") == {
        "name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule"}]}
    assert slice_device(slices, "n2", "gpu-0") == {
        "name": "gpu-0", "attributes": {"uuid": {"string": "U"}}}
    assert slice_device(slices, "n3", "gpu-0") is None
    pod = {"status": {"containerStatuses": [{"allocatedResourcesStatus": [
        {"name": "claim:c/gpu", "resources": [{"resourceID": "d/gpu=u-gpu-0",
                                               "health": "Unhealthy"}]}]}]}}
    assert device_health(pod) == {"d/gpu=u-gpu-0": "Unhealthy"}
    assert device_health({"status": {}}) == {}


def test_pod_manifest_gives_every_container_every_claim() -> None:
    pod = pod_manifest("p", "img:local", ["sleep", "1"], [PodClaim("a", template="t")],
                       containers=("c0", "c1"))
    containers = pod["spec"]["containers"]
    assert [c["name"] for c in containers] == ["c0", "c1"]
    assert all(c["resources"]["claims"] == [{"name": "a"}] for c in containers)


def _slice(pool: str, generation: int, node: str | None, *devices: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"pool": {"name": pool, "generation": generation},
                            "devices": [{"name": d, "attributes": {"uuid": {"string": d}}}
                                        for d in devices]}
    if node is not None:
        spec["nodeName"] = node
    return {"spec": spec}


class _Slices:
    """What node_devices and allocated_devices read of a ResourceApi: one driver's slices."""

    def __init__(self, *slices: dict[str, Any]) -> None:
        self._slices = list(slices)
        self.asked: list[str | None] = []

    def slices(self, driver: str | None = None) -> list[dict[str, Any]]:
        self.asked.append(driver)
        return self._slices


def test_node_devices_reads_the_newest_generation_of_node_pools() -> None:
    api: Any = _Slices(_slice("n2", 1, "n2", "old"), _slice("n2", 2, "n2", "gpu-0", "gpu-1"),
                       _slice("n1", 1, "n1", "gpu-0"), _slice("empty", 1, "n3"),
                       _slice("network", 1, None, "nic-0"))
    got = node_devices(api, "gpu.fakegpu.dev")
    assert {n: [(d["pool"], d["name"]) for d in devs] for n, devs in got.items()} == {
        "n2": [("n2", "gpu-0"), ("n2", "gpu-1")], "n1": [("n1", "gpu-0")]}
    assert publishing_nodes(api, "gpu.fakegpu.dev") == ["n1", "n2"]
    assert set(api.asked) == {"gpu.fakegpu.dev"}


def test_allocated_devices_are_the_published_entries_with_their_pool() -> None:
    api: Any = _Slices(_slice("n1", 3, "n1", "gpu-0", "gpu-1"))
    claim: dict[str, Any] = {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {
        "results": [{"driver": "gpu.fakegpu.dev", "pool": "n1", "device": "gpu-1"},
                    {"driver": "other", "pool": "x", "device": "nic-0"}]}}}}
    (device,) = allocated_devices(api, "gpu.fakegpu.dev", claim)
    assert (device["pool"], device["name"], device["attributes"]["uuid"]["string"]) == (
        "n1", "gpu-1", "gpu-1")
    with pytest.raises(AssertionError, match=r"claim c has no allocation of gpu\.fakegpu\.dev"):
        allocated_devices(api, "gpu.fakegpu.dev", {"metadata": {"name": "c"}})


def test_visible_gpus_reads_nvidia_visible_devices() -> None:
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": "GPU-a,MIG-b"}) == ["GPU-a", "MIG-b"]
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": ""}) == []
    with pytest.raises(AssertionError, match="no NVIDIA_VISIBLE_DEVICES"):
        visible_gpus({"PATH": "/bin"})


def test_config_api_version_follows_the_driver_name() -> None:
    assert config_api_version("gpu.nvidia.com") == "resource.nvidia.com/v1beta1"
    assert config_api_version("gpu.fakegpu.dev") == "resource.fakegpu.dev/v1beta1"
