"""A fake GPU node for any DRA driver: what the chart's node DaemonSet (``fakeNodes.enabled``)
runs on every node, so that a third-party driver installed by its own chart finds GPUs there.

It renders the node's NVML state from the topology (by ``NODE_NAME``, kept across restarts
while the topology is the same, as the plugin's entrypoint does, in the same hostPath) and
builds the NVIDIA host a driver expects in ``--host-dir`` (``nvidiahost``): the driver root
(``driver/``: ``libnvidia-ml.so.<version>``, ``nvidia-smi``, device nodes, the state among its
firmware files, where the fake library looks when no variable names the state) and the
``proc/`` files a driver reads for MIG. Then it serves ``GET /readyz`` (the pod's readiness:
the kubelet asks over HTTP, nothing is started in the container) and follows the state until
SIGTERM: a replaced state is linked in again, MIG capability files come and go with the
instances.

The state and the host directory must be on one filesystem (the state is hard-linked into
the driver root): the chart mounts one hostPath holding both.

Usage: ``python -m fakegpu.node.host --host-dir DIR [--probe-port PORT]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

POLL_SECONDS = 1.0  # how late a capability file may follow a MIG change made in a pod


def _say(text: str) -> None:
    print(f"fakegpu node host: {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    from fakegpu import nvidiasmi
    from fakegpu.errors import FakegpuError
    from fakegpu.node import nvidiahost as nh
    from fakegpu.node.entrypoint import plugin_env
    from fakegpu.nvml import env as nvml_env
    from fakegpu.plugin.probe import ReadinessEndpoint

    parser = argparse.ArgumentParser(prog="python -m fakegpu.node.host")
    parser.add_argument("--host-dir", type=Path, required=True,
                        help="where the NVIDIA host is built (driver/ is the driver root)")
    parser.add_argument("--probe-port", type=int, default=None,
                        help="serve GET /readyz on this port once the host is built")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    host = nh.HostDir(args.host_dir)
    try:
        env, node = plugin_env(os.environ)
        state = Path(env["FAKEGPU_NVML_STATE"])
        facts = nh.read_facts(state)
        nh.build(host, facts, library=nvml_env.library_path(), nvidia_smi=nvidiasmi.path(),
                 host_proc_devices=Path("/proc/devices").read_text(), state=state)
    except FakegpuError as err:  # one line in the pod's log, not a traceback
        _say(str(err))
        return err.exit_code
    _say(f"node {node}: driver root {host.driver_root} (driver {facts.driver_version}, "
         f"{len(facts.gpus)} GPUs), NVML state {state}")
    probe = None if args.probe_port is None else ReadinessEndpoint(
        lambda: (True, f"driver root {host.driver_root} built"), args.probe_port)
    try:
        nh.follow(host, state, (nh.read_generation(state)[0], facts.generation),
                  lambda: not stop.is_set(), _say, POLL_SECONDS)
    finally:
        if probe is not None:
            probe.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
