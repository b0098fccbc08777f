"""Pure parts of the embedded provider: names, state files, host checks, the demo manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fakegpu.cli.cluster import demo_manifest
from fakegpu.cluster import embedded, get_provider
from fakegpu.cluster.process import ProcessRecord
from fakegpu.errors import InvalidInput


@pytest.mark.parametrize("name", ["fakegpu", "a", "e2e-1", "x" * 20])
def test_valid_names(name: str) -> None:
    embedded.validate_name(name)


@pytest.mark.parametrize("name", ["", "A", "-a", "a-", "a_b", "x" * 21, "../etc"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidInput):
        embedded.validate_name(name)


def test_state_round_trip(tmp_path: Path) -> None:
    st = embedded.ClusterState(name="c1", root=tmp_path, k8s_version="1.37.2", slot=4,
                               nodes=[embedded.NodeState("n0", 0, True)])
    st.processes["etcd"] = ProcessRecord("etcd", 42, 7, "/b/etcd", tmp_path / "etcd.log")
    st.cgroups.append("/fakegpu-c1-0")
    st.save()
    again = embedded.ClusterState.load(tmp_path)
    assert again == st
    assert again.layout(again.nodes[0]).ip == "10.250.4.10"


def test_state_of_another_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"version": 999}')
    with pytest.raises(ValueError):
        embedded.ClusterState.load(tmp_path)


def test_unknown_node_names_the_known_ones(tmp_path: Path) -> None:
    st = embedded.ClusterState(name="c1", root=tmp_path, nodes=[embedded.NodeState("a", 0, True)])
    with pytest.raises(InvalidInput, match="nodes: a"):
        st.node("b")


def test_memory_estimate_and_meminfo() -> None:
    assert embedded.estimate_memory_mib(4) > embedded.estimate_memory_mib(1)
    assert embedded.mem_available_mib("MemTotal: 100 kB\nMemAvailable:   2048000 kB\n") == 2000
    assert embedded.mem_available_mib("MemTotal: 100 kB\n") is None


def test_status_of_missing_cluster_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.CLUSTERS_ENV, str(tmp_path))
    assert embedded.EmbeddedProvider().status("nothing") is None


def test_down_of_missing_cluster_is_a_no_op(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.CLUSTERS_ENV, str(tmp_path))
    embedded.EmbeddedProvider().down("nothing")
    embedded.EmbeddedProvider().down("nothing")
    assert list(tmp_path.iterdir()) == []


def test_up_refuses_a_leftover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.CLUSTERS_ENV, str(tmp_path))
    (tmp_path / "old").mkdir()
    with pytest.raises(InvalidInput, match="fakegpu cluster down --name old"):
        embedded.EmbeddedProvider().up("old", Path("whatever.yaml"), None)


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
    monkeypatch.setenv(embedded.CLUSTERS_ENV, str(tmp_path / "clusters"))
    root = tmp_path / "clusters" / "c1"
    st = embedded.ClusterState(name="c1", root=root, k8s_version="1.37.2", slot=0,
                               nodes=[embedded.NodeState("gpu-a", 0, True)])
    st.save()
    for rel, text in (("cp/logs/etcd.log", "etcd says"), ("n0/logs/kubelet.log", "kubelet says"),
                      ("n0/pods/default_p_uid/main/0.log", "pod says")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    out = tmp_path / "out"
    written = embedded.EmbeddedProvider().logs("c1", out)
    assert (out / "cp" / "etcd.log").read_text() == "etcd says"
    assert (out / "gpu-a" / "kubelet.log").read_text() == "kubelet says"
    assert (out / "gpu-a" / "pods" / "default_p_uid" / "main" / "0.log").read_text() == "pod says"
    assert {out / "cp" / "etcd.log", out / "gpu-a" / "kubelet.log"} <= set(written)


def test_logs_of_missing_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.CLUSTERS_ENV, str(tmp_path))
    with pytest.raises(InvalidInput, match="no cluster"):
        embedded.EmbeddedProvider().logs("none", tmp_path / "out")
