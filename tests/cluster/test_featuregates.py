"""The DRA gate / API version table: what each release gets, and how it is formatted."""

from __future__ import annotations

import subprocess

import pytest

from fakegpu.cluster import featuregates as fg
from fakegpu.cluster.artifacts import binaries
from fakegpu.errors import InvalidInput


@pytest.mark.parametrize(("text", "minor"), [("1.37", 37), ("1.34.1", 34), ("v1.35.0", 35),
                                             ("1.38.0-beta.0", 38), ("v1.38.0-rc.1", 38)])
def test_parse_minor(text: str, minor: int) -> None:
    assert fg.parse_minor(text) == minor


@pytest.mark.parametrize("text", ["", "2.1", "1.x", "1.37.2.1", "latest", "1.38-beta.0",
                                  "1.38.0-"])
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
                "DRAConsumableCapacity", "DRAExtendedResource", "ResourceHealthStatus",
                "DRADeviceBindingConditions", "DRASchedulerFilterTimeout",
                "KubeletPodResourcesDynamicResources", "KubeletPodResourcesGet",
                "DRAListTypeAttributes", "DRAResourcePoolStatus",
                "DRADeviceCompatibilityGroups", "DRAFractionalCapacityRange",
                "ResourceHealthStatusMessage", "DRAResourceClaimGranularStatusAuthorization"}
    assert expected <= set(gates)
    assert all(gates.values())


# The minor that introduced each gate of 1.36-1.38's DRA features (kube_features.go's
# versioned specs of v1.38.0-beta.0); the kubelet's PodResources gates predate MIN_MINOR.
_INTRODUCED = {"DRADeviceBindingConditions": 34, "DRASchedulerFilterTimeout": 34,
               "DRAListTypeAttributes": 36, "DRAResourcePoolStatus": 36,
               "ResourceHealthStatusMessage": 36, "DRAResourceClaimGranularStatusAuthorization": 36,
               "DRADeviceCompatibilityGroups": 37, "DRAFractionalCapacityRange": 37,
               "KubeletPodResourcesDynamicResources": fg.MIN_MINOR,
               "KubeletPodResourcesGet": fg.MIN_MINOR}


@pytest.mark.parametrize(("gate", "minor"), sorted(_INTRODUCED.items()))
def test_a_new_gate_starts_in_its_minor(gate: str, minor: int) -> None:
    assert gate in fg.dra_gates(minor)
    assert gate in fg.dra_gates(fg.MAX_MINOR)
    if minor > fg.MIN_MINOR:
        # Naming it one minor earlier would stop that release's components at startup.
        assert gate not in fg.dra_gates(minor - 1)


def test_the_dependencies_of_the_new_gates_are_on_wherever_they_are() -> None:
    # kube_features.go: an enabled gate whose dependencies are off is a startup error.
    needs = {"DRADeviceBindingConditions": {"DRAResourceClaimDeviceStatus"},
             "DRADeviceCompatibilityGroups": {"DRAPartitionableDevices"},
             "DRAFractionalCapacityRange": {"DRAConsumableCapacity"},
             "ResourceHealthStatusMessage": {"ResourceHealthStatus"},
             "DRAResourceClaimGranularStatusAuthorization": {"DRAResourceClaimDeviceStatus"}}
    for minor in range(fg.MIN_MINOR, fg.MAX_MINOR + 1):
        gates = fg.dra_gates(minor)
        for gate, deps in needs.items():
            if gate in gates:
                assert deps <= set(gates), (minor, gate)


# Gates a release removed: naming one there is an "unrecognized feature gate" startup error.
_REMOVED = {38: {"DynamicResourceAllocation"}}


def test_gates_only_grow_between_releases_but_for_removed_ones() -> None:
    for minor in range(fg.MIN_MINOR, fg.MAX_MINOR):
        gone = _REMOVED.get(minor + 1, set())
        assert set(fg.dra_gates(minor)) - gone <= set(fg.dra_gates(minor + 1))
        assert not gone & set(fg.dra_gates(minor + 1))


def test_138_drops_dynamic_resource_allocation_and_keeps_the_rest() -> None:
    # v1.38.0-beta.0's kube-apiserver refuses DynamicResourceAllocation (removed, GA since 1.35)
    # and accepts every other gate of 1.37.
    assert "DynamicResourceAllocation" in fg.dra_gates(37)
    assert set(fg.dra_gates(38)) == set(fg.dra_gates(37)) - {"DynamicResourceAllocation"}
    # The 1.38 apiserver no longer serves resource.k8s.io/v1beta1 (removed in 1.38).
    assert "resource.k8s.io/v1beta1" in fg.runtime_config(37)
    assert fg.runtime_config(38) == {"resource.k8s.io/v1alpha3": True,
                                     "resource.k8s.io/v1beta2": True,
                                     "scheduling.k8s.io/v1beta1": True}


def test_runtime_config_per_release() -> None:
    assert fg.runtime_config(32) == {"resource.k8s.io/v1alpha3": True,
                                     "resource.k8s.io/v1beta1": True}
    assert "resource.k8s.io/v1beta2" in fg.runtime_config(33)
    assert "resource.k8s.io/v1beta2" in fg.runtime_config(37)
    # PodGroups (GenericWorkload) from 1.37 on.
    assert "scheduling.k8s.io/v1beta1" in fg.runtime_config(37)
    assert "scheduling.k8s.io/v1beta1" not in fg.runtime_config(36)


@pytest.mark.parametrize("minor", [31, 39])
def test_unknown_release_is_invalid_input(minor: int) -> None:
    with pytest.raises(InvalidInput, match=f"1.{minor}"):
        fg.dra_gates(minor)
    with pytest.raises(InvalidInput):
        fg.runtime_config(minor)


def test_format_map_is_sorted_and_lowercase() -> None:
    assert fg.format_map({"B": True, "A": False}) == "A=false,B=true"
    assert fg.format_map({}) == ""


# --- the table against the built binaries (filled by `fakegpu cluster binaries`) ---------------

@pytest.mark.integration
@pytest.mark.parametrize("version", sorted(binaries.SUPPORTED.values()))
def test_the_built_apiserver_accepts_the_gates_of_its_minor(version: str) -> None:
    # kube-apiserver parses --feature-gates before --version prints: an unknown gate exits 1
    # ("unrecognized feature gate") without starting anything, so this costs a second.
    bins = binaries.cached(version)
    if bins is None:
        pytest.skip(f"SKIPPED: Kubernetes {version} is not cached; run "
                    f"`fakegpu cluster binaries --k8s-version {version}`")
    gates = fg.format_map(fg.dra_gates(fg.parse_minor(version)))
    ok = subprocess.run([str(bins.kube_apiserver), f"--feature-gates={gates}", "--version"],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert f"v{version}" in ok.stdout
    bad = subprocess.run([str(bins.kube_apiserver), "--feature-gates=NoSuchDRAGate=true",
                          "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "unrecognized feature gate" in bad.stderr
