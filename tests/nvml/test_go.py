"""go-nvml and go-nvlib (NVIDIA's Go bindings, as the DRA driver uses them) read the node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from fakegpu.nvml import env
from fakegpu.topology.model import LinkState

from .conftest import render_node, topology

pytestmark = pytest.mark.integration
GO_DIR = Path(__file__).resolve().parents[1] / "go"


# mixed/a100-0 has a GPU with MIG on and instances, one with MIG on and none, and two with
# MIG off: go-nvlib's GetMigDevices must enumerate each (nvidia-ctk cdi generate relies on it).
@pytest.mark.parametrize(("fixture", "node_name"), [
    ("dgx-h100", None), ("gb200-mini", None), ("mixed", "a100-0"),
])
def test_go_nvml(fixture: str, node_name: str | None, tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed")
    topo = topology(fixture)
    node = topo.nodes[-1] if node_name is None else topo.node(node_name)
    path = render_node(tmp_path, topo, node.name)
    expect = {
        "driver": topo.driver.version,
        "gpus": [{
            "index": g.index, "minor": g.minor, "uuid": g.uuid, "name": g.product.name,
            "memory_mib": g.product.memory_mib, "bus_id": g.pci.bus_id,
            "clique": "" if g.fabric is None else
            f"{uuid.UUID(g.fabric.cluster_uuid)}.{g.fabric.clique_id}",
            "links": sum(1 for link in g.nvlinks if link.state is LinkState.UP),
            "mig_capable": g.product.mig is not None,
            "mig_devices": len(g.mig.instances) if g.mig.enabled else 0,
        } for g in node.gpus],
    }
    expect_file = tmp_path / "expect.json"
    expect_file.write_text(json.dumps(expect))
    environ = dict(os.environ, **env.env(path), FAKEGPU_EXPECT=str(expect_file),
                   GOFLAGS="-mod=mod", CGO_ENABLED="1")
    proc = subprocess.run([go, "test", "-count=1", "-v", "."], cwd=GO_DIR, env=environ,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "--- PASS: TestGoNvmlReadsTheNode" in proc.stdout
    assert "--- PASS: TestGoNvlibEnumerates" in proc.stdout
