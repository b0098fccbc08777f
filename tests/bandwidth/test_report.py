"""``fakegpu bandwidth report``: a heatmap PNG and a markdown table from a results file; bad
input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakegpu.bandwidth import model, report, results
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES


def _document(domain: str = "") -> dict[str, Any]:
    """What `fakegpu bandwidth run` writes for gb200-mini, built from the rules."""
    topology = load_topology(FIXTURES / "gb200-mini.yaml")
    views = model.topology_views(topology, compute_domain=domain)
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    return {"format": results.FORMAT, "simulation": True, "note": "simulated", "unit": "GB/s",
            "network_gbps_per_gpu": topology.network.gbps_per_gpu,
            "gpus": [{"node": v.node, "index": v.index, "uuid": v.uuid} for v in views],
            "bandwidth": values, "paths": [[p.value for p in row] for row in paths]}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "bandwidth", "report", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_report_draws_a_heatmap_and_a_table(tmp_path: Path) -> None:
    src = tmp_path / "results.json"
    src.write_text(json.dumps(_document()))
    out = _cli(str(src), "--out", str(tmp_path / "heat.png"))
    assert out.returncode == 0, out.stderr
    png = (tmp_path / "heat.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    table = (tmp_path / "heat.md").read_text()
    assert "| nvlink-local | 48 | 900 |" in table  # 4 nodes x 4 x 3 ordered pairs
    assert "| network | 192 | 50 |" in table
    assert table.count("\n| gb200-") == 16


def test_markdown_counts_the_paths_of_a_domain_run() -> None:
    data = results.parse(_document(domain="d"), "r.json")
    text = report.markdown(data)
    assert "| nvlink-fabric | 192 | 900 |" in text and "network" not in text
    assert report.node_spans(data) == [(f"gb200-{i}", 4 * i, 4) for i in range(4)]


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not JSON"),
    ("[]", "format: expected 'fakegpu-bandwidth/1'"),
    (json.dumps({**_document(), "gpus": []}), "gpus: expected a list of 1..2048 GPUs"),
    (json.dumps({**_document(), "bandwidth": [[1.0]]}), "bandwidth: expected a list of 16 rows"),
    (json.dumps({**_document(), "paths": [["warp"] * 16] * 16}), "paths[0][0]: expected one of"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: str, message: str) -> None:
    src = tmp_path / "r.json"
    src.write_text(content)
    out = _cli(str(src), "--out", str(tmp_path / "h.png"))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr
    assert not (tmp_path / "h.png").exists()


def test_a_missing_file_is_exit_2(tmp_path: Path) -> None:
    out = _cli(str(tmp_path / "none.json"), "--out", str(tmp_path / "h.png"))
    assert out.returncode == 2 and "no such file" in out.stderr


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": ' + "9" * 5000 + "}", "not JSON"),  # past Python's 4,300-digit int limit
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),  # RecursionError in json
])
def test_hostile_json_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    src = tmp_path / "results.json"
    src.write_text(text)
    out = _cli(str(src), "--out", str(tmp_path / "h.png"))
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"fakegpu: {src}: ") and message in line


def test_a_huge_number_is_a_bad_value(tmp_path: Path) -> None:
    # 10**400 is an int JSON holds but no float: it was an OverflowError traceback.
    doc = _document()
    doc["bandwidth"][0][1] = 10**400
    src = tmp_path / "results.json"
    src.write_text(json.dumps(doc))
    out = _cli(str(src), "--out", str(tmp_path / "h.png"))
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "bandwidth[0][1]" in out.stderr


def test_dollars_are_text_not_mathtext(tmp_path: Path) -> None:
    # matplotlib read "$" in the unit, node names or title as mathtext and failed to parse.
    doc = _document()
    doc["unit"] = r"$\frac{GB$"
    doc["gpus"][0]["node"] = "a$^$b"
    src = tmp_path / "results.json"
    src.write_text(json.dumps(doc))
    out = _cli(str(src), "--out", str(tmp_path / "h.png"), "--title", r"cost $\sqrt{$")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r"$\frac{GB$" in (tmp_path / "h.md").read_text()


def test_outputs_that_cannot_be_written_or_would_replace_the_results(tmp_path: Path) -> None:
    src = tmp_path / "results.json"
    src.write_text(json.dumps(_document()))
    before = src.read_bytes()
    png = str(tmp_path / "results.png")
    for args in (["--out", str(src)], ["--out", str(tmp_path / "h.png"), "--table", str(src)],
                 ["--out", png, "--table", png]):
        out = _cli(str(src), *args)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert src.read_bytes() == before
    out = _cli(str(src), "--out", "/proc/nope/h.png")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "/proc/nope/h.png" in out.stderr and "Traceback" not in out.stderr
