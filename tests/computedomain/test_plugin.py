"""The compute-domain plugin's pure pieces: the claim plan, who may join, the CDI spec."""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.computedomain import plugin
from fakegpu.computedomain.fabric import GpuFabric, NodeFabric
from fakegpu.computedomain.names import daemon_endpoint, for_gpu_driver
from fakegpu.kubeletplugin import slicepool
from fakegpu.kubeletplugin.claims import ClaimRef

NAMES = for_gpu_driver("gpu.nvidia.com")
REF = ClaimRef("ns", "c", "uid-1")
CLIQUE = "11111111-2222-3333-4444-555555555555.1"


def claim(devices: list[str], kind: str = "ComputeDomainChannelConfig", pool: str = "n0",
          domain: str = "dom", driver: str = NAMES.driver) -> dict[str, Any]:
    return {"metadata": {"uid": "uid-1"}, "status": {"allocation": {"devices": {
        "results": [{"driver": driver, "pool": pool, "device": d, "request": "r"}
                    for d in devices],
        "config": [{"source": "FromClaim", "requests": ["r"], "opaque": {
            "driver": driver, "parameters": {"kind": kind, "domainID": domain}}}]}}}}


def test_plan_reads_devices_and_the_domain() -> None:
    p = plugin.plan(claim(["channel-0"]), REF, NAMES, "n0")
    assert (p.domain_uid, p.kind, [a.index for a in p.devices]) == ("dom", "channel", [0])
    p = plugin.plan(claim(["daemon-0"], "ComputeDomainDaemonConfig"), REF, NAMES, "n0")
    assert p.kind == "daemon"


@pytest.mark.parametrize(("raw", "words"), [
    (claim(["channel-0"], pool="n1"), "allocated on node n1"),
    (claim(["gpu-0"]), "unknown device"),
    (claim(["channel-0"], domain=""), "domainID"),
    (claim(["channel-0"], driver="other"), "no devices allocated by driver"),
    (claim(["daemon-0"]), "goes with channel devices"),
    ({**claim(["channel-0"]), "metadata": {"uid": "x"}}, "deleted and recreated"),
])
def test_a_claim_that_cannot_be_planned_says_why(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(plugin.ClaimError) as err:
        plugin.plan(raw, REF, NAMES, "n0")
    assert words in str(err.value) and "ns/c" in str(err.value)


def fab(*gpus: tuple[int, str, bool]) -> NodeFabric:
    return NodeFabric(tuple(GpuFabric(i, f"GPU-{i}", state, clique, degraded)
                            for i, (state, clique, degraded) in enumerate(gpus)))


def domain(*nodes: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "d"},
            "status": {"nodes": [{"name": n, "cliqueID": c} for n, c in nodes]}}


def test_a_node_joins_only_completed_healthy_in_the_domains_clique() -> None:
    ok = fab((3, CLIQUE, False), (3, CLIQUE, False))
    assert plugin.join_problem(NAMES, domain(("n1", CLIQUE)), "n0", ok) == ""
    assert plugin.join_problem(NAMES, domain(("n0", "other.2")), "n0", ok) == ""  # itself
    other = plugin.join_problem(NAMES, domain(("n1", "other.2")), "n0", ok)
    assert "node n0 cannot join ComputeDomain ns/d" in other and "(n1) in other.2" in other
    degraded = plugin.join_problem(NAMES, domain(), "n0", fab((3, CLIQUE, False),
                                                              (3, CLIQUE, True)))
    assert "GPU 1 (GPU-1) fabric health is degraded" in degraded
    assert "not completed" in plugin.join_problem(NAMES, domain(), "n0",
                                                  fab((2, "", False)))
    assert "in different cliques" in plugin.join_problem(
        NAMES, domain(), "n0", fab((3, CLIQUE, False), (3, "x.2", False)))
    assert "no GPUs" in plugin.join_problem(NAMES, domain(), "n0", fab())


