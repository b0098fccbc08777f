"""``fakegpu kind ...``: what kind clusters need here without a registry.

- ``node-image``: assemble the kind node image for a Kubernetes minor (or print kindest/node's);
- ``image``: build the plugin image (the package's Dockerfile, from a checkout or a wheel);
- ``config``: print the kind config for a minor and topology (clusters/kind/ holds the defaults);
- ``docker``: make sure a Docker daemon runs (started with the capability wrapper when needed),
  or stop the one fakegpu started.
The cluster itself: ``fakegpu cluster up --provider kind``.
"""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console

from fakegpu.topology.packaged import default_topology

from . import add_verbose, argtypes, show_help

# Said in the file itself: it is read by people who run `kind create cluster --config` on it.
NO_CNI_NOTE = ("# disableDefaultCNI: fakegpu's kind provider installs a bridge CNI on every node;"
               "\n# with a plain `kind create cluster` the nodes stay NotReady. For that, print "
               "it with\n# --default-cni (kind's kindnetd, whose image kind must be able to "
               "pull).\n")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``kind`` and its subcommands to the top-level parser."""
    kind = sub.add_parser("kind", help="kind clusters without a registry (images, configs)",
                          description="Images and configs for kind clusters with fake GPUs, "
                                      "made on this machine (no registry needed).")
    cmds = kind.add_subparsers(dest="kind_command", metavar="SUBCOMMAND")

    node = cmds.add_parser("node-image", help="assemble the kind node image (no registry)",
                           description="Assemble a kind node image from locally built "
                                       "binaries and a debootstrapped Debian; print its name.")
    node.add_argument("--k8s-version", default=None, metavar="1.N",
                      help="Kubernetes minor (default: the newest supported)")
    add_verbose(node)
    node.set_defaults(func=_node_image)

    img = cmds.add_parser("image", help="build the plugin image; print its name")
    add_verbose(img)
    img.set_defaults(func=_image)

    cfg = cmds.add_parser("config", help="print the kind config for a minor and topology")
    cfg.add_argument("--k8s-version", default=None, metavar="1.N",
                     help="Kubernetes minor (default: the newest supported)")
    cfg.add_argument("--topology", type=argtypes.topology, default=None,
                     metavar="NAME|FILE", help=argtypes.TOPOLOGY_HELP)
    cfg.add_argument("--image", default=None, help="node image to name in the config")
    cfg.add_argument("--default-cni", action="store_true",
                     help="keep kind's default CNI (kindnetd), for a plain `kind create "
                          "cluster`; without it the nodes need the CNI fakegpu's kind provider "
                          "installs, and stay NotReady otherwise")
    add_verbose(cfg)
    cfg.set_defaults(func=_config)

    dock = cmds.add_parser("docker", help="ensure a Docker daemon runs (or --stop ours)")
    dock.add_argument("--stop", action="store_true",
                      help="stop the dockerd fakegpu started (never another one)")
    add_verbose(dock)
    dock.set_defaults(func=_docker)

    kind.set_defaults(func=show_help(kind))


def _console() -> Console:
    return Console(stderr=True)


def _node_image(args: argparse.Namespace) -> int:
    from fakegpu.cluster.kind import dockerhost, nodeimage

    console = _console()
    started = time.monotonic()
    host = dockerhost.ensure(console)
    built = nodeimage.assemble(host.docker, args.k8s_version, console)
    console.print(f"node image {built.ref} ({time.monotonic() - started:.0f}s)")
    print(built.ref)
    return 0


def _image(args: argparse.Namespace) -> int:
    from fakegpu.cluster.kind import dockerhost, image

    console = _console()
    image.check_inputs()  # a missing Dockerfile or package file fails before Docker starts
    print(image.build(dockerhost.ensure(console).docker, console).ref)
    return 0


def _config(args: argparse.Namespace) -> int:
    from fakegpu.cluster import featuregates
    from fakegpu.cluster.artifacts import binaries
    from fakegpu.cluster.kind import config
    from fakegpu.topology.load import load_topology

    topology = args.topology or default_topology()
    topo = load_topology(topology)
    minor = featuregates.parse_minor(binaries.resolve_version(args.k8s_version))
    header = config.committed_header(minor, topo.name)
    rendered = config.render(minor, [n.name for n in topo.nodes], args.image)
    if args.default_cni:
        rendered["networking"].pop("disableDefaultCNI", None)
    else:
        header += NO_CNI_NOTE
    sys.stdout.write(config.dump(rendered, header))
    return 0


def _docker(args: argparse.Namespace) -> int:
    from fakegpu.cluster.kind import dockerhost

    console = _console()
    if args.stop:
        stopped = dockerhost.stop_own_dockerd()
        console.print("stopped fakegpu's dockerd" if stopped else "no dockerd of fakegpu runs")
        return 0
    host = dockerhost.ensure(console)
    console.print(f"docker: {'started by fakegpu' if host.ours else 'already running'}"
                  f"{', capability wrapper as default runtime' if host.runtime_wrapper else ''}")
    return 0
