"""The fake IMEX daemon: one process per node and ComputeDomain.

Started by the compute-domain plugin when it prepares the daemon claim of the domain's
DaemonSet pod on this node (stopped when that claim is unprepared). Once a second it:

- reads this node's fabric through NVML (``fabric.read``): every GPU completed, healthy and in
  one clique, or a reason why not (fault injection: ``fabric-degraded``);
- checks its own endpoint, the daemon pod's process at ``<pod IP>:DAEMON_PORT``, and each peer's
  (the domain's other daemon pods) over the pod network;
- writes its node's entry in the domain's ``status.nodes`` (name, pod IP, clique ID, index,
  Ready/NotReady) and an Event on every change, naming the reason.

It runs while its claim's record (the plugin's ``claims/<uid>.json``) exists: unprepare stops
it, and a node whose state is gone (an embedded cluster taken down) leaves no daemon behind,
though a plugin restart does not stop it.

After any failure the node needs ``STABLE_ROUNDS`` good rounds in a row before it is Ready
again, as a real IMEX daemon re-forms its domain after losing a peer: an outage is never too
short for the status to show it.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from fakegpu.errors import FakegpuError
from fakegpu.kube import errors

from . import fabric, kube, objects
from .names import DAEMON_PORT, NOT_READY, READY, Names, daemon_endpoint
from .reflector import say

log = logging.getLogger(__name__)
STABLE_ROUNDS = 2
PROBE_TIMEOUT_S = 0.5
COMPONENT = "fakegpu-imex-daemon"


@dataclass(frozen=True)
class Config:
    names: Names
    domain_uid: str
    node: str
    pod_namespace: str
    pod_name: str
    port: int = DAEMON_PORT
    interval_s: float = 1.0
    record: Path | None = None  # the plugin's record of the daemon claim: gone, the daemon ends


def probe(ip: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when something accepts a TCP connection at ip:port."""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Observation:
    ip: str
    clique: str
    problem: str  # "" when this node is fit to be in the domain right now
    unreachable: tuple[str, ...]  # peers' node names


