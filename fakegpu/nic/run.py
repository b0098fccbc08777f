"""``fakegpu nic run``: the NIC DRA driver's kubelet plugin on one node.

Wires discovery (sysfs), the apiserver, the driver and the base's gRPC servers; publishes the
node's NICs as one ResourceSlice and keeps it current. Stops on SIGTERM/SIGINT: finishes
in-flight calls, removes its sockets, and deletes the node's slices unless another instance
of the driver still serves here.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from fakegpu import drivers
from fakegpu.errors import InvalidInput
from fakegpu.kubeletplugin import names
from fakegpu.kubeletplugin.kube import Kube
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.slicepool import PoolPublisher, SliceApi
from fakegpu.kubeletplugin.sockets import socket_paths
from fakegpu.kubeletplugin.startup import other_instances_alive, usable_dir

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


class NicPublisher(PoolPublisher):
    def __init__(self, kube: SliceApi, driver: str, node: str, interval_s: float) -> None:
        super().__init__(kube, driver, node, interval_s, name="nic-slice-publisher")

    def desired(self, version: str, generation: int,
                owner: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [slices.build_slice(self._driver, self._node, discovery.discover(), version,
                                   generation, owner)]


def _check(opts: Options) -> None:
    if not opts.node_name:
        raise InvalidInput("--node is required (or set NODE_NAME)")
    for flag, value in (("--node", opts.node_name), ("--driver", opts.driver_name),
                        ("--instance-id", opts.instance_id)):
        if (value or flag != "--instance-id") and (why := names.check(flag, value)):
            raise InvalidInput(why)


def run(opts: Options, stop: threading.Event | None = None) -> int:
    _check(opts)
    try:
        paths = socket_paths(opts.kubelet_root, opts.driver_name, opts.instance_id)
    except ValueError as err:
        raise InvalidInput(str(err)) from err
    state_dir = opts.state_dir or opts.kubelet_root / "plugins" / opts.driver_name
    for flag, path in (("--kubelet-root", paths.registration.parent),
                       ("--kubelet-root", paths.dra.parent), ("--cdi-root", opts.cdi_root),
                       ("--state-dir", state_dir)):
        usable_dir(flag, path)
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
    found: Sequence[Nic] = discovery.discover()
    log.info("discovered NICs node=%s count=%d names=%s", opts.node_name, len(found),
             ",".join(n.name for n in found))
    kube = Kube(opts.kubeconfig)
    driver = NicDriver(NicConfig(driver=opts.driver_name, node=opts.node_name,
                                 state_dir=state_dir, cdi_root=opts.cdi_root,
                                 instance=opts.instance_id, write_status=opts.write_status),
                       kube, discovery.discover)
    publisher = NicPublisher(kube, opts.driver_name, opts.node_name, opts.rediscover_interval_s)
    publisher.start()
    servers = PluginServers(driver, paths)
    log.info("serving driver=%s node=%s registration=%s dra=%s state=%s", opts.driver_name,
             opts.node_name, paths.registration, paths.dra, state_dir)
    stop.wait()
    servers.stop(opts.grace_period_s)
    publisher.stop()
    if other_instances_alive(opts.kubelet_root, opts.driver_name, paths):
        log.info("another instance serves driver=%s: leaving ResourceSlices in place",
                 opts.driver_name)
    else:
        publisher.cleanup()
    log.info("stopped")
    return 0
