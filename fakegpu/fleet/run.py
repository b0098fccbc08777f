"""``python -m fakegpu.fleet.run``: the fleet slice publisher as a long-running process.

Started by ``fakegpu cluster up`` for a fleet topology (with the fake libnvidia-ml.so.1 on
the loader path: ``command`` gives the environment); on another cluster it runs the same
way wherever the topology and a kubeconfig are (docs/scale.md).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from fakegpu import drivers
from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.kubeletplugin.kube import Kube
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state as nvml_state
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology

from .publisher import FleetPublisher, SimNode

log = logging.getLogger("fakegpu.fleet")


def state_files(topology: Topology, state_dir: Path, *, fresh: bool = False) -> list[SimNode]:
    """Each simulated node's NVML state file under ``state_dir``, rendered when missing."""
    state_dir.mkdir(parents=True, exist_ok=True)
    sims = []
    for node in topology.simulated_nodes:
        path = state_dir / f"{node.name}.state"
        if fresh or not path.is_file():
            nvml_state.render(topology, node.name, path)
        sims.append(SimNode(node, path))
    return sims


def command(kubeconfig: Path, topology: Path, state_dir: Path, driver: str
            ) -> tuple[list[str], dict[str, str]]:
    """argv and the extra environment of the publisher process (the library's path)."""
    topo = load_topology(topology)
    sims = state_files(topo, state_dir)
    if not sims:
        raise InvalidInput(f"{topology}: no simulated nodes (nodes[].simulated: true)")
    env = nvml_env.env(sims[0].state)
    argv = [sys.executable, "-m", "fakegpu.fleet.run", "--kubeconfig", str(kubeconfig),
            "--topology", str(topology), "--state-dir", str(state_dir), "--driver", driver]
    return argv, env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakegpu.fleet.run",
                                     description="Publish a fleet's simulated nodes' slices.")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--driver", default=drivers.DEFAULT)
    parser.add_argument("--once", action="store_true", help="one full pass, then exit")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        sims = state_files(load_topology(args.topology), args.state_dir)
        kube = Kube(args.kubeconfig)
        from fakegpu.kube import api as kubeapi

        from . import nodes

        admin = kubeapi.connect(args.kubeconfig)
        fleet = FleetPublisher(sims, kube, args.driver, lambda: nodes.stopped(admin),
                               workers=args.workers)
        if args.once:
            fleet.sync_all()
            return 0
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        log.info("fleet publisher: %d simulated nodes, driver %s", len(sims), args.driver)
        fleet.run(stop)
        return 0
    except FakegpuError as err:
        print(f"fakegpu fleet: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
