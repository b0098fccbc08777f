"""The plugin pod's readiness probe: ready once this instance serves both of its sockets.

Why it matters: a DaemonSet rolling update with maxSurge deletes the old pod as soon as the new
one is Ready. Without a probe "Ready" means "container started", before the new instance has
its sockets; the old instance then finds no other instance on its way out and deletes the
node's ResourceSlices (as the last instance must), and the node has no devices until the new
one republishes. With this probe the old instance sees the new one and leaves them.

Usage: ``python -m fakegpu.node.readiness --driver-name D [--kubelet-root R]``, with the
instance id in $POD_UID as for the plugin. Exit 0 when ready, 1 when not. The same check as the
plugin's own ``GET /readyz`` (``plugin run --probe-port``, fakegpu/plugin/probe.py), which the
chart probes instead: an exec probe starts an interpreter on every node every period.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def ready(kubelet_root: Path, driver: str, instance_id: str) -> tuple[bool, str]:
    from fakegpu.kubeletplugin.sockets import socket_paths
    from fakegpu.plugin.probe import serving

    return serving(socket_paths(kubelet_root, driver, instance_id))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="fakegpu-readiness")
    parser.add_argument("--driver-name", required=True)
    parser.add_argument("--kubelet-root", type=Path, default=Path("/var/lib/kubelet"))
    args = parser.parse_args(argv)
    ok, why = ready(args.kubelet_root, args.driver_name, os.environ.get("POD_UID", ""))
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
