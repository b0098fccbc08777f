"""A real one-worker embedded cluster: up, Ready, slices, node stop/start, down leaves nothing.

Needs root and the cached binaries, images and fake NVML library: without them it skips and
says exactly what is missing (build them with `fakegpu cluster binaries` / `make demo`).
"""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakegpu.cluster import cleanup, embedded
from fakegpu.cluster.process import WaitPolicy, pids_matching, wait_until
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.paths import repo_fixtures_dir

pytestmark = pytest.mark.integration

# Unique per run: several engineers (and CI) may run this suite on one host at once.
NAME = f"it-{os.getpid()}"
TOPOLOGY = repo_fixtures_dir() / "dgx-h100.yaml"  # one node, 8 GPUs


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mounts, cgroups, interfaces)"
    from fakegpu.cluster import binaries

    if binaries.cached() is None:
        return ("Kubernetes binaries are not cached: run `fakegpu cluster binaries` "
                "(or `make demo`) first")
    for mod in ("fakegpu.cluster.images", "fakegpu.nvml.state"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError:
            return f"{mod} is not available yet"
    return None


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[embedded.EmbeddedProvider, ClusterInfo]]:
    reason = _missing()
    if reason:
        pytest.skip(f"SKIPPED LOUDLY: embedded cluster integration test: {reason}")
    provider = embedded.EmbeddedProvider(policy=WaitPolicy(timeout=180))
    provider.down(NAME)  # a leftover of an aborted earlier run
    info = provider.up(NAME, TOPOLOGY, None)
    try:
        yield provider, info
    finally:
        provider.down(NAME)


def _state() -> embedded.ClusterState:
    return embedded.ClusterState.load(embedded.clusters_dir() / NAME)


def test_node_ready_with_slices(cluster: tuple[embedded.EmbeddedProvider, ClusterInfo]) -> None:
    _, info = cluster
    st = _state()
    (node,) = info.nodes
    assert embedded.node_ready(st, node.name)
    slices = embedded.node_slices(st, node.name)
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    assert len(devices) >= 8  # the DGX H100's eight GPUs (MIG-capable ones may add more)
    assert info.kubeconfig.is_file()
    out = subprocess.run([str(_kubectl()), f"--kubeconfig={info.kubeconfig}",
                          "get", "nodes", "-o", "name"], capture_output=True, text=True,
                         check=True).stdout
    assert f"node/{node.name}" in out


def _kubectl() -> Path:
    from fakegpu.cluster import binaries

    found = binaries.cached()
    assert found is not None
    return found.kubectl


def test_stop_and_start_node(cluster: tuple[embedded.EmbeddedProvider, ClusterInfo]) -> None:
    provider, info = cluster
    node = info.nodes[0].name
    provider.stop_node(NAME, node)
    after = provider.status(NAME)
    assert after is not None and not after.node(node).running
    st = _state()
    wait_until(f"node {node} NotReady", lambda: not embedded.node_ready(st, node),
               WaitPolicy(timeout=120, interval=2))
    provider.start_node(NAME, node)
    again = provider.status(NAME)
    assert again is not None and again.node(node).running
    assert embedded.node_ready(st, node)
    assert embedded.node_slices(st, node)


def test_down_leaves_nothing(cluster: tuple[embedded.EmbeddedProvider, ClusterInfo]) -> None:
    provider, _ = cluster
    st = _state()
    root = st.root
    provider.down(NAME)
    assert not root.exists()
    assert pids_matching(lambda argv: any(str(root) in a for a in argv)) == []
    assert cleanup.mounts_under(Path("/proc/self/mountinfo").read_text(), root) == []
    for link in st.interfaces:
        assert not cleanup.link_exists(link), link
    for h in cleanup.cgroup_hierarchies():
        for rel in st.cgroups:
            assert not (h / rel.strip("/")).exists(), h / rel
    provider.down(NAME)  # idempotent
    assert provider.status(NAME) is None
