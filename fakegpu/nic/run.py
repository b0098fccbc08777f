"""``fakegpu nic run``: the NIC DRA driver's kubelet plugin on one node.

Wires discovery (sysfs), the apiserver, the driver and the base's gRPC servers; publishes the
node's NICs as one ResourceSlice and keeps it current, and their links as device health.
Stops on SIGTERM/SIGINT: finishes in-flight calls, removes its sockets, and deletes the node's
slices unless another instance of the driver still serves here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu import drivers
from fakegpu.kubeletplugin import startup
from fakegpu.kubeletplugin.dirwatch import DirWatch
from fakegpu.kubeletplugin.health import HealthStreams
from fakegpu.kubeletplugin.kube import Kube
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.slicepool import PoolPublisher, SliceApi

from . import discovery, slices
from .discovery import Nic
from .driver import NicConfig, NicDriver

log = logging.getLogger(__name__)
DRIVER = drivers.NIC


@dataclass(frozen=True)
class Options:
    node_name: str
    kubeconfig: Path | None
    kubelet_root: Path
    cdi_root: Path
    driver_name: str = DRIVER
    instance_id: str = ""
    state_dir: Path | None = None
    write_status: bool = True
    rediscover_interval_s: float = 10.0
    grace_period_s: float = 30.0
    numa_node_list: bool = False  # numaNode in its list form (KEP-5491)


class NicPublisher(PoolPublisher):
    """Publishes the NICs; each rediscovery first carries their links to prepared interfaces
    (before the apiserver is asked: a fault reaches a pod while the apiserver is away too)."""

    def __init__(self, kube: SliceApi, driver: str, node: str, interval_s: float,
                 nic_driver: NicDriver, numa_list: bool = False) -> None:
        super().__init__(kube, driver, node, interval_s, name="nic-slice-publisher")
        self._nic_driver = nic_driver
        self._numa_list = numa_list
        self._found: Sequence[Nic] = ()

    def sync(self) -> bool:
        self._found = discovery.discover()  # once per sync: the links and the slice alike
        self._nic_driver.follow_links(self._found)
        return super().sync()

    def desired(self, version: str, generation: int,
                owner: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [slices.build_slice(self._driver, self._node, self._found, version,
                                   generation, owner, self._numa_list)]


def run(opts: Options, stop: threading.Event | None = None) -> int:
    paths, state_dir = startup.prepare(opts.node_name, opts.driver_name, opts.instance_id,
                                       opts.kubelet_root, opts.cdi_root, opts.state_dir)
    stop = stop or threading.Event()
    startup.on_signals(stop)
    found: Sequence[Nic] = discovery.discover()
    log.info("discovered NICs node=%s count=%d names=%s", opts.node_name, len(found),
             ",".join(n.name for n in found))
    kube = Kube(opts.kubeconfig)
    driver = NicDriver(NicConfig(driver=opts.driver_name, node=opts.node_name,
                                 state_dir=state_dir, cdi_root=opts.cdi_root,
                                 instance=opts.instance_id, write_status=opts.write_status),
                       kube, discovery.discover)
    publisher = NicPublisher(kube, opts.driver_name, opts.node_name, opts.rediscover_interval_s,
                             driver, opts.numa_node_list)
    publisher.start()
    # Pods' status shows a NIC without link unhealthy (KEP-4680), read afresh per report.
    streams = HealthStreams(opts.node_name, lambda: slices.device_health(
        opts.driver_name, discovery.discover()))

    def changed() -> None:
        publisher.wake()
        streams.wake()

    # A link fault reaches the slice, the pods' interfaces and their status at once, not at
    # the next rediscovery (the sysfs view's link files change by rename).
    links = DirWatch(discovery.link_dirs(), changed)
    links.start()
    servers = PluginServers(driver, paths, extra=streams)
    log.info("serving driver=%s node=%s registration=%s dra=%s state=%s", opts.driver_name,
             opts.node_name, paths.registration, paths.dra, state_dir)
    stop.wait()
    servers.stop(opts.grace_period_s)
    links.stop()
    publisher.stop()
    startup.withdraw_slices(opts.kubelet_root, opts.driver_name, paths, publisher.cleanup)
    log.info("stopped")
    return 0
