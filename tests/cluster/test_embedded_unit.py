"""Pure parts of the embedded provider: names, state files, host checks, the demo manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fakegpu.cli.cluster import demo_manifest
from fakegpu.cluster import get_provider
from fakegpu.cluster.embedded import bringup, network, state
from fakegpu.cluster.embedded.provider import EmbeddedProvider
from fakegpu.cluster.names import validate_name
from fakegpu.cluster.process import ProcessRecord
from fakegpu.errors import InvalidInput
from fakegpu.topology.packaged import FIXTURES

TOPOLOGY = FIXTURES / "dgx-h100.yaml"


@pytest.mark.parametrize("name", ["fakegpu", "a", "e2e-1", "x" * 20])
def test_valid_names(name: str) -> None:
    validate_name(name)


@pytest.mark.parametrize("name", ["", "A", "-a", "a-", "a_b", "x" * 21, "../etc"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidInput):
        validate_name(name)


def test_state_round_trip(tmp_path: Path) -> None:
    st = state.ClusterState(name="c1", root=tmp_path, k8s_version="1.37.2", slot=4,
                               nodes=[state.NodeState("n0", 0, True, k8s_version="1.37.2")])
    st.processes["etcd"] = ProcessRecord("etcd", 42, 7, "/b/etcd", tmp_path / "etcd.log")
    st.cgroups.append("/fakegpu-c1-0")
    st.save()
    again = state.ClusterState.load(tmp_path)
    assert again == st
    assert again.layout(again.nodes[0]).ip == "10.250.4.10"


def test_state_of_another_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"version": 999}')
    with pytest.raises(state.StateError, match=r"state.json: .*state version 999"):
        state.ClusterState.load(tmp_path)


def test_unknown_node_names_the_known_ones(tmp_path: Path) -> None:
    st = state.ClusterState(name="c1", root=tmp_path, nodes=[state.NodeState("a", 0, True)])
    with pytest.raises(InvalidInput, match="nodes: a"):
        st.node("b")


def test_memory_estimate_and_meminfo() -> None:
    assert bringup.estimate_memory_mib(4) > bringup.estimate_memory_mib(1)
    assert bringup.mem_available_mib("MemTotal: 100 kB\nMemAvailable:   2048000 kB\n") == 2000
    assert bringup.mem_available_mib("MemTotal: 100 kB\n") is None


def test_status_of_missing_cluster_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    assert EmbeddedProvider().status("nothing") is None


def test_down_of_missing_cluster_is_a_no_op(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    get_provider("embedded").down("nothing")
    get_provider("embedded").down("nothing")
    assert list(tmp_path.iterdir()) == []


def test_up_refuses_a_leftover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    (tmp_path / "old").mkdir()
    with pytest.raises(InvalidInput, match="fakegpu cluster down --cluster old"):
        get_provider("embedded").up("old", TOPOLOGY, None)


def test_providers() -> None:
    assert get_provider("embedded").name == "embedded"
    with pytest.raises(InvalidInput, match="unknown cluster provider"):
        get_provider("docker")


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
def test_demo_manifest_claims_one_gpu(api: str) -> None:
    template, pod = yaml.safe_load_all(demo_manifest("img:1", "gpu.fakegpu.dev", api))
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    where = request["exactly"] if api == "v1" else request
    assert where["deviceClassName"] == "gpu.fakegpu.dev"
    assert template["apiVersion"] == f"resource.k8s.io/{api}"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "img:1"
    assert container["imagePullPolicy"] == "Never"
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        template["metadata"]["name"]


def test_logs_are_copied_under_node_names(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path / "clusters"))
    root = tmp_path / "clusters" / "c1"
    st = state.ClusterState(name="c1", root=root, k8s_version="1.37.2", slot=0,
                               nodes=[state.NodeState("gpu-a", 0, True)])
    st.save()
    for rel, text in (("cp/logs/etcd.log", "etcd says"), ("n0/logs/kubelet.log", "kubelet says"),
                      ("n0/pods/default_p_uid/main/0.log", "pod says")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    out = tmp_path / "out"
    written = EmbeddedProvider().logs("c1", out)
    assert (out / "cp" / "etcd.log").read_text() == "etcd says"
    assert (out / "gpu-a" / "kubelet.log").read_text() == "kubelet says"
    assert (out / "gpu-a" / "pods" / "default_p_uid" / "main" / "0.log").read_text() == "pod says"
    assert {out / "cp" / "etcd.log", out / "gpu-a" / "kubelet.log"} <= set(written)


def test_logs_of_missing_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    with pytest.raises(InvalidInput, match="no cluster"):
        EmbeddedProvider().logs("none", tmp_path / "out")


@pytest.mark.parametrize("text", ["{not json", '{"version": 1, "name": "c"}', "[]", ""])
def test_a_corrupt_state_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(state.StateError, match=rf"^{tmp_path}/state.json: not a readable "):
        state.ClusterState.load(tmp_path)


def test_a_corrupt_state_of_another_cluster_does_not_free_its_slot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its slot would be handed out twice: the two clusters would share addresses and bridges.
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "state.json").write_text('{"version": 1, "slot": 0, "name": ')
    with pytest.raises(state.StateError, match=r"other/state.json: not a readable"):
        network.free_slot(set())


def test_a_directory_without_state_holds_no_slot(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    (tmp_path / "starting").mkdir()  # an `up` before its first save
    (tmp_path / "stray-file").write_text("")
    slot = network.free_slot(set())
    assert 0 <= slot < state.MAX_SLOTS


def test_cached_binaries_lets_cache_bugs_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from fakegpu.cluster.artifacts import binaries

    def broken(version: str | None = None) -> None:
        raise RuntimeError("a bug in the cache")

    monkeypatch.setattr(binaries, "cached", broken)
    with pytest.raises(RuntimeError, match="a bug in the cache"):
        state.cached_binaries("1.37.2")


def test_cached_binaries_of_an_unsupported_version_are_not_cached() -> None:
    assert state.cached_binaries("1.20.0") is None


def test_down_with_a_corrupt_state_removes_what_it_can(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    (tmp_path / "c1" / "n0").mkdir(parents=True)
    (tmp_path / "c1" / "state.json").write_text("{truncated")
    get_provider("embedded").down("c1")
    assert not (tmp_path / "c1").exists()


@pytest.mark.parametrize("command", [["up"], ["down"], ["status"], ["logs", "--out", "x"],
                                     ["node", "stop", "n0"]])
@pytest.mark.parametrize("flag", ["--cluster", "--name"])  # --name: the old spelling, hidden
def test_cli_refuses_a_bad_cluster_name_with_exit_2(command: list[str], flag: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from fakegpu.cli import main

    with pytest.raises(SystemExit) as info:
        main(["cluster", *command, flag, "x" * 21])
    assert info.value.code == 2
    assert "use 1-20 lowercase letters" in capsys.readouterr().err


def test_cli_up_has_retain(capsys: pytest.CaptureFixture[str]) -> None:
    from fakegpu.cli import main

    with pytest.raises(SystemExit):
        main(["cluster", "up", "--help"])
    assert "--retain" in capsys.readouterr().out
