"""The options every command spells the same way: one helper per concept.

A cluster is ``--cluster NAME``, a node ``--node NAME``, a DRA driver ``--driver``, what a
command prints ``-o table|json|yaml``. Spellings of earlier releases stay accepted, hidden
(help SUPPRESS): ``--name``, ``--node-name``, ``--driver-name``, ``--format`` and the
positional NAME / NODE some commands took. tests/test_cli_shape.py walks the parser tree
and refuses a visible option without help, or a cluster or node spelled otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fakegpu import drivers

FORMATS = ("table", "json", "yaml")
# `cluster status --format text` of earlier releases: the table.
_OLD_FORMATS = {"text": "table"}
PROVIDERS = ("embedded", "kind")  # fakegpu.cluster.PROVIDERS, not imported: that is slow


class _Alias(argparse.Action):
    """A hidden positional spelling of an option: sets the option's destination when given
    (``cluster upgrade-plugin NAME`` = ``--cluster NAME``); absent, it changes nothing."""

    target = ""  # the option's destination
    convert: Callable[[str], Any] = str  # the option's type, applied here: argparse would
    # apply a positional's own type to its SUPPRESS default too

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if values is None or values is argparse.SUPPRESS:
            return
        try:
            values = self.convert(values)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        setattr(namespace, self.target, values)


def _hidden_positional(parser: argparse.ArgumentParser, target: str,
                       type_: Callable[[str], Any]) -> None:
    # A positional's dest is its name: the action class carries the target. Default
    # SUPPRESS keeps argparse from writing anything when it is absent.
    action = type(f"_{target}_alias", (_Alias,),
                  {"target": target, "convert": staticmethod(type_)})
    parser.add_argument(f"_{target}_positional", nargs="?", metavar=target, action=action,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_cluster(parser: argparse.ArgumentParser, *, default: str | None = None,
                required: bool = False, positional: bool = False,
                type_: Callable[[str], Any] = str, help: str | None = None) -> None:
    """``--cluster NAME`` (dest ``cluster``); ``--name`` and, with ``positional``, a bare NAME
    of earlier releases, hidden."""
    text = help or "the cluster's name" + (" (default: %(default)s)" if default else "")
    parser.add_argument("--cluster", metavar="NAME", default=default, type=type_,
                        required=required, help=text)
    parser.add_argument("--name", dest="cluster", type=type_, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
    if positional:
        _hidden_positional(parser, "cluster", type_)


def add_provider(parser: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """``--provider``: the cluster's provider; without a default, the one that has it."""
    text = ("embedded: host processes; kind: Docker containers (default: %(default)s)"
            if default else "the cluster's provider: embedded or kind (default: the one that "
                            "has a cluster of that name)")
    parser.add_argument("--provider", choices=PROVIDERS, default=default, help=text)


def add_node(parser: argparse.ArgumentParser, *, dest: str = "node", default: str | None = None,
             help: str = "the node's name", positional: bool = False,
             old: Sequence[str] = ()) -> None:
    """``--node NAME``; ``old`` spellings (``--node-name``) and, with ``positional``, a bare
    NODE of earlier releases, hidden."""
    parser.add_argument("--node", dest=dest, metavar="NAME", default=default, help=help)
    for flag in old:
        parser.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    if positional:
        _hidden_positional(parser, dest, str)


def driver_key(text: str) -> str:
    """argparse type: one of fakegpu's drivers, by key (``nvidia``) or name
    (``gpu.nvidia.com``) -> its key."""
    if text in drivers.CHOICES:
        return text
    for key, name in drivers.CHOICES.items():
        if text == name:
            return key
    raise argparse.ArgumentTypeError(
        f"{text!r} is not one of fakegpu's drivers (expected "
        f"{', '.join(f'{k} ({v})' for k, v in drivers.CHOICES.items())})")


def driver_name(text: str) -> str:
    """argparse type: any DRA driver name; fakegpu's keys (``nvidia``) stand for theirs."""
    return drivers.CHOICES.get(text, text)


KEY_HELP = (f"fakegpu: {drivers.FAKEGPU}; nvidia: NVIDIA-compatible, {drivers.NVIDIA} with "
            f"NVIDIA's DeviceClasses ({drivers.NVIDIA}, {drivers.mig_class(drivers.NVIDIA)})")


