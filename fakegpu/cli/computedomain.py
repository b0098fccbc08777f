"""``fakegpu computedomain``: the ComputeDomain controller, its kubelet plugin and the fake
IMEX daemon (docs/gb200.md)."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

from fakegpu.computedomain.names import Names
from fakegpu.deploy.manifests import NAMESPACE
from fakegpu.errors import InvalidInput

from . import add_verbose, argtypes, options, show_help

DEFAULT_DOMAIN = "fakegpu.dev"


def _domain_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--domain", default=DEFAULT_DOMAIN,
                        help="the driver domain: nvidia.com means NVIDIA's names "
                             "(resource.nvidia.com, compute-domain.nvidia.com); the GPU "
                             "driver's name without 'gpu.' (default: %(default)s)")


def _namespace_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """The driver's namespace (the chart's release namespace), as NVIDIA's pieces take it:
    $POD_NAMESPACE (the pod's own, from the downward API), else the chart's default."""
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", NAMESPACE),
                        help=f"the driver's namespace: {what} (default: $POD_NAMESPACE or "
                             f"{NAMESPACE})")


def _names(domain: str) -> Names:
    from fakegpu.kubeletplugin import names as safe

    if why := safe.check("--domain", domain):
        raise InvalidInput(why)
    return Names(domain)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    cd = sub.add_parser("computedomain", help="ComputeDomains: controller, plugin, IMEX daemon",
                        description="Multi-node NVLink (GB200) the way NVIDIA's DRA driver "
                                    "models it: ComputeDomains, IMEX channels and daemons.")
    cmds = cd.add_subparsers(dest="cd_command", metavar="SUBCOMMAND")

    ctl = cmds.add_parser("controller", help="run the ComputeDomain controller (one per cluster)",
                          description="For each ComputeDomain: its channel claim template, the "
                                      "IMEX daemon set, its status; cleanup on deletion.")
    _domain_arg(ctl)
    _namespace_arg(ctl, "where the IMEX daemon sets and their claim templates live")
    ctl.add_argument("--daemon-image", required=True,
                     help="image of the IMEX daemon pods (one with a busybox shell and httpd)")
    options.add_in_cluster_kubeconfig(ctl)
    ctl.add_argument("--resync", type=argtypes.interval, default=60.0, metavar="SECONDS",
                     help="seconds between full passes over every domain, the safety net "
                          "under the watches (default: %(default)s)")
    add_verbose(ctl)
    ctl.set_defaults(func=_controller)

    plug = cmds.add_parser("plugin", help="run the compute-domain kubelet plugin on this node",
                           description="Publish IMEX channels and a daemon device; prepare "
                                       "channel and daemon claims.")
    options.add_plugin_node(plug, pool=False)
    _domain_arg(plug)
    options.add_kubelet_plugin(plug, state="claim records and daemon logs", instance_id=False)
    _namespace_arg(plug, "the only one whose daemon claims it prepares (the controller's)")
    add_verbose(plug)
    plug.set_defaults(func=_plugin)

    dmn = cmds.add_parser("daemon", help="the fake IMEX daemon (started by the plugin)",
                          description="One node's IMEX daemon of one ComputeDomain.")
    _domain_arg(dmn)
    dmn.add_argument("--domain-uid", required=True, metavar="UID",
                     help="the ComputeDomain's UID")
    dmn.add_argument("--node", required=True, metavar="NAME", help="this node's name")
    dmn.add_argument("--pod-namespace", required=True, metavar="NAMESPACE",
                     help="the daemon pod's namespace")
    dmn.add_argument("--pod-name", required=True, metavar="NAME", help="the daemon pod's name")
    dmn.add_argument("--claim-uid", default="", help="the daemon claim (names this process)")
    dmn.add_argument("--state-dir", default="", help="the plugin's (names this process)")
    options.add_in_cluster_kubeconfig(dmn)
    add_verbose(dmn)
    dmn.set_defaults(func=_daemon)

    cd.set_defaults(func=show_help(cd))


def _controller(args: argparse.Namespace) -> int:
    from fakegpu.computedomain.connect import connect
    from fakegpu.computedomain.controller import Config, Controller

    names = _names(args.domain)
    api = connect(args.kubeconfig)
    stop = threading.Event()
    _on_signals(stop)
    Controller(api, Config(
        names, args.namespace, args.daemon_image, args.resync)).run(stop)
    return 0


def _plugin(args: argparse.Namespace) -> int:
    from fakegpu.computedomain.plugin import run

    if not args.node_name:
        raise InvalidInput("--node is required (or set NODE_NAME)")
    return run(_names(args.domain).driver, args.node_name, args.kubeconfig,
               args.kubelet_root, args.cdi_root, args.state_dir, args.namespace)


def _daemon(args: argparse.Namespace) -> int:
    from fakegpu.computedomain import daemon
    from fakegpu.computedomain.connect import connect

    names = _names(args.domain)
    record = (Path(args.state_dir) / "claims" / f"{args.claim_uid}.json"
              if args.state_dir and args.claim_uid else None)
    return daemon.run(connect(args.kubeconfig), daemon.Config(
        names, args.domain_uid, args.node, args.pod_namespace, args.pod_name, record=record))


def _on_signals(stop: threading.Event) -> None:
    import signal

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
