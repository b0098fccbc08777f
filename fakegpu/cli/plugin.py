"""``fakegpu plugin``: run the DRA kubelet plugin, print its DeviceClass manifests."""

from __future__ import annotations

import argparse
import sys

from fakegpu import drivers
from fakegpu.errors import InvalidInput
from fakegpu.plugin import shape

from . import add_verbose, argtypes, options, show_help


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    plugin = sub.add_parser("plugin", help="the DRA kubelet plugin for fake (or real) GPUs",
                            description="The DRA kubelet plugin: NVML -> ResourceSlices, "
                                        "kubelet prepare -> CDI specs.")
    cmds = plugin.add_subparsers(dest="plugin_command", metavar="SUBCOMMAND")

    run = cmds.add_parser(
        "run", help="serve the kubelet on this node",
        description="Register with the kubelet, publish this node's GPUs as ResourceSlices "
                    "and prepare claims as CDI specs. Stops gracefully on SIGTERM: an instance "
                    "that is the last of its driver on the node also deletes its slices.")
    options.add_plugin_node(run)
    options.add_driver(run, any_name=True, dest="driver_name", default=drivers.DEFAULT,
                       help=f"the DRA driver name to register as; nvidia ({drivers.NVIDIA}) "
                            "acts as NVIDIA's driver, so its DeviceClasses and CEL selectors "
                            "work unchanged; fakegpu stands for %(default)s",
                       old=("--driver-name",))
    _nvidia_compatible(run, "driver_name", drivers.NVIDIA)
    run.add_argument("--dynamic-mig", action="store_true",
                     help="NVIDIA's DynamicMIG: publish every MIG-capable GPU whole and as every "
                          "placement of every MIG profile (partitionable devices sharing a "
                          "counter set), and create the MIG device when a claim is prepared "
                          "(needs DRAPartitionableDevices)")
    run.add_argument("--shared-gpus", default="", metavar="MINORS",
                     help="comma-separated GPU minors to publish for several claims at once, "
                          "each taking a share of the memory (DRAConsumableCapacity)")
    run.add_argument("--time-sliced-gpus", default="", metavar="MINOR:N,...",
                     help="dynamic-MIG GPUs also offered as N time-sliced shares of 1/N of the "
                          "memory each, kept apart from their MIG devices by compatibility "
                          "groups (DRADeviceCompatibilityGroups, 1.37+); needs --dynamic-mig")
    run.add_argument("--nvidia-compat-release", choices=shape.RELEASES, default=shape.CURRENT,
                     help="with --driver nvidia: the NVIDIA driver release whose slices to "
                          "publish; v25.3 adds the index, minor and parentIndex attributes its "
                          "later releases dropped (default: %(default)s, as NVIDIA's main)")
    run.add_argument("--consumable-shares", type=_shares, default=shape.SHARES_DISABLED,
                     metavar="POLICY",
                     help="with --driver nvidia: NVIDIA's consumable-shares policy for every "
                          "GPU and static MIG device: disabled, memory, unlimited or a positive "
                          "integer N (several claims at once; DRAConsumableCapacity) "
                          "(default: %(default)s)")
    run.add_argument("--attach-gpus", default="", metavar="MINORS",
                     help="comma-separated GPU minors that must be attached before a pod binds "
                          "(binding conditions, DRADeviceBindingConditions): the plugin attaches "
                          "each after --attach-seconds once a claim gets it")
    run.add_argument("--broken-attach-gpus", default="", metavar="MINORS",
                     help="like --attach-gpus, but the attach fails: the scheduler picks again")
    run.add_argument("--attach-seconds", type=float, default=5.0, metavar="SECONDS",
                     help="how long an attach takes (default: %(default)s)")
    options.add_numa_node_list(run)
    options.add_kubelet_plugin(run, state="shared checkpoint + lock dir")
    run.add_argument("--no-device-status", dest="write_status", action="store_false",
                     help="do not write status.devices[].data on prepared claims")
    run.add_argument("--keep-slices-on-exit", action="store_true",
                     help="on SIGTERM leave the node's ResourceSlices even as the last instance "
                          "(sequential upgrades: the next instance adopts them; the kubelet "
                          "removes them after its grace period if none comes)")
    run.add_argument("--no-slices", dest="publish_slices", action="store_false",
                     help="do not publish ResourceSlices (another component does)")
    run.add_argument("--rediscover-interval", type=argtypes.interval, default=10.0,
                     metavar="SECONDS",
                     help="how often NVML is re-read to republish changed devices, e.g. "
                          "after MIG reconfiguration; XID/ECC/GPU-lost events republish at "
                          "once (default: %(default)s)")
    run.add_argument("--grace-period", type=argtypes.seconds, default=30.0, metavar="SECONDS",
                     help="on SIGTERM, how long in-flight calls may take to finish "
                          "(default: %(default)s)")
    run.add_argument("--probe-port", type=argtypes.port, default=None, metavar="PORT",
                     help="serve GET /readyz on this TCP port: 200 once both sockets serve, "
                          "503 before; for the kubelet's httpGet readiness probe, which "
                          "starts no process (default: not served)")
    run.add_argument("--version", dest="print_version", action="store_true",
                     help="print this plugin's version (the image's stamp, or "
                          "$FAKEGPU_PLUGIN_VERSION) and exit")
    add_verbose(run)
    run.set_defaults(func=_run)

    classes = cmds.add_parser("deviceclass", help="print the DeviceClass manifests (YAML)",
                              description="Print the driver's DeviceClasses (GPU and MIG), "
                                          "the ones the Helm chart and the embedded cluster "
                                          "install.")
    options.add_driver(classes, help=f"whose DeviceClasses: fakegpu: {drivers.FAKEGPU} / "
                                     f"{drivers.mig_class(drivers.FAKEGPU)}; nvidia: "
                                     f"{drivers.NVIDIA} / {drivers.mig_class(drivers.NVIDIA)}")
    _nvidia_compatible(classes, "driver", drivers.NVIDIA_KEY)
    add_verbose(classes)
    classes.set_defaults(func=_deviceclass)

    plugin.set_defaults(func=show_help(plugin))


