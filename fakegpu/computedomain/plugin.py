"""The compute-domain kubelet plugin: the fakegpu plugin's gRPC machinery under a second
driver name (compute-domain.nvidia.com, or compute-domain.fakegpu.dev).

It publishes, per node, IMEX channel devices ``channel-<N>`` and one daemon device
``daemon-0`` (attributes ``type`` and ``id``, as NVIDIA's driver names them) and prepares:

- a daemon claim (the IMEX DaemonSet's pod on this node): starts the fake IMEX daemon for the
  claim's domain (``daemon.py``) and gives the pod the domain's identity;
- a channel claim (a workload's): refuses a node that cannot join the domain (its fabric is not
  completed and healthy, or its clique is not the domain's), labels the node for the domain
  so its IMEX daemon lands here, waits until that daemon is Ready in the domain's status, then
  injects ``/dev/nvidia-caps-imex-channels/channel<N>`` and ``FAKEGPU_COMPUTE_DOMAIN`` /
  ``FAKEGPU_IMEX_CHANNEL``, and ``FAKEGPU_IMEX_DAEMON``: the daemon pod's endpoint (its IP from
  the domain's status, ``DAEMON_PORT``), where a channel user finds its node's daemon. Not
  ready within ``READY_WAIT_S``: that claim's error, and the kubelet asks again.

A channel claim must be in its domain's namespace (a domain is a tenant boundary, as in
NVIDIA's driver), a daemon claim in the driver's namespace (``--namespace``: where the
controller makes the IMEX daemons' claims; anyone else's would start a daemon in a domain they
may not touch), and a node is in one domain at a time: a channel claim of a second domain
on a node whose label names a first, still existing one is refused (per claim, and an event on
the second domain) until the first domain's workloads have left the node.

Errors are per claim; records (one JSON file per prepared claim) make prepare idempotent and
let a restarted plugin find its daemons again. A daemon's own command line names its claim and
this plugin's state dir, so the daemons running are found in /proc, not in a pid file written
after the start (a kill -9 between the two left a daemon no one knew of). Daemons outlive a
plugin restart (docs/gb200.md): they end when their claim is unprepared or its record is gone.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from fakegpu import fsutil
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.kube import errors
from fakegpu.kube.errors import KubeError
from fakegpu.kube.resource import GROUP
from fakegpu.kubeletplugin import cdispec, slicepool, startup
from fakegpu.kubeletplugin import names as safe
from fakegpu.kubeletplugin.checkpoint import PreparedClaim, PreparedDevice
from fakegpu.kubeletplugin.claims import ClaimError, ClaimRef, PrepareResult, allocated_results
from fakegpu.kubeletplugin.health import HEALTHY, UNHEALTHY, DeviceStatus, HealthStreams
from fakegpu.kubeletplugin.kube import Kube
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.wait import NotYet, wait_for

from . import fabric, killpoint, kube
from .connect import connect
from .names import (
    CHANNEL,
    CHANNEL_CONFIG_KIND,
    DAEMON,
    DAEMON_CONFIG_KIND,
    ENV_CHANNEL,
    ENV_DAEMON,
    ENV_DOMAIN,
    IMEX_CHANNEL_DIR,
    READY,
    Names,
    daemon_endpoint,
    for_cd_driver,
)

log = logging.getLogger(__name__)
CHANNELS = 8  # channel-0 .. channel-7 published per node (NVIDIA's driver: up to 2048)
# The char device a channel is: a major no real driver here uses (the real one is dynamic,
# from /proc/devices "nvidia-caps-imex-channels"), minor = channel number.
IMEX_MAJOR = 511
# As long as the kubelet's 45 s per call allows: a prepare that fails is not retried after the
# pod worker's 10 s backoff but at the pod's next resync, 60-90 s later (1.37's kuberuntime
# manager returns from a failed PrepareDynamicResources without a sync error), so every
# failure here costs a minute or more; on a loaded 2-core host an IMEX daemon can take 35 s.
READY_WAIT_S = 40.0
READY_POLL_S = 1.0  # one GET of the domain per second and waiting claim (18 at once on NVL72)
CDI_CLASS = "imex"
MANAGED_BY = "fakegpu-compute-domain-plugin"
DAEMON_STOP_S = 5.0
# From a daemon's Popen until /proc shows its command line: moments, unless very loaded.
DAEMON_EXEC_S = 10.0
# Where the kill -9 tests stop the plugin (killpoint.py), in the order a prepare reaches them.
KILL_STEPS = ("prepare-spec-written", "prepare-recorded", "daemon-starting",
              "daemon-started")


@dataclass(frozen=True)
class Config:
    names: Names
    node: str
    kubeconfig: Path | None
    kubelet_root: Path
    cdi_root: Path
    state_dir: Path
    namespace: str  # the driver's: where the controller makes the daemon claims


# --- pure pieces -------------------------------------------------------------------------------


def devices(version: str) -> list[dict[str, Any]]:
    """This node's devices, in ResourceSlice form. Every domain on the node shares them:
    allowMultipleAllocations (an apiserver without DRAConsumableCapacity drops it, and then
    one domain at a time uses a node)."""
    def device(kind: str, index: int) -> dict[str, Any]:
        return slicepool.device(f"{kind}-{index}", {
            "allowMultipleAllocations": True,
            "attributes": {"type": {"string": kind}, "id": {"int": index}}}, version)

    return [*(device(CHANNEL, i) for i in range(CHANNELS)), device(DAEMON, 0)]


def device_health(problem: str) -> list[DeviceStatus]:
    """Every device's health for the kubelet's health streams (pod status): while the node's
    fabric keeps it out of every domain (``NodeFabric.problem``: not completed, degraded, no
    clique), its channels and daemon are unusable, so unhealthy, with that reason."""
    return [DeviceStatus(d["name"], UNHEALTHY if problem else HEALTHY, problem)
            for d in devices("v1")]


def fabric_problem() -> str:
    """The node's fabric problem ("" when it can join a domain), read through NVML."""
    try:
        return fabric.read().problem
    except FakegpuError as err:
        return str(err)


