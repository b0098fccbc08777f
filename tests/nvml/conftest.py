"""Helpers for the fake NVML tests: render a node into tmp_path, run Python (pynvml) in a
subprocess that sees only that node, and get its JSON answer back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakegpu.nvml import env, state
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology
from fakegpu.topology.packaged import FIXTURES

FIXTURE_FILES = sorted(FIXTURES.glob("*.yaml"))

RunPy = Callable[..., Any]


@pytest.fixture(scope="session")
def libdir() -> Path:
    return env.libdir()


def topology(name: str) -> Topology:
    return load_topology(FIXTURES / f"{name}.yaml")


def render_node(tmp_path: Path, topo: Topology, node: str) -> Path:
    return state.render(topo, node, tmp_path / f"{node}.state")


def run_python(state_path: Path | str, code: str, *, timeout: float = 60,
               extra_env: dict[str, str] | None = None, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter wired to the node; it prints JSON on its last line."""
    environ = dict(os.environ)
    environ["LD_LIBRARY_PATH"] = str(env.libdir())
    environ["FAKEGPU_NVML_STATE"] = str(state_path)
    environ.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def py_json(state_path: Path | str, code: str, **kw: Any) -> Any:
    proc = run_python(state_path, code, **kw)
    return json.loads(proc.stdout.strip().splitlines()[-1])
