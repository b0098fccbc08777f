"""``fakegpu plugin run``: wire discovery, the apiserver, the driver and the gRPC servers.

Shutdown on SIGTERM/SIGINT: unregister (remove the registration socket), finish in-flight
calls, remove our sockets; then delete the node's slices only if no other instance of this
driver still serves here (during a rolling update the new instance keeps them). SIGUSR1 is a
stop for replacement (a sequential upgrade): the slices stay in any case, for the next instance
to adopt; should none come, the kubelet removes them after its grace period.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from fakegpu import drivers
from fakegpu.errors import InvalidInput, printable

from . import discovery, healthsvc, names, shape, version
from .checkpoint import Records
from .claimstatus import ClaimConditions
from .driver import Devices, Driver, DriverConfig
from .health import EventWatcher, Health
from .kube import Kube
from .probe import ReadinessEndpoint
from .publish import SlicePublisher, merge_taints
from .server import PluginServers
from .sockets import SocketPaths, socket_alive, socket_paths

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
    keep_slices_on_exit: bool = False  # as if every stop were SIGUSR1 (sequential upgrades)
    probe_port: int | None = None  # GET /readyz on this TCP port (None: not served)
    nvidia_release: str = shape.CURRENT  # NVIDIA's release whose slice shape to follow
    consumable_shares: str = shape.SHARES_DISABLED  # NVIDIA's --consumable-shares policy


def usable_dir(flag: str, path: Path) -> None:
    """Make ``path`` (absolute: the kubelet and the runtime resolve it from elsewhere) or say in
    one line why it cannot be, before the servers, the checkpoint or a CDI spec fail on it."""
    if not path.is_absolute():
        raise InvalidInput(f"{flag}: {printable(str(path))} is a relative path, expected an "
                           "absolute one")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInput(f"{flag}: cannot create directory {printable(str(path))}: "
                           f"{err.strerror or err}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InvalidInput(f"{flag}: directory {printable(str(path))} is not writable")


def other_instances_alive(kubelet_root: Path, driver: str, own: SocketPaths) -> bool:
    registry = kubelet_root / "plugins_registry"
    candidates = {*registry.glob(f"{driver}-reg.sock"), *registry.glob(f"{driver}-*-reg.sock")}
    return any(p != own.registration and socket_alive(p) for p in candidates)


def slice_shape(opts: Options, nvidia: bool) -> shape.Shape:
    """The slices' shape; NVIDIA's options with another driver name are bad input (exit 2)."""
    for flag, value, default in (("--nvidia-compat-release", opts.nvidia_release, shape.CURRENT),
                                 ("--consumable-shares", opts.consumable_shares,
                                  shape.SHARES_DISABLED)):
        if value != default and not nvidia:
            raise InvalidInput(f"{flag}: NVIDIA's driver's option, expected --driver nvidia "
                               f"(got {printable(opts.driver_name)})")
    try:
        return shape.Shape(nvidia, opts.nvidia_release, opts.consumable_shares)
    except ValueError as err:
        raise InvalidInput(str(err)) from None


def run(opts: Options, stop: threading.Event | None = None) -> int:
    if not opts.node_name:
        raise InvalidInput("--node is required (or set NODE_NAME)")
    # NVIDIA's driver name means NVIDIA's semantics: MIG profile names, health (docs/plugin.md).
    nvidia = drivers.is_nvidia(opts.driver_name)
    look = slice_shape(opts, nvidia)
    # Each of these becomes part of a path (sockets, state dir) or a name the apiserver keeps:
    # one rule for all of them, checked before anything touches the disk.
    for flag, value in (("--node", opts.node_name), ("--driver", opts.driver_name),
                        ("--instance-id", opts.instance_id)):
        # (no instance id is fine: the default socket names)
        if (value or flag != "--instance-id") and (why := names.check(flag, value)):
            raise InvalidInput(why)
    try:
        paths = socket_paths(opts.kubelet_root, opts.driver_name, opts.instance_id)
    except ValueError as err:
        raise InvalidInput(str(err)) from err
    state_dir = opts.state_dir or opts.kubelet_root / "plugins" / opts.driver_name
    # Of the kubelet's root only the plugin's own directories in it must be writable: in the
    # plugin's pod the root itself is read-only, only these are mounted from the node.
    for flag, path in (("--kubelet-root", paths.registration.parent),
                       ("--kubelet-root", paths.dra.parent), ("--cdi-root", opts.cdi_root),
                       ("--state-dir", state_dir)):
        usable_dir(flag, path)
    stamp = version.current()
    log.info("fakegpu plugin version %s (from %s)", stamp.version, stamp.source)
    stop = stop or threading.Event()
    replaced = threading.Event()  # SIGUSR1: stopped to be replaced; leave the slices

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        if signum == signal.SIGUSR1:
            replaced.set()
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, on_signal)
    devices = Devices(lambda: discovery.discover(nvidia, opts.dynamic_mig, opts.shared_gpus))
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
                                 prepare_delay_s=version.prepare_delay()),
                    kube, devices)
    health = Health(opts.driver_name, nvidia)
    publisher = SlicePublisher(kube, devices, opts.driver_name, opts.node_name,
                               opts.rediscover_interval_s, health=health.taints,
                               shape=look, still_faulty=health.still_faulty)
    # The kubelet's health streams report the taints the slices carry (pod status, KEP-4680).
    def statuses() -> list[healthsvc.DeviceStatus]:
        inventory = devices.current()
        taints = merge_taints(health.still_faulty(inventory, publisher.adopted),
                              health.taints(inventory), keep_fatal=not nvidia)
        return healthsvc.device_statuses(opts.driver_name, inventory, taints, nvidia)

    streams = healthsvc.HealthStreams(opts.node_name, statuses)
    # The same health as conditions on each prepared claim's device status entries.
    conditions = ClaimConditions(kube, Records(state_dir), opts.driver_name, opts.node_name,
                                 statuses)

    def changed() -> None:
        publisher.poke()
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
    servers = PluginServers(driver, paths, opts.workers, streams)
    probe = None if opts.probe_port is None else ReadinessEndpoint(paths, opts.probe_port)
    log.info("serving driver=%s node=%s version=%s registration=%s dra=%s state=%s",
             opts.driver_name, opts.node_name, stamp.version, paths.registration, paths.dra,
             state_dir)
    stop.wait()
    servers.stop(opts.grace_period_s)
    if probe is not None:
        probe.stop()
    driver.close()
    publisher.stop()
    if opts.write_status:
        conditions.stop()
    if opts.publish_slices:
        watcher.stop()
    if opts.publish_slices:
        if other_instances_alive(opts.kubelet_root, opts.driver_name, paths):
            log.info("another instance serves driver=%s: leaving ResourceSlices in place",
                     opts.driver_name)
        elif replaced.is_set() or opts.keep_slices_on_exit:
            log.info("stopped for replacement: leaving ResourceSlices of driver=%s in place",
                     opts.driver_name)
        else:
            publisher.cleanup()
    log.info("stopped")
    return 0
