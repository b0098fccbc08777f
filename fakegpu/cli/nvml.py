"""``fakegpu nvml env|libdir|render``, ``fakegpu fault inject|clear`` and ``fakegpu smi``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from fakegpu.cli import argtypes
from fakegpu.errors import EXIT_OK, FakegpuError, InvalidInput, printable

GPU_HELP = "the GPU's index on the node (as nvidia-smi numbers it)"
NIC_HELP = ("the NIC's interface name on the node (its nic.fakegpu.dev device's "
            "interfaceName), for nic-link-down")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    from fakegpu.cli import add_verbose, options, show_help

    nvml = sub.add_parser("nvml", help="the fake libnvidia-ml.so.1 and its per-node state",
                          description="Point NVML clients at a fake node.")
    add_verbose(nvml)
    cmds = nvml.add_subparsers(dest="nvml_command", metavar="COMMAND")
    nvml.set_defaults(func=show_help(nvml))

    env = cmds.add_parser("env", help="print shell exports that make NVML see one node",
                          description='Use as: eval "$(fakegpu nvml env --topology F --node N)". '
                                      "Renders the node's state file if it does not exist.")
    _node_args(env)
    env.add_argument("--fresh", action="store_true", help="re-render the state file")
    add_verbose(env)
    env.set_defaults(func=_env)

    libdir = cmds.add_parser("libdir", help="print the directory holding libnvidia-ml.so.1")
    add_verbose(libdir)
    libdir.set_defaults(func=_libdir)

    render = cmds.add_parser("render", help="render a node's state file (replacing it)")
    _node_args(render)
    add_verbose(render)
    render.set_defaults(func=_render)

    fault = sub.add_parser("fault", help="inject or clear GPU faults at run time",
                           description="Inject or clear faults on a fake node's GPUs; every "
                                       "NVML client on the node sees them at once.")
    add_verbose(fault)
    fcmds = fault.add_subparsers(dest="fault_command", metavar="COMMAND")
    fault.set_defaults(func=show_help(fault))
    kinds = ("xid VALUE | ecc-dbe | gpu-lost | nvlink-down LINK | fabric-degraded; "
             "with --nic: nic-link-down")
    inject = fcmds.add_parser("inject", help=f"inject a fault: {kinds}")
    _node_args(inject, cluster=True)
    inject.add_argument("--gpu", type=int, metavar="INDEX", help=GPU_HELP)
    inject.add_argument("--nic", metavar="INTERFACE", help=NIC_HELP)
    inject.add_argument("kind", metavar="KIND", help=kinds)
    inject.add_argument("value", nargs="?", type=int, metavar="VALUE",
                        help="the XID code (xid) or the link index (nvlink-down)")
    add_verbose(inject)
    inject.set_defaults(func=_inject)
    clear = fcmds.add_parser("clear", help="clear one kind of fault, or all of a GPU's faults")
    _node_args(clear, cluster=True)
    clear.add_argument("--gpu", type=int, metavar="INDEX", help=GPU_HELP)
    clear.add_argument("--nic", metavar="INTERFACE", help=NIC_HELP)
    clear.add_argument("kind", nargs="?", metavar="KIND",
                       help=f"the kind of fault to clear: {kinds} (default: every fault)")
    clear.add_argument("value", nargs="?", type=int, metavar="VALUE",
                       help="only that XID code or link index")
    add_verbose(clear)
    clear.set_defaults(func=_clear)

    smi = sub.add_parser("smi", help="an nvidia-smi-like view of a node, read through NVML",
                         description="List GPUs, MIG devices and the NVLink matrix as NVML "
                                     "reports them (default: $FAKEGPU_NVML_STATE).")
    _node_args(smi, required=False, cluster=True)
    options.add_output(smi, table="the summary, fitted to the terminal")
    add_verbose(smi)
    smi.set_defaults(func=_smi)


def _node_args(parser: argparse.ArgumentParser, required: bool = True,
               cluster: bool = False) -> None:
    parser.add_argument("--topology", type=argtypes.topology, metavar="NAME|FILE",
                        help="a packaged topology's name or a topology YAML")
    parser.add_argument("--node", metavar="NAME", help="node name (default: the only node)")
    parser.add_argument("--state", metavar="PATH",
                        help="state file (with --topology: where to render it)")
    if cluster:
        from fakegpu.cli import options

        options.add_cluster(parser, type_=argtypes.cluster_name,
                            help="a running cluster: act on its node --node, on any provider")
        options.add_provider(parser)
    parser.set_defaults(_node_required=required)


def _state_path(args: argparse.Namespace, *, render: bool = True, fresh: bool = False) -> Path:
    """The state file the arguments name, rendering it from the topology when needed."""
    from fakegpu.nvml import env
    from fakegpu.topology.load import load_topology

    if args.topology:
        topology = load_topology(args.topology)
        node = args.node
        if node is None:
            if len(topology.nodes) != 1:
                names = ", ".join(n.name for n in topology.nodes)
                raise InvalidInput(f"--node is required: {args.topology} has nodes {names}")
            node = topology.nodes[0].name
        if not render:
            return Path(args.state) if args.state else env.state_path(topology, node)
        return env.ensure_state(topology, node, args.state, fresh=fresh)
    if args.node:
        raise InvalidInput("--node needs --topology")
    if args.state:
        return Path(args.state)
    if not args._node_required and os.environ.get(env.STATE_ENV):
        return Path(os.environ[env.STATE_ENV])
    raise InvalidInput("give --topology FILE --node NAME, or --state PATH")


def _env(args: argparse.Namespace) -> int:
    from fakegpu.nvml import env

    path = _state_path(args, fresh=args.fresh)
    for key, value in env.env(path).items():
        print(f"export {key}={shlex.quote(value)}")
    return EXIT_OK


def _libdir(_args: argparse.Namespace) -> int:
    from fakegpu.nvml import env

    print(env.libdir())
    return EXIT_OK


def _render(args: argparse.Namespace) -> int:
    print(_state_path(args, fresh=True))
    return EXIT_OK


def _existing_state(args: argparse.Namespace) -> Path:
    from fakegpu.nvml import env

    path = _state_path(args)
    if not env.is_state_file(path):
        raise InvalidInput(f"no state file at {printable(str(path))}")
    return path


def _on_cluster(args: argparse.Namespace, command: list[str]) -> int | None:
    """With --cluster: run ``command`` against that cluster's node and relay its output and
    exit code (the node's state file may not be on this host); None without --cluster."""
    if args.cluster is None:
        if args.provider is not None:
            raise InvalidInput("--provider needs --cluster")
        return None
    res = _cluster_output(args, command)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode


def _cluster_output(args: argparse.Namespace,
                    command: list[str]) -> subprocess.CompletedProcess[str]:
    """``fakegpu <command>`` run against --cluster's node --node, its output captured."""
    from fakegpu.cluster import nodenvml

    if args.topology or args.state:
        raise InvalidInput("--cluster names the node's state itself: "
                           "drop --topology and --state")
    if not args.node:
        raise InvalidInput("--cluster needs --node NAME (a worker of that cluster)")
    return nodenvml.run(args.cluster, args.node, command, args.provider)


NIC_LINK_DOWN = "nic-link-down"


def _target(args: argparse.Namespace) -> None:
    """Exactly one of --gpu and --nic, and a kind that fits it."""
    if (args.gpu is None) == (args.nic is None):
        raise InvalidInput("give --gpu INDEX or --nic INTERFACE (one of them)")
    if args.nic is not None and args.kind not in (None, NIC_LINK_DOWN):
        raise InvalidInput(f"KIND: {args.kind!r} is a GPU fault; a NIC has {NIC_LINK_DOWN}")
    if args.gpu is not None and args.kind == NIC_LINK_DOWN:
        raise InvalidInput(f"KIND: {NIC_LINK_DOWN} needs --nic INTERFACE, not --gpu")


def _nic_link(args: argparse.Namespace, up: bool) -> int:
    """A NIC's link in the node's sysfs view, which its NIC plugin reads (docs/nics.md)."""
    from fakegpu.nvml import sysfs

    view = sysfs.path_for(_existing_state(args))
    try:
        sysfs.set_link(view, args.nic, up)
    except KeyError:
        have = ", ".join(sysfs.nic_names(view)) or "none"
        raise InvalidInput(f"--nic: no NIC {args.nic!r} on this node (it has {have})") from None
    return EXIT_OK


def _inject(args: argparse.Namespace) -> int:
    from fakegpu.cluster.nodenvml import fault_args
    from fakegpu.nvml import faults

    _target(args)
    rc = _on_cluster(args, fault_args("inject", args.gpu, args.kind, args.value, args.nic))
    if rc is not None:
        return rc
    if args.nic is not None:
        return _nic_link(args, up=False)
    faults.inject(_existing_state(args), args.gpu, args.kind, args.value)
    return EXIT_OK


def _clear(args: argparse.Namespace) -> int:
    from fakegpu.cluster.nodenvml import fault_args
    from fakegpu.nvml import faults

    _target(args)
    rc = _on_cluster(args, fault_args("clear", args.gpu, args.kind, args.value, args.nic))
    if rc is not None:
        return rc
    if args.nic is not None:
        return _nic_link(args, up=True)
    faults.clear(_existing_state(args), args.gpu, args.kind, args.value)
    return EXIT_OK


def _smi(args: argparse.Namespace) -> int:
    from fakegpu.nvml import smi, smitable

    if args.cluster is None and args.provider is not None:
        raise InvalidInput("--provider needs --cluster")
    if args.cluster is not None:
        # The node's fakegpu reads the data; this one renders it for this terminal.
        remote = _cluster_output(args, ["smi", "-o", "json"])
        if remote.returncode != 0:
            sys.stdout.write(remote.stdout)
            sys.stderr.write(remote.stderr)
            return remote.returncode
        try:
            view = json.loads(remote.stdout)
        except ValueError:
            raise FakegpuError(f"fakegpu smi on node {args.node} printed no JSON view: "
                               f"{printable(remote.stdout[:200])}") from None
    else:
        view = smi.read(_existing_state(args))
    from fakegpu.cli import options

    options.emit(view, args.output, lambda: smitable.render(view, sys.stdout))
    return EXIT_OK
