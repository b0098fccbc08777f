"""What `fakegpu cluster upgrade-kubernetes` refuses before it touches a cluster, and what the
state records for it (the upgrade itself runs live: e2e/test_version_skew.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakegpu.cli import main
from fakegpu.cluster.artifacts import binaries
from fakegpu.cluster.embedded import k8supgrade, state
from fakegpu.cluster.embedded.controlplane import ControlPlaneCerts
from fakegpu.errors import EXIT_INVALID, EXIT_PREREQ, InvalidInput, MissingPrerequisite


def _cluster(root: Path, version: str = "1.37.2", **kw: object) -> state.ClusterState:
    st = state.ClusterState(name="c1", root=root, k8s_version=version, slot=3, phase="ready",
                            cp_ports={"etcd_client": 1, "etcd_peer": 2, "apiserver": 3,
                                      "controller_manager": 4, "scheduler": 5},
                            nodes=[state.NodeState("n0", 0, True, k8s_version=version)])
    for key, value in kw.items():
        setattr(st, key, value)
    root.mkdir(parents=True, exist_ok=True)
    st.save()
    return st


@pytest.mark.parametrize(("to", "message"), [
    ("1.20", r"Kubernetes version '1.20' is not supported; supported: 1.34"),
    ("banana", r"'banana' is not supported"),
    ("1.35", r"--to 1.35: cluster 'c1' runs Kubernetes 1.37.2; move one minor at a time "
             r"\(1.36 or 1.38\)"),
])
def test_a_version_not_supported_or_too_far_is_refused(tmp_path: Path, to: str,
                                                       message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        k8supgrade.target_binaries(_cluster(tmp_path), to)


def test_a_version_not_cached_names_the_command_that_builds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "cached", lambda version=None: None)
    with pytest.raises(MissingPrerequisite, match=r"Kubernetes 1.36.3 is not cached: run "
                                                  r"`fakegpu cluster binaries --k8s-version "
                                                  r"1.36` first"):
        k8supgrade.target_binaries(_cluster(tmp_path), "1.36")


def test_a_cluster_that_is_not_ready_or_has_a_stopped_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"not ready \(phase 'creating'\)"):
        k8supgrade.target_binaries(_cluster(tmp_path / "a", phase="creating"), "1.38")
    st = _cluster(tmp_path / "b")
    st.nodes[0].running = False
    with pytest.raises(InvalidInput, match=r"node n0 is stopped: start it \(`fakegpu cluster "
                                           r"node start n0 --cluster c1`\)"):
        k8supgrade.target_binaries(st, "1.38")


def test_a_cluster_without_recorded_ports_must_be_recreated(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="did not record its control plane's ports"):
        k8supgrade.target_binaries(_cluster(tmp_path, cp_ports={}), "1.38")


def test_a_state_from_before_gives_its_nodes_the_clusters_version(tmp_path: Path) -> None:
    st = _cluster(tmp_path)
    doc = json.loads(st.path.read_text())
    for n in doc["nodes"]:
        del n["k8s_version"]
    del doc["cp_ports"]
    st.path.write_text(json.dumps(doc))
    again = state.ClusterState.load(tmp_path)
    assert again.nodes[0].k8s_version == "1.37.2" and again.cp_ports == {}


def test_control_plane_certificates_load_as_they_were_written(tmp_path: Path) -> None:
    made = ControlPlaneCerts.create(tmp_path)
    loaded = ControlPlaneCerts.load(tmp_path)
    assert loaded.ca.cert_path == made.ca.cert_path
    for pair in ("apiserver", "kubelet_client", "admin", "controller_manager", "scheduler",
                 "service_account"):
        assert getattr(loaded, pair) == getattr(made, pair), pair
        assert getattr(loaded, pair).cert.is_file() and getattr(loaded, pair).key.is_file()


@pytest.mark.parametrize(("to", "code", "text"), [
    ("1.20", EXIT_INVALID, "is not supported"),
    ("1.36", EXIT_PREREQ, "is not cached"),
])
def test_the_command_exits_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str], to: str, code: int,
                                         text: str) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    _cluster(tmp_path / "c1")
    monkeypatch.setattr(binaries, "cached", lambda version=None: None)
    assert main(["cluster", "upgrade-kubernetes", "--cluster", "c1", "--to", to,
                 "--provider", "embedded"]) == code
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1, err
