"""The plugin container's entrypoint: render this node's fake NVML, then exec the plugin.

In a cluster every plugin pod runs the same image with the same topology (a ConfigMap); what
makes each worker show its own GPUs is the node name (downward API ``NODE_NAME``): the node's
NVML state is rendered from the topology into a writable directory (a hostPath of the node, so
that faults and MIG instances made at run time outlive a plugin restart or upgrade, as they do on
real hardware; rendered anew when the topology changes) and the plugin is exec'd with the fake
library first on the loader path. A node the topology does not name is an error, not a node
without GPUs: a silent default would let tests pass against the wrong machine.

Usage: ``python -m fakegpu.node.entrypoint [PLUGIN ARGS...]`` (arguments go to
``fakegpu plugin run`` unchanged).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fakegpu.topology.model import Node, Topology

TOPOLOGY_ENV = "FAKEGPU_TOPOLOGY"
STATE_DIR_ENV = "FAKEGPU_NVML_STATE_DIR"
DEFAULT_TOPOLOGY = "/etc/fakegpu/topology.yaml"
DEFAULT_STATE_DIR = "/run/fakegpu"


def plugin_env(environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The environment the plugin runs with and the node it serves; renders the state file."""
    from fakegpu.errors import InvalidInput
    from fakegpu.nvml import env as nvml_env
    from fakegpu.topology.load import load_topology

    node = environ.get("NODE_NAME", "")
    if not node:
        raise InvalidInput("NODE_NAME is not set (give it from the downward API: spec.nodeName)")
    topology = load_topology(environ.get(TOPOLOGY_ENV) or DEFAULT_TOPOLOGY)
    names = [n.name for n in topology.nodes]
    if node not in names:
        raise InvalidInput(f"node {node!r} is not in topology {topology.name!r} "
                           f"(its nodes: {', '.join(names)})")
    state_dir = Path(environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)
    state = keep_or_render(topology, node, state_dir / f"{node}.state",
                           Path(environ.get(TOPOLOGY_ENV) or DEFAULT_TOPOLOGY))
    return {**environ, **nvml_env.env(state)}, node


def keep_or_render(topology: Topology, node: str, path: Path, source: Path) -> Path:
    """The node's NVML state, kept across plugin restarts (an upgrade) while the topology is
    the same: faults and MIG instances made at run time live in it, as on real hardware
    they outlive a driver pod. A changed topology (its digest, kept beside the state) or a
    state of an older layout is rendered anew."""
    import hashlib

    from fakegpu import fsutil
    from fakegpu.nvml import env as nvml_env

    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    marker = path.with_name(path.name + ".topology-sha256")
    try:
        same = marker.read_text().strip() == digest
    except OSError:
        same = False
    state = nvml_env.ensure_state(topology, node, path, fresh=not same)
    if not same:
        fsutil.atomic_write(marker, digest + "\n")
    return state


def nic_plugin_args(node: Node) -> list[str]:
    """The flags a topology node asks of its NIC plugin (and its GPU plugin too): numaNode in
    its list form (``pcie.numa_attribute: list``)."""
    return ["--numa-node-list"] if node.pcie is not None and node.pcie.numa_list else []


def plugin_args(node: Node) -> list[str]:
    """The plugin flags a topology node asks for, the same on every provider: NVIDIA's
    DynamicMIG (``mig.dynamic``), GPUs shared by memory (``shared``) or time-sliced
    (``time_slices``), GPUs attached before use (``attach``) and numaNode's form
    (``nic_plugin_args``)."""
    from fakegpu.topology.model import ATTACH_BROKEN, ATTACH_HOTPLUG

    args = ["--dynamic-mig"] if node.dynamic_mig else []
    args += nic_plugin_args(node)
    if node.shared_minors:
        args.append("--shared-gpus=" + ",".join(map(str, node.shared_minors)))
    if node.time_sliced:
        args.append("--time-sliced-gpus=" + ",".join(f"{m}:{n}" for m, n in node.time_sliced))
    for flag, mode in (("--attach-gpus", ATTACH_HOTPLUG), ("--broken-attach-gpus", ATTACH_BROKEN)):
        if node.attach_minors(mode):
            args.append(f"{flag}=" + ",".join(map(str, node.attach_minors(mode))))
    return args


def topology_args(environ: Mapping[str, str], node: str,
                  flags: Callable[[Node], list[str]] = plugin_args) -> list[str]:
    """``flags`` of ``node`` in the container's topology."""
    from fakegpu.topology.load import load_topology

    return flags(load_topology(environ.get(TOPOLOGY_ENV) or DEFAULT_TOPOLOGY).node(node))


def exec_fakegpu(who: str, what: str, env: Mapping[str, str], *args: str) -> int:
    """Become ``fakegpu ARGS`` (a plugin container's PID 1: exec, not a child, so the plugin
    gets the kubelet's SIGTERM), saying ``what`` in the container's log first."""
    fakegpu = str(Path(sys.executable).with_name("fakegpu"))
    argv = [fakegpu, *args]
    print(f"fakegpu {who}: {what}; exec {' '.join(argv)}", file=sys.stderr, flush=True)
    os.execve(fakegpu, argv, dict(env))
    return 127  # not reached


def main(argv: Sequence[str]) -> int:
    from fakegpu.errors import FakegpuError

    try:
        env, node = plugin_env(os.environ)
        argv = [*topology_args(os.environ, node), *argv]
    except FakegpuError as err:
        print(f"fakegpu entrypoint: {err}", file=sys.stderr)
        return err.exit_code
    return exec_fakegpu("entrypoint", f"node {node}, NVML state {env['FAKEGPU_NVML_STATE']}",
                        env, "plugin", "run", "--node", node, *argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
