"""`fakegpu fault|smi --cluster C --node N` reach that node's NVML state (embedded provider).

The cluster here is only its state.json and the node's rendered NVML state file, exactly where
a bring-up puts them: no Kubernetes runs, and none is needed to reach the file. The kind path
(the same command run in the node's plugin pod) needs a kind cluster: tests/kind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cluster.embedded import state
from fakegpu.nvml import state as nvml_state
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

TOPOLOGY = FIXTURES / "gb200-mini.yaml"


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[dict[str, str], str, Path]:
    """(environment pointing at the clusters dir, node name, its state file)."""
    topo = load_topology(TOPOLOGY)
    node = topo.nodes[1]
    st = state.ClusterState(name="c1", root=tmp_path / "c1", k8s_version="1.37.2", slot=3,
                               topology=str(TOPOLOGY), phase="ready",
                               nodes=[state.NodeState(n.name, i, bool(n.gpus))
                                      for i, n in enumerate(topo.nodes)])
    st.root.mkdir()
    st.save()
    path = st.layout(st.nodes[1]).nvml_state
    path.parent.mkdir(parents=True)
    nvml_state.render(topo, node.name, path)
    env = {**os.environ, state.CLUSTERS_ENV: str(tmp_path)}
    env.pop("FAKEGPU_NVML_STATE", None)
    return env, node.name, path


def fakegpu(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_fault_and_smi_by_cluster_and_node(cluster: tuple[dict[str, str], str, Path]) -> None:
    env, node, path = cluster
    on = ["--cluster", "c1", "--node", node]
    before = fakegpu(env, "smi", *on)
    assert before.returncode == 0, before.stderr
    # What the node's own state says, read the old way: the same view.
    assert before.stdout == fakegpu(env, "smi", "--state", str(path)).stdout
    assert "degraded" not in before.stdout

    res = fakegpu(env, "fault", "inject", *on, "--gpu", "1", "fabric-degraded")
    assert res.returncode == 0, res.stderr
    seen = fakegpu(env, "smi", "--state", str(path)).stdout
    assert seen.count("degraded") == 1, seen
    assert fakegpu(env, "smi", *on).stdout == seen

    res = fakegpu(env, "fault", "clear", *on, "--gpu", "1", "fabric-degraded")
    assert res.returncode == 0, res.stderr
    assert "degraded" not in fakegpu(env, "smi", *on, "--provider", "embedded").stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "nope", "--node", "x"], "no cluster 'nope'"),
    (["--cluster", "c1", "--node", "nope"], "has no node 'nope'"),
    (["--cluster", "c1"], "--cluster needs --node"),
    (["--cluster", "c1", "--node", "N", "--state", "/tmp/x"], "drop --topology and --state"),
    (["--provider", "kind", "--state", "/tmp/x"], "--provider needs --cluster"),
    (["--cluster", "c1", "--node", "N", "--gpu", "9"], "GPU index 9 is out of range"),
])
def test_bad_cluster_arguments_are_one_line_exit_2(
        cluster: tuple[dict[str, str], str, Path], args: list[str], message: str) -> None:
    env, node, _path = cluster
    args = [node if a == "N" else a for a in args]
    if "--gpu" not in args:
        args += ["--gpu", "0"]
    res = fakegpu(env, "fault", "inject", *args, "xid", "79")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
