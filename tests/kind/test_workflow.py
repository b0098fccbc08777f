"""The Actions e2e workflow: actionlint passes, and its matrix covers what fakegpu supports."""

from __future__ import annotations

import subprocess

import yaml

from fakegpu.cluster import PROVIDERS
from fakegpu.cluster.artifacts import binaries
from fakegpu.cluster.kind import tools
from fakegpu.topology.packaged import FIXTURES

from .conftest import REPO

WORKFLOWS = REPO / ".github" / "workflows"


def test_actionlint_passes() -> None:
    actionlint = tools.executable(tools.actionlint())  # built from the Go proxy when missing
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    out = subprocess.run([str(actionlint), *files], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_matrix_covers_every_minor_provider_and_topology() -> None:
    wf = yaml.safe_load((WORKFLOWS / "e2e.yml").read_text())
    matrix = wf["jobs"]["e2e"]["strategy"]["matrix"]
    assert matrix["k8s"] == list(binaries.SUPPORTED)
    assert sorted(matrix["provider"]) == sorted(PROVIDERS)
    for topology in matrix["topology"]:
        assert (FIXTURES / f"{topology}.yaml").is_file()
