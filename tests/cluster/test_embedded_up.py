"""A real one-worker embedded cluster: up, Ready, slices, node stop/start, down leaves nothing.

Needs root and the cached binaries, images and fake NVML library: without them it skips and
says exactly what is missing (build them with `fakegpu cluster binaries` / `make demo`).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cluster import cleanup, get_provider
from fakegpu.cluster.embedded import state, worker
from fakegpu.cluster.lifecycle import Lifecycle
from fakegpu.cluster.process import WaitPolicy, pids_matching, wait_until
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

# Unique per run: several engineers (and CI) may run this suite on one host at once.
NAME = f"it-{os.getpid()}"
TOPOLOGY = FIXTURES / "dgx-h100.yaml"  # one node, 8 GPUs


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mounts, cgroups, interfaces)"
    from fakegpu.cluster.artifacts import binaries

    if binaries.cached() is None:
        return ("Kubernetes binaries are not cached: run `fakegpu cluster binaries` "
                "(or `make demo`) first")
    for mod in ("fakegpu.cluster.artifacts.images", "fakegpu.nvml.state"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError:
            return f"{mod} is not available yet"
    return None


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Lifecycle, ClusterInfo]]:
    reason = _missing()
    if reason:
        pytest.skip(f"SKIPPED LOUDLY: embedded cluster integration test: {reason}")
    provider = get_provider("embedded", timeout=180)
    provider.down(NAME)  # a leftover of an aborted earlier run
    info = provider.up(NAME, TOPOLOGY, None)
    try:
        yield provider, info
    finally:
        provider.down(NAME)


def _state() -> state.ClusterState:
    return state.ClusterState.load(state.clusters_dir() / NAME)


def test_node_ready_with_slices(cluster: tuple[Lifecycle, ClusterInfo]) -> None:
    _, info = cluster
    st = _state()
    (node,) = info.nodes
    assert worker.node_ready(st, node.name)
    slices = worker.node_slices(st, node.name)
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    assert len(devices) >= 8  # the DGX H100's eight GPUs (MIG-capable ones may add more)
    assert info.kubeconfig.is_file()
    out = subprocess.run([str(_kubectl()), f"--kubeconfig={info.kubeconfig}",
                          "get", "nodes", "-o", "name"], capture_output=True, text=True,
                         check=True).stdout
    assert f"node/{node.name}" in out


def _kubectl() -> Path:
    from fakegpu.cluster.artifacts import binaries

    found = binaries.cached()
    assert found is not None
    return found.kubectl


def test_kubelet_has_its_own_device_plugin_socket(
        cluster: tuple[Lifecycle, ClusterInfo]) -> None:
    st = _state()
    for n in st.nodes:
        lay = st.layout(n)
        # Bound at the kubelet's fixed path, inside its mount namespace: it is the node's dir.
        assert (lay.device_plugins_dir / "kubelet.sock").is_socket(), lay.device_plugins_dir


_VOLUME_POD = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: it-vol}}
data: {{greeting: hello-from-configmap}}
---
apiVersion: v1
kind: Pod
metadata: {{name: it-vol}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["sh", "-c", "cat /cm/greeting; echo; wc -c < {token}"]
    volumeMounts: [{{name: cm, mountPath: /cm}}]
  volumes: [{{name: cm, configMap: {{name: it-vol}}}}]
"""
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_pod_reads_configmap_and_projected_token(
        cluster: tuple[Lifecycle, ClusterInfo]) -> None:
    """The kubelet mounts volumes (tmpfs for the token) in its own mount namespace; containerd
    in the host's must see them, or the container finds empty directories."""
    _, info = cluster
    kubectl = [str(_kubectl()), f"--kubeconfig={info.kubeconfig}"]
    # The default service account is made by the controller-manager shortly after start.
    wait_until("service account default", lambda: subprocess.run(
        [*kubectl, "get", "serviceaccount", "default"], capture_output=True).returncode == 0,
        WaitPolicy(timeout=120, interval=1))
    subprocess.run([*kubectl, "apply", "-f", "-"], check=True, capture_output=True, text=True,
                   input=_VOLUME_POD.format(image=info.workload_image, token=TOKEN))
    try:
        def done() -> bool:
            phase = subprocess.run([*kubectl, "get", "pod", "it-vol", "-o",
                                    "jsonpath={.status.phase}"], capture_output=True,
                                   text=True).stdout
            assert phase != "Failed", _describe(kubectl)
            return phase == "Succeeded"

        wait_until("pod it-vol Succeeded", done, WaitPolicy(timeout=120, interval=1))
        out = subprocess.run([*kubectl, "logs", "it-vol"], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out[0] == "hello-from-configmap"
        assert int(out[1]) > 100  # a signed JWT, not an empty file
    finally:
        subprocess.run([*kubectl, "delete", "pod,configmap", "it-vol", "--wait=false"],
                       capture_output=True)


def _describe(kubectl: list[str]) -> str:
    return subprocess.run([*kubectl, "describe", "pod", "it-vol"], capture_output=True,
                          text=True).stdout + subprocess.run(
        [*kubectl, "logs", "it-vol"], capture_output=True, text=True).stdout


def test_stop_and_start_node(cluster: tuple[Lifecycle, ClusterInfo]) -> None:
    provider, info = cluster
    node = info.nodes[0].name
    provider.stop_node(NAME, node)
    after = provider.status(NAME)
    assert after is not None and not after.node(node).running
    st = _state()
    wait_until(f"node {node} NotReady", lambda: not worker.node_ready(st, node),
               WaitPolicy(timeout=120, interval=2))
    provider.start_node(NAME, node)
    again = provider.status(NAME)
    assert again is not None and again.node(node).running
    assert worker.node_ready(st, node)
    assert worker.node_slices(st, node)


def test_down_leaves_nothing(cluster: tuple[Lifecycle, ClusterInfo]) -> None:
    provider, _ = cluster
    st = _state()
    root = st.root
    provider.down(NAME)
    assert not root.exists()
    assert pids_matching(lambda argv: any(str(root) in a for a in argv)) == []
    assert cleanup.mounts_under(Path("/proc/self/mountinfo").read_text(), root) == []
    # The kubelets' mount namespaces ended with them: none holds a node's directory.
    held = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _mounts_in(p, root)]
    assert held == []
    for link in st.interfaces:
        assert not cleanup.link_exists(link), link
    for h in cleanup.cgroup_hierarchies():
        for rel in st.cgroups:
            assert not (h / rel.strip("/")).exists(), h / rel
    provider.down(NAME)  # idempotent
    assert provider.status(NAME) is None