def slice_object(names: Names, node: str, owner: dict[str, Any] | None, version: str,
                 generation: int = 1) -> dict[str, Any]:
    return slicepool.pool_slice(names.driver, node, version, generation, devices(version),
                                owner, MANAGED_BY)


class Publisher(slicepool.PoolPublisher):
    """The node's one slice, kept by the base's pool publisher."""

    def __init__(self, api: slicepool.SliceApi, names_: Names, node: str) -> None:
        super().__init__(api, names_.driver, node, interval_s=30.0,
                         name="cd-slice-publisher")
        self._names = names_

    def desired(self, version: str, generation: int,
                owner: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [slice_object(self._names, self._node, owner, version, generation)]


@dataclass(frozen=True)
class Allocated:
    request: str
    device: str  # channel-<N> | daemon-0
    kind: str  # channel | daemon
    index: int


@dataclass(frozen=True)
class Plan:
    ref: ClaimRef
    domain_uid: str
    config_kind: str
    allocation_mode: str
    devices: tuple[Allocated, ...]

    @property
    def kind(self) -> str:
        return DAEMON if self.config_kind == DAEMON_CONFIG_KIND else CHANNEL


def plan(claim: dict[str, Any], ref: ClaimRef, names: Names, node: str) -> Plan:
    """The claim's devices of our driver on this node and its domain config. Raises
    ClaimError."""
    where = f"ResourceClaim {ref.namespace}/{ref.name}"
    results = allocated_results(claim, ref, names.driver)
    allocation = (claim.get("status") or {}).get("allocation") or {}
    allocated = []
    for r in results:
        if r.get("pool") != node:
            raise ClaimError(f"{where}: device {r.get('device')} is allocated on node "
                             f"{r.get('pool')}, not {node}")
        kind, _, index = str(r.get("device", "")).rpartition("-")
        if kind not in (CHANNEL, DAEMON) or not index.isdigit():
            raise ClaimError(f"{where} names unknown device {r.get('device')!r}")
        allocated.append(Allocated(str(r.get("request", "")), str(r["device"]), kind,
                                   int(index)))
    configs = [c.get("opaque") or {} for c in (allocation.get("devices") or {}).get("config")
               or []]
    params = [c.get("parameters") or {} for c in configs if c.get("driver") == names.driver]
    ours = [p for p in params if p.get("kind") in (CHANNEL_CONFIG_KIND, DAEMON_CONFIG_KIND)]
    if not ours or not ours[-1].get("domainID"):
        raise ClaimError(f"{where} has no {CHANNEL_CONFIG_KIND} or {DAEMON_CONFIG_KIND} "
                         f"naming a domainID for driver {names.driver}: use the "
                         "ComputeDomain's resourceClaimTemplate")
    config = ours[-1]  # the last one wins, as for every opaque config
    kinds = {a.kind for a in allocated}
    wanted = DAEMON if config["kind"] == DAEMON_CONFIG_KIND else CHANNEL
    if kinds != {wanted}:
        raise ClaimError(f"{where}: a {config['kind']} goes with {wanted} devices, not "
                         f"{', '.join(sorted(a.device for a in allocated))}")
    return Plan(ref, str(config["domainID"]), str(config["kind"]),
                str(config.get("allocationMode") or "Single"), tuple(allocated))


def join_problem(names_: Names, cd: dict[str, Any], node: str, fab: fabric.NodeFabric) -> str:
    """Why ``node`` cannot join domain ``cd``, or ""."""
    meta = cd["metadata"]
    ref = f"ComputeDomain {meta['namespace']}/{meta['name']}"
    if fab.problem:
        return f"node {node} cannot join {ref}: {fab.problem}"
    others = [n for n in (cd.get("status") or {}).get("nodes") or []
              if n.get("name") != node and n.get("cliqueID")]
    theirs = sorted({n["cliqueID"] for n in others} - {fab.clique})
    if theirs:
        members = ", ".join(sorted(n["name"] for n in others if n["cliqueID"] != fab.clique))
        return (f"node {node} cannot join {ref}: its GPUs are in NVLink clique {fab.clique}, "
                f"the domain's nodes ({members}) in {', '.join(theirs)}")
    return ""


def tenant_problem(ref: ClaimRef, cd: dict[str, Any]) -> str:
    """Why channel claim ``ref`` may not use domain ``cd``, or "": a claim names a domain of
    its own namespace only (the domain UID in its config could be copied from any)."""
    meta = cd["metadata"]
    if meta["namespace"] == ref.namespace:
        return ""
    return (f"ResourceClaim {ref.namespace}/{ref.name} names ComputeDomain "
            f"{meta['namespace']}/{meta['name']} of another namespace: a channel claim must "
            f"be in its ComputeDomain's namespace ({meta['namespace']})")


def daemon_claim_problem(ref: ClaimRef, driver_namespace: str) -> str:
    """Why daemon claim ``ref`` may not be prepared, or "": only the controller's claims, in
    the driver's namespace, start IMEX daemons (a user's copy of one, with a domain UID copied
    from anywhere, would join that domain). Checked before the domain is looked up, so the
    answer says nothing about which UIDs exist."""
    if ref.namespace == driver_namespace:
        return ""
    return (f"ResourceClaim {ref.namespace}/{ref.name} is a {DAEMON_CONFIG_KIND} claim: "
            f"a daemon claim must be in the driver's namespace ({driver_namespace}), where "
            "the ComputeDomain controller makes them")


def daemon_cmdline_matches(argv: Sequence[str], uid: str, state_dir: str) -> bool:
    """Whether ``argv`` is the IMEX daemon of claim ``uid`` started from ``state_dir``."""
    pairs = set(itertools.pairwise(argv))
    return ("computedomain", "daemon") in pairs and ("--claim-uid", uid) in pairs and (
        "--state-dir", state_dir) in pairs


def cdi_spec(names_: Names, p: Plan, domain_ref: str, clique: str,
             daemon: str = "") -> dict[str, Any]:
    """The claim's CDI spec; ``daemon``: the node's IMEX daemon endpoint (channel claims)."""
    kind = f"{names_.driver}/{CDI_CLASS}"
    env = [f"{ENV_DOMAIN}={p.domain_uid}", f"FAKEGPU_COMPUTE_DOMAIN_NAME={domain_ref}",
           f"FAKEGPU_CLAIM={p.ref.namespace}/{p.ref.name}"]
    devs = []
    for a in p.devices:
        # Every CDI device needs an edit of its own (an empty one is refused by the runtime).
        edits: dict[str, Any] = {"env": [f"FAKEGPU_IMEX_DEVICE={a.device}"]}
        if a.kind == CHANNEL:
            channels = range(CHANNELS) if p.allocation_mode == "All" else [a.index]
            edits["deviceNodes"] = [{
                "path": f"{IMEX_CHANNEL_DIR}/channel{c}", "type": "c", "major": IMEX_MAJOR,
                "minor": c, "permissions": "rw", "fileMode": 0o666} for c in channels]
            edits["env"] += [f"{ENV_CHANNEL}={a.index}", f"FAKEGPU_CLIQUE_ID={clique}"]
            if daemon:
                edits["env"].append(f"{ENV_DAEMON}={daemon}")
        devs.append({"name": f"{p.ref.uid}-{a.device}", "containerEdits": edits})
    return {"cdiVersion": cdispec.CDI_VERSION, "kind": kind, "containerEdits": {"env": env},
            "devices": devs}


def spec_filename(names_: Names, uid: str) -> str:
    return cdispec.spec_filename(names_.driver, uid)


# --- the driver --------------------------------------------------------------------------------


class ComputeDomainDriver:
    """What ``fakegpu.kubeletplugin.server`` calls: prepare / unprepare, one result per claim."""

    def __init__(self, cfg: Config, api: client.ApiClient, resource_version: str) -> None:
        self.driver_name = cfg.names.driver
        self.c = cfg
        self.names = cfg.names
        self.api = api
        self.resource_version = resource_version  # kube.resource_version: the one rule
        self._lock = threading.Lock()  # one claim at a time: prepares wait on daemons anyway
        self._refused: set[str] = set()  # claims told their node is in another domain
        self._claims = self.c.state_dir / "claims"
        self._daemons = self.c.state_dir / "daemons"
        self._claims.mkdir(parents=True, exist_ok=True)
        self._daemons.mkdir(parents=True, exist_ok=True)
        self.c.cdi_root.mkdir(parents=True, exist_ok=True)

    # records: <state>/claims/<uid>.json = {"claim": PreparedClaim, "domain", "kind", "pod"}
    def _record(self, uid: str) -> dict[str, Any] | None:
        try:
            raw = json.loads((self._claims / f"{uid}.json").read_text())
            return raw if isinstance(raw, dict) else None
        except (OSError, ValueError):
            return None

    def _records(self) -> dict[str, dict[str, Any]]:
        out = {}
        for path in self._claims.glob("*.json"):
            if (rec := self._record(path.stem)) is not None:
                out[path.stem] = rec
        return out

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results = {}
        for ref in refs:
            try:
                results[ref.uid] = PrepareResult(self._prepare_one(ref))
            except ClaimError as err:
                log.warning("prepare uid=%s: %s", ref.uid, err)
                results[ref.uid] = PrepareResult(None, str(err))
            except Exception as err:  # the apiserver, NVML, the disk: this claim's error
                log.exception("prepare uid=%s failed", ref.uid)
                results[ref.uid] = PrepareResult(None, f"cannot prepare: {err}")
        return results

    def _prepare_one(self, ref: ClaimRef) -> PreparedClaim:
        bad = safe.check("namespace", ref.namespace) or safe.check("name", ref.name)
        if bad:
            raise ClaimError(f"ResourceClaim {bad}")
        rec = self._record(ref.uid)
        if rec is not None and (self.c.cdi_root / rec["claim"]["cdi_spec"]).is_file():
            if rec["kind"] == DAEMON:
                self._ensure_daemon(ref.uid, rec)
            return PreparedClaim.from_json(rec["claim"])
        claim = dict(kube.custom(self.api).get_namespaced_custom_object(
            GROUP, self.resource_version, ref.namespace, "resourceclaims", ref.name,
            _request_timeout=kube.TIMEOUT_S))
        p = plan(claim, ref, self.names, self.c.node)
        if p.kind == DAEMON and (why := daemon_claim_problem(ref, self.c.namespace)):
            raise ClaimError(why)
        cd = kube.find_domain(self.api, self.names, p.domain_uid)
        if cd is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: no ComputeDomain "
                             f"with UID {p.domain_uid}")
        domain_ref = f"{cd['metadata']['namespace']}/{cd['metadata']['name']}"
        if p.kind == CHANNEL and (why := tenant_problem(ref, cd)):
            raise ClaimError(why)
        pod = ""
        clique = ""
        daemon = ""
        if p.kind == CHANNEL:
            fab = fabric.read()
            if why := join_problem(self.names, cd, self.c.node, fab):
                raise ClaimError(why)
            clique = fab.clique
            with self._lock:  # the check and the label as one step: one domain per node
                if other := self._other_domain(p.domain_uid):
                    self._refuse_second_domain(ref, cd, domain_ref, other)
                kube.label_node(self.api, self.c.node, self.names.label_key, p.domain_uid)
            if ip := self._wait_ready(cd, domain_ref):
                daemon = daemon_endpoint(ip)
        else:
            owners = [r for r in (claim.get("status") or {}).get("reservedFor") or []
                      if r.get("resource") == "pods"]
            if not owners:
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} is reserved for "
                                 "no pod: a daemon claim belongs to an IMEX daemon pod")
            pod = f"{ref.namespace}/{owners[0]['name']}"
        prepared = PreparedClaim(
            uid=ref.uid, namespace=ref.namespace, name=ref.name,
            devices=tuple(PreparedDevice(
                request_names=(a.request,), pool_name=self.c.node, device_name=a.device,
                cdi_device_ids=(f"{self.names.driver}/{CDI_CLASS}={ref.uid}-{a.device}",))
                for a in p.devices),
            cdi_spec=spec_filename(self.names, ref.uid))
        rec = {"claim": prepared.to_json(), "domain": p.domain_uid, "kind": p.kind, "pod": pod}
        with self._lock:
            fsutil.atomic_write(self.c.cdi_root / prepared.cdi_spec,
                                json.dumps(cdi_spec(self.names, p, domain_ref, clique,
                                                    daemon)),
                                mode=0o644)
            killpoint.reached("prepare-spec-written")
            fsutil.atomic_write(self._claims / f"{ref.uid}.json", json.dumps(rec))
            killpoint.reached("prepare-recorded")
            if p.kind == DAEMON:
                self._ensure_daemon(ref.uid, rec)
        log.info("prepared %s claim=%s/%s uid=%s domain=%s", p.kind, ref.namespace, ref.name,
                 ref.uid, domain_ref)
        return prepared

    def _other_domain(self, uid: str) -> dict[str, Any] | None:
        """Another domain this node is in (its label, or a channel prepared here), if that
        domain still exists and is not being deleted."""
        node = kube.core(self.api).read_node(self.c.node, _request_timeout=kube.TIMEOUT_S)
        candidates = {(node.metadata.labels or {}).get(self.names.label_key, ""),
                      *(str(r.get("domain")) for r in self._records().values()
                        if r.get("kind") == CHANNEL)} - {uid, ""}
        for other in sorted(candidates):
            cd = kube.find_domain(self.api, self.names, other)
            if cd is not None and not cd["metadata"].get("deletionTimestamp"):
                return cd
        return None

    def _refuse_second_domain(self, ref: ClaimRef, cd: dict[str, Any], domain_ref: str,
                              other: dict[str, Any]) -> None:
        om = other["metadata"]
        why = (f"node {self.c.node} is in ComputeDomain {om['namespace']}/{om['name']}: a node "
               f"is in one ComputeDomain at a time, so ComputeDomain {domain_ref} waits until "
               "that domain's workloads have left the node")
        if ref.uid not in self._refused:  # one event per claim, not one per kubelet retry
            self._refused.add(ref.uid)
            kube.event(self.api, self.names, cd, "NodeInOtherDomain",
                       f"ResourceClaim {ref.namespace}/{ref.name}: {why}", warning=True,
                       component="fakegpu-compute-domain-plugin")
        raise ClaimError(why)

    def _wait_ready(self, cd: dict[str, Any], domain_ref: str) -> str:
        """Wait until this node's IMEX daemon is Ready in the domain; its pod IP."""
        deadline = time.monotonic() + READY_WAIT_S
        meta = cd["metadata"]
        state = "no IMEX daemon has reported from this node yet"
        while True:
            current = kube.get_domain(self.api, self.names, meta["namespace"], meta["name"])
            mine = next((n for n in (current.get("status") or {}).get("nodes") or []
                         if n.get("name") == self.c.node), None)
            if mine is not None and mine.get("status") == READY:
                return str(mine.get("ipAddress") or "")
            if mine is not None:
                state = f"its status is {mine.get('status') or 'unknown'}"
            if time.monotonic() >= deadline:
                raise ClaimError(f"ComputeDomain {domain_ref}: the IMEX daemon on node "
                                 f"{self.c.node} is not ready ({state}); retrying")
            time.sleep(READY_POLL_S)

    # --- daemons ---------------------------------------------------------------------------

    def _daemon_pids(self, uid: str) -> list[int]:
        """The running IMEX daemons of claim ``uid`` (normally one), found by their command
        line: what runs is the record, so no kill -9 can separate the two."""
        state = str(self.c.state_dir)
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:  # exited meanwhile, or not ours to read
                continue
            if daemon_cmdline_matches(raw.decode(errors="replace").split("\0"), uid, state):
                found.append(int(entry.name))
        return sorted(found)

    def _ensure_daemon(self, uid: str, rec: dict[str, Any]) -> None:
        """The claim's one daemon: the one running adopted (extra ones, which an older
        plugin could leave, stopped), or one started."""
        running = self._daemon_pids(uid)
        if running:
            if len(running) > 1:
                log.warning("claim=%s has %d IMEX daemons: stopping all but pid %d", uid,
                            len(running), running[0])
                _terminate(running[1:])
            return
        killpoint.reached("daemon-starting")
        namespace, _, pod = str(rec["pod"]).partition("/")
        argv = [sys.executable, "-m", "fakegpu", "computedomain", "daemon",
                "--domain", self.names.domain, "--domain-uid", rec["domain"],
                "--node", self.c.node, "--pod-namespace", namespace, "--pod-name", pod,
                "--claim-uid", uid, "--state-dir", str(self.c.state_dir),
                *(["--kubeconfig", str(self.c.kubeconfig)] if self.c.kubeconfig else [])]
        with (self._daemons / f"{uid}.log").open("ab") as out:
            # Its own session: a signal to the plugin's process group does not end it.
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        # Popen returns once the child's exec has begun, before the kernel has set up its new
        # command line: /proc/<pid>/cmdline reads empty for a moment (most of the time on
        # this 2-core VM), and a scan then (the very next prepare of this claim) found no
        # daemon and started a second one. So the start returns once the daemon shows.
        self._await_exec(uid, proc)
        killpoint.reached("daemon-started")
        log.info("started IMEX daemon pid=%d claim=%s pod=%s domain=%s", proc.pid, uid,
                 rec["pod"], rec["domain"])

    def _await_exec(self, uid: str, proc: subprocess.Popen[bytes]) -> None:
        def shown() -> None:
            if proc.poll() is None and proc.pid not in self._daemon_pids(uid):
                raise NotYet(f"pid {proc.pid} shows no daemon command line yet")

        wait_for(shown, what=f"IMEX daemon pid {proc.pid} of claim {uid} to start",
                 timeout=DAEMON_EXEC_S, interval=0.02)

    def _stop_daemon(self, uid: str) -> None:
        _terminate(self._daemon_pids(uid))
        (self._daemons / f"{uid}.pid").unlink(missing_ok=True)  # an older plugin's pid file

    def restart_daemons(self) -> None:
        """At start: every prepared daemon claim gets its daemon again."""
        for uid, rec in self._records().items():
            if rec.get("kind") == DAEMON:
                self._ensure_daemon(uid, rec)

    def running_daemons(self) -> int:
        return sum(len(self._daemon_pids(uid)) for uid, rec in self._records().items()
                   if rec.get("kind") == DAEMON)

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        out = {}
        for ref in refs:
            try:
                self._unprepare_one(ref)
                out[ref.uid] = ""
            except Exception as err:
                log.exception("unprepare uid=%s failed", ref.uid)
                out[ref.uid] = f"cannot unprepare: {err}"
        return out

    def _unprepare_one(self, ref: ClaimRef) -> None:
        rec = self._record(ref.uid)
        if rec is None:
            (self.c.cdi_root / spec_filename(self.names, ref.uid)).unlink(missing_ok=True)
            return
        if rec["kind"] == DAEMON:
            self._stop_daemon(ref.uid)
        with self._lock:
            (self._claims / f"{ref.uid}.json").unlink(missing_ok=True)
            (self.c.cdi_root / rec["claim"]["cdi_spec"]).unlink(missing_ok=True)
            still = any(r.get("kind") == CHANNEL and r.get("domain") == rec["domain"]
                        for r in self._records().values())
        if rec["kind"] == CHANNEL and not still:
            # The domain's last workload left this node: its daemon goes too (NVIDIA's way).
            with contextlib.suppress(errors.NotFound):
                node = errors.call(f"cannot read Node {self.c.node}", lambda: kube.core(
                    self.api).read_node(self.c.node, _request_timeout=kube.TIMEOUT_S))
                if (node.metadata.labels or {}).get(self.names.label_key) == rec["domain"]:
                    kube.label_node(self.api, self.c.node, self.names.label_key, None)
        log.info("unprepared %s claim=%s/%s uid=%s", rec["kind"], ref.namespace, ref.name,
                 ref.uid)


