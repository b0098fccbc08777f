"""The catalogue of checks: what each verifies, the capability it needs and its feature gate.

One entry per check function of the suite (``test_<id>``); the report lists them in this
order. What they check follows upstream Kubernetes' DRA end-to-end tests of a driver
(test/e2e/dra): slices, prepare/unprepare of inline and template claims, sharing, deallocation,
claim status, admin access, prioritized alternatives, device taints.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    id: str  # the test function is test_<id>
    title: str
    capability: str  # the capabilities file's key that declares it
    gate: str | None = None  # the feature gate it needs (None: GA everywhere it runs)


CHECKS: tuple[Check, ...] = (
    Check("slices_one_pool_per_node", "registration and slices: each node with the driver "
          "has one pool, all its slices on that node, resourceSliceCount consistent", "slices"),
    Check("driver_registered_with_kubelet", "the kubelet of every node the driver publishes "
          "devices for reports the driver's plugin registered (its /metrics through the node "
          "proxy)", "slices"),
    Check("slices_owned_by_node", "each slice is owned by its Node (ownerReferences)",
          "nodeOwnedSlices"),
    Check("slices_written_only_by_own_node", "the driver's identity may write its own "
          "node's slices and no other node's (server-side dry run)", "sliceWriteScope"),
    Check("template_claim_prepared", "a pod with a claim from a ResourceClaimTemplate runs "
          "on the node of its allocation and sees the allocated devices", "prepare"),
    Check("standalone_claim_prepared", "a pod using an existing ResourceClaim runs and sees "
          "its devices", "prepare"),
    Check("claim_shared_by_containers", "two containers of one pod using one claim see the "
          "same devices", "sharedClaims"),
    Check("claim_shared_by_pods", "two pods using one claim run on one node, see the same "
          "devices, and both are in reservedFor", "sharedClaims"),
    Check("deallocated_after_use", "deleting the pods releases their claims (generated "
          "claim deleted, standalone claim deallocated) and the devices serve a new pod",
          "prepare"),
    Check("unprepared_without_failures", "deleting pods that used claims leaves no "
          "FailedUnprepareDynamicResources event and no failed unprepare in the kubelets' "
          "counters", "prepare"),
    Check("claim_status_devices", "the driver records status.devices for exactly the "
          "allocated devices", "deviceStatus", "DRAResourceClaimDeviceStatus"),
    Check("unsatisfiable_claim_stays_pending", "a claim for more devices than any node has "
          "leaves its pod unschedulable and the claim unallocated", "prepare"),
    Check("prioritized_alternative_allocated", "firstAvailable: an impossible first "
          "alternative is passed over, the next one is allocated and prepared",
          "prioritizedList", "DRAPrioritizedList"),
    Check("admin_access_shares_an_allocated_device", "an adminAccess claim in a labelled "
          "namespace gets a device another claim holds, and its pod runs", "adminAccess",
          "DRAAdminAccess"),
    Check("device_taint_rule_keeps_new_claims_off", "a NoSchedule DeviceTaintRule on a "
          "device keeps new claims off it; a tolerating claim gets it", "deviceTaints",
          "DRADeviceTaintRules"),
)

BY_ID = {c.id: c for c in CHECKS}
CAPABILITIES = tuple(dict.fromkeys(c.capability for c in CHECKS))
