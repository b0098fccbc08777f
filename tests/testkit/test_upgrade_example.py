"""examples/upgrade-under-load (docs/vendors.md): its command line and its verdict on a load
and the samples, without a cluster (the load harness itself is proven by e2e/test_upgrade.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fakegpu.testkit.load import LoadReport, PodRecord
from fakegpu.testkit.upgrade import Sample

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/upgrade-under-load/upgrade_under_load.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upgrade_under_load", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_upgrade_command_follows_the_separator(example: ModuleType) -> None:
    args = example.parse(["--kubeconfig", "k", "--driver", "gpu.example.com", "--",
                          "helm", "upgrade", "d", "./chart", "--set", "image.tag=v2"])
    assert args.upgrade == ["helm", "upgrade", "d", "./chart", "--set", "image.tag=v2"]
    assert args.device_class is None and args.rate == 0.5


def test_no_upgrade_command_is_a_usage_error(example: ModuleType) -> None:
    with pytest.raises(SystemExit) as exited:
        example.parse(["--kubeconfig", "k", "--driver", "d"])
    assert exited.value.code == 2


def _load(*pods: PodRecord) -> LoadReport:
    return LoadReport(started_at=0.0, duration_s=10.0, pods=pods)


def test_a_clean_upgrade_has_no_problem(example: ModuleType) -> None:
    load = _load(PodRecord("p0", "n0", 0.0, started=1.0, finished=2.0))
    samples = [Sample(0.5, {"n0": 4}, {}), Sample(1.0, {"n0": 4}, {})]
    assert example.problems(load, samples, {"n0": 4}) == []


def test_failed_unstarted_pods_and_withdrawn_devices_are_problems(example: ModuleType) -> None:
    load = _load(PodRecord("p0", "n0", 0.0, failed=3.0, failure="exit 1"),
                 PodRecord("p1", "n1", 0.0),
                 PodRecord("p2", "n1", 0.0, started=1.0, finished=2.0))
    samples = [Sample(0.5, {"n0": 4, "n1": 4}, {}), Sample(1.0, {"n0": 4}, {})]
    assert example.problems(load, samples, {"n0": 4, "n1": 4}) == [
        "pod p0 on n0 failed at 3.0s: exit 1",  # reported once, not also as never started
        "pod p1 on n1 never started",
        "node n1 published 0 devices during the upgrade, 4 before",
    ]
