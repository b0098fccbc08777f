"""A node's pool of ResourceSlices, as every kubelet plugin here publishes it: deterministic
slice names, the Node as owner, "is the published pool already what we want" (the generation
is bumped only on a real change, so two instances publishing the same devices agree), and the
writes that turn the published slices into the desired ones.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fakegpu.kube.errors import KubeError

from .syncloop import SyncLoop

log = logging.getLogger(__name__)

Taint = dict[str, str]


class SliceApi(Protocol):
    def version(self) -> str: ...
    def server_minor(self) -> int: ...
    def node_uid(self, name: str) -> str: ...
    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]: ...
    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_slice(self, name: str) -> None: ...


def device_taints(entry: Mapping[str, Any]) -> list[Taint]:
    """The taints of a published device entry, whatever the version's shape."""
    body = entry.get("basic", entry)
    return [dict(t) for t in body.get("taints") or []]


def node_owner(node: str, uid: str) -> dict[str, Any]:
    """The ownerReference NVIDIA's slices carry (the kubelet plugin helper's): the Node, as
    controller, so the garbage collector deletes the slices with the node."""
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}


def slice_name(driver: str, node: str, index: int) -> str:
    """Deterministic, DNS-safe, <= 63 chars: every instance computes the same names."""
    base = re.sub(r"[^a-z0-9-]", "-", f"{node}-{driver}".lower()).strip("-")
    if len(base) > 50:
        base = base[:41].rstrip("-") + "-" + hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base}-{index}"


def _contains(have: Any, want: Any) -> bool:
    """``want`` is in ``have``: the apiserver may add defaulted fields, never drop ours."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _contains(have[k], v)
                                              for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(have) == len(want)
                and all(_contains(h, w) for h, w in zip(have, want, strict=True)))
    return bool(have == want)


def same_devices(existing: Sequence[dict[str, Any]], desired: Sequence[dict[str, Any]]) -> bool:
    """True when the published slices already carry exactly the desired pool content."""
    if len(existing) != len(desired):
        return False
    have = {o["metadata"]["name"]: o for o in existing}
    for obj in desired:
        spec = dict(obj["spec"])
        spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
        stored = have.get(obj["metadata"]["name"])
        published = stored["spec"] if stored is not None else None
        if not _contains(published, spec):
            return False
        # A slice published before the owner was known (or by an older version) gets it.
        owners = obj["metadata"].get("ownerReferences")
        if owners and not _contains((stored or {})["metadata"].get("ownerReferences"), owners):
            return False
        # "Contains" cannot see a taint that went away (desired then has no taints at all).
        assert published is not None
        if len(spec.get("devices") or []) != len(published.get("devices") or []):
            return False
        for mine, theirs in zip(spec.get("devices") or [], published.get("devices") or [],
                                strict=True):
            if [_bare(t) for t in device_taints(theirs)] != device_taints(mine):
                return False
    return True


def _bare(published: Taint) -> Taint:
    """A published taint without what the apiserver fills in (timeAdded)."""
    return {k: v for k, v in published.items() if k in ("key", "value", "effect")}


def next_generation(existing: Sequence[Mapping[str, Any]]) -> int:
    return 1 + max((int(o["spec"]["pool"].get("generation") or 0) for o in existing), default=0)


def write_pool(api: SliceApi, existing: Sequence[Mapping[str, Any]],
               desired: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Create or replace each desired slice, delete the published ones no longer wanted;
    (sent, stored) per desired slice, so the caller sees what the apiserver dropped."""
    by_name = {o["metadata"]["name"]: o for o in existing}
    out = []
    for body in desired:
        old = by_name.pop(body["metadata"]["name"], None)
        if old is None:
            stored = api.create_slice(body)
        else:
            body["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            if "ownerReferences" not in body["metadata"] and \
                    old["metadata"].get("ownerReferences"):
                # Another instance could read the Node: keep what it set (a replace
                # without them would drop them, and the two would flap).
                body["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"]
            stored = api.replace_slice(body)
        out.append((body, stored))
    for stale in by_name:
        api.delete_slice(stale)
    return out


def device(name: str, body: dict[str, Any], version: str) -> dict[str, Any]:
    """A device entry in ``version``'s shape: v1beta1 nests the fields under ``basic``, later
    versions flattened it."""
    if version == "v1beta1":
        return {"name": name, "basic": body}
    return {"name": name, **body}


def pool_slice(driver: str, node: str, version: str, generation: int,
               devices: Sequence[dict[str, Any]], owner: Mapping[str, Any] | None,
               managed_by: str) -> dict[str, Any]:
    """A node's whole pool in one slice (at most 128 devices)."""
    metadata: dict[str, Any] = {"name": slice_name(driver, node, 0),
                                "labels": {"app.kubernetes.io/managed-by": managed_by}}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice",
            "metadata": metadata,
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": list(devices)}}


class PoolPublisher(SyncLoop):
    """A thread that keeps this node's pool of ``driver`` equal to what ``sync`` builds,
    retrying with backoff while the apiserver is away. Subclasses say what the pool holds
    (``desired``); the GPU plugin's publisher overrides ``sync`` for its taints and counters."""

    def __init__(self, kube: SliceApi, driver: str, node: str, interval_s: float = 10.0,
                 name: str = "slice-publisher") -> None:
        self._kube = kube
        self._driver, self._node = driver, node
        super().__init__(name=name, what="publish ResourceSlices", interval_s=interval_s)
        self._owner: dict[str, Any] | None = None
        self._owner_warned = False

    def owner(self) -> dict[str, Any] | None:
        """The Node's ownerReference, once read; None (logged once) while it cannot be read:
        slices are then published without an owner rather than not at all."""
        if self._owner is None:
            try:
                uid = self._kube.node_uid(self._node)
            except KubeError as err:
                if not self._owner_warned:
                    self._owner_warned = True
                    log.warning("cannot read Node %s (%s): publishing ResourceSlices without "
                                "an owner (the plugin needs get on nodes)", self._node, err)
                return None
            self._owner = node_owner(self._node, uid)
        return self._owner


    def desired(self, version: str, generation: int,
                owner: dict[str, Any] | None) -> list[dict[str, Any]]:
        raise NotImplementedError

    def sync(self) -> bool:
        """Publish if needed; True when something changed. Raises KubeError."""
        version = self._kube.version()
        owner = self.owner()
        existing = self._kube.list_slices(self._driver, self._node)
        if same_devices(existing, self.desired(version, 0, owner)):
            return False
        generation = next_generation(existing)
        desired = self.desired(version, generation, owner)
        write_pool(self._kube, existing, desired)
        log.info("published ResourceSlices driver=%s pool=%s generation=%d devices=%d "
                 "version=%s", self._driver, self._node, generation,
                 sum(len(o["spec"].get("devices") or ()) for o in desired), version)
        return True

    def cleanup(self, attempts: int = 3) -> bool:
        """Delete this node's slices of this driver (uninstall). True when they are gone."""
        for attempt in range(attempts):
            try:
                for obj in self._kube.list_slices(self._driver, self._node):
                    self._kube.delete_slice(obj["metadata"]["name"])
                log.info("deleted ResourceSlices driver=%s pool=%s", self._driver, self._node)
                return True
            except KubeError as err:
                log.warning("cannot delete ResourceSlices (attempt %d/%d): %s",
                            attempt + 1, attempts, err)
                threading.Event().wait(1.0)
        return False
