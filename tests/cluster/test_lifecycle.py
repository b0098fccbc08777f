"""The one create/delete flow above the providers: validation, exists check, state first,
named actions, and on failure logs saved then cleanup unless retained.

A small in-memory provider stands in for a real one here (what the flow does is the subject);
the same flow runs the real kind provider failing at its first action, and, in
test_embedded_up.py, a real embedded cluster failing after its kubelets started.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fakegpu.cluster import get_provider
from fakegpu.cluster.lifecycle import Lifecycle
from fakegpu.cluster.names import MAX_LENGTH
from fakegpu.cluster.provider import Action, ClusterInfo, ClusterSpec
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology
from fakegpu.topology.packaged import FIXTURES

TOPOLOGY = FIXTURES / "dgx-h100.yaml"


@pytest.fixture(autouse=True)
def _failed_logs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A failed up copies logs to a new temporary directory: keep them in this test's own.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


class MemoryProvider:
    """Makes a directory per action under ``root/<name>``; deleting removes the directory."""

    name = "memory"

    def __init__(self, root: Path, actions: Sequence[str] = ("one", "two", "three")) -> None:
        self.root = root
        self.titles = actions
        self.calls: list[str] = []
        self.spec: ClusterSpec | None = None
        self.fail_delete = False

    def _dir(self, name: str) -> Path:
        return self.root / name

    def exists(self, name: str) -> bool:
        self.calls.append("exists")
        return self._dir(name).exists()

    def check_host(self, spec: ClusterSpec) -> None:
        self.calls.append("check_host")

    def provision(self, spec: ClusterSpec) -> Any:
        self.calls.append("provision")
        self.spec = spec
        provider = self

        class State:
            phase = "creating"

            def save(self) -> None:
                provider.calls.append(f"save {self.phase}")
                provider._dir(spec.name).mkdir(parents=True, exist_ok=True)
                (provider._dir(spec.name) / "state.json").write_text(
                    json.dumps({"phase": self.phase}))

        class Bringup:
            state = State()

            def actions(self) -> Sequence[Action]:
                return [Action(t, provider._action(spec.name, t)) for t in provider.titles]

        return Bringup()

    def _action(self, name: str, title: str) -> Any:
        def run() -> None:
            self.calls.append(title)
            (self._dir(name) / f"{title}.log").write_text(f"{title} ran\n")

        return run

    def delete(self, name: str) -> None:
        self.calls.append("delete")
        if self.fail_delete:
            raise FakegpuError("cannot remove a mount")
        for f in sorted(self._dir(name).glob("*")):
            f.unlink()
        if self._dir(name).exists():
            self._dir(name).rmdir()

    def status(self, name: str) -> ClusterInfo | None:
        self.calls.append("status")
        if not self._dir(name).exists():
            return None
        return ClusterInfo(name=name, provider=self.name, k8s_version="1.37.2",
                           kubeconfig=self._dir(name) / "kubeconfig", topology=TOPOLOGY,
                           driver_name="gpu.fakegpu.dev", workload_image="w:1")

    def healthy(self, name: str) -> bool:
        return self._dir(name).exists()

    def logs(self, name: str, out: Path) -> list[Path]:
        self.calls.append("logs")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for log in sorted(self._dir(name).glob("*.log")):
            (out / log.name).write_text(log.read_text())
            written.append(out / log.name)
        return written

    def stop_node(self, name: str, node: str) -> None:
        raise NotImplementedError

    def start_node(self, name: str, node: str) -> None:
        raise NotImplementedError


def _lifecycle(provider: Any, *, retain: bool = False) -> Lifecycle:
    return Lifecycle(provider, Console(stderr=True, force_terminal=False), retain=retain)


def test_up_runs_the_actions_in_order_after_recording_state(tmp_path: Path) -> None:
    provider = MemoryProvider(tmp_path)
    info = _lifecycle(provider).up("c1", TOPOLOGY, "1.35")
    assert info.name == "c1"
    assert provider.calls == ["exists", "check_host", "provision", "save creating", "one", "two",
                              "three", "status"]
    # The topology is loaded once, as a model; the version is resolved to its patch release.
    assert provider.spec is not None
    assert isinstance(provider.spec.topology, Topology)
    assert provider.spec.topology_file == TOPOLOGY.resolve()
    assert provider.spec.k8s_version == "1.35.4"
    assert provider.spec.nic_driver == "nic.fakegpu.dev"  # --nic-driver's default


@pytest.mark.parametrize(("key", "name"), [("dranet", "dra.net"), ("none", "")])
def test_the_nic_driver_key_reaches_the_provider_as_its_name(tmp_path: Path, key: str,
                                                            name: str) -> None:
    provider = MemoryProvider(tmp_path)
    _lifecycle(provider).up("c1", TOPOLOGY, None, nic_driver=key)
    assert provider.spec is not None and provider.spec.nic_driver == name


def test_a_vendor_chart_runs_alone_and_not_beside_a_plugin_binary(tmp_path: Path) -> None:
    from fakegpu.cluster import driverchart
    from fakegpu.cluster.external import ExternalPlugin
    from fakegpu.deploy import chart_dir

    chart = driverchart.parse(str(chart_dir()), driver="gpu.example.com")
    provider = MemoryProvider(tmp_path)
    _lifecycle(provider).up("c1", TOPOLOGY, None, chart=chart)
    # fakegpu runs no plugin of its own beside the vendor's: no NIC plugin either.
    assert provider.spec is not None and provider.spec.chart == chart
    assert provider.spec.nic_driver == ""
    provider = MemoryProvider(tmp_path / "2")
    with pytest.raises(InvalidInput, match=r"--plugin-chart and --plugin-bin"):
        _lifecycle(provider).up("c1", TOPOLOGY, None, chart=chart,
                                plugin=ExternalPlugin(binary=Path("/bin/true")))
    assert provider.calls == []


def test_an_unknown_nic_driver_is_refused_before_the_provider_is_asked(tmp_path: Path) -> None:
    provider = MemoryProvider(tmp_path)
    with pytest.raises(InvalidInput, match=r"--nic-driver: unknown NIC driver choice 'sriov'"):
        _lifecycle(provider).up("c1", TOPOLOGY, None, nic_driver="sriov")
    assert provider.calls == []


def test_failed_up_saves_logs_then_removes_everything(
        tmp_path: Path, fail_at: Any, injected_failure: type[Exception]) -> None:
    provider = MemoryProvider(tmp_path / "clusters")
    with pytest.raises(injected_failure, match="injected failure at 'two'") as info:
        _lifecycle(fail_at(provider, "two")).up("c1", TOPOLOGY, None)
    assert provider.calls == ["exists", "check_host", "provision", "save creating", "one", "two",
                              "save failed", "logs", "delete"]
    # Logs first (both actions had written theirs), then nothing left behind.
    (note,) = [n for n in info.value.__notes__ if n.startswith("logs of the failed cluster")]
    saved = Path(note.rsplit(": ", 1)[1])
    assert sorted(p.name for p in saved.iterdir()) == ["one.log", "two.log"]
    assert not (tmp_path / "clusters" / "c1").exists()


def test_failed_up_with_retain_keeps_the_cluster_marked_failed(
        tmp_path: Path, fail_at: Any, injected_failure: type[Exception]) -> None:
    provider = MemoryProvider(tmp_path)
    with pytest.raises(injected_failure):
        _lifecycle(fail_at(provider, "three"), retain=True).up("c1", TOPOLOGY, None)
    assert provider.calls[-2:] == ["three", "save failed"]
    assert "logs" not in provider.calls and "delete" not in provider.calls
    assert json.loads((tmp_path / "c1" / "state.json").read_text()) == {"phase": "failed"}
    assert (tmp_path / "c1" / "three.log").is_file()


def test_a_failing_cleanup_is_a_note_on_the_original_error(
        tmp_path: Path, fail_at: Any, injected_failure: type[Exception]) -> None:
    provider = MemoryProvider(tmp_path)
    provider.fail_delete = True
    with pytest.raises(injected_failure) as info:
        _lifecycle(fail_at(provider, "one")).up("c1", TOPOLOGY, None)
    assert any("removing the failed cluster failed too (cannot remove a mount): run "
               "`fakegpu cluster down --provider memory --cluster c1`" in n
               for n in info.value.__notes__)


def test_an_unexpected_exception_becomes_a_fakegpu_error_after_cleanup(tmp_path: Path) -> None:
    provider = MemoryProvider(tmp_path)

    def boom() -> None:
        raise RuntimeError("a bug")

    provider._action = lambda name, title: boom if title == "two" else (lambda: None)  # type: ignore[method-assign]
    with pytest.raises(FakegpuError, match="cluster up failed: a bug"):
        _lifecycle(provider).up("c1", TOPOLOGY, None)
    assert provider.calls[-1] == "delete" and not (tmp_path / "c1").exists()


def test_an_existing_cluster_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    provider = MemoryProvider(tmp_path)
    (tmp_path / "c1").mkdir()
    with pytest.raises(InvalidInput, match=r"cluster 'c1' already exists \(or is left over\): "
                                           r"run `fakegpu cluster down --provider memory "
                                           r"--cluster c1` first"):
        _lifecycle(provider).up("c1", TOPOLOGY, None)
    assert provider.calls == ["exists"]


@pytest.mark.parametrize(("name", "topology", "version", "match"), [
    ("x" * (MAX_LENGTH + 1), TOPOLOGY, None, "cluster name"),
    ("Bad_Name", TOPOLOGY, None, "cluster name"),
    ("c1", Path("/nonexistent.yaml"), None, "topology file not found"),
    ("c1", TOPOLOGY, "1.20", "not supported"),
])
def test_bad_input_is_refused_before_the_provider_is_asked(
        tmp_path: Path, name: str, topology: Path, version: str | None, match: str) -> None:
    provider = MemoryProvider(tmp_path)
    with pytest.raises(InvalidInput, match=match):
        _lifecycle(provider).up(name, topology, version)
    assert provider.calls == []


@pytest.mark.parametrize("op", ["down", "status", "healthy", "logs"])
def test_every_operation_checks_the_name(tmp_path: Path, op: str) -> None:
    provider = MemoryProvider(tmp_path)
    args: tuple[Any, ...] = ("../etc",) if op != "logs" else ("../etc", tmp_path / "out")
    with pytest.raises(InvalidInput, match=r"cluster name '\.\./etc'"):
        getattr(_lifecycle(provider), op)(*args)
    assert provider.calls == []


# --- the real kind provider under the same flow ------------------------------------------------


def test_kind_failed_up_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      fail_at: Any, injected_failure: type[Exception]) -> None:
    """kind's bring-up fails at its first action (without Docker nothing further can run here):
    the lifecycle collects what logs there are and removes the recorded state."""
    from fakegpu.cluster.kind import provider as kindmod

    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    kind = kindmod.KindProvider(Console(stderr=True))
    failing = fail_at(kind, "Docker", after=False)
    with pytest.raises(injected_failure) as info:
        _lifecycle(failing).up("k1", TOPOLOGY, None)
    assert failing.reached
    assert any(n.startswith("logs of the failed cluster") for n in info.value.__notes__)
    assert not (kindmod.clusters_dir() / "k1").exists()
    assert kindmod.KindState.load("k1") is None


def test_kind_failed_up_with_retain_keeps_its_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: Any,
        injected_failure: type[Exception]) -> None:
    from fakegpu.cluster.kind import provider as kindmod

    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    failing = fail_at(kindmod.KindProvider(Console(stderr=True)), "Docker", after=False)
    with pytest.raises(injected_failure):
        _lifecycle(failing, retain=True).up("k1", TOPOLOGY, None)
    st = kindmod.KindState.load("k1")
    assert st is not None and st.phase == "failed"
    assert st.workers == [n.name for n in load_topology(TOPOLOGY).nodes]


def test_get_provider_wraps_each_provider_in_the_lifecycle() -> None:
    for name in ("embedded", "kind"):
        clusters = get_provider(name, timeout=5)
        assert isinstance(clusters, Lifecycle) and clusters.name == name
