"""Monitoring tools from PyPI, built on pynvml, run against the fake node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.nvml import env

from .conftest import render_node, topology

pytestmark = pytest.mark.integration


def _environ(path: Path) -> dict[str, str]:
    return dict(os.environ, **env.env(path), TERM="dumb", COLUMNS="200")


def test_gpustat_lists_fake_gpus(tmp_path: Path) -> None:
    topo = topology("hgx-h200")
    node = topo.nodes[0]
    path = render_node(tmp_path, topo, node.name)
    text = subprocess.run([sys.executable, "-m", "gpustat", "--no-color"], capture_output=True,
                          text=True, timeout=120, env=_environ(path), check=False)
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if line.startswith("[")]
    assert [line.split(" |")[0] for line in lines] == [
        f"[{g.index}] {g.product.name}" for g in node.gpus]
    out = subprocess.run([sys.executable, "-m", "gpustat", "--json"], capture_output=True,
                         text=True, timeout=120, env=_environ(path), check=False)
    assert out.returncode == 0, out.stderr
    gpus = json.loads(out.stdout)["gpus"]
    assert [[g["index"], g["name"], g["uuid"], g["memory.total"]] for g in gpus] == [
        [g.index, g.product.name, g.uuid, g.product.memory_mib] for g in node.gpus]


def test_nvitop_lists_fake_gpus(tmp_path: Path) -> None:
    # nvitop is a test dependency: its absence is a broken install, not a reason to skip.
    assert shutil.which("nvitop", path=str(Path(sys.executable).parent)), "nvitop not installed"
    topo = topology("dgx-h100")
    node = topo.nodes[0]
    path = render_node(tmp_path, topo, node.name)
    code = """
import json
from nvitop import Device
print(json.dumps([[d.index, d.name(), d.uuid(), d.memory_total(), d.bus_id()]
                  for d in Device.all()]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_environ(path), check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == [[g.index, g.product.name, g.uuid, g.product.memory_mib * 1024 * 1024,
                    g.pci.bus_id] for g in node.gpus]
    once = subprocess.run([str(Path(sys.executable).parent / "nvitop"), "--once"],
                          capture_output=True, text=True, timeout=120, env=_environ(path),
                          check=False)
    assert once.returncode == 0, once.stderr
    assert once.stdout.count("H100") >= len(node.gpus)
