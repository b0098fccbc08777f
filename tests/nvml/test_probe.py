"""The fidelity probe: it reads back what the topology says, and its comparison finds drift."""

from __future__ import annotations

import json
from pathlib import Path

from fakegpu.nvml.probe import compare

from .conftest import py_json, render_node, run_python, topology

PROBE = "import json, fakegpu.nvml.probe as p; print(json.dumps(p.probe()))"
COMPARE = "import fakegpu.nvml.probe as p; raise SystemExit(p.main(['--compare', '{}', '{}']))"


def test_probe_reads_the_topology(tmp_path: Path) -> None:
    topo = topology("hgx-h200")
    node = topo.nodes[0]
    dump = py_json(render_node(tmp_path, topo, node.name), PROBE)
    assert dump["system"]["driver_version"] == topo.driver.version
    assert [d["uuid"] for d in dump["devices"]] == [g.uuid for g in node.gpus]
    assert [d["pci"]["busId"] for d in dump["devices"]] == [g.pci.bus_id for g in node.gpus]
    first = dump["devices"][0]
    assert first["memory_v1"]["total"] == node.gpus[0].product.memory_mib * 1024 * 1024
    assert len(first["nvlinks"]) == node.gpus[0].product.nvlink.links_per_gpu  # type: ignore[union-attr]
    infos = [e["info"] for e in first["mig_profiles"].values()]
    names = {i["name"] for i in infos if isinstance(i, dict)}
    assert names == {p.name for p in node.gpus[0].product.mig.profiles}  # type: ignore[union-attr]


def test_compare_separates_drift_from_identity(tmp_path: Path) -> None:
    h200, h100 = topology("hgx-h200"), topology("dgx-h100")
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(py_json(render_node(tmp_path, h200, h200.nodes[0].name), PROBE)))
    b.write_text(json.dumps(py_json(render_node(tmp_path, h100, h100.nodes[0].name), PROBE)))
    same = run_python(a, COMPARE.format(a, a))
    assert same.stdout.strip().endswith("# 0 differences (0 identity fields left out)")
    differ = run_python(a, COMPARE.format(a, b), check=False)
    assert differ.returncode == 1
    assert "devices[0].name: 'NVIDIA H200' != 'NVIDIA H100 80GB HBM3'" in differ.stdout
    assert "uuid" not in differ.stdout.split("#")[0]


def test_compare_leaves() -> None:
    assert compare({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": 1}) == [
        ("a[1].b", 2, 3), ("c", "<absent>", 1)]
