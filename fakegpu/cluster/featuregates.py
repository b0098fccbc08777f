"""DRA feature gates and resource.k8s.io API versions per Kubernetes minor release.

Pure data and functions: the same answer goes to the apiserver, scheduler, controller-manager
and kubelet, so all four agree on what DRA can do. Facts: REFERENCE.md section 2; for 1.37 and
1.38, checked by starting the built v1.37.2 and v1.38.0-beta.0 kube-apiservers with each gate and
each API version (tests/cluster/test_featuregates.py checks the gates on every cached build).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fakegpu.errors import InvalidInput

# The Kubernetes minors this table knows. Older ones lack resource.k8s.io/v1beta1 entirely.
MIN_MINOR = 32
MAX_MINOR = 38


@dataclass(frozen=True)
class _Gate:
    name: str
    first: int  # first minor where the gate exists
    last: int | None = None  # last minor where it can still be set (None: still there)


# Every DRA-related gate we turn on, with the minors in which the gate can be named. A gate that
# went GA stays settable (to true, with a warning) for a few releases; naming it after its removal
# is a startup error, so `last` bounds it once a release drops one. `first` is the minor that
# introduced the gate, clipped to MIN_MINOR (k8s.io/kubernetes pkg/features/kube_features.go,
# the versioned specs; docs/k8s-features.md lists each gate's stage per minor and what fakegpu
# does with it). Checked on the built v1.37.2 and v1.38.0-beta.0 kube-apiservers: every gate
# below is accepted there but DynamicResourceAllocation in 1.38 (removed, GA and locked since
# 1.35); 1.38 added no DRA gate. A gate is here when turning it on changes what a GPU driver or
# its user can do or see; the DRA gates left out are in docs/k8s-features.md with the reason.
_GATES: tuple[_Gate, ...] = (
    _Gate("DynamicResourceAllocation", 32, last=37),
    _Gate("DRAAdminAccess", 32),
    _Gate("DRAResourceClaimDeviceStatus", 32),
    _Gate("ResourceHealthStatus", 32),
    # The kubelet's PodResources API (KEP-3695): Get, and DRA devices in List/Get. Both exist
    # since 1.27 (alpha), beta and on from 1.34, GA in 1.36.
    _Gate("KubeletPodResourcesGet", 32),
    _Gate("KubeletPodResourcesDynamicResources", 32),
    _Gate("DRAPrioritizedList", 33),
    _Gate("DRAPartitionableDevices", 33),
    _Gate("DRADeviceTaints", 33),
    _Gate("DRAExtendedResource", 34),
    _Gate("DRAConsumableCapacity", 34),
    # KEP-5007: bindingConditions on devices hold a pod's binding until a controller says so.
    _Gate("DRADeviceBindingConditions", 34),
    # KEP-4381: the scheduler gives up a node's DRA Filter after 10 s (beta and on since 1.34).
    _Gate("DRASchedulerFilterTimeout", 34),
    _Gate("DRADeviceTaintRules", 35),
    # Beta and on from their first minor: named so that every minor says the same.
    _Gate("DRAResourceClaimGranularStatusAuthorization", 36),
    _Gate("ResourceHealthStatusMessage", 36),
    # Alpha in 1.36-1.38: list-type attributes (KEP-5491), ResourcePoolStatusRequest
    # (KEP-5677, resource.k8s.io/v1alpha3, switched on below).
    _Gate("DRAListTypeAttributes", 36),
    _Gate("DRAResourcePoolStatus", 36),
    # Alpha in 1.37-1.38: compatibility groups on consumesCounters (KEP-5963: MIG vs whole
    # GPU refused at scheduling); milli-unit capacity ranges (KEP-5075, beta).
    _Gate("DRADeviceCompatibilityGroups", 37),
    _Gate("DRAFractionalCapacityRange", 37),
    # Beta but off in 1.37-1.38: PodGroups with gang scheduling (KEP-4671, its API
    # scheduling.k8s.io/v1beta1 switched on below; alpha before 1.37 with other API versions)
    # and claims a PodGroup's pods share (KEP-5729, which needs GenericWorkload).
    _Gate("GenericWorkload", 37),
    _Gate("DRAWorkloadResourceClaims", 37),
)

# resource.k8s.io versions to switch on (all served ones besides the default v1), per minor.
_API_VERSIONS: dict[int, tuple[str, ...]] = {
    32: ("v1alpha3", "v1beta1"),
    33: ("v1alpha3", "v1beta1", "v1beta2"),
    34: ("v1alpha3", "v1beta1", "v1beta2"),
    35: ("v1alpha3", "v1beta1", "v1beta2"),
    36: ("v1alpha3", "v1beta1", "v1beta2"),
    37: ("v1alpha3", "v1beta1", "v1beta2"),
    # resource.k8s.io/v1beta1 is no longer served from 1.38 (its prerelease lifecycle says
    # removed in 1.38; the built v1.38.0-beta.0 apiserver serves v1, v1beta2 and v1alpha3 and
    # ignores v1beta1 in --runtime-config).
    38: ("v1alpha3", "v1beta2"),
}


def parse_minor(version: str) -> int:
    """``"1.37.2"``, ``"v1.37.2"``, ``"1.38.0-beta.0"`` -> the minor, else InvalidInput."""
    m = re.fullmatch(r"v?1\.(\d+)(?:\.\d+(?:-[0-9A-Za-z.]+)?)?", version.strip())
    if not m:
        raise InvalidInput(f"not a Kubernetes version: {version!r} (expected 1.N or 1.N.P)")
    return int(m.group(1))


def _check_minor(minor: int) -> None:
    if not MIN_MINOR <= minor <= MAX_MINOR:
        raise InvalidInput(
            f"Kubernetes 1.{minor} is not supported for DRA here "
            f"(supported: 1.{MIN_MINOR} to 1.{MAX_MINOR})"
        )


def dra_gates(minor: int) -> dict[str, bool]:
    """Every DRA gate that exists in ``1.<minor>``, all enabled."""
    _check_minor(minor)
    return {
        g.name: True
        for g in _GATES
        if g.first <= minor and (g.last is None or minor <= g.last)
    }


def first_minor(gate: str) -> int:
    """The first minor whose DRA gates here include ``gate``."""
    return next(g.first for g in _GATES if g.name == gate)


def require(minor: int, gate: str, what: str) -> None:
    """InvalidInput, one line naming the minor needed, when ``1.<minor>`` lacks ``gate``."""
    if gate not in dra_gates(minor):
        raise InvalidInput(f"{what} needs Kubernetes 1.{first_minor(gate)} or newer ({gate}); "
                           f"this cluster would run 1.{minor}")


# The API fields the gates above add, by field name: an apiserver drops a field of a gate that
# is off, or one its minor does not know, from the object it stores without an error (a claim
# then silently asks for less); ``dropped_field`` names the gate and the minor that has it.
# ``capacity`` is consumable capacity only in a request (a device's capacity is basic DRA).
FIELD_GATES: Mapping[str, str] = {
    "firstAvailable": "DRAPrioritizedList",
    "adminAccess": "DRAAdminAccess",
    "tolerations": "DRADeviceTaints",
    "taints": "DRADeviceTaints",
    "sharedCounters": "DRAPartitionableDevices",
    "consumesCounters": "DRAPartitionableDevices",
    "extendedResourceName": "DRAExtendedResource",
    "allowMultipleAllocations": "DRAConsumableCapacity",
    "requestPolicy": "DRAConsumableCapacity",
    "distinctAttribute": "DRAConsumableCapacity",
    "bindingConditions": "DRADeviceBindingConditions",
    "bindingFailureConditions": "DRADeviceBindingConditions",
    "bindsToNode": "DRADeviceBindingConditions",
    "compatibilityGroups": "DRADeviceCompatibilityGroups",
    **dict.fromkeys(("bools", "ints", "strings", "versions"), "DRAListTypeAttributes"),
}


def dropped_field(path: str, minor: int) -> str:
    """Why an apiserver of ``1.<minor>`` dropped the field at ``path`` (``spec.devices.
    requests[0].firstAvailable``), as one clause naming the minor that has it."""
    key = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
    gate = FIELD_GATES.get(key)
    if key == "capacity" and "requests[" in path:
        gate = "DRAConsumableCapacity"
    if gate is None:
        return f"Kubernetes 1.{minor} does not serve it, or a feature gate it needs is off"
    first = first_minor(gate)
    if minor < first:
        return f"it needs Kubernetes 1.{first} or newer ({gate}); this cluster runs 1.{minor}"
    return f"feature gate {gate} is off on this cluster (Kubernetes 1.{minor} has it)"


# Other API versions the gates above need: PodGroup and Workload (GenericWorkload), served in
# scheduling.k8s.io/v1beta1 from 1.37 (k8s.io/kubernetes pkg/registry/scheduling/rest).
_OTHER_APIS: tuple[tuple[str, int], ...] = (("scheduling.k8s.io/v1beta1", 37),)


def runtime_config(minor: int) -> dict[str, bool]:
    """``--runtime-config`` entries enabling every served resource.k8s.io version, and the
    other API versions the gates need."""
    _check_minor(minor)
    return {**{f"resource.k8s.io/{v}": True for v in _API_VERSIONS[minor]},
            **{api: True for api, first in _OTHER_APIS if first <= minor}}


def format_map(values: Mapping[str, bool]) -> str:
    """``{"B": True, "A": False}`` -> ``"A=false,B=true"`` (sorted: stable command lines)."""
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(values.items()))
