"""``fakegpu nic``: run the NIC DRA driver's kubelet plugin (docs/nics.md)."""

from __future__ import annotations

import argparse

from fakegpu import drivers

from . import add_verbose, argtypes, options, show_help


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    nic = sub.add_parser("nic", help="the DRA kubelet plugin for the node's NICs",
                         description="The NIC DRA driver: sysfs -> ResourceSlices, kubelet "
                                     "prepare -> a network interface in the pod (CDI).")
    cmds = nic.add_subparsers(dest="nic_command", metavar="SUBCOMMAND")
    run = cmds.add_parser(
        "run", help="serve the kubelet on this node",
        description="Register with the kubelet, publish this node's NICs as a ResourceSlice "
                    "and prepare claims: a network interface and the RDMA device node in the "
                    "pod, the interface's name and MAC in the claim's status.")
    options.add_plugin_node(run)
    run.add_argument("--driver", dest="driver_name", default=drivers.NIC,
                     help="the DRA driver name to register as (default: %(default)s)")
    options.add_kubelet_plugin(run, state="records + lock dir")
    run.add_argument("--no-device-status", dest="write_status", action="store_false",
                     help="do not write status.devices[] (network data) on prepared claims")
    run.add_argument("--rediscover-interval", type=argtypes.interval, default=10.0,
                     metavar="SECONDS", help="how often sysfs is re-read (default: %(default)s)")
    run.add_argument("--grace-period", type=argtypes.seconds, default=30.0, metavar="SECONDS",
                     help="on SIGTERM, how long in-flight calls may take (default: %(default)s)")
    options.add_numa_node_list(run)
    add_verbose(run)
    run.set_defaults(func=_run)
    nic.set_defaults(func=show_help(nic))


def _run(args: argparse.Namespace) -> int:
    from fakegpu.nic.run import Options, run

    return run(Options(
        node_name=args.node_name, driver_name=args.driver_name, kubeconfig=args.kubeconfig,
        kubelet_root=args.kubelet_root, cdi_root=args.cdi_root, instance_id=args.instance_id,
        state_dir=args.state_dir, write_status=args.write_status,
        rediscover_interval_s=args.rediscover_interval, grace_period_s=args.grace_period,
        numa_node_list=args.numa_node_list))
