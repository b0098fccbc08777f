"""Which pod `fakegpu fault|smi --cluster C --node N` runs in on kind: the node's running fake
node pod (the chart's fakeNodes DaemonSet, whichever driver runs on the node), the newest
should two run; and that it and the bring-up's NVML state check run there through the API's
exec stream. No Docker needed."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from fakegpu.cluster.kind import hostpod, provider
from fakegpu.cluster.kind.hostpod import STATE_DIR_IN_POD, host_pod
from fakegpu.cluster.kind.state import KindState
from fakegpu.errors import FakegpuError
from fakegpu.kube import api as kubeapi
from fakegpu.kube import pods as kpods
from fakegpu.kube.pods import ExecResult
from fakegpu.topology.model import Topology


def pod(name: str, node: str, phase: str = "Running", created: str = "2026-11-30T10:00:00Z",
        deleting: bool = False, container: str = "host") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": container}]},
            "status": {"phase": phase}}


def test_the_nodes_newest_running_host_pod() -> None:
    pods = [pod("old", "w1"), pod("new", "w1", created="2026-11-30T10:05:00Z"),
            pod("other", "w2", created="2026-11-30T12:00:00Z"),
            pod("starting", "w1", phase="Pending", created="2026-11-30T10:09:00Z")]
    assert host_pod(pods, "w1") == "new"
    assert host_pod(pods, "w2") == "other"
    assert host_pod([pod("going", "w1", deleting=True)], "w1") is None
    assert host_pod(pods, "w3") is None


def test_other_pods_of_the_namespace_are_not_the_host() -> None:
    """fakegpu's plugins and the IMEX daemons run in the same namespace."""
    pods = [pod("host", "w1"), pod("gpu", "w1", container="plugin"),
            pod("cd", "w1", created="2026-11-30T10:05:00Z", container="compute-domain-plugin"),
            pod("imex", "w1", created="2026-11-30T10:06:00Z", container="imex-daemon")]
    assert host_pod(pods, "w1") == "host"
    assert host_pod(pods[1:], "w1") is None


# --- the exec itself: through the apiserver's stream, no kubectl process -------------------------
# kube.pods.exec_ is replaced by a recorder: these are unit tests of the provider's calls (what
# runs where); exec_ itself is exercised against real pods by the kind and e2e suites.


class _Recorder:
    def __init__(self, stdout: str = "", returncode: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.out = ExecResult(returncode, stdout, "err")

    def __call__(self, api: object, namespace: str, name: str, command: Sequence[str],
                 **kwargs: Any) -> ExecResult:
        self.calls.append({"namespace": namespace, "pod": name, "command": list(command),
                           **kwargs})
        return self.out


@pytest.fixture
def kind_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The cluster's pods as ``kubeapi.pods`` answers; no apiserver is contacted, and no
    kubectl may be run."""
    listed: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def session(_kubeconfig: Path) -> Iterator[object]:
        yield object()

    def no_process(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a subprocess was started for API work")

    monkeypatch.setattr(kubeapi, "session", session)
    monkeypatch.setattr(kubeapi, "pods", lambda _api, _ns: listed)
    monkeypatch.setattr(f"{provider.__name__}.run", no_process)
    yield listed


def _state() -> KindState:
    return KindState(name="c1", k8s_version="1.35.0", topology="t.yaml",
                     driver="gpu.fakegpu.dev", phase="ready", workers=["w1", "w2"])


def test_node_nvml_runs_fakegpu_in_the_host_container_through_the_api(
        monkeypatch: pytest.MonkeyPatch, kind_api: list[dict[str, Any]]) -> None:
    kind_api += [pod("p1", "w1"), pod("p2", "w2")]
    exec_ = _Recorder(stdout="GPU 0\n", returncode=3)
    monkeypatch.setattr(kpods, "exec_", exec_)
    kp = provider.KindProvider()
    monkeypatch.setattr(kp, "_ready_state", lambda _name: _state())
    res = kp.node_nvml("c1", "w2", ["smi", "-L"])
    [call] = exec_.calls
    assert call["namespace"] == hostpod.NAMESPACE and call["pod"] == "p2"
    assert call["container"] == "host" and call["check"] is False
    assert call["command"] == ["/opt/fakegpu/bin/python", "-m", "fakegpu", "smi", "-L",
                               "--state", f"{STATE_DIR_IN_POD}/w2.state"]
    # The command's own output and exit code, as a local run would give them.
    assert (res.returncode, res.stdout, res.stderr) == (3, "GPU 0\n", "err")


def test_node_nvml_without_a_running_host_pod_is_one_line(
        monkeypatch: pytest.MonkeyPatch, kind_api: list[dict[str, Any]]) -> None:
    kind_api.append(pod("p1", "w1", phase="Pending"))
    monkeypatch.setattr(kpods, "exec_", _Recorder())
    kp = provider.KindProvider()
    monkeypatch.setattr(kp, "_ready_state", lambda _name: _state())
    with pytest.raises(FakegpuError, match=r"^node 'w1' of cluster 'c1' has no running "
                                           r"fake node pod \(namespace .+\)$"):
        kp.node_nvml("c1", "w1", ["smi"])


@pytest.mark.parametrize("same", [True, False], ids=["same", "differs"])
def test_the_nvml_state_check_hashes_the_file_in_each_host_pod(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind_api: list[dict[str, Any]],
        same: bool) -> None:
    from fakegpu.nvml import env as nvml_env

    kind_api += [pod("p1", "w1"), pod("p2", "w2"),
                 pod("cd", "w1", created="2026-11-30T10:05:00Z",
                     container="compute-domain-plugin")]
    rendered = tmp_path / "w.state"
    rendered.write_bytes(b"state")
    digest = hashlib.sha256(b"state" if same else b"other").hexdigest()
    exec_ = _Recorder(stdout=f"{digest}  /x\n")
    monkeypatch.setattr(kpods, "exec_", exec_)
    monkeypatch.setattr(nvml_env, "ensure_state", lambda *_a, **_k: rendered)
    kp = provider.KindProvider()
    if same:
        kp._nvml_copies(_state(), cast(Topology, None))
    else:
        with pytest.raises(FakegpuError, match=r"^node w1: the fake node pod's NVML state differs"):
            kp._nvml_copies(_state(), cast(Topology, None))
    assert [(c["pod"], c["container"], c["command"]) for c in exec_.calls] == [
        ("p1", "host", ["sha256sum", f"{STATE_DIR_IN_POD}/w1.state"]),
        ("p2", "host", ["sha256sum", f"{STATE_DIR_IN_POD}/w2.state"]),
    ][:2 if same else 1]
