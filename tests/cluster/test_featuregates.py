"""The DRA gate / API version table: what each release gets, and how it is formatted."""

from __future__ import annotations

import pytest

from fakegpu.cluster import featuregates as fg
from fakegpu.errors import InvalidInput


@pytest.mark.parametrize(("text", "minor"), [("1.37", 37), ("1.34.1", 34), ("v1.35.0", 35)])
def test_parse_minor(text: str, minor: int) -> None:
    assert fg.parse_minor(text) == minor


@pytest.mark.parametrize("text", ["", "2.1", "1.x", "1.37.2.1", "latest"])
def test_parse_minor_rejects(text: str) -> None:
    with pytest.raises(InvalidInput):
        fg.parse_minor(text)


def test_gates_appear_in_the_release_that_introduced_them() -> None:
    assert "DRADeviceTaintRules" not in fg.dra_gates(34)
    assert "DRADeviceTaintRules" in fg.dra_gates(35)
    assert "DRAConsumableCapacity" not in fg.dra_gates(33)
    assert "DRAConsumableCapacity" in fg.dra_gates(34)
    assert "DRAPrioritizedList" not in fg.dra_gates(32)


def test_every_named_gate_is_on_in_137() -> None:
    gates = fg.dra_gates(37)
    expected = {"DRAAdminAccess", "DRAPrioritizedList", "DRADeviceTaints", "DRADeviceTaintRules",
                "DRAPartitionableDevices", "DRAResourceClaimDeviceStatus",
                "DRAConsumableCapacity", "DRAExtendedResource", "ResourceHealthStatus"}
    assert expected <= set(gates)
    assert all(gates.values())


def test_gates_only_grow_between_releases() -> None:
    # No gate in the table has been removed yet: a later release never loses one.
    for minor in range(fg.MIN_MINOR, fg.MAX_MINOR):
        assert set(fg.dra_gates(minor)) <= set(fg.dra_gates(minor + 1))


def test_runtime_config_per_release() -> None:
    assert fg.runtime_config(32) == {"resource.k8s.io/v1alpha3": True,
                                     "resource.k8s.io/v1beta1": True}
    assert "resource.k8s.io/v1beta2" in fg.runtime_config(33)
    assert "resource.k8s.io/v1beta2" in fg.runtime_config(37)


@pytest.mark.parametrize("minor", [31, 38])
def test_unknown_release_is_invalid_input(minor: int) -> None:
    with pytest.raises(InvalidInput, match=f"1.{minor}"):
        fg.dra_gates(minor)
    with pytest.raises(InvalidInput):
        fg.runtime_config(minor)


def test_format_map_is_sorted_and_lowercase() -> None:
    assert fg.format_map({"B": True, "A": False}) == "A=false,B=true"
    assert fg.format_map({}) == ""
