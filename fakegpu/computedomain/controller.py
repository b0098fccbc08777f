"""The ComputeDomain controller: one process per cluster.

Per domain: keeps the finalizer on it; creates the channel ResourceClaimTemplate (the domain's
namespace), the daemon claim template and the IMEX DaemonSet (the driver's namespace) when
missing; drops status entries of nodes that no longer run one of the domain's daemon pods and
sets ``status.status``. A domain being deleted loses all of that, its label on every node, and
then its finalizer; objects labelled with the UID of a domain that no longer exists are
removed too (a domain deleted while the controller was down).

How work arrives, NVIDIA's way (client-go's informers and work queue): reflectors watch the
ComputeDomains and what the controller relies on (its templates, DaemonSets and daemon pods,
found by the domain label, and the nodes); each event puts the UID of the domain it concerns
on a work queue, and one worker reconciles that domain. A failed reconcile comes back after a
backoff. A resync every ``resync_s`` reconciles everything (``reconcile_all``, the same code),
the safety net for anything no event announced.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.kube.resource import GROUP

from . import killpoint, kube, objects
from .names import NOT_READY, PLURAL, VERSION, Names, daemonset_name
from .reflector import DELETED, Reflector, Source, say
from .workqueue import WorkQueue

log = logging.getLogger(__name__)
# A call that failed at the apiserver, mapped to the vocabulary or not (yet).
API_ERRORS: tuple[type[Exception], ...] = (errors.KubeError, *kubeapi.ERRORS)
TIMEOUT_S = kube.TIMEOUT_S
COMPONENT = "fakegpu-compute-domain-controller"
ALL = ""  # the work queue's key of a resync: reconcile every domain, collect orphans
STOP_POLL_S = 0.5  # how soon the worker notices a stop (SIGTERM) while idle
# Where the kill -9 tests stop the controller (killpoint.py), in the order a reconcile goes.
KILL_STEPS = ("finalizer-added", "channel-template-made", "daemon-template-made",
              "daemonset-made")


@dataclass(frozen=True)
class Config:
    names: Names
    namespace: str  # where daemon sets and daemon claim templates live
    image: str  # the IMEX daemon pods' image
    resync_s: float = 60.0  # between full passes, the safety net under the watches


class Controller:
    def __init__(self, api: client.ApiClient, cfg: Config) -> None:
        self.api = api
        self.cfg = cfg
        self.names = cfg.names
        self._core: Any = kube.core(api)
        self._apps: Any = kube.apps(api)
        self._objects: Any = kube.custom(api)
        self.resource_version = kube.resource_version(api)  # the one rule, asked once
        self._reported: dict[str, str] = {}  # uid -> last spec error reported
        self.queue = WorkQueue()
        self.synced = threading.Event()  # every reflector listed and the first pass done
        key = self.names.label_key
        ns = cfg.namespace
        self._domains = Reflector(Source(
            "computedomains", self._objects.list_cluster_custom_object,
            (self.names.group, VERSION, PLURAL)), self._on_domain)
        self._reflectors = [self._domains, *(Reflector(source, self._on_owned) for source in (
            Source("resourceclaimtemplates", self._objects.list_cluster_custom_object,
                   (GROUP, self.resource_version, "resourceclaimtemplates"),
                   {"label_selector": key}),
            Source(f"daemonsets {ns}", self._apps.list_namespaced_daemon_set, (ns,),
                   {"label_selector": key}),
            Source(f"pods {ns}", self._core.list_namespaced_pod, (ns,),
                   {"label_selector": key}))),
            Reflector(Source("nodes", self._core.list_node), self._on_node)]

    def run(self, stop: threading.Event) -> None:
        """Watch and reconcile until ``stop`` is set; then close the watches and return."""
        log.info("controller running group=%s namespace=%s image=%s resync=%ss",
                 self.names.group, self.cfg.namespace, self.cfg.image, self.cfg.resync_s)
        threads = [threading.Thread(target=r.run, args=(stop,), daemon=True,
                                    name=f"watch {r.source.what}") for r in self._reflectors]
        for t in threads:
            t.start()
        try:
            self._work(stop)
        finally:
            for r in self._reflectors:
                r.close()
            for t in threads:
                t.join(timeout=5)
        log.info("controller stopped")

    def _work(self, stop: threading.Event) -> None:
        # As client-go's WaitForCacheSync: reconcile once every reflector has its first list.
        for r in self._reflectors:
            while not r.listed.wait(STOP_POLL_S):
                if stop.is_set():
                    return
        self.queue.add(ALL)  # what changed while no controller ran, orphans included
        next_resync = time.monotonic() + self.cfg.resync_s
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_resync:
                self.queue.add(ALL)
                next_resync = now + self.cfg.resync_s
            key = self.queue.get(min(STOP_POLL_S, next_resync - now))
            if key is not None:
                self._process(key)

    def _process(self, key: str) -> None:
        try:
            if key == ALL:
                self.reconcile_all()
                self.synced.set()
            else:
                self.reconcile_domain(key)
        except Exception as err:  # the apiserver away or refusing: the key comes back later
            delay = self.queue.retry(key)
            log.warning("%s: %s; again in %.2fs",
                        "resync" if key == ALL else f"ComputeDomain uid={key}",
                        say(err), delay)
        else:
            self.queue.forget(key)

    # --- events -> work ------------------------------------------------------------------------

    def _on_domain(self, _kind: str, cd: dict[str, Any]) -> None:
        self.queue.add(str(cd["metadata"]["uid"]))

    def _on_owned(self, _kind: str, obj: dict[str, Any]) -> None:
        """A template, DaemonSet or daemon pod: its domain, by the label every one carries."""
        if uid := (obj["metadata"].get("labels") or {}).get(self.names.label_key):
            self.queue.add(uid)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        self._on_owned(kind, node)
        if kind == DELETED:  # a domain being deleted force-deletes the gone node's daemon pods
            for cd in self._domains.objects():
                if cd["metadata"].get("deletionTimestamp"):
                    self.queue.add(str(cd["metadata"]["uid"]))

    # --- one domain, or all ----------------------------------------------------------------------

    def reconcile_domain(self, uid: str) -> None:
        """Reconcile the domain with this UID, or remove what it left if it is gone. API
        errors propagate (the caller retries with a backoff)."""
        cd = self._current(uid)
        if cd is None:
            log.info("removing what ComputeDomain uid=%s left behind", uid)
            self._cleanup(uid, channel_namespace=None)
        else:
            self._handle(cd)

    def _current(self, uid: str) -> dict[str, Any] | None:
        """The domain as the apiserver has it now; None when it is gone."""
        seen = next((d for d in self._domains.objects() if d["metadata"].get("uid") == uid),
                    None)
        if seen is None:  # not seen (yet, or any more): the apiserver's list decides
            return kube.find_domain(self.api, self.names, uid)
        try:
            cd = kube.get_domain(self.api, self.names, seen["metadata"]["namespace"],
                                 seen["metadata"]["name"])
        except errors.NotFound:
            return None
        return cd if cd["metadata"].get("uid") == uid else None

    def reconcile_all(self) -> None:
        domains = kube.list_domains(self.api, self.names)
        alive = {d["metadata"]["uid"] for d in domains
                 if not d["metadata"].get("deletionTimestamp")}
        for cd in domains:
            try:
                self._handle(cd)
            except API_ERRORS as err:
                log.warning("ComputeDomain %s/%s: %s", cd["metadata"]["namespace"],
                            cd["metadata"]["name"], say(err))
        self._collect_orphans(alive)

    def _handle(self, cd: dict[str, Any]) -> None:
        """Reconcile or finalize one domain; a spec it cannot act on is said once, as an
        event on it."""
        try:
            if cd["metadata"].get("deletionTimestamp"):
                self._finalize(cd)
            else:
                self._reconcile(cd)
        except objects.SpecError as err:
            # Said on the domain (a condition, an event) and not retried: the spec is
            # immutable, and a taken template name is retried by the next resync.
            uid = cd["metadata"]["uid"]
            self._set_invalid(cd, str(err))
            if self._reported.get(uid) != str(err):
                self._reported[uid] = str(err)
                log.error("%s", err)
                kube.event(self.api, self.names, cd, "InvalidSpec", str(err), warning=True,
                           component=COMPONENT)

    def _set_invalid(self, cd: dict[str, Any], message: str | None) -> None:
        """The domain's Valid condition: False with ``message``, or (None) gone."""
        meta = cd["metadata"]
        old = (cd.get("status") or {}).get("conditions") or []
        if message is None and not any(c.get("type") == objects.VALID for c in old):
            return  # the usual case: nothing to write
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = None if message is None else objects.invalid_condition(message, now)

        def change(current: dict[str, Any]) -> dict[str, Any]:
            conditions = objects.with_condition(current.get("conditions") or [], condition)
            out = {**current, "status": current.get("status") or NOT_READY}
            if conditions:
                out["conditions"] = conditions
            else:
                out.pop("conditions", None)
            return out

        kube.update_status(self.api, self.names, meta["namespace"], meta["name"], change)

    def _reconcile(self, cd: dict[str, Any]) -> None:
        meta = cd["metadata"]
        if self.names.finalizer not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), self.names.finalizer]
            cd = kube.replace(self.api, self.names, cd)
            killpoint.reached("finalizer-added")
        domain = objects.parse(cd)
        if self._ensure_template(objects.channel_template(self.names, domain,
                                                          version=self.resource_version)):
            killpoint.reached("channel-template-made")
        if self._ensure_template(objects.daemon_template(self.names, domain, self.cfg.namespace,
                                                         version=self.resource_version)):
            killpoint.reached("daemon-template-made")
        self._set_invalid(cd, None)  # a template name taken before may be free now
        if self._ensure_daemonset(objects.daemonset(self.names, domain, self.cfg.namespace,
                                                    self.cfg.image)):
            killpoint.reached("daemonset-made")
        with_daemon = {p.spec.node_name for p in self._daemon_pods(domain.uid)
                       if p.spec.node_name and not p.metadata.deletion_timestamp}

        def status(current: dict[str, Any]) -> dict[str, Any]:
            nodes = objects.prune_nodes(current.get("nodes") or [], with_daemon)
            out = {**current, "status": objects.domain_status(domain.num_nodes, nodes)}
            if nodes:
                out["nodes"] = nodes
            else:
                out.pop("nodes", None)
            return out

        before = (cd.get("status") or {}).get("status")
        after = kube.update_status(self.api, self.names, domain.namespace, domain.name, status)
        now = ((after or {}).get("status") or {}).get("status")
        if after is not None and now != before:
            log.info("ComputeDomain %s is %s", domain.ref, now)
            kube.event(self.api, self.names, after, f"ComputeDomain{now}",
                       f"{_ready_count(after)} of {domain.num_nodes} nodes ready",
                       component=COMPONENT)

    def _ensure_template(self, body: dict[str, Any]) -> bool:
        """Create the template when missing (True: created)."""
        meta = body["metadata"]
        try:
            found = errors.call(
                f"cannot read ResourceClaimTemplate {meta['namespace']}/{meta['name']}",
                lambda: self._objects.get_namespaced_custom_object(
                    GROUP, self.resource_version, meta["namespace"], "resourceclaimtemplates",
                    meta["name"], _request_timeout=TIMEOUT_S))
        except errors.NotFound:
            kubeapi.apply(self.api, [body], field_manager=COMPONENT)
            log.info("created ResourceClaimTemplate %s/%s", meta["namespace"], meta["name"])
            return True
        owner = (found["metadata"].get("labels") or {}).get(self.names.label_key)
        if owner != meta["labels"][self.names.label_key]:
            raise objects.SpecError(
                f"ResourceClaimTemplate {meta['namespace']}/{meta['name']} exists and is not "
                "this ComputeDomain's: rename spec.channel.resourceClaimTemplate.name")
        return False

    def _ensure_daemonset(self, body: dict[str, Any]) -> bool:
        """Create the DaemonSet when missing (True: created)."""
        meta = body["metadata"]
        try:
            errors.call(f"cannot read DaemonSet {meta['namespace']}/{meta['name']}",
                        lambda: self._apps.read_namespaced_daemon_set(
                            meta["name"], meta["namespace"], _request_timeout=TIMEOUT_S))
        except errors.NotFound:
            kubeapi.apply(self.api, [body], field_manager=COMPONENT)
            log.info("created DaemonSet %s/%s", meta["namespace"], meta["name"])
            return True
        return False

    def _daemon_pods(self, uid: str) -> list[Any]:
        return list(self._core.list_namespaced_pod(
            self.cfg.namespace, label_selector=f"{self.names.label_key}={uid}",
            _request_timeout=TIMEOUT_S).items)

    # --- deletion ------------------------------------------------------------------------------

    def _finalize(self, cd: dict[str, Any]) -> None:
        meta = cd["metadata"]
        if self.names.finalizer not in (meta.get("finalizers") or []):
            return
        uid = meta["uid"]
        if not self._cleanup(uid, channel_namespace=meta["namespace"]):
            return  # daemon pods still stopping: their deletion events bring the domain back
        meta["finalizers"] = [f for f in meta["finalizers"] if f != self.names.finalizer]
        with contextlib.suppress(errors.NotFound):
            kube.replace(self.api, self.names, cd)
        log.info("ComputeDomain %s/%s: everything it had is gone", meta["namespace"],
                 meta["name"])

    def _cleanup(self, uid: str, channel_namespace: str | None) -> bool:
        """Remove what domain ``uid`` had; True once nothing of it is left but pods on nodes
        that no longer exist (force-deleted here: no kubelet will ever confirm them)."""
        selector = f"{self.names.label_key}={uid}"
        for node in self._core.list_node(label_selector=selector,
                                         _request_timeout=TIMEOUT_S).items:
            kube.label_node(self.api, node.metadata.name, self.names.label_key, None)
        _ignore_404(lambda: self._apps.delete_namespaced_daemon_set(
            daemonset_name(uid), self.cfg.namespace, propagation_policy="Background",
            _request_timeout=TIMEOUT_S))
        namespaces = [self.cfg.namespace, *([channel_namespace] if channel_namespace else [])]
        for template in self._templates(selector, None if channel_namespace is None
                                        else namespaces):
            tm = template["metadata"]
            _ignore_404(lambda tm=tm: self._objects.delete_namespaced_custom_object(
                GROUP, self.resource_version, tm["namespace"], "resourceclaimtemplates",
                tm["name"],
                _request_timeout=TIMEOUT_S))
        nodes = {n.metadata.name for n in self._core.list_node(_request_timeout=TIMEOUT_S).items}
        left = []
        for pod in self._daemon_pods(uid):
            if pod.spec.node_name and pod.spec.node_name not in nodes:
                _ignore_404(lambda pod=pod: self._core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0,
                    _request_timeout=TIMEOUT_S))
            else:
                left.append(pod)
        return not left

    def _templates(self, selector: str, namespaces: list[str] | None) -> list[dict[str, Any]]:
        if namespaces is None:
            out = self._objects.list_cluster_custom_object(
                GROUP, self.resource_version, "resourceclaimtemplates", label_selector=selector,
                _request_timeout=TIMEOUT_S)
            return list(out.get("items") or [])
        found: list[dict[str, Any]] = []
        for ns in dict.fromkeys(namespaces):
            out = self._objects.list_namespaced_custom_object(
                GROUP, self.resource_version, ns, "resourceclaimtemplates",
                label_selector=selector,
                _request_timeout=TIMEOUT_S)
            found.extend(out.get("items") or [])
        return found

    def _collect_orphans(self, alive: set[str]) -> None:
        """Objects of domains that are gone (deleted while no controller ran, or their
        finalizer removed by hand)."""
        key = self.names.label_key
        seen: set[str] = set()
        for ds in self._apps.list_namespaced_daemon_set(
                self.cfg.namespace, label_selector=key, _request_timeout=TIMEOUT_S).items:
            seen.add((ds.metadata.labels or {}).get(key, ""))
        for node in self._core.list_node(label_selector=key, _request_timeout=TIMEOUT_S).items:
            seen.add((node.metadata.labels or {}).get(key, ""))
        for template in self._templates(key, None):
            seen.add((template["metadata"].get("labels") or {}).get(key, ""))
        # A domain created this very moment is not "gone": list again before removing.
        gone = seen - alive - {""}
        if gone:
            gone -= {d["metadata"]["uid"] for d in kube.list_domains(self.api, self.names)}
        for uid in gone:
            log.info("removing what ComputeDomain uid=%s left behind", uid)
            self._cleanup(uid, channel_namespace=None)


def _ready_count(cd: dict[str, Any]) -> int:
    return sum(1 for n in (cd.get("status") or {}).get("nodes") or []
               if n.get("status") == "Ready")


def _ignore_404(call: Any) -> None:
    with contextlib.suppress(errors.NotFound):
        errors.call("cannot delete", call)
