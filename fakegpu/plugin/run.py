"""``fakegpu plugin run``: wire discovery, the apiserver, the driver and the gRPC servers.

Shutdown on SIGTERM/SIGINT: unregister (remove the registration socket), finish in-flight
calls, remove our sockets; then delete the node's slices only if no other instance of this
driver still serves here (during a rolling update the new instance keeps them). SIGUSR1 is a
stop for replacement (a sequential upgrade): the slices stay in any case, for the next instance
to adopt; should none come, the kubelet removes them after its grace period.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from fakegpu import drivers
from fakegpu.errors import InvalidInput, printable
from fakegpu.kubeletplugin import startup
from fakegpu.kubeletplugin.checkpoint import Records
from fakegpu.kubeletplugin.health import DeviceStatus, HealthStreams
from fakegpu.kubeletplugin.kube import Kube
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.slicepool import Taint

from . import attach, discovery, healthsvc, shape, version
from .claimstatus import ClaimConditions
from .driver import Devices, Driver, DriverConfig
from .health import EventWatcher, Health
from .probe import ReadinessEndpoint, serving
from .publish import SlicePublisher, merge_taints

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    node_name: str
    driver_name: str
    kubeconfig: Path | None
    kubelet_root: Path
    cdi_root: Path
    instance_id: str = ""
    state_dir: Path | None = None
    write_status: bool = True
    publish_slices: bool = True
    rediscover_interval_s: float = 10.0
    grace_period_s: float = 30.0
    workers: int = 32  # gRPC threads: calls wait on the apiserver, not the CPU
    dynamic_mig: bool = False  # NVIDIA's DynamicMIG: partitions created at prepare
    shared_gpus: frozenset[int] = frozenset()  # minors shared by memory (consumable capacity)
    # (minor, N): dynamic-MIG GPUs also offered as N time-sliced shares (compatibility groups)
    time_sliced_gpus: tuple[tuple[int, int], ...] = ()
    attach_gpus: frozenset[int] = frozenset()  # minors attached before use (attach.py)
    broken_attach_gpus: frozenset[int] = frozenset()  # minors whose attach fails
    attach_seconds: float = 5.0  # how long an attach takes
    keep_slices_on_exit: bool = False  # as if every stop were SIGUSR1 (sequential upgrades)
    probe_port: int | None = None  # GET /readyz on this TCP port (None: not served)
    nvidia_release: str = shape.CURRENT  # NVIDIA's release whose slice shape to follow
    consumable_shares: str = shape.SHARES_DISABLED  # NVIDIA's --consumable-shares policy
    numa_node_list: bool = False  # numaNode in its list form (KEP-5491)


def slice_shape(opts: Options, nvidia: bool) -> shape.Shape:
    """The slices' shape; NVIDIA's options with another driver name are bad input (exit 2)."""
    for flag, value, default in (("--nvidia-compat-release", opts.nvidia_release, shape.CURRENT),
                                 ("--consumable-shares", opts.consumable_shares,
                                  shape.SHARES_DISABLED)):
        if value != default and not nvidia:
            raise InvalidInput(f"{flag}: NVIDIA's driver's option, expected --driver nvidia "
                               f"(got {printable(opts.driver_name)})")
    try:
        return shape.Shape(nvidia, opts.nvidia_release, opts.consumable_shares,
                           opts.numa_node_list)
    except ValueError as err:
        raise InvalidInput(str(err)) from None


def run(opts: Options, stop: threading.Event | None = None) -> int:
    # NVIDIA's driver name means NVIDIA's semantics: MIG profile names, health, slices' shape
    # (docs/plugin.md); its options are checked before anything touches the disk.
    nvidia = drivers.is_nvidia(opts.driver_name)
    look = slice_shape(opts, nvidia)
    paths, state_dir = startup.prepare(opts.node_name, opts.driver_name, opts.instance_id,
                                       opts.kubelet_root, opts.cdi_root, opts.state_dir)
    stamp = version.current()
    log.info("fakegpu plugin version %s (from %s)", stamp.version, stamp.source)
    stop = stop or threading.Event()
    replaced = threading.Event()  # SIGUSR1: stopped to be replaced; leave the slices

    startup.on_signals(stop, (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1),
                       lambda signum: replaced.set() if signum == signal.SIGUSR1 else None)
    if opts.time_sliced_gpus and nvidia:
        log.warning("--time-sliced-gpus ignored: NVIDIA's driver has no time-sliced devices "
                    "to mimic")
    devices = Devices(lambda: attach.mark(
        discovery.discover(nvidia, opts.dynamic_mig, opts.shared_gpus,
                           dict(opts.time_sliced_gpus)),
        opts.attach_gpus, opts.broken_attach_gpus))
    inventory = devices.current()  # fail at start, loudly, without NVML
    log.info("discovered devices node=%s count=%d names=%s", opts.node_name,
             len(inventory.devices), ",".join(d.name for d in inventory.devices))
    if stamp.broken:
        # The startup self-check of a bad release: it never passes, so this instance never
        # serves, registers or publishes; the previous one keeps the node (docs/upgrades.md).
        log.error("startup self-check failed: version %s is a broken release; not serving "
                  "(waiting to be stopped)", stamp.version)
        stop.wait()
        log.info("stopped without serving")
        return 1
    kube = Kube(opts.kubeconfig)
    driver = Driver(DriverConfig(driver=opts.driver_name, node=opts.node_name,
                                 state_dir=state_dir, cdi_root=opts.cdi_root,
                                 instance=opts.instance_id, write_status=opts.write_status,
                                 dynamic_mig=opts.dynamic_mig, version=stamp.version,
                                 prepare_delay_s=version.prepare_delay(), shape=look),
                    kube, devices)
    health = Health(opts.driver_name, nvidia)
    # Devices attached before a pod binds: the attach controller, and the taint of a failed one.
    attacher = attach.Attacher(kube, opts.driver_name, opts.node_name, devices.current,
                               opts.attach_seconds, lambda: publisher.wake())

    def taints(inventory: discovery.Inventory) -> dict[str, list[Taint]]:
        return merge_taints(health.taints(inventory), attacher.taints(inventory))

    publisher = SlicePublisher(kube, devices, opts.driver_name, opts.node_name,
                               opts.rediscover_interval_s, health=taints,
                               shape=look, still_faulty=health.still_faulty)
    # The kubelet's health streams report the taints the slices carry (pod status, KEP-4680).
    def statuses() -> list[DeviceStatus]:
        inventory = devices.current()
        taints = merge_taints(health.still_faulty(inventory, publisher.adopted),
                              health.taints(inventory), keep_fatal=not nvidia)
        return healthsvc.device_statuses(opts.driver_name, inventory, taints, nvidia)

    streams = HealthStreams(opts.node_name, statuses)
    # The same health as conditions on each prepared claim's device status entries.
    conditions = ClaimConditions(kube, Records(state_dir), opts.driver_name, opts.node_name,
                                 statuses)

    def changed() -> None:
        publisher.wake()
        streams.wake()
        conditions.wake()

    # Events wake the publisher at once; rediscovery every interval catches what NVML sends
    # no event for (MIG reconfiguration, a GPU that answers again).
    watcher = EventWatcher(health, devices.current, changed)
    if opts.publish_slices:
        watcher.start()
        publisher.start()
    if opts.write_status:
        conditions.start()
    attaching = bool(opts.attach_gpus or opts.broken_attach_gpus) and opts.write_status
    if attaching:
        attacher.start()
    servers = PluginServers(driver, paths, opts.workers, streams)
    probe = None if opts.probe_port is None else ReadinessEndpoint(
        functools.partial(serving, paths), opts.probe_port)
    log.info("serving driver=%s node=%s version=%s registration=%s dra=%s state=%s",
             opts.driver_name, opts.node_name, stamp.version, paths.registration, paths.dra,
             state_dir)
    stop.wait()
    servers.stop(opts.grace_period_s)
    if probe is not None:
        probe.stop()
    driver.close()
    if attaching:
        attacher.stop()
    publisher.stop()
    if opts.write_status:
        conditions.stop()
    if opts.publish_slices:
        watcher.stop()
    if opts.publish_slices:
        startup.withdraw_slices(
            opts.kubelet_root, opts.driver_name, paths, publisher.cleanup,
            keep="stopped for replacement" if replaced.is_set() or opts.keep_slices_on_exit
            else "")
    log.info("stopped")
    return 0
