"""Host NVML state is keyed on what a topology file is (resolved path + content), not on how
it was named: an edited file gets a fresh state without --fresh, two files of the same name get
two states, and the same file keeps its state with the faults injected into it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fakegpu.nvml import env, faults, state
from fakegpu.topology.load import load_topology

from .conftest import FIXTURES

NODE = "dgx-h100-0"


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return run


def _copy(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(FIXTURES / "dgx-h100.yaml", where / "dgx-h100.yaml"))


def test_the_same_file_keeps_its_state_and_faults(tmp_path: Path, libdir: Path) -> None:
    topo = _copy(tmp_path / "a")
    path = env.ensure_state(load_topology(topo), NODE)
    faults.inject(path, 3, "gpu-lost")
    injected = path.read_bytes()
    # Loaded again, and named another way (relative to another directory): the same state.
    again = env.ensure_state(load_topology(tmp_path / "a" / ".." / "a" / "dgx-h100.yaml"), NODE)
    assert again == path
    assert path.read_bytes() == injected


def test_an_edited_file_renders_a_new_state_without_fresh(tmp_path: Path) -> None:
    topo = _copy(tmp_path / "a")
    first = env.ensure_state(load_topology(topo), NODE)
    assert state.read_header(first).gpu_count == 8
    topo.write_text(topo.read_text().replace("count: 8", "count: 4"))
    second = env.ensure_state(load_topology(topo), NODE)
    assert second != first
    assert state.read_header(second).gpu_count == 4


def test_two_files_of_the_same_name_get_two_states(tmp_path: Path) -> None:
    one, two = _copy(tmp_path / "project-a"), _copy(tmp_path / "project-b")
    a = env.ensure_state(load_topology(one), NODE)
    b = env.ensure_state(load_topology(two), NODE)
    assert a != b
    assert a.parent.name.startswith("dgx-h100-") and b.parent.name.startswith("dgx-h100-")


def test_a_relative_name_is_resolved_where_it_was_loaded(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _copy(tmp_path / "a")
    _copy(tmp_path / "b")
    monkeypatch.chdir(tmp_path / "a")
    a = load_topology("dgx-h100.yaml")
    monkeypatch.chdir(tmp_path / "b")
    b = load_topology("dgx-h100.yaml")
    assert a.source == b.source == "dgx-h100.yaml"  # messages keep the name as given
    assert env.state_dir(a) != env.state_dir(b)
