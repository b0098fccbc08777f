"""``fakegpu fleet run|delete``: a topology's simulated nodes on any cluster (docs/scale.md).

``fakegpu cluster up`` does the same for its own clusters; these commands are for a cluster
fakegpu did not make (the chart's, a cloud one): KWOK and the fleet publisher run here, in
the foreground, against the kubeconfig's apiserver.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console

from fakegpu import drivers
from fakegpu.cli import argtypes, options
from fakegpu.errors import EXIT_OK, InvalidInput


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from fakegpu.cli import add_verbose, show_help

    fleet = sub.add_parser("fleet", help="simulated GPU nodes (KWOK) on any cluster",
                           description="Run a topology's simulated nodes against a cluster "
                                       "fakegpu did not make (docs/scale.md).")
    add_verbose(fleet)
    cmds = fleet.add_subparsers(dest="fleet_command", metavar="COMMAND")
    fleet.set_defaults(func=show_help(fleet))

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kubeconfig", type=Path, required=True,
                       help="a kubeconfig that may create Nodes and ResourceSlices")
        p.add_argument("--topology", type=argtypes.topology, required=True, metavar="NAME|FILE",
                       help="a topology (packaged name or YAML) with nodes[].simulated: true")
        add_verbose(p)

    run = cmds.add_parser("run", help="create the simulated Nodes; run KWOK and the slice "
                                      "publisher until interrupted")
    common(run)
    options.add_driver(run, help=f"publish as {drivers.FAKEGPU} (fakegpu) or, "
                                 f"NVIDIA-compatible, {drivers.NVIDIA} (nvidia)")
    run.add_argument("--state-dir", type=Path, default=None,
                     help="where the simulated nodes' NVML state files live (default: a new "
                          "temporary directory); `fakegpu fault inject --state` edits them")
    run.add_argument("--pod-cidr", default="10.254.0.0/16",
                     help="addresses KWOK gives pods on simulated nodes")
    run.set_defaults(func=_run)

    delete = cmds.add_parser("delete", help="delete the topology's simulated Node objects "
                                            "(their ResourceSlices go with them)")
    common(delete)
    delete.set_defaults(func=_delete)


def _simulated(path: Path) -> list[str]:
    from fakegpu.topology.load import load_topology

    names = [n.name for n in load_topology(path).simulated_nodes]
    if not names:
        raise InvalidInput(f"{path}: no simulated nodes (nodes[].simulated: true)")
    return names


def _run(args: argparse.Namespace) -> int:
    from fakegpu.cluster.embedded import fleet as embedded
    from fakegpu.cluster.process import spawn, terminate
    from fakegpu.fleet import nodes, run, stages
    from fakegpu.kube import api as kubeapi
    from fakegpu.topology.load import load_topology

    topology = load_topology(args.topology)
    _simulated(args.topology)
    driver = drivers.by_key(args.driver)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="fakegpu-fleet-"))
    work = state_dir / "fleet"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "kwok.yaml"
    config.write_text(stages.config_text())
    kwok = embedded.kwok_binary(Console(stderr=True))
    with kubeapi.session(args.kubeconfig) as api:
        made = nodes.create(api, topology.simulated_nodes)
    print(f"{made} simulated Node objects created; NVML state in {state_dir}")
    rec = spawn("kwok", embedded.kwok_argv(kwok, args.kubeconfig, config, args.pod_cidr,
                                           "10.254.255.254"), work / "kwok.log")
    print(f"KWOK running (log {work / 'kwok.log'}); publishing slices until interrupted")
    argv, env = run.command(args.kubeconfig, args.topology, state_dir, driver)
    try:
        return subprocess.run(argv, env={**os.environ, **env}, check=False).returncode
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        terminate(rec)


def _delete(args: argparse.Namespace) -> int:
    from fakegpu.fleet import nodes
    from fakegpu.kube import api as kubeapi

    names = _simulated(args.topology)
    with kubeapi.session(args.kubeconfig) as api:
        deleted = nodes.delete(api, names)
    print(f"{deleted} simulated Node objects deleted ({len(names) - deleted} were not there)")
    return EXIT_OK
