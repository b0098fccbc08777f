"""The Actions workflows: actionlint passes on ours, on the composite action's steps and on the
sample workflows of docs/vendors.md; the e2e matrix covers what fakegpu supports."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from fakegpu.cluster import PROVIDERS
from fakegpu.cluster.artifacts import binaries
from fakegpu.cluster.kind import tools
from fakegpu.topology.packaged import FIXTURES

from .conftest import REPO

WORKFLOWS = REPO / ".github" / "workflows"


def _actionlint(files: list[str], cwd: Path = REPO) -> None:
    actionlint = tools.executable(tools.actionlint())  # built from the Go proxy when missing
    out = subprocess.run([str(actionlint), *files], capture_output=True, text=True, check=False,
                         cwd=cwd)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_passes() -> None:
    # From the repository's root: `uses: ./` (action-test.yml) is checked against action.yml.
    _actionlint(sorted(str(p) for p in WORKFLOWS.glob("*.yml")))


def action_as_workflow(action: dict[str, Any]) -> dict[str, Any]:
    """The composite action's steps as a reusable workflow's job, its inputs as the workflow's
    (actionlint checks workflows only: this way its expressions, the outputs of the actions it
    uses and, where shellcheck is installed, its scripts are checked too)."""
    inputs = {name: {"type": "string", "default": spec["default"]}
              for name, spec in action["inputs"].items()}
    return {"name": "action-steps", "on": {"workflow_call": {"inputs": inputs}},
            "jobs": {"steps": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}}}


def test_actionlint_passes_on_the_action_and_the_vendor_samples(tmp_path: Path) -> None:
    from tests.test_action import sample_workflows

    action = yaml.safe_load((REPO / "action.yml").read_text())
    files = [tmp_path / "action-steps.yml"]
    files[0].write_text(yaml.safe_dump(action_as_workflow(action), sort_keys=False))
    for name, text in sample_workflows().items():
        files.append(tmp_path / name)
        files[-1].write_text(text)
    _actionlint([str(f) for f in files], cwd=tmp_path)


def test_matrix_covers_every_minor_provider_and_topology() -> None:
    wf = yaml.safe_load((WORKFLOWS / "e2e.yml").read_text())
    matrix = wf["jobs"]["e2e"]["strategy"]["matrix"]
    assert matrix["k8s"] == list(binaries.SUPPORTED)
    assert sorted(matrix["provider"]) == sorted(PROVIDERS)
    for topology in matrix["topology"]:
        assert (FIXTURES / f"{topology}.yaml").is_file()
