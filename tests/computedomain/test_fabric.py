"""A node's fabric read through the real fake NVML (pynvml on fakegpu's library), in a fresh
process: gb200-mini's GPUs are in one completed clique; a degraded GPU makes the node unfit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.nvml import env, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

_SCRIPT = """
import json, sys
from fakegpu.computedomain import fabric
from fakegpu.nvml import faults
before = fabric.read()
faults.inject(sys.argv[1], 2, "fabric-degraded")
after = fabric.read()
print(json.dumps([before.clique, before.problem, after.clique, after.problem,
                  len(before.gpus)]))
"""


def test_gb200_mini_node_is_one_clique_until_a_gpu_degrades(tmp_path: Path) -> None:
    topo = load_topology(FIXTURES / "gb200-mini.yaml")
    path = state.render(topo, topo.nodes[0].name, tmp_path / "node.state")
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(path)],
                         env={**os.environ, **env.env(path)}, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    clique, problem, after_clique, after_problem, count = json.loads(
        res.stdout.strip().splitlines()[-1])
    assert count == 4 and problem == ""
    cluster, _, number = clique.rpartition(".")
    assert len(cluster) == 36 and number == "1", clique  # gb200-mini: clique 1
    assert after_clique == "" and "GPU 2" in after_problem and "degraded" in after_problem
