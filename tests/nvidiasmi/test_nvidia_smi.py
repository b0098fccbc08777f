"""fakegpu's nvidia-smi against the fake NVML library: what it prints is what pynvml reads."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fakegpu.nvidiasmi import path as smi_path
from fakegpu.nvml.env import ensure_state, env
from fakegpu.paths import repo_fixtures_dir
from fakegpu.testkit.gpus import read_node_gpus
from fakegpu.topology.load import load_topology

pytestmark = pytest.mark.integration


def _state(tmp_path: Path, fixture: str, node: str) -> Path:
    topology = load_topology(repo_fixtures_dir() / fixture)
    return ensure_state(topology, node, tmp_path / f"{node}.state")


def _smi(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(smi_path()), *args], env={**os.environ, **env(state)},
                          capture_output=True, text=True, timeout=60, check=False)


def test_list_prints_every_gpu_nvml_reports(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "-L")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"GPU {g.index}: {g.name} (UUID: {g.uuid})"
                                       for g in read_node_gpus(state)]


def test_query_gpu_csv(tmp_path: Path) -> None:
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{g.index}, {g.uuid}, {g.pci_bus_id}"
                                       for g in read_node_gpus(state)]
    with_header = _smi(state, "--query-gpu=name,memory.total", "--format=csv")
    assert with_header.stdout.splitlines()[0] == "name, memory.total [MiB]"
    assert with_header.stdout.splitlines()[1].endswith(" MiB")
    bad = _smi(state, "--query-gpu=index,warp.speed", "--format=csv")
    assert bad.returncode == 2 and "warp.speed" in bad.stderr


def test_topo_shows_nvswitch_links_between_every_pair(tmp_path: Path) -> None:
    # DGX H100: 18 NVLinks per GPU, all through NVSwitches.
    state = _state(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    out = _smi(state, "topo", "-m")
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines() if line.startswith("GPU")]
    assert len(rows) == 8
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row[1:9]]
        assert cells[i] == "X" and {c for j, c in enumerate(cells) if j != i} == {"NV18"}


def test_mig_devices_and_instances(tmp_path: Path) -> None:
    topology = load_topology(repo_fixtures_dir() / "partitioning.yaml")
    node = next(n for n in topology.nodes if any(g.mig.enabled for g in n.gpus))
    state = ensure_state(topology, node.name, tmp_path / "mig.state")
    listed = _smi(state, "-L").stdout.splitlines()
    migs = [line for line in listed if line.startswith("  MIG ")]
    gis = [line for line in _smi(state, "mig", "-lgi").stdout.splitlines()
           if line.startswith("|  ") and "MIG" in line]
    assert migs and len(gis) == len(migs)  # one compute instance per GPU instance here
    assert all("(UUID: MIG-" in line for line in migs)


def test_without_a_node_state_it_says_the_driver_is_not_there(tmp_path: Path) -> None:
    # As NVIDIA's exits 9 on a host without the driver loaded.
    from fakegpu.nvml.env import libdir

    bare = {k: v for k, v in os.environ.items() if k != "FAKEGPU_NVML_STATE"}
    out = subprocess.run([str(smi_path()), "-L"], capture_output=True, text=True, timeout=60,
                         check=False, env={**bare, "LD_LIBRARY_PATH": str(libdir())})
    assert out.returncode == 9 and out.stdout == ""
    assert "couldn't communicate with the NVIDIA driver" in out.stderr
