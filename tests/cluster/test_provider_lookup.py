"""`cluster status|down|logs` without --provider: the provider that has a cluster of that
name answers (``fakegpu.cluster.provider_of``). No real cluster, no Docker: the embedded
provider's state directory and kind's state in the cache are made here, and `kind get
clusters` is a script."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from fakegpu.cli import main
from fakegpu.cluster import provider_of
from fakegpu.cluster.embedded import state as embedded_state
from fakegpu.cluster.kind import dockerhost
from fakegpu.cluster.kind import provider as kind_provider
from fakegpu.cluster.kind.state import KindState
from fakegpu.errors import InvalidInput


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host with no cluster: empty embedded state dir and cache (so no kind either)."""
    monkeypatch.setenv(embedded_state.CLUSTERS_ENV, str(tmp_path / "embedded"))
    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _kind_present(host: Path, monkeypatch: pytest.MonkeyPatch, clusters: list[str]) -> Path:
    """kind in the cache and a Docker daemon that answers; `kind get clusters` lists
    ``clusters`` and records that it was asked."""
    bindir = host / "kind-bin"
    bindir.mkdir()
    asked = host / "kind-asked"
    kind = bindir / "kind"
    listing = "".join(f"{c}\\n" for c in clusters)
    kind.write_text("#!/bin/sh\n"
                    f"echo \"$@\" >> {asked}\n"
                    f"[ \"$1 $2\" = 'get clusters' ] && printf '{listing}'\n"
                    "exit 0\n")
    kind.chmod(0o755)
    monkeypatch.setattr(kind_provider.tools, "cached", lambda tool: bindir)
    monkeypatch.setattr(dockerhost, "unavailable_reason", lambda: None)
    monkeypatch.setattr(dockerhost, "docker_client", lambda: Path("/bin/true"))
    monkeypatch.setattr(dockerhost, "daemon_answers", lambda docker, timeout=15.0: True)
    return asked


def _embedded_cluster(name: str) -> None:
    root = embedded_state.clusters_dir() / name
    root.mkdir(parents=True)
    embedded_state.ClusterState(name=name, root=root, k8s_version="1.37.2", slot=3,
                                nodes=[embedded_state.NodeState("n0", 0, True)]).save()


def _kind_cluster(name: str) -> None:
    KindState(name=name, k8s_version="1.37.2", topology="/t.yaml", driver="gpu.fakegpu.dev",
              phase="ready").save()


def test_a_cluster_nowhere_has_no_provider(host: Path) -> None:
    assert provider_of("c1") is None


def test_kind_present_without_that_cluster_is_asked_and_says_no(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _kind_present(host, monkeypatch, ["other"])
    assert provider_of("c1") is None
    assert "get clusters" in asked.read_text()


def test_kind_absent_is_not_asked(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dockerhost, "daemon_answers", lambda *a: pytest.fail("docker asked"))
    assert provider_of("c1") is None


def test_each_provider_answers_for_its_own_clusters(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _kind_present(host, monkeypatch, ["from-kind"])
    _embedded_cluster("emb")
    _kind_cluster("kstate")
    assert provider_of("emb") == "embedded"
    assert provider_of("kstate") == "kind"  # its state, in the cache
    assert provider_of("from-kind") == "kind"  # `kind get clusters` (a leftover)


def test_the_same_name_on_both_providers_asks_for_provider(
        host: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _embedded_cluster("c1")
    _kind_cluster("c1")
    with pytest.raises(InvalidInput, match="exists on providers embedded and kind: name one "
                                           "with --provider"):
        provider_of("c1")
    assert main(["cluster", "status", "--cluster", "c1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--provider" in err
    assert main(["cluster", "status", "--cluster", "c1", "--provider", "embedded",
                 "-o", "json"]) == 0


def test_status_finds_each_provider_s_cluster_without_provider(
        host: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dockerhost, "docker_client", lambda: None)
    _embedded_cluster("emb")
    _kind_cluster("kc")
    for name, provider in (("emb", "embedded"), ("kc", "kind")):
        assert main(["cluster", "status", "--cluster", name, "-o", "yaml"]) == 0
        shown = yaml.safe_load(capsys.readouterr().out)
        assert (shown["name"], shown["provider"]) == (name, provider)


@pytest.mark.parametrize("command", [["status"], ["status", "-o", "yaml"],
                                     ["logs", "--out", "OUT"]])
def test_no_such_cluster_on_any_provider_is_exit_2_on_one_line(
        host: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: list[str]) -> None:
    _kind_present(host, monkeypatch, ["other"])
    argv = ["cluster", *(str(host / "logs") if a == "OUT" else a for a in command),
            "--cluster", "c1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no cluster 'c1'" in err, err


def test_down_of_a_cluster_nowhere_is_a_no_op(host: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "down", "--cluster", "c1"]) == 0
    assert "removed (or was not there)" in capsys.readouterr().err
    assert not os.path.exists(host / "embedded" / "c1")
