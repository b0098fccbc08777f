from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from fakegpu.plugin.discovery import normalize_bus_id, pcie_root
from fakegpu.plugin.slices import semver


def test_bus_id_in_sysfs_form() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("00000001:C1:00.0") == "0001:c1:00.0"


def test_pcie_root_from_sysfs_and_fallback(tmp_path: Path) -> None:
    real = tmp_path / "devices" / "pci0000:17" / "0000:17:00.0" / "0000:18:00.0"
    real.mkdir(parents=True)
    (tmp_path / "bus").mkdir()
    (tmp_path / "bus" / "0000:18:00.0").symlink_to(real)
    assert pcie_root("0000:18:00.0", str(tmp_path / "bus")) == "pci0000:17"
    assert pcie_root("0000:3b:00.0", str(tmp_path / "bus")) == "pci0000:3b"


def test_semver_strips_leading_zeros() -> None:
    assert semver("580.159.03") == "580.159.3"
    assert semver("9.0") == "9.0.0"
    assert semver("13") == "13.0.0"


REPO = Path(__file__).resolve().parents[2]
_READ = """
import dataclasses, json
from fakegpu.plugin import discovery
inv = discovery.discover()
print(json.dumps({"lost": list(inv.lost_indices),
                  "devices": [dataclasses.asdict(d) for d in inv.devices]}))
"""


def _fake_node(tmp_path: Path, fixture: str, node: str) -> tuple[Path, dict[str, str]]:
    from fakegpu.nvml import env, state
    from fakegpu.topology.load import load_topology

    path = state.render(load_topology(REPO / "fixtures" / fixture), node, tmp_path / "s.bin")
    return path, {**os.environ, **env.env(path)}


def _discover(environ: dict[str, str]) -> dict[str, Any]:
    # pynvml binds libnvidia-ml.so.1 once per process: read in a fresh one.
    out = subprocess.run([sys.executable, "-c", _READ], env=environ, capture_output=True,
                         text=True, check=True, timeout=60)
    return dict(json.loads(out.stdout))


def test_mig_devices_read_back_from_the_fake_library(tmp_path: Path) -> None:
    from fakegpu.topology.load import load_topology

    node = load_topology(REPO / "fixtures" / "mixed.yaml").node("a100-0")
    _path, environ = _fake_node(tmp_path, "mixed.yaml", "a100-0")
    got = _discover(environ)
    by_name = {d["name"]: d for d in got["devices"]}
    # GPU 0 has three instances, GPU 1 MIG on without instances (nothing to offer),
    # GPUs 2 and 3 are whole GPUs: a GPU in MIG mode is never offered whole.
    migs = [d for d in got["devices"] if d["type"] == "mig"]
    assert sorted(d["profile"] for d in migs) == sorted(
        i.profile for i in node.gpus[0].mig.instances)
    assert sorted(d["name"] for d in got["devices"] if d["type"] == "gpu") == ["gpu-2", "gpu-3"]
    parent_uuid = {d["parent_uuid"] for d in migs}
    assert len(parent_uuid) == 1 and parent_uuid.pop().startswith("GPU-")
    for d in migs:
        m = d["mig"]
        assert d["name"] == (f"gpu-{d['minor']}-mig-{m['profile_id']}-{m['placement_start']}-"
                             f"{m['placement_size']}")
        assert d["uuid"].startswith("MIG-") and m["multiprocessors"] > 0
    # The profiles' real ids and sizes: 3g.20gb is id 9 over 4 memory slices at 0.
    three = next(d for d in migs if d["profile"] == "3g.20gb")
    assert (three["mig"]["profile_id"], three["mig"]["placement_start"],
            three["mig"]["placement_size"]) == (9, 0, 4)
    assert by_name["gpu-2"]["mig"] is None and got["lost"] == []


def test_a_lost_gpu_is_reported_not_fatal(tmp_path: Path) -> None:
    from fakegpu.nvml import faults

    path, environ = _fake_node(tmp_path, "dgx-h100.yaml", "dgx-h100-0")
    faults.inject(path, 3, "gpu-lost")
    got = _discover(environ)
    assert got["lost"] == [3]
    assert len(got["devices"]) == 7 and all(d["index"] != 3 for d in got["devices"])


def test_carry_lost_keeps_last_known_devices_marked() -> None:
    from fakegpu.plugin.discovery import Inventory, carry_lost

    from .helpers import gpu

    before = Inventory("580.1", "13.0", tuple(replace(gpu(i), index=i) for i in range(3)))
    after = Inventory("580.1", "13.0", (before.devices[0], before.devices[2]), lost_indices=(1,))
    merged = carry_lost(before, after)
    assert [(d.name, d.lost) for d in merged.devices] == [
        ("gpu-0", False), ("gpu-1", True), ("gpu-2", False)]
    assert carry_lost(None, after) == after  # an instance started after the loss
