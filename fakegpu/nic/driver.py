"""Prepare / unprepare of NIC claims on the kubelet-plugin base.

Prepare, per claim: read the claim, take this driver's results for this node, make each NIC's
node-side interface (``netdev``, with the NIC's addresses), write the claim's status
(``networkData``: the interface name, addresses and MAC the pod sees, and a ``Ready``
condition), then the CDI spec (the interface through
``netDevices``, the RDMA verbs node through ``deviceNodes``) and the record, under the commit
lock. A claim whose status cannot be written is not prepared: its interfaces go again.
Unprepare removes the interfaces (if the pod never took them), the spec and the record.
Errors are per claim; a prepared claim asked again is answered from its record.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fakegpu.errors import FakegpuError
from fakegpu.kubeletplugin import cdispec, names
from fakegpu.kubeletplugin.checkpoint import PreparedClaim, PreparedDevice, Records
from fakegpu.kubeletplugin.claims import (
    ClaimError,
    ClaimRef,
    ClaimSource,
    PrepareResult,
    allocated_results,
    write_device_status,
)
from fakegpu.kubeletplugin.statelock import LockTimeout, StateLock

from . import netdev
from .discovery import Nic
from .slices import device_name

log = logging.getLogger(__name__)
CLASS = "nic"
# netDevices exist from CDI 1.1.0; containerd refuses a spec that uses a field its version
# does not have.
CDI_VERSION = "1.1.0"
LOCK_TIMEOUT_S = 60.0
RDMA_DIR = "/dev/infiniband"


@dataclass(frozen=True)
class NicConfig:
    driver: str
    node: str
    state_dir: Path
    cdi_root: Path
    instance: str = ""
    write_status: bool = True


def kind(driver: str) -> str:
    return f"{driver}/{CLASS}"


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def build_spec(driver: str, ref: ClaimRef,
               devices: Sequence[tuple[Nic, netdev.HostLink]]) -> dict[str, Any]:
    out = []
    for nic, link in devices:
        prefix = f"FAKEGPU_NIC_{_env_name(nic.name)}"
        edits: dict[str, Any] = {
            "netDevices": [{"hostInterfaceName": link.port, "name": nic.name}],
            "env": [f"{prefix}_MAC={nic.mac}", f"{prefix}_PCI_BUS_ID={nic.pci_bus_id}",
                    *([f"{prefix}_RDMA={nic.rdma}"] if nic.rdma else ())]}
        if nic.uverbs and nic.uverbs_dev:
            edits["deviceNodes"] = [{"path": f"{RDMA_DIR}/{nic.uverbs}", "type": "c",
                                     "major": nic.uverbs_dev[0], "minor": nic.uverbs_dev[1],
                                     "permissions": "rw"}]
        out.append({"name": f"{ref.uid}-{device_name(nic, driver)}", "containerEdits": edits})
    return {"cdiVersion": CDI_VERSION, "kind": kind(driver),
            "containerEdits": {"env": [f"FAKEGPU_NIC_CLAIM={ref.namespace}/{ref.name}"]},
            "devices": out}


def status_entries(driver: str, node: str, claim: dict[str, Any], version: str,
                   devices: Sequence[tuple[str, Nic]], now: str = "") -> list[dict[str, Any]]:
    """The claim's ``status.devices`` entries: what the pod's interface is (networkData)."""
    now = now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = int((claim.get("metadata") or {}).get("generation") or 0)
    return [{
        "driver": driver, "pool": node, "device": device_name(nic, driver),
        "data": {"interfaceName": nic.name, "macAddress": nic.mac, "model": nic.model,
                 "pciBusID": nic.pci_bus_id, **({"rdmaDevice": nic.rdma} if nic.rdma else {}),
                 **({"pluginVersion": version} if version else {})},
        "networkData": {"interfaceName": nic.name, "hardwareAddress": nic.mac,
                        **({"ips": list(nic.ips)} if nic.ips else {})},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                        "message": f"interface {nic.name} ready for the claim's pods"
                                   f" (request {request})",
                        "lastTransitionTime": now, "observedGeneration": generation}],
    } for request, nic in devices]


class NicDriver:
    def __init__(self, cfg: NicConfig, claims: ClaimSource,
                 nics: Callable[[], Sequence[Nic]], version: str = "") -> None:
        self.cfg = cfg
        self._claims, self._nics, self._version = claims, nics, version
        self._records = Records(cfg.state_dir)
        self._wires: dict[str, bool] = {}  # node-side ends set up (True) or down, by name
        self._lock = StateLock(cfg.state_dir, LOCK_TIMEOUT_S)
        try:
            with self._lock.cleanup():
                self._records.recover()
                cdispec.remove_stale_temps(cfg.cdi_root, cfg.driver)
        except LockTimeout as err:
            log.warning("skipped startup cleanup: %s", err)
        except OSError as err:
            raise FakegpuError(f"cannot set up the plugin state in {cfg.state_dir}: "
                               f"{err}") from err

    @property
    def driver_name(self) -> str:
        return self.cfg.driver

    def _name(self, nic: Nic) -> str:
        return device_name(nic, self.cfg.driver)

    def _link(self, device: str) -> netdev.HostLink:
        return netdev.host_link(str(self.cfg.state_dir), device)

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results = {}
        for ref in refs:
            bad = names.check("namespace", ref.namespace) or names.check("name", ref.name)
            try:
                results[ref.uid] = (PrepareResult(None, f"ResourceClaim {bad}") if bad
                                    else self._prepare(ref))
            except Exception as err:  # this claim's, whatever it is
                results[ref.uid] = PrepareResult(None, str(err))
        return results

    def _prepared(self, uid: str) -> PreparedClaim | None:
        record = self._records.get(uid, repair=True)
        if record is None:
            return None
        ids = [i for d in record.devices for i in d.cdi_device_ids]
        sound = cdispec.spec_sound(self.cfg.cdi_root, record.cdi_spec, kind(self.cfg.driver),
                                   ids)
        return record if sound else None

    def _plan(self, claim: dict[str, Any], ref: ClaimRef) -> list[tuple[str, Nic]]:
        by_name = {self._name(n): n for n in self._nics()}
        out = []
        for result in allocated_results(claim, ref, self.cfg.driver):
            pool, name = result.get("pool"), str(result.get("device"))
            if pool != self.cfg.node:
                raise ClaimError(f"device {pool}/{name} of ResourceClaim {ref.namespace}/"
                                 f"{ref.name} is allocated on another node (pool {pool!r}, "
                                 f"this node {self.cfg.node!r})")
            if name not in by_name:
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} names unknown "
                                 f"NIC {name!r} on node {self.cfg.node}")
            out.append((str(result.get("request", "")), by_name[name]))
        return out

    def _prepare(self, ref: ClaimRef) -> PrepareResult:
        with self._lock.commit():
            done = self._prepared(ref.uid)
        if done is not None:
            return PrepareResult(done)
        claim = self._claims.get_claim(ref.namespace, ref.name)
        plan = self._plan(claim, ref)
        links = [(nic, self._link(self._name(nic))) for _request, nic in plan]
        prepared = PreparedClaim(
            uid=ref.uid, namespace=ref.namespace, name=ref.name,
            devices=tuple(PreparedDevice(
                request_names=(request,), pool_name=self.cfg.node, device_name=self._name(nic),
                cdi_device_ids=(cdispec.device_id(kind(self.cfg.driver),
                                                  f"{ref.uid}-{self._name(nic)}"),))
                for request, nic in plan),
            cdi_spec=cdispec.spec_filename(self.cfg.driver, ref.uid),
            instance=self.cfg.instance, plugin_version=self._version)
        with self._lock.commit():
            done = self._prepared(ref.uid)  # another instance got there meanwhile
            if done is not None:
                return PrepareResult(done)
            try:
                for nic, link in links:
                    # Prepared during a fault (a pod tolerating it): no carrier from the start.
                    netdev.create(link, nic.mac, nic.ips, nic.mtu, up=nic.link_up)
                    self._wires[link.wire] = nic.link_up
                if self.cfg.write_status and (error := write_device_status(
                        self._claims, claim, ref, self.cfg.driver,
                        status_entries(self.cfg.driver, self.cfg.node, claim, self._version,
                                       plan))):
                    raise ClaimError(error)
                spec = cdispec.stage_spec(self.cfg.cdi_root, prepared.cdi_spec,
                                          build_spec(self.cfg.driver, ref, links))
                os.replace(spec, self.cfg.cdi_root / prepared.cdi_spec)
                self._records.commit(ref.uid, self._records.stage(prepared))
                self._records.sync()
            except BaseException:
                for _nic, link in links:
                    try:
                        netdev.remove(link)
                    except netdev.NetdevError as err:
                        log.error("claim uid=%s: %s", ref.uid, err)
                cdispec.remove_spec(self.cfg.cdi_root, prepared.cdi_spec)
                raise
        log.info("prepared claim=%s/%s uid=%s nics=%s", ref.namespace, ref.name, ref.uid,
                 ",".join(f"{n.name}->{link.port}" for n, link in links))
        return PrepareResult(prepared)

    def follow_links(self, nics: Sequence[Nic]) -> None:
        """Carry each NIC's link state (sysfs carrier; a ``nic-link-down`` fault and its
        clearing) to the interfaces of claims prepared on it, so a running pod sees its link
        go and come back. Called with every rediscovery; only changes reach ``ip``."""
        up = {self._name(n): n.link_up for n in nics}
        try:
            with self._lock.commit():  # not beside a prepare or unprepare of the same pair
                for record in self._records.all().values():
                    for device in record.devices:
                        self._follow(record, device.device_name, up.get(device.device_name, True))
        except LockTimeout as err:
            log.warning("links not followed this time: %s", err)

    def _follow(self, record: PreparedClaim, device: str, want: bool) -> None:
        link = self._link(device)
        if self._wires.get(link.wire) == want:
            return
        try:
            if netdev.set_wire(link, want):
                log.info("claim=%s/%s device=%s: link %s", record.namespace, record.name,
                         device, "up" if want else "down")
            self._wires[link.wire] = want
        except netdev.NetdevError as err:
            log.error("claim uid=%s: %s", record.uid, err)

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" on success). Unknown claims succeed: nothing to undo."""
        results = {}
        for ref in refs:
            try:
                with self._lock.commit():
                    record = self._records.get(ref.uid)
                    for device in record.devices if record else ():
                        link = self._link(device.device_name)
                        netdev.remove(link)
                        self._wires.pop(link.wire, None)
                    self._records.remove(ref.uid)
                    cdispec.remove_spec(self.cfg.cdi_root,
                                        cdispec.spec_filename(self.cfg.driver, ref.uid))
                    self._records.sync()
                results[ref.uid] = ""
                if record is not None:
                    log.info("unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
            except (OSError, netdev.NetdevError) as err:
                results[ref.uid] = f"cannot unprepare: {err}"
        return results
