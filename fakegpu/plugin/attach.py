"""GPUs that must be attached before a pod may bind to them (KEP-5007, binding conditions).

A GPU behind a fabric switch, or hot-plugged, is not usable on the node the moment the
scheduler picks it: something has to attach it first. Such a device (``--attach-gpus``, from
the topology's ``attach: hotplug``) is published with ``bindsToNode``, ``bindingConditions:
[ATTACHED]`` and ``bindingFailureConditions: [ATTACH_FAILED]`` (slices.py). The scheduler then
allocates and reserves its claim but holds the pod's binding (event BindingConditionsPending)
until the claim's ``status.devices`` entry for it has ATTACHED true; ATTACH_FAILED true makes it
drop the allocation and schedule the pod again.

This thread plays the attaching controller on the device's node: it finds claims allocated one
of the node's such devices and, ``delay_s`` after it first saw the allocation, sets ATTACHED
(``hotplug``) or ATTACH_FAILED (``broken``, ``--broken-attach-gpus``). A failed device is also
tainted (``<driver>/attach-failed``, NoSchedule) so the scheduler's next pick is another one,
as an operator would cordon a slot that does not attach. It runs in the plugin because the
plugin may write status.devices only for claims allocated on its own node (the chart's
``associated-node:`` rights), which ``bindsToNode`` makes every such allocation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from fakegpu.kubeletplugin.slicepool import Taint
from fakegpu.kubeletplugin.syncloop import SyncLoop

from .discovery import Inventory
from .slices import ATTACH_FAILED, ATTACHED, NO_SCHEDULE, TAINT_ATTACH_FAILED, taint

log = logging.getLogger(__name__)

# Device.attach, published as the fakegpu.dev/attach attribute: the topology's ``attach``
# values (the plugin reads no topology: the node's flags carry them, node/entrypoint.py).
ATTACH_HOTPLUG = "hotplug"  # attaches
ATTACH_BROKEN = "broken"  # the attach fails


class AttachApi(Protocol):
    def list_claims(self) -> list[dict[str, Any]]: ...
    def replace_claim_status(self, claim: dict[str, Any]) -> None: ...


def mark(inventory: Inventory, hotplug: frozenset[int], broken: frozenset[int]) -> Inventory:
    """``inventory`` with the whole GPUs of those minors marked (``Device.attach``)."""
    if not hotplug and not broken:
        return inventory

    def mode(minor: int) -> str:
        return ATTACH_BROKEN if minor in broken else ATTACH_HOTPLUG if minor in hotplug else ""

    return replace(inventory, devices=tuple(
        replace(d, attach=mode(d.minor)) if d.type == "gpu" and not d.consumes else d
        for d in inventory.devices))


def waiting(claim: Mapping[str, Any], driver: str, node: str,
            modes: Mapping[str, str]) -> list[str]:
    """Devices of this node that ``claim`` was allocated and that wait for their attach:
    published with binding conditions and neither condition set yet. Pure."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    done = {e.get("device") for e in status.get("devices") or []
            if e.get("driver") == driver and e.get("pool") == node
            and any(c.get("type") in (ATTACHED, ATTACH_FAILED) and c.get("status") == "True"
                    for c in e.get("conditions") or ())}
    return [r["device"] for r in results
            if r.get("driver") == driver and r.get("pool") == node
            and r.get("device") in modes and r.get("bindingConditions")
            and r["device"] not in done]


def set_condition(claim: dict[str, Any], driver: str, node: str, device: str, mode: str,
                  now: str) -> dict[str, Any]:
    """``claim`` with the attach outcome in the device's ``status.devices`` entry. Pure."""
    entries = claim.setdefault("status", {}).setdefault("devices", [])
    entry = next((e for e in entries if e.get("driver") == driver and e.get("pool") == node
                  and e.get("device") == device), None)
    if entry is None:
        entry = {"driver": driver, "pool": node, "device": device}
        entries.append(entry)
    ok = mode != ATTACH_BROKEN
    condition = {
        "type": ATTACHED if ok else ATTACH_FAILED, "status": "True",
        "reason": "Attached" if ok else "AttachFailed",
        "message": (f"attached to node {node}" if ok
                    else f"the attach to node {node} failed (the topology marks it broken)"),
        "lastTransitionTime": now,
        "observedGeneration": int(claim.get("metadata", {}).get("generation") or 0)}
    entry["conditions"] = [c for c in entry.get("conditions") or ()
                           if c.get("type") != condition["type"]] + [condition]
    return claim


class Attacher(SyncLoop):
    """The thread that attaches this node's devices for the claims allocated them."""

    def __init__(self, claims: AttachApi, driver: str, node: str,
                 devices: Callable[[], Inventory], delay_s: float,
                 on_failed: Callable[[], None], interval_s: float = 1.0) -> None:
        self._claims, self._driver, self._node = claims, driver, node
        self._devices, self._delay, self._on_failed = devices, delay_s, on_failed
        self._seen: dict[tuple[str, str], float] = {}  # (claim UID, device) -> first seen
        self._failed: set[str] = set()
        self._lock = threading.Lock()
        super().__init__(name="attach", what="attach devices", interval_s=interval_s)

    def taints(self, inventory: Inventory) -> dict[str, list[Taint]]:
        """The devices whose attach failed, tainted for the slice publisher."""
        with self._lock:
            failed = set(self._failed)
        return {d.name: [taint(self._driver, TAINT_ATTACH_FAILED, effect=NO_SCHEDULE)]
                for d in inventory.devices if d.name in failed}

    def sync(self, now: float | None = None) -> int:
        """One round: set the outcome of every attach that is due; how many were written."""
        now = time.monotonic() if now is None else now
        modes = {d.name: d.attach for d in self._devices().devices if d.attach}
        if not modes:
            return 0
        seen: dict[tuple[str, str], float] = {}
        written = 0
        for claim in self._claims.list_claims():
            uid = str(claim.get("metadata", {}).get("uid", ""))
            due: list[str] = []
            for device in waiting(claim, self._driver, self._node, modes):
                first = seen[(uid, device)] = self._seen.get((uid, device), now)
                if now - first >= self._delay:
                    due.append(device)
            if due and self._write(claim, due, modes):
                written += len(due)
        self._seen = seen
        return written

    def _write(self, claim: dict[str, Any], due: Sequence[str], modes: Mapping[str, str]
               ) -> bool:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for device in due:
            set_condition(claim, self._driver, self._node, device, modes[device], stamp)
        try:
            self._claims.replace_claim_status(claim)
        except Exception as err:  # a conflict or a deallocation meanwhile: next round
            log.info("attach not recorded on claim %s/%s yet: %s",
                     claim.get("metadata", {}).get("namespace"),
                     claim.get("metadata", {}).get("name"), err)
            return False
        failed = [d for d in due if modes[d] == ATTACH_BROKEN]
        log.info("attach claim=%s/%s attached=%s failed=%s",
                 claim["metadata"].get("namespace"), claim["metadata"].get("name"),
                 ",".join(d for d in due if d not in failed), ",".join(failed))
        if failed:
            with self._lock:
                self._failed.update(failed)
            self._on_failed()
        return True
