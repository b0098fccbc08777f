"""The NIC plugin container's entrypoint (``python -m fakegpu.node.nic``), run as the chart
runs it, up to the point where it would exec the plugin: a node without a PCIe tree is served
idle until SIGTERM (it must not read the machine's real /sys); a node the topology does not
name is one line and exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import resolve_topology

TOPOLOGY = """\
name: no-tree
seed: 1
nodes:
  - {name: big-0, gpus: {product: H100-SXM5-80GB, count: 9}, nvlink: none}
"""


def _start(tmp_path: Path, node: str) -> subprocess.Popen[str]:
    (tmp_path / "t.yaml").write_text(TOPOLOGY)
    env = {**os.environ, "NODE_NAME": node, "FAKEGPU_TOPOLOGY": str(tmp_path / "t.yaml"),
           "FAKEGPU_NVML_STATE_DIR": str(tmp_path / "state")}
    return subprocess.Popen([sys.executable, "-m", "fakegpu.node.nic"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_node_without_a_pcie_tree_waits_idle_for_its_sigterm(tmp_path: Path) -> None:
    proc = _start(tmp_path, "big-0")
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()  # after its signals are blocked: SIGTERM cannot be lost
        assert said.strip() == ("fakegpu nic entrypoint: node big-0 has no PCIe tree in the "
                                "topology: no NICs to serve"), said
        time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()
        # Its NVML state is rendered (the GPU plugin's), with no sysfs view beside it.
        assert (tmp_path / "state" / "big-0.state").is_file()
        assert not (tmp_path / "state" / "big-0.state.sysfs").exists()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err

def test_a_node_the_topology_does_not_name_is_one_line(tmp_path: Path) -> None:
    proc = _start(tmp_path, "nope")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "fakegpu nic entrypoint: node 'nope' is not in topology 'no-tree' (its nodes: big-0)"]


@pytest.mark.parametrize(("module", "command"), [
    ("fakegpu.node.entrypoint", "plugin run"),
    ("fakegpu.node.nic", "nic run"),
    ("fakegpu.computedomain.entrypoint", "computedomain plugin"),
])
def test_each_entrypoint_becomes_its_plugin(tmp_path: Path, module: str, command: str) -> None:
    """The three plugin containers' PID 1 exec ``fakegpu <command> --node <node> ARGS`` (here
    ``--help``, so the plugin only prints its usage) and say so in one line first."""
    node = load_topology(resolve_topology("dgx-h100")).nodes[0].name
    env = {**os.environ, "NODE_NAME": node, "FAKEGPU_TOPOLOGY": str(resolve_topology("dgx-h100")),
           "FAKEGPU_NVML_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], env=env, text=True,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr.splitlines()[-1]
    assert said.startswith("fakegpu ") and f"node {node}" in said, said
    assert said.endswith(f"fakegpu {command} --node {node} --help"), said
    assert proc.stdout.startswith(f"usage: fakegpu {command}"), proc.stdout[:200]
