"""The controller's pure builders and status arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.computedomain import objects
from fakegpu.computedomain.names import Names, for_cd_driver, for_gpu_driver

NV = for_gpu_driver("gpu.nvidia.com")
FG = for_gpu_driver("gpu.fakegpu.dev")


def cd(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "d", "uid": "u-1"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "t"}},
                     **spec}}


def test_names_are_nvidias_in_nvidia_mode_and_fakegpus_otherwise() -> None:
    assert (NV.group, NV.driver, NV.label_key) == (
        "resource.nvidia.com", "compute-domain.nvidia.com", "resource.nvidia.com/computeDomain")
    assert (NV.channel_class, NV.daemon_class) == (
        "compute-domain-default-channel.nvidia.com", "compute-domain-daemon.nvidia.com")
    assert (FG.group, FG.driver) == ("resource.fakegpu.dev", "compute-domain.fakegpu.dev")
    assert for_cd_driver("compute-domain.nvidia.com") == NV
    assert for_cd_driver("gpu.nvidia.com") is None


def test_parse_reads_the_spec_and_defaults_single() -> None:
    d = objects.parse(cd())
    assert (d.ref, d.uid, d.num_nodes, d.template, d.allocation_mode) == (
        "ns/d", "u-1", 2, "t", "Single")


@pytest.mark.parametrize(("spec", "field"), [
    ({"numNodes": -1}, "spec.numNodes"),
    ({"numNodes": "2"}, "spec.numNodes"),
    ({"numNodes": True}, "spec.numNodes"),
    ({"channel": {}}, "spec.channel.resourceClaimTemplate.name"),
    ({"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Some"}},
     "spec.channel.allocationMode"),
])
def test_a_bad_spec_is_one_line_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(objects.SpecError) as err:
        objects.parse(cd(**spec))
    assert field in str(err.value) and "ComputeDomain ns/d" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
@pytest.mark.parametrize("names", [NV, FG])
def test_templates_and_daemonset_carry_the_domain(names: Names, version: str) -> None:
    d = objects.parse(cd(channel={"resourceClaimTemplate": {"name": "t"},
                                  "allocationMode": "All"}))
    ch = objects.channel_template(names, d, version=version)
    assert ch["apiVersion"] == f"resource.k8s.io/{version}"
    assert ch["metadata"] == {"name": "t", "namespace": "ns",
                              "labels": {names.label_key: "u-1",
                                         "app.kubernetes.io/managed-by": "fakegpu"}}
    devices = ch["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == names.channel_class
    [config] = devices["config"]
    assert config["opaque"] == {"driver": names.driver, "parameters": {
        "apiVersion": names.api_version, "kind": "ComputeDomainChannelConfig",
        "domainID": "u-1", "allocationMode": "All"}}
    dm = objects.daemon_template(names, d, "sys", version=version)
    assert dm["apiVersion"] == f"resource.k8s.io/{version}"
    assert dm["metadata"]["namespace"] == "sys"
    assert dm["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["kind"] == \
        "ComputeDomainDaemonConfig"
    ds = objects.daemonset(names, d, "sys", "img:1")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {names.label_key: "u-1"}
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == dm["metadata"]["name"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["containers"][0]["image"] == "img:1"


def test_domain_status_counts_ready_nodes() -> None:
    r, n = {"status": "Ready"}, {"status": "NotReady"}
    assert objects.domain_status(2, [r, r]) == "Ready"
    assert objects.domain_status(2, [r, n]) == "NotReady"
    assert objects.domain_status(2, [r, r, n]) == "Ready"  # numNodes of them are enough
    assert objects.domain_status(0, []) == "NotReady"
    assert objects.domain_status(0, [r]) == "Ready"
    assert objects.domain_status(0, [r, n]) == "NotReady"


def test_upsert_keeps_indexes_and_fills_the_lowest_gap() -> None:
    nodes = objects.upsert_node([], {"name": "a", "status": "NotReady"})
    nodes = objects.upsert_node(nodes, {"name": "b", "status": "Ready"})
    nodes = objects.upsert_node(nodes, {"name": "a", "status": "Ready", "index": 7})
    assert [(x["name"], x["index"], x["status"]) for x in nodes] == [
        ("a", 0, "Ready"), ("b", 1, "Ready")]
    nodes = objects.remove_node(nodes, "a")
    nodes = objects.upsert_node(nodes, {"name": "c", "status": "Ready"})
    assert [(x["name"], x["index"]) for x in nodes] == [("c", 0), ("b", 1)]
    assert [x["name"] for x in objects.prune_nodes(nodes, {"b"})] == ["b"]


class _Served:
    """An ApiClient stand-in for ``kube.api.get_json("/apis")``: the resource.k8s.io versions."""

    def __init__(self, versions: list[str]) -> None:
        self.versions = versions


@pytest.mark.parametrize(("served", "chosen"), [(["v1beta1", "v1beta2", "v1"], "v1"),
                                                (["v1beta1", "v1beta2"], "v1beta2")])
def test_the_resource_version_is_the_one_rules(monkeypatch: pytest.MonkeyPatch,
                                               served: list[str], chosen: str) -> None:
    from fakegpu.computedomain import kube
    from fakegpu.kube import api as kubeapi

    monkeypatch.setattr(kubeapi, "served_versions", lambda api, group: api.versions)
    assert kube.resource_version(_Served(served)) == chosen  # type: ignore[arg-type]


def test_an_apiserver_serving_only_v1beta1_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fakegpu.computedomain import kube
    from fakegpu.errors import FakegpuError
    from fakegpu.kube import api as kubeapi

    monkeypatch.setattr(kubeapi, "served_versions", lambda api, group: api.versions)
    with pytest.raises(FakegpuError, match=r"^ComputeDomains need resource.k8s.io v1 or "
                                           r"v1beta2; the apiserver's newest is v1beta1$"):
        kube.resource_version(_Served(["v1beta1"]))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["Bad_Name!", "UPPER", "x" * 300, "../x", "a/b", "-a", "a-",
                                  ""])
def test_a_template_name_that_is_no_object_name_is_a_spec_error(name: str) -> None:
    channel = {"resourceClaimTemplate": {"name": name}}
    with pytest.raises(objects.SpecError) as err:
        objects.parse(cd(channel=channel))
    assert "spec.channel.resourceClaimTemplate.name" in str(err.value)
    assert len(str(err.value)) < 300, "the message stays one readable line"


@pytest.mark.parametrize("name", ["t", "imex-channel", "a.b-c.d", "x" * 253])
def test_an_object_name_is_a_good_template_name(name: str) -> None:
    channel = {"resourceClaimTemplate": {"name": name}}
    assert objects.parse(cd(channel=channel)).template == name


def test_the_valid_condition_is_set_kept_and_removed() -> None:
    other = {"type": "Other", "status": "True"}
    first = objects.invalid_condition("bad", "2026-01-01T00:00:00Z")
    conditions = objects.with_condition([other], first)
    assert conditions == [other, first]
    # The same condition again keeps its transition time; another message is a new one.
    later = objects.invalid_condition("bad", "2026-01-02T00:00:00Z")
    assert objects.with_condition(conditions, later) == [other, first]
    changed = objects.invalid_condition("worse", "2026-01-02T00:00:00Z")
    assert objects.with_condition(conditions, changed) == [other, changed]
    assert objects.with_condition(conditions, None) == [other]
