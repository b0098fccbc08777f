"""One embedded bring-up: its host check, its state (saved first, by the lifecycle) and its
ordered actions. Nodes are started phase by phase across all of them (containerd everywhere,
then the kubelets, ...) through ``worker.EmbeddedNode``, in its components' order."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from fakegpu.cluster import cleanup, imagealiases, inotify
from fakegpu.cluster.artifacts import images
from fakegpu.cluster.embedded import computedomains, fleet, install, network, worker
from fakegpu.cluster.embedded import node as nodemod
from fakegpu.cluster.embedded.controlplane import ControlPlane, ControlPlaneCerts
from fakegpu.cluster.embedded.layout import MAX_SOCKET_PATH, NodeBinaries, longest_socket_path
from fakegpu.cluster.embedded.state import (
    CLUSTERS_ENV,
    MAX_SLOTS,
    ClusterState,
    NodeState,
    clusters_dir,
    node_layout,
    slot_network,
)
from fakegpu.cluster.external import cluster_objects as external_cluster_objects
from fakegpu.cluster.kubeconfig import write_kubeconfig
from fakegpu.cluster.process import WaitPolicy
from fakegpu.cluster.provider import Action, ClusterSpec
from fakegpu.errors import InvalidInput, MissingPrerequisite
from fakegpu.kube import api as kubeapi
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state as nvml_state

MAX_NODES = 200  # one node address and pod subnet each (state.node_layout)
# Rough resident memory per component, measured on this kind of host; generous on purpose.
MEM_CONTROL_PLANE_MIB = 1200
MEM_PER_NODE_MIB = 400


def estimate_memory_mib(nodes: int) -> int:
    return MEM_CONTROL_PLANE_MIB + MEM_PER_NODE_MIB * nodes


def mem_available_mib(meminfo: str) -> int | None:
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return None


def check_host(spec: ClusterSpec, console: Console) -> None:
    """Refuse at once what this host cannot run; raise the inotify limits it needs."""
    # Simulated nodes run no kubelet: only real ones count against the host's limits.
    name, root, nodes = spec.name, clusters_dir() / spec.name, len(spec.topology.real_nodes)
    if spec.chart is not None:
        raise InvalidInput("--plugin-chart installs a Helm chart on fake GPU nodes: kind "
                           "provider only (on embedded, run your plugin binary: --plugin-bin)")
    if os.geteuid() != 0:
        raise MissingPrerequisite("the embedded cluster needs root (mounts, cgroups, "
                                  "network interfaces): run as root")
    # unshare, findmnt: each kubelet runs in a mount namespace of its own (node.py).
    for tool in ("ip", "umount", "mount", "unshare", "findmnt"):
        if shutil.which(tool) is None:
            raise MissingPrerequisite(f"`{tool}` is not installed (apt-get install iproute2 "
                                      "mount util-linux)")
    if nodes > MAX_NODES:
        raise InvalidInput(f"the topology has {nodes} nodes; the embedded cluster holds at "
                           f"most {MAX_NODES} (one address and pod subnet each)")
    need = estimate_memory_mib(nodes)
    have = mem_available_mib(Path("/proc/meminfo").read_text())
    if have is not None and need > have:
        raise InvalidInput(f"the topology has {nodes} nodes: about {need} MiB of memory "
                           f"needed, {have} MiB available; use a smaller topology")
    longest = max((longest_socket_path(node_layout(name, root, MAX_SLOTS - 1, i, "n"),
                                       spec.driver)
                   for i in range(nodes)), key=lambda t: t[1], default=("", 0))
    if longest[1] > MAX_SOCKET_PATH:
        raise InvalidInput(f"socket path {longest[0]} would be {longest[1]} bytes (limit "
                           f"{MAX_SOCKET_PATH}): use a shorter ${CLUSTERS_ENV} or "
                           "cluster name")
    for line in inotify.ensure_inotify(inotify.inotify_need(nodes, inotify.inotify_in_use())):
        console.print(f"[yellow]{line}[/]")


def tag_images(st: ClusterState, names: Sequence[str]) -> None:
    """The workload image under ``names`` too, in every node's containerd."""
    from fakegpu.cluster.embedded.state import cached_binaries

    bins = cached_binaries(st.k8s_version)
    if bins is None:
        raise MissingPrerequisite(f"cluster {st.name!r}: Kubernetes {st.k8s_version} "
                                  "binaries are no longer cached")
    imagealiases.tag(st.workload_image, names, [
        (n.name, [str(bins.ctr), "--address", str(st.layout(n).containerd_socket)])
        for n in st.nodes])


