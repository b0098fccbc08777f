"""The bandwidth job as the e2e suites run it: one worker pod per node holding all the node's
GPUs (and, with a ComputeDomain, the domain's IMEX channel), the launcher over them, and the
figures the rules (``fakegpu.bandwidth.model``) give for the topology, to compare with.

Shared by the gb200-mini suite and the full-rack one, so both start their workers and derive
their expectations the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client as kclient

from fakegpu.bandwidth import launcher, model
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.topology.model import Topology

from . import k8s
from .dra import (
    PodClaim,
    ResourceApi,
    allocation_results,
    attribute_value,
    pod_claim_name,
    pod_manifest,
    published_device,
)

GPU_TEMPLATE = "all-gpus"
WORKER_LABELS = {"app.kubernetes.io/name": "nvbandwidth"}  # the launcher's selector


def worker_name(node: str) -> str:
    return f"bw-{node}"


def start_workers(cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
                  namespace: str, topology: Topology, *, channel_template: str | None = None,
                  timeout: float = 180.0) -> list[Any]:
    """One pod per node of ``topology`` holding all the node's GPUs (and a channel of
    ``channel_template``, a ComputeDomain's); once all run, the pods in rank order."""
    api.create("resourceclaimtemplates", api.claim_template(GPU_TEMPLATE, [
        api.device_request("gpus", cluster.driver_name, count=len(topology.nodes[0].gpus))]),
        namespace)
    claims = [PodClaim("gpus", template=GPU_TEMPLATE)]
    if channel_template is not None:
        claims.append(PodClaim("imex", template=channel_template))
    for node in topology.nodes:
        pod = pod_manifest(worker_name(node.name), cluster.workload_image, ["sleep", "3600"],
                           claims, labels=dict(WORKER_LABELS))
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
        k8s.create_pod(core, namespace, pod)
    for node in topology.nodes:
        k8s.wait_pod_running(core, namespace, worker_name(node.name), timeout=timeout)
    return launcher.worker_pods(core, namespace)


def allocated_uuids(cluster: ClusterInfo, api: ResourceApi, namespace: str,
                    pods: list[Any]) -> list[str]:
    """The GPU UUIDs the pods' claims got, as the slices publish them, in node/index order."""
    out = []
    for pod in pods:
        claim = api.claim(namespace, pod_claim_name(pod, "gpus"))
        devices = [published_device(api, cluster.driver_name, r["pool"], r["device"])
                   for r in allocation_results(claim, cluster.driver_name)]
        devices.sort(key=lambda d: int(attribute_value(d, "index")))
        out += [str(attribute_value(d, "uuid")) for d in devices]
    return out


def expected(topology: Topology, nodes: Sequence[str] | None = None, **kwargs: Any
             ) -> tuple[list[Any], list[Any]]:
    """The figures and path names the rules give for ``topology``, the GPUs in the order of
    ``nodes`` (the job's rank order: its pods' nodes; default the topology's order), each
    node's by index. ``kwargs`` as ``model.topology_views`` takes them: the job's
    ComputeDomain, degraded GPUs."""
    views = model.topology_views(topology, **kwargs)
    if nodes is not None:
        rank = {name: i for i, name in enumerate(nodes)}
        if set(rank) != {v.node for v in views}:
            raise ValueError(f"the job's nodes {sorted(rank)} are not the topology's")
        views.sort(key=lambda v: rank[v.node])  # stable: index order within a node
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    return values, [[p.value for p in row] for row in paths]


def run(core: kclient.CoreV1Api, namespace: str, pods: list[Any],
        topology: Topology) -> dict[str, Any]:
    """The job over ``pods`` at the topology's network and NIC speeds: the merged results."""
    return launcher.run(core, namespace, pods, network_gbps=topology.network.gbps_per_gpu,
                        nic_gbps=model.nic_rates(topology))