def add_driver(parser: argparse.ArgumentParser, *, any_name: bool = False,
               dest: str = "driver", default: str | None = drivers.DEFAULT_KEY,
               required: bool = False, help: str | None = None,
               old: Sequence[str] = ()) -> None:
    """``--driver``: fakegpu's drivers by key or name (stored as the key), or with
    ``any_name`` any DRA driver name (stored as the name; the keys stand for theirs)."""
    if any_name:
        kind: Callable[[str], str] = driver_name
        metavar = "NAME"
        text = help or (f"the DRA driver's name; fakegpu and nvidia stand for "
                        f"{drivers.FAKEGPU} and {drivers.NVIDIA}")
    else:
        kind, metavar = driver_key, "{" + ",".join(drivers.CHOICES) + "}"
        text = help or KEY_HELP
    if default is not None and "%(default)s" not in text:
        text += " (default: %(default)s)"
    parser.add_argument("--driver", dest=dest, type=kind, metavar=metavar, default=default,
                        required=required, help=text)
    for flag in old:
        parser.add_argument(flag, dest=dest, type=kind, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)


NIC_KEY_HELP = (f"the NIC plugin on every node whose topology has a PCIe tree: fakegpu: "
                f"{drivers.NIC}; dranet: {drivers.DRANET} with DRANET's device names and "
                "attributes; none: no NIC plugin (docs/nics.md)")


def add_nic_driver(parser: argparse.ArgumentParser) -> None:
    """``--nic-driver {fakegpu,dranet,none}`` (dest ``nic_driver``, stored as the key)."""
    parser.add_argument("--nic-driver", dest="nic_driver", choices=tuple(drivers.NIC_CHOICES),
                        default=drivers.NIC_DEFAULT_KEY,
                        help=NIC_KEY_HELP + " (default: %(default)s)")


def add_numa_node_list(parser: argparse.ArgumentParser) -> None:
    """``--numa-node-list``: the GPU and NIC plugins' choice of the standard numaNode's form."""
    parser.add_argument("--numa-node-list", action="store_true",
                        help="publish resource.kubernetes.io/numaNode in its list form: the "
                             "device's NUMA node, then the equidistant NUMA nodes of its socket "
                             "(KEP-5491; needs DRAListTypeAttributes, Kubernetes 1.36+)")


def add_plugin_node(parser: argparse.ArgumentParser, *, pool: bool = True) -> None:
    """A kubelet plugin's ``--node``: the node it serves (``pool``: its pool is named so)."""
    also = ", also the pool name" if pool else ""
    add_node(parser, dest="node_name", default=os.environ.get("NODE_NAME", ""),
             help=f"this node's name{also} (default: $NODE_NAME)", old=("--node-name",))


def add_in_cluster_kubeconfig(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` of a process that runs in the cluster (a plugin, a controller)."""
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="kubeconfig (default: in-cluster service account, else $KUBECONFIG)")


def add_kubelet_plugin(parser: argparse.ArgumentParser, *, state: str,
                       instance_id: bool = True) -> None:
    """What every kubelet plugin here takes: where the kubelet and the runtime look, where
    its claim records live (``state`` says what it keeps there), and for those that roll
    over with two instances serving, ``--instance-id``."""
    add_in_cluster_kubeconfig(parser)
    parser.add_argument("--kubelet-root", type=Path, default=Path("/var/lib/kubelet"),
                        help="the kubelet's root dir, holding plugins_registry/ and plugins/ "
                             "(default: %(default)s)")
    parser.add_argument("--cdi-root", type=Path, default=Path("/var/run/cdi"),
                        help="where the container runtime reads CDI specs (default: %(default)s)")
    if instance_id:
        parser.add_argument("--instance-id", default=os.environ.get("POD_UID", ""),
                            help="unique per instance (the pod UID): sockets get unique names "
                                 "so two instances serve during a rolling update "
                                 "(default: $POD_UID)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help=f"{state} (default: <kubelet-root>/plugins/<driver>)")


def _format(text: str) -> str:
    value = _OLD_FORMATS.get(text, text)
    if value not in FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(FORMATS)}")
    return value


def add_output(parser: argparse.ArgumentParser, *, table: str = "for people") -> None:
    """``-o/--output table|json|yaml`` (dest ``output``); ``--format`` hidden."""
    parser.add_argument("-o", "--output", type=_format, choices=FORMATS, default="table",
                        help=f"table: {table}; json, yaml: the same data for programs "
                             "(default: %(default)s)")
    parser.add_argument("--format", dest="output", type=_format, choices=FORMATS,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def emit(data: Any, output: str, table: Callable[[], object]) -> None:
    """Print ``data`` as ``output`` says: JSON, YAML (pyyaml's safe_dump), or ``table()``."""
    if output == "json":
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        table()