class Bringup:
    def __init__(self, spec: ClusterSpec, console: Console, policy: WaitPolicy) -> None:
        self.spec = spec
        self.console = console
        self.policy = policy
        self.topology = spec.topology
        self.state = ClusterState(
            name=spec.name, root=clusters_dir() / spec.name, k8s_version=spec.k8s_version,
            topology=str(spec.topology_file), driver=spec.driver, nic_driver=spec.nic_driver,
            plugin=spec.plugin.to_json() if spec.plugin else None,
            nodes=[NodeState(n.name, i, bool(n.gpus), k8s_version=spec.k8s_version)
                   for i, n in enumerate(spec.topology.real_nodes)],
            simulated=[n.name for n in spec.topology.simulated_nodes])
        self.bins: NodeBinaries | None = None
        self.imgs: images.Images | None = None
        self.cp: ControlPlane | None = None
        self.kwok: Path | None = None
        self._nodes: list[worker.EmbeddedNode] = []

    def actions(self) -> Sequence[Action]:
        n, aliases = len(self.state.nodes), self.spec.image_aliases
        return [
            Action("Kubernetes binaries", self._binaries),
            Action("container images", self._images),
            Action("node network", lambda: network.create(self.state)),
            Action("control plane (etcd, kube-apiserver, controller-manager, scheduler)",
                   self._control_plane),
            Action("cluster objects (plugin RBAC, DeviceClasses)", self._apply_objects),
            Action(f"node files and certificates ({n} nodes)", self._node_files),
            Action("containerd on every node", self._containerd),
            Action("import images into every node", self._import_images),
            *([Action(f"workload image also named {', '.join(aliases)}",
                      lambda: tag_images(self.state, aliases))] if aliases else []),
            Action("kubelets", self._kubelets),
            Action("fakegpu plugins and ResourceSlices", self._plugins),
            *([Action(f"simulated nodes ({len(self.state.simulated)}: KWOK and the fleet "
                      "slice publisher)", self._fleet)] if self.state.simulated else []),
        ]

    def _bins(self) -> NodeBinaries:
        assert self.bins is not None, "the binaries action runs first"
        return self.bins

    def _members(self) -> list[worker.EmbeddedNode]:
        # Made after the network action: a node's layout depends on the cluster's slot.
        if not self._nodes:
            self._nodes = worker.nodes(self.state, self.policy, self.topology)
        return self._nodes

    def _binaries(self) -> None:
        from fakegpu.cluster.artifacts import binaries

        self.bins = binaries.ensure(self.spec.k8s_version, console=self.console)
        if self.state.simulated:
            self.kwok = fleet.kwok_binary(self.console)

    def _images(self) -> None:
        self.imgs = images.ensure_images(console=self.console)
        self.state.workload_image = self.imgs.workload_ref
        self.state.pause_image = self.imgs.pause_ref
        self.state.save()

    def _control_plane(self) -> None:
        st = self.state
        cp = ControlPlane(st.cp_dir, self._bins(), controllers=True, policy=self.policy,
                          cluster_name=st.name)
        try:
            cp.start()
        finally:
            # Recorded even on failure: start() stops its own, this is for a kill mid-way.
            for rec in cp.processes:
                st.processes[rec.name] = rec
            st.server = cp.server
            st.cp_ports = cp.ports.to_json()
            st.save()
        shutil.copyfile(cp.kubeconfig, st.kubeconfig)
        os.chmod(st.kubeconfig, 0o600)
        self.cp = cp

    def _apply_objects(self) -> None:
        # Exactly the Helm chart's objects (service account, RBAC, admission policy,
        # DeviceClasses), so the plugin has the same rights here as on kind: install.py.
        st = self.state
        with kubeapi.session(st.kubeconfig) as api:
            values = worker.install_values(st, kubeapi.resource_version(api))
            kubeapi.apply(api, install.objects(values))
            if (ext := st.external_plugin()) is not None:
                kubeapi.apply(api, external_cluster_objects(
                    ext, st.driver, name=values.name, namespace=values.namespace,
                    service_account=values.service_account, resource_api=values.resource_api))

    def _node_files(self) -> None:
        assert self.cp is not None and self.cp.certs is not None
        for node in self._members():
            self._write_node_files(node, self.cp.certs, self.cp.gates or {})

    def _write_node_files(self, node: worker.EmbeddedNode, certs: ControlPlaneCerts,
                          gates: dict[str, bool]) -> None:
        st, lay, ca = self.state, node.layout, certs.ca
        node_pki = lay.root / "pki"
        client = ca.issue("kubelet-client", f"system:node:{lay.name}",
                          orgs=("system:nodes",), client=True, directory=node_pki)
        serving = ca.issue("kubelet-serving", f"system:node:{lay.name}", server=True,
                           dns=(lay.name,), ips=(lay.ip,), directory=node_pki)
        cfg = nodemod.render_kubelet_config(lay, ca=ca.cert_path, serving_cert=serving.cert,
                                            serving_key=serving.key, gates=gates)
        nodemod.write_node_files(lay, self._bins(), st.pause_image, cfg)
        write_kubeconfig(lay.kubelet_kubeconfig, server=st.server, ca=ca.cert_path,
                         cert=client.cert, key=client.key, cluster=st.name,
                         user=f"system:node:{lay.name}")
        st.cgroups.append(lay.cgroup_root)
        st.save()
        cleanup.create_cgroup(lay.cgroup_root)

    def _containerd(self) -> None:
        for node in self._members():
            node.start_containerd(self._bins())

    def _import_images(self) -> None:
        assert self.imgs is not None
        for node in self._members():
            images.import_images(self._bins(), node.layout.containerd_socket,
                                 self.imgs.archives)

    def _kubelets(self) -> None:
        for node in self._members():
            node.start_kubelet(self._bins())
        for node in self._members():
            node.wait_ready()

    def _plugins(self) -> None:
        st = self.state
        envs = {}
        for node in self._members():
            nvml_state.render(self.topology, node.name, node.layout.nvml_state)
            envs[node.name] = nvml_env.env(node.layout.nvml_state)
        for node in self._members():
            if st.runs_own_plugin():
                node.start_plugin(envs[node.name])
            if st.external_plugin() is not None:
                node.start_external(envs[node.name])
        for node in self._members():
            if node.state.has_gpus:
                node.wait_slices()
        # The NIC plugin on every node whose fake host shows a PCIe tree, unless the cluster
        # runs none (--nic-driver none; docs/nics.md).
        nic_nodes = [n for n in self._members() if n.has_nics(envs[n.name])]
        for node in nic_nodes:
            node.start_nics(envs[node.name])
        for node in nic_nodes:
            node.wait_nics()
        if st.runs_own_plugin():
            # The compute-domain plugin on every GPU node, then the ComputeDomain controller.
            for node in self._members():
                if node.state.has_gpus:
                    node.start_compute_domains(envs[node.name])
            with kubeapi.session(st.kubeconfig) as api:
                kubeconfig = computedomains.controller_credentials(
                    api, st.cp_dir, server=st.server, ca=st.cp_dir / "pki" / "ca.crt",
                    cluster=st.name)
            st.record(computedomains.start_controller(
                kubeconfig, st.driver, st.workload_image, st.cp_dir / "logs"))
        if not st.simulated:
            st.phase = "ready"
            st.save()

    def _fleet(self) -> None:
        st = self.state
        assert self.kwok is not None, "the binaries action found KWOK"
        node_prefix, pod_prefix = slot_network(st.slot)
        # Pod addresses above every real node's /24 (those end at .199), one node address.
        fleet.start(st.root, st.kubeconfig, Path(st.topology), self.topology, st.driver,
                    self.kwok, f"{pod_prefix}.240.0/20", f"{node_prefix}.250", st.record)
        # Every simulated node at once: a bigger fleet gets a longer wait.
        policy = self.policy.scaled(max(1.0, len(st.simulated) / 100))
        watch = [r for c in (fleet.KWOK, fleet.PUBLISHER) if (r := st.process(c))]
        fleet.wait_ready(st.kubeconfig, st.simulated, st.driver, policy, watch)
        st.phase = "ready"
        st.save()
