"""A fleet's simulated nodes inside an embedded cluster: KWOK and the fleet publisher.

Both are host processes of the cluster, recorded in its state like the kubelets, under
``<cluster>/fleet/``: ``kwok.yaml`` (the stages), ``nvml/<node>.state`` (one NVML state per
simulated node, what ``fakegpu fault --cluster`` edits) and ``logs/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from fakegpu import fsutil
from fakegpu.cluster.process import ProcessRecord, WaitPolicy, is_alive, spawn, wait_until
from fakegpu.errors import FakegpuError
from fakegpu.fleet import nodes, run, stages
from fakegpu.kube import api as kubeapi
from fakegpu.topology.model import Topology

# Their processes' keys in the cluster state (state.process_key).
KWOK = "kwok"
PUBLISHER = "fleet-publisher"
KWOK_LEASE_S = 40  # the kubelet's default node lease: the node controller's grace fits it


def fleet_dir(root: Path) -> Path:
    return root / "fleet"


def state_dir(root: Path) -> Path:
    return fleet_dir(root) / "nvml"


def state_path(root: Path, node: str) -> Path:
    return state_dir(root) / f"{node}.state"


def kwok_argv(kwok: Path, kubeconfig: Path, config: Path, pod_cidr: str, node_ip: str
              ) -> list[str]:
    return [str(kwok), f"--kubeconfig={kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={nodes.KWOK_SELECTOR}",
            f"--node-lease-duration-seconds={KWOK_LEASE_S}",
            f"--cidr={pod_cidr}", f"--node-ip={node_ip}"]


def start(root: Path, kubeconfig: Path, topology_file: Path, topology: Topology, driver: str,
          kwok: Path, pod_cidr: str, node_ip: str,
          record: Callable[[ProcessRecord], object]) -> None:
    """Create the simulated Node objects, then start KWOK and the fleet publisher.

    ``record`` saves each process in the cluster state as soon as it exists (``down`` must
    find it whatever happens next)."""
    where = fleet_dir(root)
    config = where / "kwok.yaml"
    fsutil.atomic_write(config, stages.config_text())
    with kubeapi.session(kubeconfig) as api:
        nodes.create(api, topology.simulated_nodes)
    record(spawn(KWOK, kwok_argv(kwok, kubeconfig, config, pod_cidr, node_ip),
                 where / "logs" / "kwok.log"))
    argv, env = run.command(kubeconfig, topology_file.resolve(), state_dir(root), driver)
    record(spawn(PUBLISHER, argv, where / "logs" / "publisher.log",
                 env={**os.environ, **env}))


def check_publisher(rec: ProcessRecord | None, cluster: str) -> None:
    """FakegpuError (exit 1, one line) unless the recorded fleet publisher runs: only it
    carries a simulated node's NVML state (a fault) to the node's ResourceSlices."""
    if rec is not None and is_alive(rec):
        return
    which = f"pid {rec.pid}, log {rec.log}" if rec is not None else "none recorded"
    raise FakegpuError(f"cluster {cluster!r}: the fleet publisher is not running ({which}), so "
                       "a fault on a simulated node would reach no ResourceSlice; recreate "
                       "the cluster (fakegpu cluster down, then up)")


def ready(kubeconfig: Path, names: Sequence[str], driver: str) -> tuple[int, int]:
    """(simulated nodes Ready, simulated nodes with a whole slice pool)."""
    wanted = set(names)
    with kubeapi.session(kubeconfig) as api:
        listed = kubeapi.get_json(api, f"/api/v1/nodes?labelSelector={nodes.SIMULATED_LABEL}"
                                       "%3Dtrue")
        up = sum(1 for n in listed.get("items") or []
                 if n["metadata"]["name"] in wanted and kubeapi.is_ready(n))
        pools = kubeapi.complete_pools(kubeapi.resource_slices(api, driver=driver))
    return up, len(pools & wanted)


def wait_ready(kubeconfig: Path, names: Sequence[str], driver: str, policy: WaitPolicy,
               watch: Sequence[ProcessRecord]) -> None:
    """Until every simulated node is Ready (KWOK) and has its whole pool (the publisher)."""
    total = len(names)
    # Each look lists every simulated Node and slice: seldom for a big fleet.
    policy = WaitPolicy(policy.timeout, max(policy.interval, total / 200))
    wait_until(f"{total} simulated nodes Ready with their ResourceSlices (KWOK, fleet "
               "publisher)", lambda: ready(kubeconfig, names, driver) == (total, total),
               policy, watch=watch)


def kwok_binary(console: Console) -> Path:
    from fakegpu.cluster.artifacts import kwok

    return kwok.ensure(console=console)


def _pool_gone(kubeconfig: Path, node: str, driver: str) -> bool:
    with kubeapi.session(kubeconfig) as api:
        return not kubeapi.resource_slices(api, driver=driver, node=node)


def stop_node(kubeconfig: Path, node: str, driver: str, policy: WaitPolicy) -> None:
    """NotReady at once, slices withdrawn by the fleet publisher (waited for)."""
    with kubeapi.session(kubeconfig) as api:
        nodes.stop(api, node)
    wait_until(f"simulated node {node}'s ResourceSlices withdrawn (fleet publisher)",
               lambda: _pool_gone(kubeconfig, node, driver), policy)


def start_node(kubeconfig: Path, node: str, driver: str, policy: WaitPolicy) -> None:
    """Back to KWOK; returns once it is Ready with its whole pool again."""
    with kubeapi.session(kubeconfig) as api:
        nodes.start(api, node)
    wait_until(f"simulated node {node} Ready with its ResourceSlices",
               lambda: ready(kubeconfig, [node], driver) == (1, 1), policy)