def _nvidia_compatible(parser: argparse.ArgumentParser, dest: str, nvidia: str) -> None:
    # The old spelling of --driver nvidia, hidden.
    parser.add_argument("--nvidia-compatible", dest=dest, action="store_const", const=nvidia,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _run(args: argparse.Namespace) -> int:
    from fakegpu.plugin.run import Options, run

    if args.print_version:
        from fakegpu.plugin import version

        stamp = version.current()
        print(stamp.version + (" (broken: never becomes ready)" if stamp.broken else ""))
        return 0
    return run(Options(
        node_name=args.node_name, driver_name=args.driver_name, kubeconfig=args.kubeconfig,
        kubelet_root=args.kubelet_root, cdi_root=args.cdi_root, instance_id=args.instance_id,
        state_dir=args.state_dir, write_status=args.write_status,
        publish_slices=args.publish_slices, rediscover_interval_s=args.rediscover_interval,
        grace_period_s=args.grace_period, dynamic_mig=args.dynamic_mig,
        keep_slices_on_exit=args.keep_slices_on_exit, probe_port=args.probe_port,
        shared_gpus=_minors(args.shared_gpus),
        time_sliced_gpus=_time_slices(args.time_sliced_gpus, args.dynamic_mig),
        attach_gpus=_minors(args.attach_gpus, "--attach-gpus"),
        broken_attach_gpus=_minors(args.broken_attach_gpus, "--broken-attach-gpus"),
        attach_seconds=_seconds(args.attach_seconds),
        nvidia_release=args.nvidia_compat_release, consumable_shares=args.consumable_shares,
        numa_node_list=args.numa_node_list))


def _shares(text: str) -> str:
    try:
        return shape.parse_shares(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--consumable-shares: ")) from None


def _minors(text: str, flag: str = "--shared-gpus") -> frozenset[int]:
    """``--shared-gpus`` and the like: "0,3" -> {0, 3}; anything else is bad input (exit 2)."""
    try:
        minors = frozenset(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise InvalidInput(f"{flag}: {text!r} is not a comma-separated list of GPU "
                           "minors") from None
    if any(m < 0 for m in minors):
        raise InvalidInput(f"{flag}: {text!r}: minors are not negative")
    return minors


def _time_slices(text: str, dynamic_mig: bool) -> tuple[tuple[int, int], ...]:
    """``--time-sliced-gpus``: "0:4,1:2" -> ((0, 4), (1, 2)); anything else is bad input."""
    from fakegpu.topology.build import MAX_TIME_SLICES

    out: dict[int, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        minor, _, count = part.partition(":")
        try:
            pair = int(minor), int(count)
        except ValueError:
            raise InvalidInput(f"--time-sliced-gpus: {part!r} is not MINOR:N") from None
        if pair[0] < 0 or not 2 <= pair[1] <= MAX_TIME_SLICES or pair[0] in out:
            raise InvalidInput(f"--time-sliced-gpus: {part!r}: expected a GPU minor once, with "
                               f"2..{MAX_TIME_SLICES} shares")
        out[pair[0]] = pair[1]
    if out and not dynamic_mig:
        raise InvalidInput("--time-sliced-gpus: needs --dynamic-mig (the shares draw on the "
                           "GPU's MIG counter set)")
    return tuple(sorted(out.items()))


def _seconds(value: float) -> float:
    if not 0 <= value <= 3600:
        raise InvalidInput(f"--attach-seconds: {value:g} is not between 0 and 3600")
    return value


def _deviceclass(args: argparse.Namespace) -> int:
    import yaml

    from fakegpu.deploy.manifests import Install, device_classes

    driver = drivers.by_key(args.driver)
    sys.stdout.write(yaml.safe_dump_all(device_classes(Install(driver=driver)), sort_keys=False))
    return 0
