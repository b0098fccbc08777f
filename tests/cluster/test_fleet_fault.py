"""A fault on a simulated (fleet) node reaches the cluster only through the fleet publisher:
with that process dead, `fakegpu fault inject --cluster` said it injected the fault and
nothing changed. It now fails, one line, exit 1. No cluster runs: a state directory names a
publisher that is dead, or one that is alive (this test process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cli import main
from fakegpu.cluster.embedded import fleet, state
from fakegpu.cluster.process import ProcessRecord, start_ticks


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             publisher: ProcessRecord | None) -> None:
    monkeypatch.setenv(state.CLUSTERS_ENV, str(tmp_path))
    root = tmp_path / "c1"
    root.mkdir()
    st = state.ClusterState(name="c1", root=root, k8s_version="1.37.2", slot=2,
                            nodes=[state.NodeState("n0", 0, True)], simulated=["sim-0"])
    if publisher is not None:
        st.processes[fleet.PUBLISHER] = publisher
    st.save()


def _dead(tmp_path: Path) -> ProcessRecord:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    ticks = start_ticks(proc.pid) or 1
    proc.wait()
    return ProcessRecord(fleet.PUBLISHER, proc.pid, ticks, sys.executable,
                         tmp_path / "publisher.log")


@pytest.mark.parametrize("recorded", [True, False])
def test_a_fault_on_a_simulated_node_with_its_publisher_dead_fails_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        recorded: bool) -> None:
    _cluster(tmp_path, monkeypatch, _dead(tmp_path) if recorded else None)
    for action in (["inject", "--gpu", "0", "xid", "79"], ["clear", "--gpu", "0"]):
        assert main(["fault", *action, "--cluster", "c1", "--node", "sim-0"]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, err
        assert err.startswith("fakegpu: cluster 'c1': the fleet publisher is not running")
    assert not (tmp_path / "c1" / "fleet").exists()  # nothing was written


def test_a_fault_on_a_simulated_node_with_its_publisher_alive_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    me = ProcessRecord(fleet.PUBLISHER, os.getpid(), start_ticks(os.getpid()) or 0,
                       sys.executable, tmp_path / "publisher.log")
    _cluster(tmp_path, monkeypatch, me)
    # Past the check: the node's state file is what is missing here (exit 2), not the publisher.
    assert main(["fault", "inject", "--gpu", "0", "xid", "79", "--cluster", "c1",
                 "--node", "sim-0"]) == 2
    err = capsys.readouterr().err
    assert "fleet publisher" not in err and "no state file" in err, err
