"""The one interface every cluster provider implements (embedded now, kind later).

Suites and the CLI only talk to this protocol, so they do not know which provider runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class NodeInfo:
    name: str
    role: str  # "control-plane" | "worker"
    nvml_state: Path | None  # the node's fake NVML state file (workers with GPUs)
    cdi_dir: Path | None  # where that node's plugin writes CDI specs
    plugin_state_dir: Path | None  # the plugin's checkpoint directory on that node
    kubelet_root: Path | None
    running: bool = True


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    provider: str  # "embedded" | "kind"
    k8s_version: str  # e.g. "1.37.2"
    kubeconfig: Path
    topology: Path
    driver_name: str  # the DRA driver name the plugins publish, e.g. "gpu.fakegpu.dev"
    workload_image: str  # a local image pods can run, with a shell
    nodes: tuple[NodeInfo, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "provider": self.provider,
            "k8s_version": self.k8s_version,
            "kubeconfig": str(self.kubeconfig),
            "topology": str(self.topology),
            "driver_name": self.driver_name,
            "workload_image": self.workload_image,
            "nodes": [
                {
                    "name": n.name,
                    "role": n.role,
                    "running": n.running,
                    "nvml_state": str(n.nvml_state) if n.nvml_state else None,
                    "cdi_dir": str(n.cdi_dir) if n.cdi_dir else None,
                    "plugin_state_dir": str(n.plugin_state_dir) if n.plugin_state_dir else None,
                    "kubelet_root": str(n.kubelet_root) if n.kubelet_root else None,
                }
                for n in self.nodes
            ],
            **self.extra,
        }


class Provider(Protocol):
    """What `fakegpu cluster ...` and the pytest plugin need from a provider."""

    name: str  # "embedded" | "kind"

    def up(self, name: str, topology: Path, k8s_version: str | None) -> ClusterInfo:
        """Create the cluster; return once every node is Ready and every node's slices exist.

        A leftover cluster of the same name is an error naming `fakegpu cluster down`.
        On failure, everything made so far is removed before the error propagates.
        """
        ...

    def down(self, name: str) -> None:
        """Remove everything `up` made (processes, mounts, interfaces, cgroups, files).

        Idempotent.
        """
        ...

    def status(self, name: str) -> ClusterInfo | None:
        """The running cluster's description, or None if there is none of that name."""
        ...

    def logs(self, name: str, out: Path) -> list[Path]:
        """Copy every component's logs into ``out``; return the files written."""
        ...

    def stop_node(self, name: str, node: str) -> None:
        """Stop a worker's kubelet, runtime and plugin (the node goes NotReady).

        Its state (files, running containers) is kept.
        """
        ...

    def start_node(self, name: str, node: str) -> None:
        """Start a stopped worker again and wait until it is Ready."""
        ...
