"""The fleet's CLI and cluster-state plumbing, without a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fakegpu.cluster.embedded import fleet as embedded
from fakegpu.cluster.embedded.state import ClusterState, NodeState
from fakegpu.errors import EXIT_INVALID
from fakegpu.topology.packaged import FIXTURES

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_state_keeps_the_simulated_nodes(tmp_path: Path) -> None:
    st = ClusterState(name="fg-x", root=tmp_path, nodes=[NodeState("dgx-0", 0, True)],
                      simulated=["sim-0", "sim-1"])
    st.save()
    again = ClusterState.load(tmp_path)
    assert again.simulated == ["sim-0", "sim-1"]
    assert [n.name for n in again.nodes] == ["dgx-0"]
    # A state written before fleets existed has none.
    text = (tmp_path / "state.json").read_text().replace('"simulated"', '"ignored"')
    (tmp_path / "state.json").write_text(text)
    assert ClusterState.load(tmp_path).simulated == []


def test_kwok_is_told_to_manage_only_simulated_nodes(tmp_path: Path) -> None:
    argv = embedded.kwok_argv(Path("/k/kwok"), tmp_path / "kc", tmp_path / "c.yaml",
                              "10.200.240.0/20", "10.250.0.250")
    assert "--manage-all-nodes=false" in argv
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in argv
    assert embedded.state_path(tmp_path, "sim-3") == tmp_path / "fleet" / "nvml" / "sim-3.state"


def test_fleet_cli_refuses_a_topology_without_simulated_nodes(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "fleet", "delete", "--kubeconfig",
                           str(tmp_path / "kc"), "--topology",
                           str(FIXTURES / "dgx-h100.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == EXIT_INVALID
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "dgx-h100.yaml: no simulated nodes (nodes[].simulated: true)")


def test_kind_refuses_a_fleet_in_one_line() -> None:
    import pytest

    from fakegpu.cluster.kind.provider import KindProvider
    from fakegpu.cluster.provider import ClusterSpec
    from fakegpu.errors import InvalidInput
    from fakegpu.topology.load import load_topology

    path = FIXTURES / "fleet-small.yaml"
    spec = ClusterSpec("fg-x", path, load_topology(path), "1.37.2")
    with pytest.raises(InvalidInput) as err:
        KindProvider().check_host(spec)
    assert str(err.value) == (f"{path}: simulated nodes (fleets) need the embedded provider; "
                              "the kind provider does not run them")
