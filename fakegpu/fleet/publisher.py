"""The fleet's slice publisher: every simulated node's ResourceSlices, as its plugin would.

Nothing here builds a slice. Per simulated node it runs the plugin's own pieces against the
node's rendered NVML state file: ``discovery.discover`` (through the fake libnvidia-ml.so.1,
so names, attributes, counters and MIG devices are what a real node's plugin publishes),
``health.Health`` for taints and ``publish.SlicePublisher`` for the diff with the apiserver.
One process serves the whole fleet: the library reads ``FAKEGPU_NVML_STATE`` at each
nvmlInit, so the state files are visited one after the other under one lock.

Faults (``fakegpu fault inject --cluster C --node SIM ...``) change a state file; the
publisher sees its header's generation move and resyncs that node. A node stopped with
``fakegpu cluster node stop`` (label ``fakegpu.dev/stopped``) has its slices withdrawn until
it is started again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pynvml

from fakegpu import drivers
from fakegpu.errors import FakegpuError
from fakegpu.kube.errors import KubeError
from fakegpu.kubeletplugin.slicepool import SliceApi
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state as nvml_state
from fakegpu.nvml import sysfs as nvml_sysfs
from fakegpu.plugin import discovery
from fakegpu.plugin.discovery import Inventory
from fakegpu.plugin.driver import Devices
from fakegpu.plugin.health import Health, classify, read_all_faults
from fakegpu.plugin.publish import SlicePublisher
from fakegpu.plugin.shape import Shape
from fakegpu.topology.model import Node

log = logging.getLogger(__name__)
# One state file at a time: the environment variable is process-wide.
_nvml_turn = threading.Lock()


@dataclass(frozen=True)
class SimNode:
    node: Node
    state: Path


class NodePublisher:
    """One simulated node: its plugin's health and publisher, over its state file."""

    def __init__(self, sim: SimNode, kube: SliceApi, driver: str) -> None:
        self.sim = sim
        self.nvidia = drivers.is_nvidia(driver)
        self.health = Health(driver, self.nvidia)
        self.devices = Devices(self._discover)
        self.publisher = SlicePublisher(kube, self.devices, driver, sim.node.name,
                                        health=self.health.taints,
                                        shape=Shape(nvidia=self.nvidia),
                                        still_faulty=self.health.still_faulty)
        self.seen: tuple[int, int] | None = None  # the state header's (generation, event_seq)

    def _discover(self) -> Inventory:
        node = self.sim.node
        with _nvml_turn:
            os.environ[nvml_env.STATE_ENV] = str(self.sim.state)
            # Where its devices sit, as its plugin would read them (nvml/sysfs.py).
            view = nvml_sysfs.path_for(self.sim.state)
            if view.is_dir():
                os.environ[nvml_sysfs.SYSFS_ENV] = str(view)
            else:
                os.environ.pop(nvml_sysfs.SYSFS_ENV, None)
            inventory = discovery.discover(self.nvidia, node.dynamic_mig,
                                           frozenset(node.shared_minors),
                                           dict(node.time_sliced))
            self._observe_faults()
        return inventory

    def _observe_faults(self) -> None:
        """What the plugin's event watcher and poll would record (lock held). An XID is an
        event on a real node; here the library's last XID per GPU stands for it."""
        with discovery.nvml_lock:
            pynvml.nvmlInit()
            try:
                faults = read_all_faults()
            finally:
                pynvml.nvmlShutdown()
        self.health.update_faults(faults)
        for uuid, fault in faults.items():
            if fault.last_xid:
                found = classify(pynvml.nvmlEventTypeXidCriticalError, fault.last_xid,
                                 self.nvidia)
                if found is not None:
                    self.health.record(uuid, *found)

    def changed(self) -> bool:
        """Whether the state file moved since the last sync (a fault, a clear)."""
        try:
            header = nvml_state.read_header(self.sim.state)
        except (OSError, FakegpuError):
            return True  # gone or unreadable: the sync says so, for this node only
        return (int(header.generation), int(header.event_seq)) != self.seen

    def sync(self) -> bool:
        header = nvml_state.read_header(self.sim.state)
        seen = (int(header.generation), int(header.event_seq))
        done = self.publisher.sync()
        self.seen = seen
        return done

    def withdraw(self) -> None:
        self.publisher.cleanup(attempts=1)
        self.seen = None  # publish again in full once started


class FleetPublisher:
    """Every simulated node of a fleet, synced by a small pool of threads."""

    def __init__(self, sims: Iterable[SimNode], kube: SliceApi, driver: str,
                 stopped: Callable[[], set[str]], workers: int = 4) -> None:
        self.nodes = [NodePublisher(s, kube, driver) for s in sims]
        self._stopped = stopped
        self._workers = workers
        self.down: set[str] = set()

    def _each(self, fn: Callable[[NodePublisher], None], which: list[NodePublisher]) -> None:
        with ThreadPoolExecutor(self._workers) as pool:
            for future in [pool.submit(fn, n) for n in which]:
                future.result()

    def sync_all(self, only_changed: bool = False) -> int:
        """One pass: withdraw stopped nodes, publish the others (all, or those whose state
        moved). Returns how many nodes were visited."""
        try:
            down = self._stopped()
        except Exception as err:  # the apiserver away: the run loop retries, as the plugin does
            raise KubeError(f"cannot list stopped simulated nodes: {err}") from err
        withdraw = [n for n in self.nodes if n.sim.node.name in down
                    and n.sim.node.name not in self.down]
        live = [n for n in self.nodes if n.sim.node.name not in down]
        if only_changed:
            live = [n for n in live if n.seen is None or n.changed()]
        self._each(NodePublisher.withdraw, withdraw)
        self.down = down
        failed: list[str] = []

        def one(n: NodePublisher) -> None:
            try:
                n.sync()
            except (KubeError, pynvml.NVMLError, OSError, FakegpuError) as err:
                failed.append(n.sim.node.name)
                log.warning("node %s: cannot publish its ResourceSlices: %s",
                            n.sim.node.name, err)

        self._each(one, live)
        if failed:
            raise KubeError(f"{len(failed)} simulated nodes not published "
                            f"(first: {failed[0]})")
        return len(live) + len(withdraw)

    def run(self, stop: threading.Event, poll_s: float = 1.0, full_s: float = 300.0) -> None:
        """Publish everything, then follow state changes every ``poll_s`` and republish in
        full every ``full_s`` (slices someone deleted come back, as with the plugin). A full
        pass rediscovers every node (about 13 ms of CPU each): seldom, for a big fleet on a
        small host; a changed state file is seen within ``poll_s`` (a header read)."""
        last_full = 0.0
        backoff = 1.0
        while not stop.is_set():
            full = time.monotonic() - last_full >= full_s
            try:
                started = time.monotonic()
                visited = self.sync_all(only_changed=not full)
                if full:
                    last_full = time.monotonic()
                    log.info("fleet: %d simulated nodes synced in %.1fs", visited,
                             last_full - started)
                backoff = 1.0
                stop.wait(poll_s)
            except Exception as err:  # keep the fleet published whatever one pass met
                log.warning("fleet: %s (retry in %.0fs)", err, backoff,
                            exc_info=not isinstance(err, KubeError))
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