def test_the_channel_cdi_spec_has_the_device_node_and_the_domain() -> None:
    p = plugin.plan(claim(["channel-3"]), REF, NAMES, "n0")
    spec = plugin.cdi_spec(NAMES, p, "ns/d", CLIQUE)
    assert spec["kind"] == "compute-domain.nvidia.com/imex"
    assert "FAKEGPU_COMPUTE_DOMAIN=dom" in spec["containerEdits"]["env"]
    [dev] = spec["devices"]
    assert dev["name"] == "uid-1-channel-3"
    [node] = dev["containerEdits"]["deviceNodes"]
    assert (node["path"], node["type"], node["minor"]) == (
        "/dev/nvidia-caps-imex-channels/channel3", "c", 3)
    assert "FAKEGPU_IMEX_CHANNEL=3" in dev["containerEdits"]["env"]
    every = plugin.plan(claim(["channel-0"]), REF, NAMES, "n0")
    every = plugin.Plan(every.ref, every.domain_uid, every.config_kind, "All", every.devices)
    nodes = plugin.cdi_spec(NAMES, every, "ns/d", CLIQUE)["devices"][0]["containerEdits"]
    assert len(nodes["deviceNodes"]) == plugin.CHANNELS
    assert not any(e.startswith("FAKEGPU_IMEX_DAEMON=") for e in nodes["env"])


@pytest.mark.parametrize(("ip", "endpoint"), [("10.200.1.7", "10.200.1.7:50000"),
                                              ("fd00:10::7", "[fd00:10::7]:50000")])
def test_a_channel_claim_names_its_nodes_imex_daemon(ip: str, endpoint: str) -> None:
    p = plugin.plan(claim(["channel-1"]), REF, NAMES, "n0")
    spec = plugin.cdi_spec(NAMES, p, "ns/d", CLIQUE, daemon_endpoint(ip))
    [dev] = spec["devices"]
    assert f"FAKEGPU_IMEX_DAEMON={endpoint}" in dev["containerEdits"]["env"]


def test_the_slice_publishes_channels_and_one_daemon() -> None:
    s = plugin.slice_object(NAMES, "n0", slicepool.node_owner("n0", "node-uid"), "v1beta2")
    assert s["apiVersion"] == "resource.k8s.io/v1beta2"
    names = [d["name"] for d in s["spec"]["devices"]]
    assert names == [*(f"channel-{i}" for i in range(plugin.CHANNELS)), "daemon-0"]
    assert s["spec"]["driver"] == "compute-domain.nvidia.com"
    assert s["spec"]["devices"][0]["attributes"] == {"type": {"string": "channel"},
                                                     "id": {"int": 0}}
    assert s["metadata"]["ownerReferences"][0]["uid"] == "node-uid"


def test_a_channel_claim_may_use_only_a_domain_of_its_own_namespace() -> None:
    mine = {"metadata": {"namespace": "ns", "name": "d"}}
    assert plugin.tenant_problem(REF, mine) == ""
    theirs = {"metadata": {"namespace": "tenant-b", "name": "secret"}}
    why = plugin.tenant_problem(REF, theirs)
    assert "ResourceClaim ns/c names ComputeDomain tenant-b/secret of another namespace" in why
    assert "must be in its ComputeDomain's namespace (tenant-b)" in why


def test_a_daemon_is_known_by_its_command_line() -> None:
    argv = ["/py", "-m", "fakegpu", "computedomain", "daemon", "--domain-uid", "d",
            "--claim-uid", "u1", "--state-dir", "/s"]
    assert plugin.daemon_cmdline_matches(argv, "u1", "/s")
    assert not plugin.daemon_cmdline_matches(argv, "u2", "/s")  # another claim's
    assert not plugin.daemon_cmdline_matches(argv, "u1", "/other")  # another plugin's
    assert not plugin.daemon_cmdline_matches(["vi", "--claim-uid", "u1", "--state-dir", "/s"],
                                             "u1", "/s")


def test_a_daemon_claim_must_be_in_the_drivers_namespace() -> None:
    ours = ClaimRef("fakegpu-system", "imex-x-daemon-abc", "u1")
    assert plugin.daemon_claim_problem(ours, "fakegpu-system") == ""
    why = plugin.daemon_claim_problem(REF, "fakegpu-system")
    assert why.startswith("ResourceClaim ns/c is a ComputeDomainDaemonConfig claim: ")
    assert "must be in the driver's namespace (fakegpu-system)" in why


def test_a_fabric_problem_makes_every_channel_and_the_daemon_unhealthy() -> None:
    healthy = plugin.device_health("")
    assert [s.device for s in healthy] == [
        *(f"channel-{i}" for i in range(plugin.CHANNELS)), "daemon-0"]
    assert {(s.health, s.message) for s in healthy} == {("HEALTHY", "")}
    problem = NodeFabric((GpuFabric(1, "GPU-1", 3, "c.1", True),)).problem
    assert "degraded" in problem
    assert {(s.health, s.message) for s in plugin.device_health(problem)} == {
        ("UNHEALTHY", problem)}
