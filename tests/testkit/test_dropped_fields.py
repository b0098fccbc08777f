"""A field the apiserver drops (its feature gate off, or unknown to its minor) fails the test
kit's create in one line naming the minor that has it, and leaves nothing behind.

Against real kube-apiservers: the default minor (the field is kept) and 1.36, which has no
device compatibility groups (KEP-5963, 1.37+), when its binaries are cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakegpu.cluster import featuregates
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.testkit.dra import ResourceApi, dropped

OLD = "1.36"


def test_dropped_lists_what_the_stored_object_lacks() -> None:
    sent = {"apiVersion": "x", "metadata": {"name": "a", "labels": {"k": "v"}},
            "spec": {"devices": {"requests": [
                {"name": "r0", "exactly": {"deviceClassName": "c", "adminAccess": True}},
                {"name": "r1", "firstAvailable": [{"name": "s", "deviceClassName": "c"}],
                 "selectors": []}]}}}
    stored = {"metadata": {"name": "a", "uid": "u"},
              "spec": {"devices": {"requests": [
                  {"name": "r0", "exactly": {"deviceClassName": "c", "adminAccess": True,
                                             "allocationMode": "ExactCount", "count": 1}},
                  {"name": "r1"}]}}}
    # Metadata is the apiserver's to change; an empty list is omitted, not dropped.
    assert dropped(sent, stored) == ["spec.devices.requests[1].firstAvailable"]
    assert dropped(sent, {**stored, "spec": sent["spec"]}) == []


@pytest.mark.parametrize(("path", "minor", "says"), [
    ("spec.devices.requests[1].firstAvailable", 32,
     "it needs Kubernetes 1.33 or newer (DRAPrioritizedList); this cluster runs 1.32"),
    ("spec.devices[0].consumesCounters[0].compatibilityGroups", 36,
     "it needs Kubernetes 1.37 or newer (DRADeviceCompatibilityGroups)"),
    ("spec.devices.requests[0].exactly.capacity", 37,
     "feature gate DRAConsumableCapacity is off on this cluster"),
    ("spec.devices[0].capacity", 37, "Kubernetes 1.37 does not serve it"),
])
def test_the_reason_names_the_gate_and_the_minor(path: str, minor: int, says: str) -> None:
    assert says in featuregates.dropped_field(path, minor)


def _slice() -> dict[str, Any]:
    """A time-sliced share as fakegpu publishes it: its counters in a compatibility group."""
    return {"kind": "ResourceSlice", "metadata": {"name": "n0-shares"},
            "spec": {"driver": "gpu.fakegpu.dev", "nodeName": "n0",
                     "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 2},
                     "devices": [{"name": "gpu-0-ts-0", "consumesCounters": [{
                         "counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}},
                         "compatibilityGroups": ["time-sliced"]}]}]}}


def _control_plane(version: str | None, tmp: Path) -> Any:
    from fakegpu.cluster.artifacts import binaries
    from fakegpu.cluster.embedded.controlplane import ControlPlane

    bins = binaries.cached(version)
    if bins is None:
        pytest.skip(f"Kubernetes {binaries.resolve_version(version)} is not cached: run "
                    f"`fakegpu cluster binaries --k8s-version {version}`")
    return ControlPlane(tmp, bins, controllers=False)


@pytest.mark.integration
@pytest.mark.parametrize(("version", "kept"), [(None, True), (OLD, False)],
                         ids=["default", OLD])
def test_a_field_the_minor_lacks_fails_in_one_line_and_leaves_nothing(
        version: str | None, kept: bool,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with _control_plane(version, tmp_path_factory.mktemp("cp")) as cp, \
            kubeapi.session(cp.kubeconfig) as api:
        resources = ResourceApi(api)
        if kept:
            out = resources.create("resourceslices", _slice())
            groups = out["spec"]["devices"][0]["consumesCounters"][0]["compatibilityGroups"]
            assert groups == ["time-sliced"]
            return
        with pytest.raises(errors.Invalid) as info:
            resources.create("resourceslices", _slice())
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith("cannot create resourceslices n0-shares: the apiserver "
                                  "dropped spec.devices[0].consumesCounters[0]."
                                  "compatibilityGroups: it needs Kubernetes 1.37 or newer "
                                  "(DRADeviceCompatibilityGroups); this cluster runs 1.36"), message
        assert resources.items("resourceslices") == []
