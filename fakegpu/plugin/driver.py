"""Prepare / unprepare for many claims at once, safely shared by every instance on the node.

Stateless between calls: each call takes the state lock (a file lock in the shared state
dir, so two instances during a rolling update never interleave), reloads the checkpoint,
changes it and saves it. Errors are per claim; nothing here raises to the gRPC layer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock, Timeout

from . import cdi, checkpoint
from .checkpoint import CheckpointError, PreparedClaim
from .discovery import Inventory, carry_lost
from .prepare import ClaimError, ClaimPlan, ClaimRef, plan_claim, prepared_claim

log = logging.getLogger(__name__)
LOCK_TIMEOUT_S = 60.0


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...
    def replace_claim_status(self, claim: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class DriverConfig:
    driver: str
    node: str
    state_dir: Path
    cdi_root: Path
    instance: str = ""
    write_status: bool = False


@dataclass(frozen=True)
class PrepareResult:
    claim: PreparedClaim | None
    error: str = ""


class Devices:
    """The inventory, cached; refreshed when asked (a claim names a device we do not know)."""

    def __init__(self, discover: Callable[[], Inventory]) -> None:
        self._discover = discover
        self._lock = threading.Lock()
        self._current: Inventory | None = None

    def current(self) -> Inventory:
        with self._lock:
            if self._current is None:
                self._current = self._discover()
            return self._current

    def refresh(self) -> Inventory:
        fresh = self._discover()
        with self._lock:
            # A GPU lost since the last look keeps its last known devices, marked lost.
            self._current = carry_lost(self._current, fresh)
            return self._current


class Driver:
    def __init__(self, cfg: DriverConfig, claims: ClaimSource, devices: Devices) -> None:
        self.cfg = cfg
        self._claims = claims
        self._devices = devices

    def _lock(self) -> FileLock:
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        # A new lock object per call: thread-safe, and one flock per holder across processes.
        # filelock polls a contended lock; its 50 ms default dominated prepare latency.
        return FileLock(self.cfg.state_dir / "plugin.lock", timeout=LOCK_TIMEOUT_S,
                        thread_local=False, poll_interval=0.002)

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        try:
            with self._lock():
                done = checkpoint.load(self.cfg.state_dir).claims
        except (CheckpointError, Timeout, OSError) as err:
            return {r.uid: PrepareResult(None, f"state unavailable: {err}") for r in refs}
        results: dict[str, PrepareResult] = {}
        plans: dict[str, ClaimPlan] = {}
        fetched: dict[str, dict[str, Any]] = {}
        # Read claims outside the lock: apiserver latency must not serialize the node.
        for ref in refs:
            if ref.uid in done:
                continue
            try:
                fetched[ref.uid] = self._claims.get_claim(ref.namespace, ref.name)
                plans[ref.uid] = self._plan(fetched[ref.uid], ref)
            except Exception as err:  # any failure (apiserver, allocation) is this claim's
                results[ref.uid] = PrepareResult(None, str(err))
        new: list[PreparedClaim] = []
        try:
            with self._lock():
                state = checkpoint.load(self.cfg.state_dir)
                for ref in refs:
                    if ref.uid in state.claims:  # prepared before, maybe by the other instance
                        results[ref.uid] = PrepareResult(state.claims[ref.uid])
                    elif ref.uid in plans:
                        prepared = prepared_claim(plans[ref.uid], self.cfg.driver,
                                                  self.cfg.node, self.cfg.instance)
                        cdi.write_spec(self.cfg.cdi_root, prepared.cdi_spec,
                                       cdi.build_spec(self.cfg.driver, plans[ref.uid]))
                        state.claims[ref.uid] = prepared
                        results[ref.uid] = PrepareResult(prepared)
                        new.append(prepared)
                if new:
                    checkpoint.save(self.cfg.state_dir, state)
        except (CheckpointError, Timeout, OSError) as err:
            # Nothing was recorded: drop the specs we just wrote, report every pending claim.
            for prepared in new:
                cdi.remove_spec(self.cfg.cdi_root, prepared.cdi_spec)
            for ref in refs:
                if ref.uid in plans or ref.uid not in results:
                    results[ref.uid] = PrepareResult(None, f"cannot record prepared claim: {err}")
            return results
        for prepared in new:
            log.info("prepared claim=%s/%s uid=%s devices=%s", prepared.namespace, prepared.name,
                     prepared.uid, ",".join(d.device_name for d in prepared.devices))
            if self.cfg.write_status:
                self._write_status(fetched[prepared.uid], plans[prepared.uid])
        return results

    def _plan(self, claim: dict[str, Any], ref: ClaimRef) -> ClaimPlan:
        inventory = self._devices.current()
        try:
            return plan_claim(claim, ref, self.cfg.driver, self.cfg.node, inventory.by_name())
        except ClaimError:
            # Maybe the devices changed since we last looked (MIG reconfigured): look once more.
            return plan_claim(claim, ref, self.cfg.driver, self.cfg.node,
                              self._devices.refresh().by_name())

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" on success). Unknown claims succeed: there is nothing to undo."""
        try:
            with self._lock():
                state = checkpoint.load(self.cfg.state_dir)
                for ref in refs:
                    entry = state.claims.pop(ref.uid, None)
                    name = entry.cdi_spec if entry else cdi.spec_filename(self.cfg.driver, ref.uid)
                    cdi.remove_spec(self.cfg.cdi_root, name)
                    if entry:
                        log.info("unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
                checkpoint.save(self.cfg.state_dir, state)
        except (CheckpointError, Timeout, OSError) as err:
            return {r.uid: f"cannot unprepare: {err}" for r in refs}
        return {r.uid: "" for r in refs}

    def _write_status(self, claim: dict[str, Any], plan: ClaimPlan) -> None:
        """Best effort: publish what each prepared device is in the claim's status."""
        ours = [{
            "driver": self.cfg.driver, "pool": self.cfg.node, "device": d.device.name,
            **({"shareID": d.share_id} if d.share_id else {}),
            "data": {"uuid": d.device.uuid, "productName": d.device.product_name,
                     "pciBusID": d.device.pci_bus_id},
        } for d in plan.devices]
        names = {(e["pool"], e["device"]) for e in ours}
        for attempt in range(2):
            status = claim.setdefault("status", {})
            status["devices"] = [e for e in status.get("devices") or []
                                 if not (e.get("driver") == self.cfg.driver
                                         and (e.get("pool"), e.get("device")) in names)] + ours
            try:
                self._claims.replace_claim_status(claim)
                return
            except Exception as err:  # status is informative, never fatal
                if attempt == 0 and getattr(err, "status", 0) == 409:
                    try:
                        claim = self._claims.get_claim(plan.ref.namespace, plan.ref.name)
                        continue
                    except Exception as again:
                        err = again
                log.warning("cannot write device status claim=%s/%s: %s",
                            plan.ref.namespace, plan.ref.name, err)
                return
