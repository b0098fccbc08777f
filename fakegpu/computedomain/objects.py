"""Pure builders: a ComputeDomain -> the objects the controller keeps for it, and its status.

No I/O: the controller reads, calls these, and writes. Every object carries the domain's UID
in the label ``<group>/computeDomain`` so that cleanup finds it by label alone, even after the
ComputeDomain itself is gone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.kube.resource import GROUP

from .names import (
    ALLOCATION_MODES,
    CHANNEL,
    CHANNEL_CONFIG_KIND,
    DAEMON,
    DAEMON_CONFIG_KIND,
    DAEMON_PORT,
    NOT_READY,
    READY,
    Names,
    daemon_template_name,
    daemonset_name,
)

# An object name (a DNS subdomain, RFC 1123), as the apiserver requires of a
# ResourceClaimTemplate; the CRD's schema says the same (files/computedomain.yaml).
NAME_MAX = 253
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The IMEX daemon pod: its process is the daemon's endpoint on the pod network (its peers
# connect to it); when it dies the pod's supervisor loop restarts it after a pause, as a
# service manager would, so an outage lasts long enough for every peer to see it.
RESTART_PAUSE_S = 5
DAEMON_SCRIPT = (f"while true; do httpd -f -p {DAEMON_PORT} -h /; "
                 f"echo 'IMEX daemon endpoint exited; restarting in {RESTART_PAUSE_S}s'; "
                 f"sleep {RESTART_PAUSE_S}; done")


class SpecError(ValueError):
    """A ComputeDomain whose spec the controller cannot act on (one line, names the field)."""


@dataclass(frozen=True)
class Domain:
    namespace: str
    name: str
    uid: str
    num_nodes: int
    template: str  # spec.channel.resourceClaimTemplate.name
    allocation_mode: str  # Single | All

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse(cd: Mapping[str, Any]) -> Domain:
    """A ComputeDomain object -> Domain. Raises SpecError naming the field."""
    meta = cd.get("metadata") or {}
    where = f"ComputeDomain {meta.get('namespace')}/{meta.get('name')}"
    spec = cd.get("spec") or {}
    num = spec.get("numNodes", 0)
    if not isinstance(num, int) or isinstance(num, bool) or num < 0:
        raise SpecError(f"{where}: spec.numNodes must be a whole number >= 0, not {num!r}")
    channel = spec.get("channel") or {}
    template = (channel.get("resourceClaimTemplate") or {}).get("name")
    if not template or not isinstance(template, str):
        raise SpecError(f"{where}: spec.channel.resourceClaimTemplate.name is required")
    if len(template) > NAME_MAX or not NAME_RE.fullmatch(template):
        shown = template if len(template) <= 60 else f"{template[:57]}..."
        raise SpecError(f"{where}: spec.channel.resourceClaimTemplate.name {shown!r} is no "
                        f"object name (lower-case letters, digits, '-' and '.', at most "
                        f"{NAME_MAX} characters, starting and ending alphanumeric)")
    mode = channel.get("allocationMode") or "Single"
    if mode not in ALLOCATION_MODES:
        raise SpecError(f"{where}: spec.channel.allocationMode must be one of "
                        f"{', '.join(ALLOCATION_MODES)}, not {mode!r}")
    return Domain(namespace=str(meta["namespace"]), name=str(meta["name"]),
                  uid=str(meta["uid"]), num_nodes=num, template=template,
                  allocation_mode=mode)


def _labels(names: Names, domain: Domain) -> dict[str, str]:
    return {names.label_key: domain.uid, "app.kubernetes.io/managed-by": "fakegpu"}


def _template(names: Names, domain: Domain, name: str, namespace: str, request: str,
              device_class: str, config_kind: str, version: str) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": names.api_version, "kind": config_kind,
                              "domainID": domain.uid}
    if config_kind == CHANNEL_CONFIG_KIND:
        params["allocationMode"] = domain.allocation_mode
    return {
        "apiVersion": f"{GROUP}/{version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(names, domain)},
        "spec": {"spec": {"devices": {
            "requests": [{"name": request, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}}],
            "config": [{"requests": [request], "opaque": {
                "driver": names.driver, "parameters": params}}],
        }}},
    }


def channel_template(names: Names, domain: Domain, *, version: str) -> dict[str, Any]:
    """The template users' pods name: one IMEX channel of the domain, in its namespace, at
    resource.k8s.io ``version`` (``kube.resource_version``)."""
    return _template(names, domain, domain.template, domain.namespace, CHANNEL,
                     names.channel_class, CHANNEL_CONFIG_KIND, version)


def daemon_template(names: Names, domain: Domain, namespace: str, *, version: str
                    ) -> dict[str, Any]:
    """The daemon pods' claim: the node's daemon device, configured for this domain."""
    return _template(names, domain, daemon_template_name(domain.uid), namespace, DAEMON,
                     names.daemon_class, DAEMON_CONFIG_KIND, version)


def daemonset(names: Names, domain: Domain, namespace: str, image: str) -> dict[str, Any]:
    """One IMEX daemon per node that carries the domain's label (NVIDIA's way: the plugin
    labels a node when it prepares a channel of the domain there)."""
    labels = _labels(names, domain)
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": daemonset_name(domain.uid), "namespace": namespace,
                     "labels": labels},
        "spec": {
            "selector": {"matchLabels": {names.label_key: domain.uid}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {names.label_key: domain.uid},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": DAEMON,
                                        "resourceClaimTemplateName":
                                            daemon_template_name(domain.uid)}],
                    "containers": [{
                        "name": "imex-daemon", "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", DAEMON_SCRIPT],
                        "ports": [{"name": "imex", "containerPort": DAEMON_PORT}],
                        "resources": {"claims": [{"name": DAEMON}]},
                    }],
                },
            },
        },
    }


VALID = "Valid"  # the condition a spec the controller cannot act on sets to False


def invalid_condition(message: str, now: str) -> dict[str, Any]:
    return {"type": VALID, "status": "False", "reason": "InvalidSpec", "message": message,
            "lastTransitionTime": now}


def with_condition(conditions: Iterable[Mapping[str, Any]], condition: Mapping[str, Any] | None,
                   kind: str = VALID) -> list[dict[str, Any]]:
    """``conditions`` with the one of type ``kind`` replaced by ``condition`` (None: removed);
    an unchanged condition keeps its lastTransitionTime."""
    out = [dict(c) for c in conditions if c.get("type") != kind]
    old = next((dict(c) for c in conditions if c.get("type") == kind), None)
    if condition is not None:
        same = old is not None and all(old.get(k) == condition.get(k)
                                       for k in ("status", "reason", "message"))
        out.append(old if same and old is not None else dict(condition))
    return out


def domain_status(num_nodes: int, nodes: Sequence[Mapping[str, Any]]) -> str:
    """Ready when at least numNodes daemons are ready (numNodes 0: when any node is, and all
    that joined are)."""
    ready = sum(1 for n in nodes if n.get("status") == READY)
    if num_nodes > 0:
        return READY if ready >= num_nodes else NOT_READY
    return READY if nodes and ready == len(nodes) else NOT_READY


def prune_nodes(nodes: Iterable[Mapping[str, Any]], with_daemon: set[str]
                ) -> list[dict[str, Any]]:
    """The status entries of nodes that still run one of the domain's daemon pods (a node
    deleted, or one the domain left, drops out)."""
    return [dict(n) for n in nodes if n.get("name") in with_daemon]


def upsert_node(nodes: Iterable[Mapping[str, Any]], entry: Mapping[str, Any]
                ) -> list[dict[str, Any]]:
    """``nodes`` with ``entry`` replacing the one of its node; a new node takes the lowest
    free index (indexes stay stable while a node is in the domain)."""
    out = [dict(n) for n in nodes]
    for n in out:
        if n.get("name") == entry["name"]:
            n.update({k: v for k, v in entry.items() if k != "index"})
            return out
    used = {n.get("index") for n in out}
    index = next(i for i in range(len(out) + 1) if i not in used)
    out.append({**entry, "index": index})
    return sorted(out, key=lambda n: int(n.get("index", 0)))


def remove_node(nodes: Iterable[Mapping[str, Any]], name: str) -> list[dict[str, Any]]:
    return [dict(n) for n in nodes if n.get("name") != name]
