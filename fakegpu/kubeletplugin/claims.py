"""What every DRA kubelet plugin says about a claim: its identity as the kubelet sends it, the
answer per claim, and the claim's device status written back to the apiserver.

The kubelet passes only a claim's identity; the plugin reads the ResourceClaim itself
(``ClaimSource.get_claim``), picks its own driver's results from the allocation
(``allocated_results``) and, where it publishes driver-owned status, writes its entries in
``status.devices`` (``write_device_status``), leaving other drivers' entries as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .checkpoint import PreparedClaim

log = logging.getLogger(__name__)
# HTTP answers that mean "this will never work as configured" (RBAC, admission, validation).
_REFUSED = (401, 403, 422)
STATUS_HINT = ("the plugin's service account needs update on resourceclaims/status and, "
               "from Kubernetes 1.36 (granular status authorization), associated-node:update "
               "on resourceclaims/driver for this driver; or run the plugin with "
               "--no-device-status")


class ClaimError(Exception):
    """This claim cannot be prepared; the message goes into the claim's response error."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PrepareResult:
    claim: PreparedClaim | None
    error: str = ""


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...
    def replace_claim_status(self, claim: dict[str, Any]) -> None: ...


class ClaimDriver(Protocol):
    """What the gRPC servers call: errors are per claim, never raised."""

    @property
    def driver_name(self) -> str: ...
    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]: ...
    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]: ...


def allocated_results(claim: Mapping[str, Any], ref: ClaimRef,
                      driver: str) -> list[dict[str, Any]]:
    """This driver's allocation results of ``claim`` (any node). Raises ClaimError when the
    claim is another one than the kubelet named, not allocated, or has none of ours."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} has UID {meta.get('uid')!r}, "
                         f"not {ref.uid!r} (it was deleted and recreated)")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} is not allocated")
    results = [r for r in (allocation.get("devices") or {}).get("results") or []
               if r.get("driver") == driver]
    if not results:
        raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} has no devices "
                         f"allocated by driver {driver}")
    return results


def write_device_status(claims: ClaimSource, claim: dict[str, Any], ref: ClaimRef,
                        driver: str, ours: Sequence[dict[str, Any]]) -> str:
    """Put ``ours`` (``status.devices`` entries of ``driver``) into the claim's status,
    replacing our earlier entries for the same devices (their conditions kept where ``ours``
    has none); the error, or "".

    A conflict (written meanwhile) reads the claim again and retries once. A refusal names
    the rights the plugin lacks."""
    keys = {(e["pool"], e["device"]) for e in ours}
    for attempt in range(2):
        status = claim.setdefault("status", {})
        before = status.get("devices") or []
        # An entry's conditions so far (e.g. the GPU plugin's attach outcome, attach.py) stay
        # with it unless ours brings its own.
        kept = {(e.get("pool"), e.get("device")): e["conditions"] for e in before
                if e.get("driver") == driver and e.get("conditions")}
        status["devices"] = [e for e in before
                             if not (e.get("driver") == driver
                                     and (e.get("pool"), e.get("device")) in keys)] + [
            {**e, "conditions": kept[(e["pool"], e["device"])]}
            if "conditions" not in e and (e["pool"], e["device"]) in kept else e for e in ours]
        try:
            claims.replace_claim_status(claim)
            return ""
        except Exception as err:
            code = int(getattr(err, "status", 0) or 0)
            if attempt == 0 and code == 409:
                try:
                    claim = claims.get_claim(ref.namespace, ref.name)
                    continue
                except Exception as again:
                    err, code = again, int(getattr(again, "status", 0) or 0)
            hint = f" ({STATUS_HINT})" if code in _REFUSED else ""
            message = (f"cannot write device status on ResourceClaim "
                       f"{ref.namespace}/{ref.name}: {err}{hint}")
            log.error("prepare failed uid=%s: %s", ref.uid, message)
            return message
    return ""  # unreachable: the loop returns
