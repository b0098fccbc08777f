"""The topology fuzz target (fuzz/topology.py) keeps working: its seeds hold the contract,
and a broken contract is a crash, not a pass."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType

import pytest

from fakegpu.errors import InvalidInput
from fakegpu.topology.packaged import FIXTURES

TARGET = Path(__file__).resolve().parents[2] / "fuzz" / "topology.py"


def _target() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_topology", TARGET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_seed_holds_the_contract() -> None:
    target = _target()
    assert len(target.SEEDS) > 20
    for seed in target.SEEDS:
        target.check(seed.read_bytes())


def test_a_renderer_refusing_a_valid_topology_is_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    target = _target()

    def refuse(*_args: object) -> bytes:
        raise InvalidInput("topology name too long")

    monkeypatch.setattr(target, "render_bytes", refuse)
    with pytest.raises(InvalidInput):
        target.check((FIXTURES / "dgx-a100.yaml").read_bytes())


def test_plain_mutations_run_for_a_budget(tmp_path: Path) -> None:
    inputs, crashes = _target()._plain(1, tmp_path, timeout=10)
    assert inputs > 0 and crashes == 0
    assert list(tmp_path.iterdir()) == []


def test_the_input_limit_counts_cpu_time_not_the_clock() -> None:
    # A loaded host stretches the clock, not the CPU an input uses: waiting (here sleeping,
    # there being descheduled) past the limit is no crash; computing past it is.
    target = _target()
    with target._cpu_limit(0.2):
        time.sleep(0.5)
    with pytest.raises(target.CpuTimeout), target._cpu_limit(0.2):
        while True:
            sum(range(10_000))
