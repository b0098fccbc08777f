"""The one interface every cluster provider implements (``embedded/``, ``kind/``).

A provider only provisions, lists, deletes and collects logs; the create/delete flow above it
(validation, the exists check, progress, state first, logs and cleanup on failure) is written
once, in ``lifecycle.py``. The CLI, ``fakegpu demo`` and the pytest plugin talk to that flow
(``fakegpu.cluster.get_provider``), so they do not know which provider runs them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fakegpu import drivers

if TYPE_CHECKING:
    from fakegpu.cluster.driverchart import DriverChart
    from fakegpu.cluster.external import ExternalPlugin
    from fakegpu.cluster.upgrade import Target
    from fakegpu.topology.model import Topology

# Node -> the plugin instances alive there: {"version", "instance", "role"} each.
PluginInstances = dict[str, list[dict[str, str]]]


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
    nic_driver: str = drivers.NIC  # the NIC plugin's driver name; "": no NIC plugin runs

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
            "nic_driver": self.nic_driver or None,
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


@dataclass(frozen=True)
class ClusterSpec:
    """What to create, validated once by the lifecycle and handed to the provider."""

    name: str
    topology_file: Path  # absolute
    topology: Topology  # loaded once, from topology_file
    k8s_version: str  # the pinned patch release, e.g. "1.37.2"
    driver: str = "gpu.fakegpu.dev"  # the DRA driver name the plugins register as
    plugin: ExternalPlugin | None = None  # another vendor's plugin (--plugin-bin), embedded
    image_aliases: tuple[str, ...] = ()  # normalized names the workload image also gets
    nic_driver: str = drivers.NIC  # the NIC plugin's driver (drivers.NIC_CHOICES); "": none
    chart: DriverChart | None = None  # another vendor's driver as a Helm chart (--plugin-chart)


@dataclass(frozen=True)
class Action:
    """One named step of a bring-up; the lifecycle shows one status line per action."""

    title: str
    run: Callable[[], None]


class ClusterRecord(Protocol):
    """A provider's state file of one cluster: what its ``delete`` works from."""

    phase: str  # "creating" -> "ready" (the last action sets it); "failed"

    def save(self) -> None:
        """Write it atomically (another process may read it at any moment)."""
        ...


class Provisioning(Protocol):
    """One bring-up in progress, made by ``Provider.provision``."""

    @property
    def state(self) -> ClusterRecord:
        """Saved by the lifecycle before any action, so ``delete`` knows the cluster."""
        ...

    def actions(self) -> Sequence[Action]:
        """The ordered actions that make the cluster; the last one marks it ready."""
        ...