def _mounts_in(proc: Path, root: Path) -> bool:
    """Whether the mount namespace of ``proc`` has a mount of (or onto) a path under root."""
    try:
        return str(root) + "/" in (proc / "mountinfo").read_text()
    except OSError:
        return False


def test_failed_up_saves_logs_and_leaves_nothing(fail_at: Any,
                                                  injected_failure: type[Exception]) -> None:
    """A real bring-up that fails after its kubelets started (etcd, apiserver, controllers,
    containerd and the kubelet all running): the logs are saved, then everything goes."""
    reason = _missing()
    if reason:
        pytest.skip(f"SKIPPED LOUDLY: embedded cluster integration test: {reason}")
    name = f"itf-{os.getpid()}"
    lifecycle = get_provider("embedded", timeout=180)
    lifecycle.down(name)  # a leftover of an aborted earlier run
    links_before = _fakegpu_links()
    failing = fail_at(lifecycle.provider, "fakegpu plugins", after=False)
    with pytest.raises(injected_failure) as info:
        Lifecycle(failing, lifecycle.console).up(name, TOPOLOGY, None)
    assert failing.reached
    (note,) = [n for n in info.value.__notes__ if n.startswith("logs of the failed cluster")]
    saved = Path(note.rsplit(": ", 1)[1])
    try:
        logs = {p.relative_to(saved).as_posix() for p in saved.rglob("*.log")}
        node = "dgx-h100-0"
        assert {"cp/etcd.log", "cp/kube-apiserver.log", f"{node}/kubelet.log",
                f"{node}/containerd.log"} <= logs, logs
        assert (saved / f"{node}" / "kubelet.log").stat().st_size > 0
        root = state.clusters_dir() / name
        assert not root.exists()
        assert pids_matching(lambda argv: any(str(root) in a for a in argv)) == []
        assert cleanup.mounts_under(Path("/proc/self/mountinfo").read_text(), root) == []
        for h in cleanup.cgroup_hierarchies():
            assert not (h / f"fakegpu-{name}-0").exists(), h
        assert _fakegpu_links() <= links_before  # its bridges went with it
        assert lifecycle.status(name) is None
    finally:
        shutil.rmtree(saved, ignore_errors=True)


def _fakegpu_links() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("fg")}
