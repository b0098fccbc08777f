"""A steady GPU workload while something happens to the cluster (an upgrade, a node restart).

``PodLoad`` creates short-lived pods, each with a claim of its own (one ResourceClaimTemplate),
on every node at a fixed rate, deletes the ones that finished, and records for each pod what a
user sees through the API: when it was created, scheduled, when its claim was allocated and
reserved, when its container started, when it finished, and any failure (a Failed phase, a
non-zero exit, a warning event). Usable without pytest::

    load = PodLoad(api_client, namespace, nodes, image, device_class, rate_per_node=1.0)
    load.start(); ...; report = load.stop()

Observation is by polling the namespace (pods, claims, warning events) every ``poll_s``: a
list of a few dozen objects is cheaper here than keeping three watches alive through apiserver
hiccups, and the recorded times are when this process first saw each state (API timestamps
have a resolution of one second).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client as kclient

from fakegpu.kube import errors

from .dra import PodClaim, ResourceApi, pod_manifest
from .k8s import create_pod

log = logging.getLogger(__name__)
LABEL = "fakegpu.dev/load"
TEMPLATE = "load-gpu"
# Warning events the kubelet and scheduler give a pod whose start failed for now; recorded,
# and they count as failures only if the pod never starts.
HOSTNAME_LABEL = "kubernetes.io/hostname"
IN_FLIGHT = 8  # creates per node waiting on the API server at once


@dataclass
class PodRecord:
    name: str
    node: str
    created: float  # seconds since the load started, as every time below
    scheduled: float | None = None
    allocated: float | None = None  # claim allocated and reserved for the pod
    started: float | None = None  # container running or already terminated (it ran)
    finished: float | None = None
    failed: float | None = None
    failure: str = ""
    warnings: list[str] = field(default_factory=list)
    claim: str = ""
    plugin_version: str = ""  # data.pluginVersion of the claim's device status, if written

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoadReport:
    started_at: float  # time.time() when the load started
    duration_s: float
    pods: tuple[PodRecord, ...]

    @property
    def failed(self) -> list[PodRecord]:
        return [p for p in self.pods if p.failed is not None]

    @property
    def never_started(self) -> list[PodRecord]:
        return [p for p in self.pods if p.started is None]

    def rate_per_node(self) -> dict[str, float]:
        counts: dict[str, int] = {}
        for p in self.pods:
            counts[p.node] = counts.get(p.node, 0) + 1
        return {n: c / max(self.duration_s, 1e-9) for n, c in sorted(counts.items())}

    def to_json(self) -> dict[str, Any]:
        return {"started_at": self.started_at, "duration_s": self.duration_s,
                "pods": [p.to_json() for p in self.pods]}


class PodLoad:
    """Pods with one GPU claim each, ``rate_per_node`` per second on each of ``nodes``."""

    def __init__(self, api_client: Any, namespace: str, nodes: Sequence[str], image: str,
                 device_class: str, *, rate_per_node: float = 1.0, driver: str = "",
                 command: Sequence[str] = ("true",), poll_s: float = 0.5) -> None:
        if rate_per_node <= 0:
            raise ValueError("rate_per_node must be positive")
        self.core = kclient.CoreV1Api(api_client)
        self.resources = ResourceApi(api_client)
        self.namespace = namespace
        self.nodes = list(nodes)
        self.image = image
        self.device_class = device_class
        self.driver = driver or device_class
        self.rate = rate_per_node
        self.command = list(command)
        self.poll_s = poll_s
        self.records: dict[str, PodRecord] = {}
        self._lock = threading.Lock()
        self._stop_creating = threading.Event()
        self._stop_observing = threading.Event()
        # One scheduler per node, and each pod's create in a thread of its own: the load is
        # open-loop, its ticks due on the clock whatever the API server's latency. A create
        # that waited for the one before it let a loaded API server (1-2 s a create while
        # other suites ran beside this one) pace the load below its rate: 60 pods in 64 s.
        # At most IN_FLIGHT creates per node wait at once; past that the schedule does slip.
        self._creators = [threading.Thread(target=self._create_loop, args=(node,),
                                           name=f"load-create-{node}", daemon=True)
                          for node in self.nodes]
        self._in_flight = {node: threading.BoundedSemaphore(IN_FLIGHT) for node in self.nodes}
        self._creates: list[threading.Thread] = []
        self._observer = threading.Thread(target=self._observe_loop, name="load-observe",
                                          daemon=True)
        self._threads: list[threading.Thread] = []  # once started
        self._t0 = 0.0
        self._wall0 = 0.0
        self.create_errors: list[str] = []

    def now(self) -> float:
        return time.monotonic() - self._t0

    def created_after(self, t: float) -> bool:
        """Whether a pod was created on every node at or after load time ``t``."""
        with self._lock:
            nodes = {r.node for r in self.records.values() if r.created >= t}
        return nodes >= set(self.nodes)

    def start(self) -> None:
        req = self.resources.device_request("gpu", self.device_class)
        with contextlib.suppress(errors.Conflict):  # made by an earlier load in this namespace
            self.resources.create("resourceclaimtemplates",
                                  self.resources.claim_template(TEMPLATE, [req]), self.namespace)
        self._t0, self._wall0 = time.monotonic(), time.time()
        self._threads = [*self._creators, self._observer]
        for t in self._threads:
            t.start()

    def stop(self, settle_timeout: float = 120.0) -> LoadReport:
        """Stop creating; wait until every created pod has finished or failed; report."""
        duration = self.now()
        self._stop_creating.set()
        for t in self._creators:
            t.join()
        for t in list(self._creates):  # those the schedule started before it stopped
            t.join()
        deadline = time.monotonic() + settle_timeout
        while time.monotonic() < deadline:
            with self._lock:
                open_ = [r for r in self.records.values()
                         if r.finished is None and r.failed is None]
            if not open_:
                break
            time.sleep(self.poll_s)
        self._stop_observing.set()
        self._observer.join()
        with self._lock:
            for r in self.records.values():
                if r.finished is None and r.failed is None:
                    r.failed, r.failure = self.now(), f"still not done after {settle_timeout}s"
            pods = tuple(sorted(self.records.values(), key=lambda r: r.created))
        return LoadReport(self._wall0, duration, pods)

    # --- creating -------------------------------------------------------------------------------

    def _manifest(self, name: str, node: str) -> dict[str, Any]:
        pod = pod_manifest(name, self.image, self.command, [PodClaim("gpu", template=TEMPLATE)],
                           labels={LABEL: "1"})
        pod["spec"]["nodeSelector"] = {HOSTNAME_LABEL: node}
        pod["spec"]["dnsPolicy"] = "Default"  # no cluster DNS on every provider
        return pod

    def _create_loop(self, node: str) -> None:
        interval = 1.0 / self.rate
        for tick in itertools.count():
            delay = tick * interval - self.now()
            if delay > 0 and self._stop_creating.wait(delay):
                return
            if self._stop_creating.is_set():
                return
            self._in_flight[node].acquire()
            name = f"load-{node}-{tick}"[:63].rstrip("-.")
            t = threading.Thread(target=self._create_one, args=(name, node), daemon=True,
                                 name=f"load-create-{name}")
            with self._lock:
                self._creates.append(t)
            t.start()

    def _create_one(self, name: str, node: str) -> None:
        created = self.now()
        try:
            create_pod(self.core, self.namespace, self._manifest(name, node))
        except Exception as err:  # any failure of a thread must reach the report
            with self._lock:
                self.create_errors.append(f"{name}: {err}")
            return
        finally:
            self._in_flight[node].release()
        with self._lock:
            self.records[name] = PodRecord(name, node, created)

    # --- observing ------------------------------------------------------------------------------

    def _observe_loop(self) -> None:
        while not self._stop_observing.is_set():
            try:
                self.observe_once()
            except Exception as err:  # apiserver busy or restarting for a moment: next round
                log.debug("load observation failed: %s", err)
            self._stop_observing.wait(self.poll_s)

    def observe_once(self) -> None:
        pods: list[Any] = self.core.list_namespaced_pod(self.namespace,
                                                        label_selector=f"{LABEL}=1").items
        claims = {c["metadata"]["name"]: c
                  for c in self.resources.items("resourceclaims", self.namespace)}
        events = self.core.list_namespaced_event(self.namespace,
                                                 field_selector="type=Warning").items
        now = self.now()
        done: list[str] = []
        with self._lock:
            for pod in pods:
                rec = self.records.get(str(pod.metadata.name))
                if rec is None:
                    continue
                self._update(rec, pod, claims, now)
                if rec.finished is not None or rec.failed is not None:
                    done.append(rec.name)
            for ev in events:
                if ev.type != "Warning" or ev.involved_object.kind != "Pod":
                    continue
                rec = self.records.get(str(ev.involved_object.name))
                line = f"{ev.reason}: {ev.message}"
                if rec is not None and line not in rec.warnings:
                    rec.warnings.append(line)
        for name in done:
            with contextlib.suppress(errors.KubeError):  # best effort: the namespace goes too
                errors.call(f"cannot delete pod {self.namespace}/{name}", functools.partial(
                    self.core.delete_namespaced_pod, name, self.namespace,
                    grace_period_seconds=0))

    def _update(self, rec: PodRecord, pod: Any, claims: Mapping[str, dict[str, Any]],
                now: float) -> None:
        status = pod.status
        for cond in status.conditions or ():
            if cond.type == "PodScheduled" and cond.status == "True" and rec.scheduled is None:
                rec.scheduled = now
        for cs in status.resource_claim_statuses or ():
            if cs.resource_claim_name:
                rec.claim = cs.resource_claim_name
        claim = claims.get(rec.claim) if rec.claim else None
        if claim is not None:
            st = claim.get("status") or {}
            if rec.allocated is None and st.get("allocation") and st.get("reservedFor"):
                rec.allocated = now
            for dev in st.get("devices") or ():
                if dev.get("driver") == self.driver:
                    rec.plugin_version = str((dev.get("data") or {}).get("pluginVersion", ""))
        for c in status.container_statuses or ():
            state = c.state
            if rec.started is None and (state.running or state.terminated):
                rec.started = now
            if state.terminated is not None:
                if state.terminated.exit_code == 0:
                    rec.finished = rec.finished if rec.finished is not None else now
                elif rec.failed is None:
                    rec.failed = now
                    rec.failure = (f"exit {state.terminated.exit_code} "
                                   f"{state.terminated.reason or ''}").strip()
        if status.phase == "Failed" and rec.failed is None:
            rec.failed, rec.failure = now, f"phase Failed: {status.reason or status.message}"