class Provider(Protocol):
    """What a cluster provider implements; ``lifecycle.Lifecycle`` drives it."""

    name: str  # "embedded" | "kind"

    def exists(self, name: str) -> bool:
        """Whether anything of a cluster of that name is there (a leftover counts)."""
        ...

    def check_host(self, spec: ClusterSpec) -> None:
        """Refuse at once, before anything is made, what this host cannot run."""
        ...

    def provision(self, spec: ClusterSpec) -> Provisioning:
        """The bring-up of ``spec``: state to record and actions to run."""
        ...

    def delete(self, name: str) -> None:
        """Remove everything a bring-up made (processes, mounts, interfaces, cgroups, files,
        containers). Idempotent, and safe after a crashed or failed bring-up."""
        ...

    def status(self, name: str) -> ClusterInfo | None:
        """The cluster's description, or None if there is none of that name."""
        ...

    def healthy(self, name: str) -> bool:
        """Ready, every component running, every node Ready in the apiserver."""
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

    def restart_plugin(self, name: str, node: str) -> None:
        """Stop the node's GPU plugin as the kubelet stops a deleted plugin pod (SIGTERM, its
        grace), start it again and return once it serves (its slices published); its pods
        and their prepared claims stay."""
        ...

    def upgrade_plugin(self, name: str, target: Target,
                       say: Callable[[str], None] = ...) -> list[str]:
        """Roll every worker's plugin to ``target`` (version, strategy), node by node, as the
        DaemonSet does (``fakegpu.cluster.embedded.pluginupgrade``); the nodes it changed.
        UpgradeStalled when a new instance never becomes ready (the old one keeps serving).
        """
        ...

    def upgrade_kubernetes(self, name: str, version: str,
                           say: Callable[[str], None] = ...) -> list[str]:
        """Move the running cluster to Kubernetes ``version`` (one minor away, cached): the
        control plane, then the kubelets node by node (a downgrade in the reverse order),
        pods and plugins left running (``fakegpu.cluster.embedded.k8supgrade``); what it
        changed. InvalidInput for a version not supported or not one minor away, or a
        provider that cannot; MissingPrerequisite for one not cached."""
        ...

    def plugin_instances(self, name: str) -> PluginInstances:
        """Node -> the plugin instances alive there now (an upgrade overlaps two): the
        embedded provider's processes, kind's DaemonSet pods that are not gone yet."""
        ...

    def tag_images(self, name: str, names: Sequence[str]) -> None:
        """The cluster's workload image under ``names`` (normalized) too, on every node
        that runs pods (``imagealiases.py``); tagging again is harmless."""
        ...

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]:
        """Run ``fakegpu <args> --state <node's NVML state>`` where that state lives.

        The state the node's plugin and pods really use: a file on this host (embedded), the
        file its fake node pod keeps (kind). Output and exit code are the command's; a
        cluster or node that has none is InvalidInput.
        """
        ...


class Clusters(Protocol):
    """What the CLI, ``fakegpu demo`` and the pytest plugin use: ``lifecycle.Lifecycle``."""

    @property
    def name(self) -> str:
        """The provider's name."""
        ...

    def up(self, name: str, topology: Path, k8s_version: str | None, *,
           driver: str = "fakegpu", plugin: ExternalPlugin | None = None,
           image_aliases: Sequence[str] = (), nic_driver: str = drivers.NIC_DEFAULT_KEY,
           chart: DriverChart | None = None) -> ClusterInfo:
        """Create the cluster; return once every node is Ready and every node's slices exist.

        ``driver`` (``fakegpu.cluster.DRIVERS``) is who its plugins are, ``plugin`` another
        vendor's kubelet plugin to run instead of (or beside) fakegpu's, ``image_aliases``
        names the workload image gets too, ``nic_driver`` (a ``drivers.NIC_CHOICES`` key)
        who its NIC plugin is, or none, ``chart`` another vendor's driver installed by its
        own Helm chart over fake GPU nodes (kind): all of it goes to the provider in the spec.

        A leftover cluster of the same name is an error naming `fakegpu cluster down`.
        On failure, the logs are saved and everything made so far is removed before the error
        propagates (unless told to retain it).
        """
        ...

    def down(self, name: str) -> None:
        """Remove everything `up` made. Idempotent."""
        ...

    def status(self, name: str) -> ClusterInfo | None: ...

    def healthy(self, name: str) -> bool: ...

    def logs(self, name: str, out: Path) -> list[Path]: ...

    def stop_node(self, name: str, node: str) -> None: ...

    def start_node(self, name: str, node: str) -> None: ...

    def restart_plugin(self, name: str, node: str) -> None: ...

    def upgrade_plugin(self, name: str, target: Target,
                       say: Callable[[str], None] = ...) -> list[str]: ...

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]: ...

    def upgrade_kubernetes(self, name: str, version: str,
                           say: Callable[[str], None] = ...) -> list[str]: ...

    def plugin_instances(self, name: str) -> PluginInstances: ...

    def tag_images(self, name: str, names: Sequence[str]) -> None: ...

    def down_command(self, name: str) -> str:
        """The command that removes cluster ``name``: the one spelling of the hint."""
        ...
