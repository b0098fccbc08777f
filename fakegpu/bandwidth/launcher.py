"""The MPI-style launcher of the bandwidth job: one worker pod per node, already running
(with their GPU claims, and a ComputeDomain channel claim when the job uses one). Like
``mpirun`` over ssh, it starts one rank in each pod through the apiserver's exec stream,
passing every rank the pod network addresses of its peers (rank 0 first: the rendezvous);
the ranks exchange what NVML shows them over the pod network, and each prints its rows.
The launcher merges them into one results document (``results.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client as kclient

from fakegpu.errors import FakegpuError
from fakegpu.kube import pods as kpods
from fakegpu.wait import NotYet

from .program import IN_IMAGE
from .results import merge

PORT = 29500  # rank 0's rendezvous port (PyTorch's and many MPI launchers' default)
LABEL = "app.kubernetes.io/name=nvbandwidth"  # the example's worker pods


class JobFailed(FakegpuError):
    """A rank failed or printed no results."""


def with_image(objects: list[dict[str, Any]], image: str) -> list[dict[str, Any]]:
    """``objects`` with each container image of fakegpu's workload repository (any tag or
    none) replaced by ``image``, the cluster's own (nothing can be pulled)."""
    repo = image.rsplit(":", 1)[0]

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v) for k, v in node.items()}
            if isinstance(out.get("image"), str) and out["image"].split(":")[0] == repo:
                out["image"] = image
            return out
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return [fix(o) for o in objects]


def wait_workers(core: kclient.CoreV1Api, namespace: str, count: int,
                 selector: str = LABEL, timeout: float = 180.0) -> list[Any]:
    """``worker_pods`` once ``count`` of them run."""

    def ready() -> list[Any]:
        try:
            pods = worker_pods(core, namespace, selector)
        except JobFailed as err:
            raise NotYet(str(err)) from None
        if len(pods) != count:
            raise NotYet(f"{len(pods)} of {count} worker pods")
        return pods

    return kpods.poll(ready, what=f"{count} worker pods running in {namespace}", timeout=timeout)


def worker_pods(core: kclient.CoreV1Api, namespace: str, selector: str = LABEL) -> list[Any]:
    """The running worker pods of ``selector``, in node name order (rank order)."""
    pods: list[Any] = core.list_namespaced_pod(namespace, label_selector=selector).items
    if not pods:
        raise JobFailed(f"no pods match {selector!r} in namespace {namespace}")
    waiting = [p.metadata.name for p in pods if p.status.phase != "Running" or not p.status.pod_ip]
    if waiting:
        raise JobFailed(f"pods not running yet in {namespace}: {', '.join(sorted(waiting))}")
    nodes = [p.spec.node_name for p in pods]
    if len(set(nodes)) != len(nodes):
        raise JobFailed(f"pods of {selector!r} share nodes ({', '.join(sorted(nodes))}): the "
                        "job runs one pod per node")
    return sorted(pods, key=lambda p: p.spec.node_name)


def command(rank: int, addresses: Sequence[str], node: str, *, port: int = PORT,
            network_gbps: float | None = None, nic_gbps: Mapping[str, float] | None = None,
            timeout: int = 60) -> list[str]:
    """The command line of ``rank`` (``addresses``: the pod IPs in rank order; ``nic_gbps``:
    GPU UUID -> its compute NIC's speed, ``model.nic_rates``)."""
    peers = ",".join(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses)
    cmd = [IN_IMAGE, "--rank", str(rank), "--peers", peers, "--port", str(port),
           "--node", node, "--timeout", str(timeout)]
    if network_gbps is not None:
        cmd += ["--network-gbps", f"{network_gbps:g}"]
    if nic_gbps:
        cmd += ["--nic-gbps", ",".join(f"{u}={g:g}" for u, g in sorted(nic_gbps.items()))]
    return cmd


def run(core: kclient.CoreV1Api, namespace: str, pods: Sequence[Any], *,
        network_gbps: float | None = None, nic_gbps: Mapping[str, float] | None = None,
        port: int = PORT, timeout: int = 60) -> dict[str, Any]:
    """Run one rank per pod of ``pods`` (rank order) at once; the merged results."""
    addresses = [p.status.pod_ip for p in pods]

    def one(rank: int) -> dict[str, Any]:
        pod = pods[rank]
        cmd = command(rank, addresses, pod.spec.node_name, port=port,
                      network_gbps=network_gbps, nic_gbps=nic_gbps, timeout=timeout)
        # A client per rank: the client's exec stream swaps a method of its ApiClient while
        # it connects, which concurrent execs through one client would leave swapped.
        with kclient.ApiClient(core.api_client.configuration) as own:
            res = kpods.exec_(own, namespace, pod.metadata.name, cmd, timeout=timeout + 30,
                              check=False)
        if res.returncode != 0:
            raise JobFailed(f"rank {rank} in pod {namespace}/{pod.metadata.name} exited "
                            f"{res.returncode}: {res.stderr.strip()[-400:]}")
        try:
            out: dict[str, Any] = json.loads(res.stdout)
        except json.JSONDecodeError:
            raise JobFailed(f"rank {rank} in pod {namespace}/{pod.metadata.name} printed no "
                            f"JSON: {res.stdout.strip()[:200]!r}") from None
        return out

    # Every rank at once: rank 0 waits for the others to reach it.
    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        outputs = list(pool.map(one, range(len(pods))))
    return merge(outputs)
