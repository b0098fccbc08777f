"""Keep the node's ResourceSlices equal to what NVML shows, retrying while the apiserver is away.

Stateless like the rest: the desired slices are compared with the published ones, and only
a difference bumps the pool generation. Two instances publishing the same devices therefore
agree, and a restarted instance changes nothing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from . import slices
from .driver import Devices
from .kube import Kube, KubeError

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0


class SlicePublisher:
    def __init__(self, kube: Kube, devices: Devices, driver: str, node: str,
                 interval_s: float = 10.0) -> None:
        self._kube, self._devices = kube, devices
        self._driver, self._node, self._interval = driver, node, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="slice-publisher", daemon=True)
        self.synced = threading.Event()  # set after the first successful publish

    def sync(self) -> bool:
        """Publish if needed; True when something changed. Raises KubeError."""
        version = self._kube.version()
        inventory = self._devices.refresh()
        existing = self._kube.list_slices(self._driver, self._node)
        desired = slices.build_slices(self._driver, self._node, inventory, version, 0)
        if slices.same_devices(existing, desired):
            return False
        generation = 1 + max((int(o["spec"]["pool"].get("generation") or 0) for o in existing),
                             default=0)
        desired = slices.build_slices(self._driver, self._node, inventory, version, generation)
        by_name: dict[str, dict[str, Any]] = {o["metadata"]["name"]: o for o in existing}
        for body in desired:
            old = by_name.pop(body["metadata"]["name"], None)
            if old is None:
                self._kube.create_slice(body)
            else:
                body["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
                self._kube.replace_slice(body)
        for stale in by_name:
            self._kube.delete_slice(stale)
        log.info("published ResourceSlices driver=%s pool=%s generation=%d devices=%d version=%s",
                 self._driver, self._node, generation, len(inventory.devices), version)
        return True

    def _loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                self.sync()
                self.synced.set()
                backoff = 1.0
                wait = self._interval
            except (KubeError, Exception) as err:  # keep serving the kubelet whatever happens
                log.warning("cannot publish ResourceSlices (retry in %.0fs): %s", backoff, err)
                wait, backoff = backoff, min(backoff * 2, MAX_BACKOFF_S)
            self._stop.wait(wait)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

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
