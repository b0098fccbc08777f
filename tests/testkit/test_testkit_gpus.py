"""Reading a node's GPUs through pynvml and the fake library, as the e2e suites do."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.testkit.gpus import NvmlReadError, read_node_gpus
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration


def test_reads_what_the_state_file_describes(tmp_path: Path) -> None:
    from fakegpu.nvml.env import ensure_state
    from fakegpu.topology.load import load_topology

    topology = load_topology(FIXTURES / "gb200-mini.yaml")
    node = topology.node("gb200-2")
    state = ensure_state(topology, node.name, tmp_path / "gb200-2.state")
    gpus = read_node_gpus(state)
    assert [(g.uuid, g.minor, g.name) for g in gpus] == [
        (g.uuid, g.minor, g.product.name) for g in node.gpus]
    assert [g.pci_bus_id for g in gpus] == [g.pci.bus_id for g in node.gpus]


def test_missing_state_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NvmlReadError, match="does not exist"):
        read_node_gpus(tmp_path / "nope.state")


def test_unreadable_state_is_an_error_with_pynvml_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.state"
    bad.write_bytes(b"not a state file")
    with pytest.raises(NvmlReadError, match="failed"):
        read_node_gpus(bad)
