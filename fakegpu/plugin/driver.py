"""Prepare / unprepare for many claims at once, safely shared by every instance on the node.

Stateless between calls: the state is one record per prepared claim (``checkpoint.Records``),
shared by every instance on the node (rolling update). A call reads and plans its claims
without any lock, writes each claim's CDI spec and (synced) record to temp files while the
claim's device status is written to the apiserver, and then, under the commit lock, renames
spec and record into place unless another instance got there first. No call waits on another
for longer than a few renames, and no call's cost grows with the number of claims the node
holds. Errors are per claim; nothing here raises to the gRPC layer.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fakegpu import fsutil
from fakegpu.errors import FakegpuError
from fakegpu.kubeletplugin import cdispec, checkpoint, names
from fakegpu.kubeletplugin.checkpoint import PreparedClaim
from fakegpu.kubeletplugin.claims import (
    ClaimError,
    ClaimRef,
    ClaimSource,
    PrepareResult,
    write_device_status,
)
from fakegpu.kubeletplugin.statelock import LockTimeout, StateLock

from . import cdi, devmetadata, sharing, slices
from .discovery import Inventory, carry_lost
from .dynmig import DynamicMig
from .prepare import AllocatedDevice, ClaimPlan, plan_claim, prepared_claim
from .shape import FAKEGPU, Shape

log = logging.getLogger(__name__)
LOCK_TIMEOUT_S = 60.0
STATUS_WORKERS = 16

@dataclass(frozen=True)
class DriverConfig:
    driver: str
    node: str
    state_dir: Path
    cdi_root: Path
    instance: str = ""
    write_status: bool = False
    dynamic_mig: bool = False  # partitions are created at prepare (dynmig.py)
    version: str = ""  # the plugin's version stamp (version.py), shown in claim status
    prepare_delay_s: float = 0.0  # test hook (version.PREPARE_DELAY_ENV): upgrade tests only
    shape: Shape = FAKEGPU  # the slices' shape: metadata files carry the same attributes


@dataclass(frozen=True)
class _Staged:
    claim: PreparedClaim
    spec: Path  # synced temp files, renamed into place at commit
    record: Path

    def discard(self) -> None:
        self.spec.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)


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
        self._records = checkpoint.Records(cfg.state_dir)
        self._lock = StateLock(cfg.state_dir, LOCK_TIMEOUT_S)
        self._status = (ThreadPoolExecutor(STATUS_WORKERS, thread_name_prefix="claim-status")
                        if cfg.write_status else None)
        self._mig = (DynamicMig(lambda: devices.current().by_name()) if cfg.dynamic_mig
                     else None)
        self.recover()

    @property
    def driver_name(self) -> str:
        return self.cfg.driver

    def recover(self) -> None:
        """Startup: remove temp files killed writers left, migrate an old checkpoint.

        Under the cleanup lock, so a live instance's files being staged right now stay.
        """
        try:
            with self._lock.cleanup():
                self._records.recover()
                for tmp in cdispec.remove_stale_temps(self.cfg.cdi_root, self.cfg.driver):
                    log.info("removed a temp file a killed writer left: %s", tmp)
                # Specs are not synced and are removed after their record: a crash can leave
                # one whose record is gone (or never was). No claim refers to it.
                for uid, spec in cdispec.claim_specs(self.cfg.cdi_root, self.cfg.driver).items():
                    if not names.problem(uid) and not self._records.path(uid).exists():
                        spec.unlink(missing_ok=True)
                        log.info("removed a CDI spec no prepared claim refers to: %s", spec)
                for sub in ("mps", "metadata"):  # what a killed call left for no record
                    for left in sorted((self.cfg.state_dir / sub).glob("*")):
                        if not self._records.path(left.name).exists():
                            shutil.rmtree(left, ignore_errors=True)
                if self._mig is not None:  # MIG instances a killed prepare/unprepare left
                    self._mig.reconcile(d.device_name for c in self._records.all().values()
                                        for d in c.devices)
        except LockTimeout as err:  # a busy peer: the next start cleans up instead
            log.warning("skipped startup cleanup: %s", err)
        except OSError as err:
            raise FakegpuError(f"cannot set up the plugin state in {self.cfg.state_dir}: "
                               f"{err}") from err

    def close(self) -> None:
        if self._status is not None:
            self._status.shutdown(wait=True)

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Claim UID -> result. Callers pass only UIDs that passed ``names.check``."""
        results: dict[str, PrepareResult] = {}
        plans: dict[str, ClaimPlan] = {}
        fetched: dict[str, dict[str, Any]] = {}
        if self.cfg.prepare_delay_s:
            # Before anything is read or written: a kill now leaves nothing half-done.
            log.info("prepare of %s waits %.1f s (test hook)",
                     ",".join(r.uid for r in refs), self.cfg.prepare_delay_s)
            time.sleep(self.cfg.prepare_delay_s)
        try:
            self._adopt_legacy()
        except OSError as err:
            return {r.uid: PrepareResult(None, f"state unavailable: {err}") for r in refs}
        for ref in refs:
            bad = names.check("namespace", ref.namespace) or names.check("name", ref.name)
            if bad:
                results[ref.uid] = PrepareResult(None, f"ResourceClaim {bad}")
                continue
            try:
                done = self._prepared(ref.uid)
            except OSError as err:
                results[ref.uid] = PrepareResult(None, f"state unavailable: {err}")
                continue
            if done is not None:  # prepared before, maybe by another instance
                results[ref.uid] = PrepareResult(done)
                continue
            try:  # no lock held: apiserver latency must not serialize the node
                fetched[ref.uid] = self._claims.get_claim(ref.namespace, ref.name)
                plan = self._share(fetched[ref.uid], self._plan(fetched[ref.uid], ref))
                plans[ref.uid] = self._realize(plan)
            except Exception as err:  # any failure (apiserver, allocation) is this claim's
                results[ref.uid] = PrepareResult(None, str(err))
        if plans:
            results.update(self._prepare_planned(plans, fetched))
            for uid, plan in plans.items():
                if results[uid].error:  # not prepared: its MIG instances go too
                    self._release(plan)
        return results

    def _share(self, claim: dict[str, Any], plan: ClaimPlan) -> ClaimPlan:
        """The sharing config of each device (class, then claim, per request): checked before
        anything is made, so a bad one leaves nothing behind. Raises ClaimError."""
        allocation = (claim.get("status") or {}).get("allocation") or {}
        configs = (allocation.get("devices") or {}).get("config") or []
        try:
            parsed = sharing.parse(configs, self.cfg.driver,
                                   sharing.group_version(self.cfg.driver))
            return replace(plan, devices=tuple(
                replace(d, sharing=sharing.select(parsed, d.request, d.device.type,
                                                  d.device.name)) for d in plan.devices))
        except sharing.ConfigError as err:
            ref = plan.ref
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: {err}") from err

    def _realize(self, plan: ClaimPlan) -> ClaimPlan:
        """Create the claim's dynamic MIG partitions; on a failure, destroy what this made."""
        if self._mig is None or not any(d.device.consumes for d in plan.devices):
            return plan
        self._check_modes(plan)
        made: list[AllocatedDevice] = []
        try:
            for d in plan.devices:
                made.append(replace(d, device=self._mig.create(d.device)))
        except Exception:
            self._release(replace(plan, devices=tuple(made)))
            raise
        return replace(plan, devices=tuple(made))

    def _check_modes(self, plan: ClaimPlan) -> None:
        """A MIG device of a GPU whose time-sliced shares are prepared cannot be made (MIG mode
        cannot go on under them). The scheduler keeps such claims apart by their compatibility
        groups; this is for a scheduler that does not (its gate off). The other way round, a
        share's prepare does not turn MIG off under existing instances (``DynamicMig.create``)."""
        gpus = {d.device.minor for d in plan.devices if d.device.partition
                and d.device.compat_groups}
        if not gpus:
            return
        by_name = self._devices.current().by_name()
        held = sorted({d.device_name for c in self._records.all().values() for d in c.devices
                       if (s := by_name.get(d.device_name)) is not None and s.time_sliced
                       and s.minor in gpus})
        if held:
            ref = plan.ref
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: a MIG device cannot "
                             f"be made on GPU {','.join(map(str, sorted(gpus)))} while its "
                             f"time-sliced shares are prepared ({', '.join(held)})")

    def _mps_dir(self, uid: str) -> Path:
        return self.cfg.state_dir / "mps" / uid

    def _metadata_dir(self, uid: str) -> Path:
        return self.cfg.state_dir / "metadata" / uid

    def _metadata_write(self, plan: ClaimPlan) -> dict[str, Path]:
        """Each request's device metadata file (devmetadata.py): its devices with the
        attributes their slice publishes. Request -> the file, for the CDI spec's mounts."""
        inventory = self._devices.current()
        root, out = self._metadata_dir(plan.ref.uid), {}
        for request in plan.requests:
            devices = [(d.device.name, slices.device_attributes(d.device, inventory,
                                                                self.cfg.shape))
                       for d in plan.devices if devmetadata.base_request(d.request) == request]
            doc = devmetadata.document(self.cfg.driver, self.cfg.node, plan.ref.namespace,
                                       plan.ref.name, plan.ref.uid, plan.pod_claim, request,
                                       devices)
            out[request] = devmetadata.write(root, request, doc)
        return out

    def _mps_start(self, plan: ClaimPlan) -> Path | None:
        """The claim's MPS control daemon stand-in: its pipe and log directories (mounted into
        the container) and the log of its settings; None when no device of it uses MPS."""
        devices = sharing.mps_devices([(d.device.name, d.device.uuid, d.sharing)
                                       for d in plan.devices])
        if not devices:
            return None
        path = self._mps_dir(plan.ref.uid)
        (path / "pipe").mkdir(parents=True, exist_ok=True)
        (path / "log").mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(path / "log" / sharing.MPS_LOG, sharing.control_log(
            f"{plan.ref.namespace}/{plan.ref.name}", devices), mode=0o644)
        return path

    def _release(self, plan: ClaimPlan) -> None:
        shutil.rmtree(self._mps_dir(plan.ref.uid), ignore_errors=True)
        shutil.rmtree(self._metadata_dir(plan.ref.uid), ignore_errors=True)
        if self._mig is not None:
            for error in self._mig.destroy(d.device.name for d in plan.devices):
                log.error("claim uid=%s: %s", plan.ref.uid, error)

    def _adopt_legacy(self) -> None:
        """An instance of an earlier release beside us (rolling update) still writes the
        single-file checkpoint: take its claims over first. One stat when there is none."""
        if self._records.legacy_exists():
            with self._lock.commit():
                self._records.migrate()

    def _prepare_planned(self, plans: dict[str, ClaimPlan],
                         fetched: dict[str, dict[str, Any]]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        staged: dict[str, _Staged] = {}
        committed: list[PreparedClaim] = []
        # The status write (an apiserver round trip) runs while the files are written and
        # synced; only claims whose status was written are then renamed into place.
        status: dict[str, Future[str]] = {}
        if self._status is not None:
            status = {uid: self._status.submit(self._write_status, fetched[uid], plan)
                      for uid, plan in plans.items()}
        try:
            with self._lock.staging():
                for uid, plan in plans.items():
                    try:
                        staged[uid] = self._stage(plan)
                    except OSError as err:
                        results[uid] = PrepareResult(None, f"cannot record prepared claim: {err}")
                for uid, future in status.items():
                    if error := future.result():
                        results[uid] = PrepareResult(None, error)
                        if uid in staged:
                            staged.pop(uid).discard()
                committed = self._commit(staged, results)
        except OSError as err:  # the lock: nothing was recorded
            for uid in staged:
                results[uid] = PrepareResult(None, f"cannot record prepared claim: {err}")
        finally:
            for entry in staged.values():
                entry.discard()  # no-op for the ones renamed into place
            for future in status.values():
                future.result()  # never leave a write running behind an early error
        for prepared in committed:
            log.info("prepared claim=%s/%s uid=%s devices=%s", prepared.namespace, prepared.name,
                     prepared.uid, ",".join(d.device_name for d in prepared.devices))
        return results

    def _stage(self, plan: ClaimPlan) -> _Staged:
        prepared = prepared_claim(plan, self.cfg.driver, self.cfg.node, self.cfg.instance,
                                  self.cfg.version)
        spec = cdispec.stage_spec(self.cfg.cdi_root, prepared.cdi_spec,
                                  cdi.build_spec(self.cfg.driver, plan, self._mps_start(plan),
                                                 self._metadata_write(plan)))
        try:
            record = self._records.stage(prepared)
        except BaseException:
            spec.unlink(missing_ok=True)
            raise
        return _Staged(prepared, spec, record)

    def _commit(self, staged: dict[str, _Staged],
                results: dict[str, PrepareResult]) -> list[PreparedClaim]:
        """Rename each staged claim into place unless another call recorded it first.

        The lock is taken per claim: a call with thousands of claims never makes a one-claim
        call wait for more than one claim's renames.
        """
        committed = []
        for uid, entry in staged.items():
            try:
                with self._lock.commit():
                    existing = self._prepared(uid, repair=True)
                    if existing is not None:
                        results[uid] = PrepareResult(existing)
                        continue
                    target = self.cfg.cdi_root / entry.claim.cdi_spec
                    os.replace(entry.spec, target)
                    try:
                        self._records.commit(uid, entry.record)
                    except OSError:
                        target.unlink(missing_ok=True)  # rollback: no spec without a record
                        raise
            except OSError as err:
                results[uid] = PrepareResult(None, f"cannot record prepared claim: {err}")
                continue
            results[uid] = PrepareResult(entry.claim)
            committed.append(entry.claim)
        return committed

    def _prepared(self, uid: str, repair: bool = False) -> PreparedClaim | None:
        """The claim's record when its CDI spec is sound too: a spec lost with a tmpfs at
        boot, or torn by a crash, makes the claim count as unprepared, so it is written
        again instead of answering CDI ids the runtime cannot resolve."""
        record = self._records.get(uid, repair=repair)
        if record is None:
            return None
        ids = [i for d in record.devices for i in d.cdi_device_ids]
        if not cdispec.spec_sound(self.cfg.cdi_root, record.cdi_spec,
                                  cdi.kind(self.cfg.driver), ids):
            if repair:
                log.warning("claim uid=%s has a record but no sound CDI spec %s: preparing it "
                            "again", uid, record.cdi_spec)
            return None
        return record

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
        results: dict[str, str] = {}
        removed = []
        try:
            self._adopt_legacy()
            for ref in refs:  # the lock per claim, as in prepare: a big call blocks no one
                try:
                    with self._lock.commit():
                        if self._mig is not None:
                            # MIG instances before the record: a failure leaves the record,
                            # so the kubelet's retry destroys them (reconcile at start too).
                            record = self._records.get(ref.uid)
                            if record is not None and (errors := self._mig.destroy(
                                    d.device_name for d in record.devices)):
                                results[ref.uid] = "; ".join(errors)
                                continue
                        # The record first: a crash in between leaves a spec without a record,
                        # which the kubelet's retried unprepare removes (by its fixed name).
                        if self._records.remove(ref.uid):
                            removed.append(ref)
                        cdispec.remove_spec(self.cfg.cdi_root,
                                        cdispec.spec_filename(self.cfg.driver, ref.uid))
                        shutil.rmtree(self._mps_dir(ref.uid), ignore_errors=True)
                        shutil.rmtree(self._metadata_dir(ref.uid), ignore_errors=True)
                        results[ref.uid] = ""
                except OSError as err:
                    results[ref.uid] = f"cannot unprepare: {err}"
            if removed:  # the specs' removal is not synced: recover() removes orphans
                self._records.sync()
        except OSError as err:
            return {r.uid: f"cannot unprepare: {err}" for r in refs}
        for ref in removed:
            log.info("unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
        return results

    def _write_status(self, claim: dict[str, Any], plan: ClaimPlan) -> str:
        """Publish what each prepared device is in the claim's status; the error, or "".

        Part of prepare when enabled: a claim whose status cannot be written is not
        prepared (its files are dropped), so the pod does not start and its events say why,
        instead of running without the status an operator asked for.
        """
        ours = [{
            "driver": self.cfg.driver, "pool": self.cfg.node, "device": d.device.name,
            **({"shareID": d.share_id} if d.share_id else {}),
            "data": {"uuid": d.device.uuid, "productName": d.device.product_name,
                     "pciBusID": d.device.pci_bus_id,
                     **({"pluginVersion": self.cfg.version} if self.cfg.version else {})},
        } for d in plan.devices]
        return write_device_status(self._claims, claim, plan.ref, self.cfg.driver, ours)