def _terminate(pids: Sequence[int]) -> None:
    """SIGTERM (the daemon takes its node's entry out of the domain), SIGKILL after
    ``DAEMON_STOP_S``."""
    left = list(pids)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DAEMON_STOP_S
    while left and time.monotonic() < deadline:
        _reap()
        left = [pid for pid in left if _alive(pid)]
        if left:
            time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap()


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet collected by its parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _reap() -> None:
    """Collect exited daemon children (no zombies keeping a pid alive)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


# --- run -------------------------------------------------------------------------------------


def run(driver_name: str, node: str, kubeconfig: Path | None, kubelet_root: Path,
        cdi_root: Path, state_dir: Path | None, namespace: str,
        stop: threading.Event | None = None) -> int:
    names_ = for_cd_driver(driver_name)
    if names_ is None:
        raise InvalidInput(f"--driver-name {driver_name!r} is not a compute-domain driver "
                           "(compute-domain.<domain>)")
    if why := safe.check("--namespace", namespace):
        raise InvalidInput(why)
    # The base's checks, before the apiserver or the disk fail on them.
    paths, state = startup.prepare(node, driver_name, "", kubelet_root, cdi_root, state_dir)
    cfg = Config(names_, node, kubeconfig, kubelet_root, cdi_root, state, namespace)
    api = connect(kubeconfig)
    version = kube.resource_version(api)
    driver = ComputeDomainDriver(cfg, api, version)
    publisher = Publisher(Kube(kubeconfig), names_, node)
    try:
        publisher.sync()  # at once: the channels must be there before the kubelet asks
    except KubeError as err:
        raise FakegpuError(f"cannot publish node {node}'s ResourceSlice: {err}") from err
    publisher.start()
    driver.restart_daemons()
    stop = stop or threading.Event()
    startup.on_signals(stop)
    # Pods holding a channel see it unhealthy while the fabric keeps the node out (KEP-4680).
    streams = HealthStreams(node, lambda: device_health(fabric_problem()))
    servers = PluginServers(driver, paths, 8, streams)
    log.info("serving driver=%s node=%s dra=%s", driver_name, node, paths.dra)
    while not stop.wait(2.0):
        _reap()
    servers.stop(10.0)
    # The IMEX daemons stay (docs/gb200.md): a plugin restart (an upgrade) must not take the
    # domains down; the next plugin adopts them, unprepare ends them.
    log.info("stopping; %d IMEX daemons keep running", driver.running_daemons())
    publisher.stop()
    startup.withdraw_slices(kubelet_root, driver_name, paths, publisher.cleanup)
    return 0