class Daemon:
    def __init__(self, api: client.ApiClient, cfg: Config) -> None:
        self.api = api
        self.cfg = cfg
        self._core: Any = kube.core(api)
        self._good = 0
        self._last: tuple[str, str, str, str] | None = None  # status, ip, clique, problem
        self._unreachable: tuple[str, ...] = ()
        self._cd: dict[str, Any] | None = None

    def observe(self) -> Observation:
        cfg = self.cfg
        pod = errors.call(f"cannot read pod {cfg.pod_namespace}/{cfg.pod_name}",
                          lambda: self._core.read_namespaced_pod(
                              cfg.pod_name, cfg.pod_namespace, _request_timeout=kube.TIMEOUT_S))
        ip = pod.status.pod_ip or ""
        try:
            fab = fabric.read()
            problem, clique = fab.problem, next((g.clique for g in fab.gpus if g.clique), "")
        except FakegpuError as err:
            problem, clique = str(err), ""
        if not problem and not ip:
            problem = "the daemon pod has no IP yet"
        elif not problem and not probe(ip, cfg.port):
            problem = (f"the IMEX daemon process does not answer at "
                       f"{daemon_endpoint(ip, cfg.port)}")
        peers = self._core.list_namespaced_pod(
            cfg.pod_namespace, label_selector=f"{cfg.names.label_key}={cfg.domain_uid}",
            _request_timeout=kube.TIMEOUT_S).items
        unreachable = tuple(sorted(
            str(p.spec.node_name) for p in peers
            if p.metadata.name != cfg.pod_name and p.status.pod_ip
            and not p.metadata.deletion_timestamp and not probe(p.status.pod_ip, cfg.port)))
        return Observation(ip, clique, problem, unreachable)

    def step(self) -> None:
        cfg = self.cfg
        if self._cd is None:
            self._cd = kube.find_domain(self.api, cfg.names, cfg.domain_uid)
            if self._cd is None:
                log.info("ComputeDomain uid=%s not found (yet)", cfg.domain_uid)
                return
        obs = self.observe()
        self._good = self._good + 1 if not obs.problem else 0
        ready = not obs.problem and self._good >= STABLE_ROUNDS
        status = READY if ready else NOT_READY
        problem = obs.problem or ("" if ready else "forming the domain with its peers")
        entry = {"name": cfg.node, "ipAddress": obs.ip, "cliqueID": obs.clique,
                 "status": status}
        meta = self._cd["metadata"]

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            nodes = current.get("nodes") or []
            mine = next((n for n in nodes if n.get("name") == cfg.node), None)
            if mine is not None and all(mine.get(k) == v for k, v in entry.items()):
                return None
            return {**current, "nodes": objects.upsert_node(nodes, entry),
                    "status": current.get("status") or NOT_READY}

        if kube.update_status(self.api, cfg.names, meta["namespace"], meta["name"],
                              change) is None:
            self._cd = None  # deleted: look it up again (the plugin stops us soon)
            return
        before = self._last
        self._last = (status, obs.ip, obs.clique, problem)
        # Events say what changed: ready (again), or a new reason not to be. Starting up (no
        # pod IP yet, forming the domain) is no news.
        if ready and (before is None or before[0] != READY):
            self._event("IMEXDaemonReady",
                        f"node {cfg.node}: IMEX daemon ready at {obs.ip}, clique {obs.clique}")
        elif (obs.problem and obs.ip and (before is None or before[3] != obs.problem)):
            self._event("IMEXDaemonNotReady",
                        f"node {cfg.node}: IMEX daemon not ready: {obs.problem}", warning=True)
        if obs.unreachable != self._unreachable:
            self._unreachable = obs.unreachable
            if obs.unreachable:
                self._event("IMEXPeerUnreachable",
                            f"node {cfg.node}: IMEX peers not answering on the pod network: "
                            f"{', '.join(obs.unreachable)}", warning=True)

    def _event(self, reason: str, message: str, warning: bool = False) -> None:
        log.info("%s: %s", reason, message)
        if self._cd is not None:
            kube.event(self.api, self.cfg.names, self._cd, reason, message, warning=warning,
                       component=COMPONENT)

    def leave(self) -> None:
        """Take this node's entry out of the domain (the daemon is going away)."""
        cd = self._cd or kube.find_domain(self.api, self.cfg.names, self.cfg.domain_uid)
        if cd is None:
            return
        node = self.cfg.node

        def change(current: dict[str, Any]) -> dict[str, Any] | None:
            nodes = current.get("nodes") or []
            if not any(n.get("name") == node for n in nodes):
                return None
            left = objects.remove_node(nodes, node)
            out = {**current, "nodes": left}
            if not left:
                out.pop("nodes")
            return out

        kube.update_status(self.api, self.cfg.names, cd["metadata"]["namespace"],
                           cd["metadata"]["name"], change)

    def run(self, stop: threading.Event) -> None:
        log.info("IMEX daemon node=%s domain=%s pod=%s/%s", self.cfg.node, self.cfg.domain_uid,
                 self.cfg.pod_namespace, self.cfg.pod_name)
        while not stop.is_set():
            if self.cfg.record is not None and not self.cfg.record.exists():
                log.info("claim record %s is gone: stopping", self.cfg.record)
                break
            try:
                self.step()
            except errors.NotFound as err:
                if self._cd is None:
                    log.warning("round failed: %s", err)
                else:
                    log.info("daemon pod %s/%s is gone", self.cfg.pod_namespace,
                             self.cfg.pod_name)
            except Exception as err:  # the apiserver away a moment: next round
                log.warning("round failed: %s", say(err))
            stop.wait(self.cfg.interval_s)
        try:
            self.leave()
        except Exception as err:
            log.warning("cannot remove node %s from the domain: %s", self.cfg.node, err)


def run(api: client.ApiClient, cfg: Config) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    Daemon(api, cfg).run(stop)
    return 0
