"""The pure core of NodePrepareResources: a ResourceClaim + our devices -> what to prepare.

No I/O here: the driver reads the claim and the devices, calls ``plan_claim``, then writes
the CDI spec and the checkpoint. The result depends only on its inputs, so preparing a claim
twice yields the same answer (the checkpoint makes that hold even if the devices change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakegpu.kubeletplugin import cdispec
from fakegpu.kubeletplugin.checkpoint import PreparedClaim, PreparedDevice
from fakegpu.kubeletplugin.claims import ClaimError, ClaimRef, allocated_results

from . import cdi, devmetadata
from .discovery import Device
from .sharing import Sharing


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    device: Device
    admin_access: bool
    share_id: str = ""
    sharing: Sharing | None = None  # the config that applies (sharing.py); None: not looked at


@dataclass(frozen=True)
class ClaimPlan:
    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    pod_claim: str = ""  # the pod's claim name, for a claim made from a template

    @property
    def requests(self) -> tuple[str, ...]:
        """The base requests of its devices, in order (devmetadata.py: a file each)."""
        return tuple(dict.fromkeys(devmetadata.base_request(d.request) for d in self.devices))

    @property
    def admin_access(self) -> bool:
        return any(d.admin_access for d in self.devices)


def plan_claim(claim: Mapping[str, Any], ref: ClaimRef, driver: str, node: str,
               devices: Mapping[str, Device]) -> ClaimPlan:
    """Pick this driver's results for this node from the claim's allocation. Raises ClaimError."""
    results = allocated_results(claim, ref, driver)
    allocated: list[AllocatedDevice] = []
    for result in results:
        pool, name = result.get("pool"), result.get("device")
        if pool != node:
            raise ClaimError(f"device {pool}/{name} of ResourceClaim {ref.namespace}/{ref.name} "
                             f"is allocated on another node (pool {pool!r}, this node {node!r})")
        device = devices.get(str(name))
        if device is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} names unknown device "
                             f"{name!r} on node {node}")
        allocated.append(AllocatedDevice(
            request=str(result.get("request", "")), device=device,
            admin_access=bool(result.get("adminAccess")),
            share_id=str(result.get("shareID") or "")))
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return ClaimPlan(ref=ref, devices=tuple(allocated),
                     pod_claim=str(annotations.get(devmetadata.POD_CLAIM_ANNOTATION) or ""))


def prepared_claim(plan: ClaimPlan, driver: str, node: str, instance: str,
                   version: str = "") -> PreparedClaim:
    """The kubelet's answer for a plan: one entry per allocated device, with its CDI id; the
    first device of each request also carries the request's metadata file (devmetadata.py),
    as Kubernetes' kubelet-plugin helper does."""
    first: dict[str, str] = {}
    for d in plan.devices:
        first.setdefault(devmetadata.base_request(d.request), d.device.name)

    def ids(d: AllocatedDevice) -> tuple[str, ...]:
        request = devmetadata.base_request(d.request)
        own = cdi.device_id(driver, plan.ref.uid, d.device.name)
        if first[request] != d.device.name:
            return (own,)
        return (own, cdi.metadata_device_id(driver, plan.ref.uid, request))

    return PreparedClaim(
        uid=plan.ref.uid, namespace=plan.ref.namespace, name=plan.ref.name,
        devices=tuple(PreparedDevice(
            request_names=(d.request,), pool_name=node, device_name=d.device.name,
            cdi_device_ids=ids(d), share_id=d.share_id) for d in plan.devices),
        cdi_spec=cdispec.spec_filename(driver, plan.ref.uid), instance=instance,
        plugin_version=version)
