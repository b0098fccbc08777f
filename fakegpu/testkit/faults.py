"""Faults on a running cluster's GPUs, by node name, on any provider (the test kit's
``fakegpu fault inject|clear --cluster C --node N`` and ``fakegpu smi --cluster C --node N``).

A suite never needs to know where a node's NVML state lives: the provider runs the change
where the node's plugin and pods see it (``fakegpu.cluster.nodenvml``).
"""

from __future__ import annotations

import json
from typing import Any

from fakegpu.cluster import nodenvml
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.errors import FakegpuError


class FaultCommandFailed(FakegpuError):
    """The node's ``fakegpu`` command refused or failed; the message is its own."""


def _run(cluster: ClusterInfo, node: str, args: list[str]) -> str:
    res = nodenvml.run(cluster.name, node, args, cluster.provider)
    if res.returncode != 0:
        out = (res.stderr or res.stdout).strip()
        raise FaultCommandFailed(f"`fakegpu {' '.join(args)}` on node {node} of "
                                 f"{cluster.name} exited {res.returncode}: {out}")
    return res.stdout


def inject(cluster: ClusterInfo, node: str, gpu: int, kind: str,
           value: int | None = None) -> None:
    """Inject ``kind`` (xid VALUE, ecc-dbe, gpu-lost, nvlink-down LINK, fabric-degraded) into
    GPU ``gpu`` (NVML index) of ``node``."""
    _run(cluster, node, nodenvml.fault_args("inject", gpu, kind, value))


def clear(cluster: ClusterInfo, node: str, gpu: int, kind: str | None = None,
          value: int | None = None) -> None:
    """Clear one kind of fault of GPU ``gpu`` of ``node`` (every fault without ``kind``)."""
    _run(cluster, node, nodenvml.fault_args("clear", gpu, kind, value))


def nic_link(cluster: ClusterInfo, node: str, nic: str, up: bool) -> None:
    """``nic-link-down`` on NIC ``nic`` (interface name) of ``node``, or its clearing."""
    _run(cluster, node, nodenvml.fault_args("clear" if up else "inject", None,
                                            None if up else "nic-link-down", None, nic))


def smi(cluster: ClusterInfo, node: str) -> str:
    """The node's ``fakegpu smi`` view, read through NVML where the node's plugin reads it."""
    return _run(cluster, node, ["smi"])


def smi_view(cluster: ClusterInfo, node: str) -> dict[str, Any]:
    """The node's ``fakegpu smi -o json``: the same NVML answers as data (the table is fitted
    to a terminal, not meant to be parsed)."""
    out = _run(cluster, node, ["smi", "-o", "json"])
    try:
        view = json.loads(out)
        if isinstance(view, dict) and isinstance(view.get("gpus"), list):
            return view
    except ValueError:
        pass
    raise FaultCommandFailed(f"node {node} of {cluster.name}: `fakegpu smi -o json` gave no "
                             f"GPU list:\n{out[-800:]}")


def gpu_index(cluster: ClusterInfo, node: str, uuid: str) -> int:
    """The NVML index (what ``inject`` takes) of the GPU with ``uuid`` on ``node``: what a pod
    sees (``NVIDIA_VISIBLE_DEVICES``) or a slice publishes (``uuid``), looked up in ``smi``."""
    gpus = smi_view(cluster, node)["gpus"]
    for gpu in gpus:
        if gpu.get("uuid") == uuid:
            return int(gpu["index"])
    raise FaultCommandFailed(f"node {node} of {cluster.name} has no GPU {uuid}: "
                             f"{[g.get('uuid') for g in gpus]}")
