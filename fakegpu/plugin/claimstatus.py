"""Driver-owned claim status: conditions on each prepared device, kept up with its health.

Prepare writes each device's ``status.devices[]`` entry with ``data`` (driver.py). This thread
adds the entry's ``conditions`` and keeps them current:

- ``Ready``: ``True``, reason ``Prepared``: the device is prepared for the claim's pods;
- ``Healthy``: ``True`` (reason ``DeviceHealthy``) or ``False`` (reason ``DeviceUnhealthy``,
  the message naming the taints), from the same device health the kubelet's health stream
  reports (``healthsvc.device_statuses``).

It writes when health may have changed (the NVML event thread's wake-up) and, every
``interval_s``, for claims prepared since; a claim is written again only when what it should
show changed, and a condition keeps its ``lastTransitionTime`` while its status stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from fakegpu.kubeletplugin.checkpoint import PreparedClaim, Records
from fakegpu.kubeletplugin.health import HEALTHY, DeviceStatus
from fakegpu.kubeletplugin.syncloop import SyncLoop

log = logging.getLogger(__name__)


class ClaimApi(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...
    def replace_claim_status(self, claim: dict[str, Any]) -> None: ...


Wanted = tuple[tuple[str, str, str], ...]  # (device, HEALTHY|UNHEALTHY, message), sorted
_OWN = ("Ready", "Healthy")  # the condition types this module writes


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(health: str, message: str, generation: int,
               old: list[Mapping[str, Any]] | None = None, now: str = "") -> list[dict[str, Any]]:
    """The entry's conditions for ``health``; an unchanged status keeps its transition time."""
    now = now or _now()
    before = {c.get("type"): c for c in old or ()}
    healthy = health == HEALTHY
    out = []
    for ctype, status, reason, text in (
            ("Ready", "True", "Prepared", "prepared for the claim's pods"),
            ("Healthy", "True" if healthy else "False",
             "DeviceHealthy" if healthy else "DeviceUnhealthy",
             message or ("no fault reported" if healthy else "unhealthy"))):
        prev = before.get(ctype)
        since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
        out.append({"type": ctype, "status": status, "reason": reason, "message": text,
                    "lastTransitionTime": since or now, "observedGeneration": generation})
    return out


def apply(claim: dict[str, Any], driver: str, pool: str,
          wanted: Mapping[str, tuple[str, str]], now: str = "") -> dict[str, Any]:
    """``claim`` with the conditions of each of ``wanted``'s devices (device -> (health,
    message)) in its ``status.devices`` entry (added if prepare wrote none). Pure."""
    status = claim.setdefault("status", {})
    entries = status.setdefault("devices", [])
    generation = int(claim.get("metadata", {}).get("generation") or 0)
    for device, (health, message) in sorted(wanted.items()):
        entry = next((e for e in entries if e.get("driver") == driver
                      and e.get("pool") == pool and e.get("device") == device), None)
        if entry is None:
            entry = {"driver": driver, "pool": pool, "device": device}
            entries.append(entry)
        # Conditions of other types (attach.py's binding conditions) stay as they are.
        old = list(entry.get("conditions") or ())
        entry["conditions"] = [c for c in old if c.get("type") not in _OWN] + conditions(
            health, message, generation, old, now)
    return claim


class ClaimConditions(SyncLoop):
    """The thread that keeps prepared claims' device conditions current."""

    def __init__(self, claims: ClaimApi, records: Records, driver: str, node: str,
                 statuses: Callable[[], list[DeviceStatus]], interval_s: float = 5.0) -> None:
        self._claims, self._records = claims, records
        self._driver, self._node = driver, node
        self._statuses = statuses
        self._written: dict[str, Wanted] = {}  # claim UID -> what it shows now
        super().__init__(name="claim-conditions", what="update claim conditions",
                         interval_s=interval_s)

    def sync(self) -> int:
        """Write every prepared claim whose conditions should change; how many were written."""
        health = {s.device: (s.health, s.message) for s in self._statuses()}
        prepared = self._records.all()
        self._written = {u: w for u, w in self._written.items() if u in prepared}
        written = 0
        for uid, claim in prepared.items():
            wanted = {d.device_name: health[d.device_name] for d in claim.devices
                      if d.pool_name == self._node and d.device_name in health}
            key: Wanted = tuple(sorted((d, h, m) for d, (h, m) in wanted.items()))
            if not wanted or self._written.get(uid) == key:
                continue
            if self._write(claim, wanted):
                self._written[uid] = key
                written += 1
        return written

    def _write(self, prepared: PreparedClaim, wanted: Mapping[str, tuple[str, str]]) -> bool:
        for _attempt in range(2):  # a conflict: read it again once
            try:
                claim = self._claims.get_claim(prepared.namespace, prepared.name)
            except Exception as err:
                if int(getattr(err, "status", 0) or 0) == 404:
                    return True  # gone: nothing to show it on
                raise
            if claim.get("metadata", {}).get("uid") != prepared.uid:
                return True  # another claim of that name now
            try:
                self._claims.replace_claim_status(apply(claim, self._driver, self._node,
                                                        wanted))
                log.info("claim conditions uid=%s %s", prepared.uid,
                         ",".join(f"{d}={h}" for d, (h, _m) in sorted(wanted.items())))
                return True
            except Exception as err:
                if int(getattr(err, "status", 0) or 0) != 409:
                    raise
        return False
