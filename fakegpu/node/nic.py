"""The NIC plugin container's entrypoint (kind, the Helm chart): the node's sysfs view of its
PCIe tree, found or rendered beside the NVML state as the GPU plugin's entrypoint does (the
same hostPath, so a nic-link-down fault injected there is seen here), then exec
``fakegpu nic run`` with ``FAKEGPU_SYSFS`` pointing at it.

A node whose topology has no PCIe tree has no view; the plugin would then read the node's
real /sys, and a host NIC is not the topology's. So nothing is exec'd: the container says so
once and waits for its SIGTERM (a DaemonSet pod must keep running; it serves no driver).

Usage: ``python -m fakegpu.node.nic [PLUGIN ARGS...]``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    from fakegpu.errors import FakegpuError
    from fakegpu.node.entrypoint import exec_fakegpu, nic_plugin_args, plugin_env, topology_args
    from fakegpu.nvml.sysfs import SYSFS_ENV

    try:
        env, node = plugin_env(os.environ)
        argv = [*topology_args(os.environ, node, nic_plugin_args), *argv]
    except FakegpuError as err:
        print(f"fakegpu nic entrypoint: {err}", file=sys.stderr)
        return err.exit_code
    if not env.get(SYSFS_ENV):
        # Blocked first: PID 1 of a container has no default action for SIGTERM to rely on,
        # and one that comes before the wait must still end it.
        stop = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        print(f"fakegpu nic entrypoint: node {node} has no PCIe tree in the topology: "
              "no NICs to serve", file=sys.stderr, flush=True)
        signal.sigwait(stop)
        return 0
    return exec_fakegpu("nic entrypoint", f"node {node}, sysfs {env[SYSFS_ENV]}", env, "nic",
                        "run", "--node", node, *argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
