"""The embedded provider's protocol methods (``fakegpu.cluster.provider.Provider``).

The work lives beside it: ``bringup.py`` (host check and the ordered actions),
``state.py`` (what is recorded), ``worker.py`` (a node and its components),
``pluginupgrade.py``, ``teardown.py``, ``fleet.py`` (simulated nodes).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from fakegpu.cluster.embedded import (
    bringup,
    fleet,
    k8supgrade,
    pluginupgrade,
    teardown,
    worker,
)
from fakegpu.cluster.embedded.layout import NodeBinaries
from fakegpu.cluster.embedded.state import (
    ClusterState,
    cached_binaries,
    clusters_dir,
    load_ready,
)
from fakegpu.cluster.names import validate_name
from fakegpu.cluster.process import CommandError, WaitPolicy, is_alive, run
from fakegpu.cluster.provider import ClusterInfo, ClusterSpec, NodeInfo, PluginInstances
from fakegpu.cluster.upgrade import Target
from fakegpu.errors import InvalidInput, MissingPrerequisite
from fakegpu.kube import api as kubeapi

# The control plane's processes whose health `status` reports (a fleet's too).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 fleet.KWOK, fleet.PUBLISHER)


class EmbeddedProvider:
    name = "embedded"

    def __init__(self, console: Console | None = None, *,
                 policy: WaitPolicy | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.policy = policy or WaitPolicy(timeout=180.0, interval=0.5)

    def exists(self, name: str) -> bool:
        return (clusters_dir() / validate_name(name)).exists()

    def check_host(self, spec: ClusterSpec) -> None:
        bringup.check_host(spec, self.console)

    def provision(self, spec: ClusterSpec) -> bringup.Bringup:
        return bringup.Bringup(spec, self.console, self.policy)

    def delete(self, name: str) -> None:
        teardown.delete(clusters_dir() / validate_name(name), name, self.console, self.policy)

    def status(self, name: str) -> ClusterInfo | None:
        root = clusters_dir() / validate_name(name)
        try:
            st = ClusterState.load(root)
        except FileNotFoundError:
            return None
        members = [worker.EmbeddedNode(st, n, self.policy) for n in st.nodes]
        nodes = tuple(NodeInfo(
            name=m.name, role="worker", nvml_state=m.layout.nvml_state,
            cdi_dir=m.layout.cdi_dir, plugin_state_dir=m.layout.plugin_state_dir,
            kubelet_root=m.layout.kubelet_root, running=m.running()) for m in members)
        cp_alive = {c: is_alive(r) for c in CONTROL_PLANE if (r := st.process(c))}
        return ClusterInfo(
            name=st.name, provider=self.name, k8s_version=st.k8s_version,
            kubeconfig=st.kubeconfig, topology=Path(st.topology), driver_name=st.driver,
            workload_image=st.workload_image, nodes=nodes, nic_driver=st.nic_driver,
            extra={"phase": st.phase, "server": st.server, "dir": str(root),
                   "control_plane": cp_alive, "plugins": _instances(members),
                   "node_ips": {m.name: m.layout.ip for m in members},
                   # Each kubelet's version: the cluster's, except during upgrade-kubernetes.
                   "kubelet_versions": {m.name: m.state.k8s_version for m in members},
                   "simulated_nodes": len(st.simulated)},
        )

    def healthy(self, name: str) -> bool:
        """Ready phase, every recorded process alive, apiserver answering."""
        info = self.status(name)
        if info is None or info.extra.get("phase") != "ready":
            return False
        if not all(info.extra.get("control_plane", {}).values()):
            return False
        if not all(n.running for n in info.nodes):
            return False
        st = ClusterState.load(clusters_dir() / name)
        try:
            return all(worker.node_ready(st, n.name) for n in st.nodes)
        except kubeapi.ERRORS:  # refused or unreachable: not healthy
            return False

    def logs(self, name: str, out: Path) -> list[Path]:
        root = clusters_dir() / validate_name(name)
        if not root.is_dir():
            raise InvalidInput(f"no cluster {name!r} (nothing at {root})")
        out.mkdir(parents=True, exist_ok=True)
        st = None
        with contextlib.suppress(FileNotFoundError):  # a bring-up killed before its first save
            st = ClusterState.load(root)
        # n<i> -> node name, so the copies are named as the user knows the nodes.
        names = {f"n{n.index}": n.name for n in st.nodes} if st else {}
        written = []
        for log in sorted(root.glob("*/logs/*.log")):
            owner = log.parent.parent.name
            written.append(_copy(log, out / names.get(owner, owner) / log.name))
        for pod_log in sorted(root.glob("n*/pods/**/*.log")):
            rel = pod_log.relative_to(root)
            written.append(_copy(pod_log, out / names.get(rel.parts[0], rel.parts[0])
                                 / Path(*rel.parts[1:])))
        bins = cached_binaries(st.k8s_version) if st else None
        if st is not None and bins is not None:
            for what, args in (("objects.txt", ["get", "nodes,pods,resourceclaims,"
                                                "resourceslices,deviceclasses", "-A", "-o",
                                                "wide"]),
                               ("events.txt", ["get", "events", "-A"])):
                # What kubectl says, as the user would see it; a dead apiserver is part of it.
                with contextlib.suppress(CommandError):
                    res = run([str(bins.kubectl), f"--kubeconfig={st.kubeconfig}", *args],
                              check=False, timeout=30)
                    (out / what).write_text(res.stdout + res.stderr)
                    written.append(out / what)
        return written

    def stop_node(self, name: str, node: str) -> None:
        st = load_ready(name)
        if node in st.simulated:
            fleet.stop_node(st.kubeconfig, node, st.driver, self.policy)
            return
        member = worker.EmbeddedNode(st, st.node(node), self.policy)
        member.stop()
        member.state.running = False
        st.save()

    def start_node(self, name: str, node: str) -> None:
        st = load_ready(name)
        if node in st.simulated:
            fleet.start_node(st.kubeconfig, node, st.driver, self.policy)
            return
        member, bins = self._member(st, node)
        member.start_missing(bins)
        member.state.running = True
        st.save()

    def restart_plugin(self, name: str, node: str) -> None:
        st = load_ready(name)
        if node in st.simulated:
            raise InvalidInput(f"node {node!r} of cluster {name!r} is simulated: it runs no "
                               "plugin (the fleet publisher writes its slices)")
        member, bins = self._member(st, node)
        if not member.state.running:
            raise InvalidInput(f"node {node!r} of cluster {name!r} is stopped: start it "
                               f"(`fakegpu cluster node start {node}`)")
        member.restart_plugin(bins)

    def _member(self, st: ClusterState, node: str
                ) -> tuple[worker.EmbeddedNode, NodeBinaries]:
        """A real worker with the binaries its kubelet runs; InvalidInput for an unknown node,
        MissingPrerequisite when those binaries are gone from the cache."""
        st.node(node)  # an unknown node is bad input
        member = next(m for m in worker.nodes(st, self.policy) if m.name == node)
        # Its own kubelet's version: an interrupted upgrade-kubernetes leaves them mixed.
        version = member.state.k8s_version
        bins = cached_binaries(version)
        if bins is None:
            raise MissingPrerequisite(f"Kubernetes {version} binaries are no longer cached: "
                                      f"run `fakegpu cluster binaries --k8s-version {version}` "
                                      "or recreate")
        return member, bins

    def upgrade_plugin(self, name: str, target: Target,
                       say: Callable[[str], None] = lambda _line: None) -> list[str]:
        return pluginupgrade.upgrade(load_ready(name), target, self.policy, say)

    def upgrade_kubernetes(self, name: str, version: str,
                           say: Callable[[str], None] = lambda _line: None) -> list[str]:
        return k8supgrade.upgrade(load_ready(name), version, self.policy, say)

    def plugin_instances(self, name: str) -> PluginInstances:
        st = load_ready(name)
        return _instances([worker.EmbeddedNode(st, n, self.policy) for n in st.nodes])

    def tag_images(self, name: str, names: Sequence[str]) -> None:
        bringup.tag_images(load_ready(name), names)

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]:
        # The node's plugin and its pods' runtime use this very file on this host.
        st = load_ready(name)
        if node in st.simulated:  # the fleet publisher follows this file
            if list(args[:1]) == ["fault"]:
                # Written with no publisher to follow it, a fault would reach no slice while
                # the command said it was injected.
                fleet.check_publisher(st.process(fleet.PUBLISHER), name)
            path = fleet.state_path(st.root, node)
        else:
            n = st.node(node)
            path = st.layout(n).nvml_state
            if not n.has_gpus or not path.is_file():
                raise InvalidInput(f"node {node!r} of cluster {name!r} has no GPUs")
        return subprocess.run([sys.executable, "-m", "fakegpu", *args, "--state", str(path)],
                              capture_output=True, text=True, timeout=120, check=False)


def _instances(members: Sequence[worker.EmbeddedNode]) -> PluginInstances:
    """Plugin instances alive per node: during an upgrade two (the serving one and the new
    one, "pending" until the kubelet registered it)."""
    return {m.name: [{"version": m.state.plugin_version if comp is worker.PLUGIN else "",
                      "instance": pluginupgrade.instance_of(r), "role": comp.key}
                     for comp in (worker.PLUGIN, worker.PENDING)
                     if (r := m.process(comp)) is not None and is_alive(r)]
            for m in members}


def _copy(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest
