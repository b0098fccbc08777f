"""``EmbeddedNode``: one worker of the embedded cluster and the components it owns.

A node's components are declared once, in start order (``COMPONENTS``); bring-up starts them
phase by phase across the nodes, ``start_node`` starts whichever is not running in that
order, ``stop_node`` and teardown stop them in the reverse order, and the plugin upgrade
starts and replaces plugin instances through the same object. Every process it starts is
recorded in the cluster's state (``ClusterState.record``) before it is waited for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu import drivers, fsutil
from fakegpu.cluster.embedded import computedomains, install
from fakegpu.cluster.embedded import node as nodemod
from fakegpu.cluster.embedded.layout import NodeBinaries, NodeLayout
from fakegpu.cluster.embedded.state import ClusterState, NodeState
from fakegpu.cluster.process import (
    ProcessRecord,
    WaitPolicy,
    is_alive,
    kill_pids,
    terminate,
    wait_until,
)
from fakegpu.deploy.manifests import Install
from fakegpu.kube import api as kubeapi
from fakegpu.node.entrypoint import nic_plugin_args, plugin_args
from fakegpu.nvml.sysfs import SYSFS_ENV
from fakegpu.plugin import version as plugin_version
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology


@dataclass(frozen=True)
class Component:
    key: str  # its process's key in the state: <key>/<node>
    essential: bool  # the node counts as running only while it runs


CONTAINERD = Component("containerd", True)
KUBELET = Component("kubelet", True)
EXTERNAL = Component("extplugin", True)  # another vendor's plugin (--plugin-bin)
PLUGIN = Component("plugin", True)  # fakegpu's serving plugin instance
PENDING = Component("plugin-pending", False)  # an upgrade's new instance, not yet serving
COMPUTE_DOMAINS = Component(computedomains.PLUGIN, False)
NICS = Component("nic-plugin", False)  # the NIC driver's plugin (fakegpu/nic)
# Start order; stopped in the reverse order.
COMPONENTS = (CONTAINERD, KUBELET, EXTERNAL, PLUGIN, PENDING, COMPUTE_DOMAINS, NICS)
# A plugin pod's terminationGracePeriodSeconds (the chart's 30; the plugin's own grace period
# is as long) and a little.
PLUGIN_GRACE_S = 35.0


def install_values(st: ClusterState, api_version: str = "v1") -> Install:
    """The chart's values for this cluster (its driver; DeviceClasses in ``api_version``)."""
    return Install(driver=st.driver, resource_api=f"resource.k8s.io/{api_version}",
                   nic_driver=st.nic_driver or drivers.NIC, nics=bool(st.nic_driver))


def node_ready(st: ClusterState, name: str) -> bool:
    with kubeapi.session(st.kubeconfig) as api:
        return kubeapi.node_ready(api, name)


def node_slices(st: ClusterState, name: str, driver: str | None = None
                ) -> list[dict[str, Any]]:
    with kubeapi.session(st.kubeconfig) as api:
        return kubeapi.resource_slices(api, driver=driver or st.driver, node=name)


class EmbeddedNode:
    """One worker: its layout, its recorded processes, and how to start and stop them."""

    def __init__(self, st: ClusterState, n: NodeState, policy: WaitPolicy,
                 plugin_args: Sequence[str] = (), nic_args: Sequence[str] = ()) -> None:
        self.st = st
        self.state = n
        self.policy = policy
        self.plugin_args = list(plugin_args)  # the topology's flags for this node's plugins
        self.nic_args = list(nic_args)
        self.layout: NodeLayout = st.layout(n)

    @property
    def name(self) -> str:
        return self.state.name

    # --- what runs ------------------------------------------------------------------------

    def process(self, comp: Component) -> ProcessRecord | None:
        return self.st.process(comp.key, self.name)

    def alive(self, comp: Component) -> bool:
        rec = self.process(comp)
        return rec is not None and is_alive(rec)

    def running(self) -> bool:
        """Marked running and every essential component it has alive."""
        return self.state.running and all(
            is_alive(r) for c in COMPONENTS if c.essential and (r := self.process(c)))

    def record(self, comp: Component, rec: ProcessRecord) -> ProcessRecord:
        return self.st.record(rec, f"{comp.key}/{self.name}")

    def forget(self, comp: Component) -> ProcessRecord | None:
        return self.st.forget(comp.key, self.name)

    def stop(self, bins: NodeBinaries | None = None) -> None:
        """Stop every component, last started first. With ``bins`` (teardown) the node's pods
        are removed through CRI first, so CNI releases addresses and veths, and no shim is
        left; without, its pods' containers are kept (a stopped node)."""
        for comp in reversed(COMPONENTS):
            rec = self.process(comp)
            if rec is None:
                continue
            if comp is CONTAINERD and bins is not None and is_alive(rec):
                nodemod.stop_pods(self.layout, bins)
            terminate(rec)
        if bins is not None:
            kill_pids(nodemod.shim_pids(self.layout))

    def restart_plugin(self, bins: NodeBinaries) -> None:
        """Stop the node's GPU plugin (fakegpu's, or another vendor's ``--plugin-bin``) as the
        kubelet stops a deleted plugin pod (SIGTERM, 30 s of grace and a little), then start
        it again and wait for its slices, as ``start_missing`` does. The pods keep running."""
        for comp in (EXTERNAL, PLUGIN):
            rec = self.process(comp)
            if rec is not None:
                terminate(rec, PLUGIN_GRACE_S)
        self.start_missing(bins)

    # --- starting, in COMPONENTS order ------------------------------------------------------

    def start_containerd(self, bins: NodeBinaries) -> None:
        self.record(CONTAINERD, nodemod.start_containerd(self.layout, bins, self.policy))

    def start_kubelet(self, bins: NodeBinaries) -> None:
        self.record(KUBELET, nodemod.start_kubelet(self.layout, bins))

    def replace_kubelet(self, bins: NodeBinaries, gates: dict[str, bool]) -> None:
        """Run the kubelet of ``bins`` (its config rewritten with that minor's ``gates``) in
        place of the running one: containerd, the node's pods and its plugins keep running.
        Returns once the node is Ready under the new kubelet, fakegpu's plugin has been
        registered by it (the plugin watcher of a starting kubelet finds the plugin's
        registration socket) and the node's slices are whole."""
        lay, pki = self.layout, self.layout.root / "pki"
        cfg = nodemod.render_kubelet_config(
            lay, ca=self.st.cp_dir / "pki" / "ca.crt", serving_cert=pki / "kubelet-serving.crt",
            serving_key=pki / "kubelet-serving.key", gates=gates)
        plugin = self.process(PLUGIN) if self.alive(PLUGIN) else None
        mark = nodemod.log_size(plugin.log) if plugin else 0
        if (old := self.process(KUBELET)) is not None:
            terminate(old)
        fsutil.atomic_write(lay.kubelet_config, cfg)
        self.start_kubelet(bins)
        kubelet = self.process(KUBELET)
        assert kubelet is not None

        def taken_over() -> bool:
            with kubeapi.session(self.st.kubeconfig) as api:
                return kubeapi.node_ready_on(api, self.name, bins.k8s_version)

        wait_until(f"node {self.name} Ready under kubelet {bins.k8s_version}", taken_over,
                   self.policy, watch=[kubelet], fatal=nodemod.FATAL_LOG_LINES)
        if plugin is not None:
            wait_until(f"fakegpu plugin of node {self.name} registered by kubelet "
                       f"{bins.k8s_version}",
                       lambda: nodemod.PLUGIN_REGISTERED in nodemod.written_since(plugin.log,
                                                                                  mark),
                       self.policy, watch=[kubelet, plugin])
        if self.state.has_gpus:
            self.wait_slices()

    def wait_ready(self) -> None:
        watch = [r for c in (KUBELET, CONTAINERD) if (r := self.process(c))]
        wait_until(f"node {self.name} Ready (kubelet)", self._ready, self.policy,
                   watch=watch, fatal=nodemod.FATAL_LOG_LINES)

    def _ready(self) -> bool:
        return node_ready(self.st, self.name)

    @property
    def env(self) -> dict[str, str]:
        """The NVML env its plugins were first started with (``plugin.env``)."""
        env: dict[str, str] = json.loads((self.layout.root / "plugin.env").read_text())
        return env

    def _keep_env(self, env: dict[str, str]) -> None:
        (self.layout.root / "plugin.env").write_text(json.dumps(env))  # start_node reads it

    def start_external(self, env: dict[str, str]) -> None:
        """Another vendor's plugin (``--plugin-bin``) on the NVIDIA host built from the
        node's NVML state (external.py, pluginhost.py)."""
        ext = self.st.external_plugin()
        assert ext is not None
        self._keep_env(env)
        self._credentials()
        self.record(EXTERNAL, nodemod.start_external_plugin(
            self.layout, ext, env, image=self.st.workload_image,
            namespace=install_values(self.st).namespace))

    def start_plugin(self, env: dict[str, str], *, version: str = "", instance: str = "",
                     comp: Component = PLUGIN, extra_env: dict[str, str] | None = None
                     ) -> ProcessRecord:
        """fakegpu's plugin, with the topology's flags for this node (dynamic MIG, shared
        GPUs) as the kind plugin image's entrypoint adds them; recorded as ``comp``."""
        self._keep_env(env)
        self._credentials()
        env = {**env, **({plugin_version.VERSION_ENV: version} if version else {}),
               **(extra_env or {})}
        return self.record(comp, nodemod.start_plugin(
            self.layout, self.st.driver, env, extra_args=self.plugin_args,
            instance_id=instance))

    def start_compute_domains(self, env: dict[str, str]) -> None:
        self.record(COMPUTE_DOMAINS, computedomains.start_plugin(self.layout, self.st.driver,
                                                                 env))

    def has_nics(self, env: dict[str, str]) -> bool:
        """Whether the node runs a NIC plugin: the cluster has a NIC driver and the node's fake
        host shows a PCIe tree (its NICs), the plugin's input."""
        return bool(self.st.nic_driver) and SYSFS_ENV in env

    def start_nics(self, env: dict[str, str]) -> None:
        self._credentials()
        self.record(NICS, nodemod.start_nic_plugin(self.layout, env, self.st.nic_driver,
                                                   self.nic_args))

    def wait_nics(self) -> None:
        rec = self.process(NICS)
        assert rec is not None, f"the NIC plugin of {self.name} was started"
        driver = self.st.nic_driver
        wait_until(f"a whole ResourceSlice pool of node {self.name} (NIC plugin, {driver})",
                   lambda: self.name in kubeapi.complete_pools(
                       node_slices(self.st, self.name, driver)), self.policy, watch=[rec])

    def wait_slices(self) -> None:
        """Until each of its plugins published a whole ResourceSlice pool for this node."""
        ext = self.st.external_plugin()
        waits = [] if ext is not None and not ext.beside else [(PLUGIN, self.st.driver)]
        if ext is not None:
            waits.append((EXTERNAL, ext.driver_name(self.st.driver)))
        for comp, driver in waits:
            rec = self.process(comp)
            assert rec is not None, f"{comp.key} of {self.name} was started"
            who = "fakegpu plugin" if comp is PLUGIN else f"plugin {ext and ext.binary.name}"

            def complete(driver: str = driver) -> bool:
                return self.name in kubeapi.complete_pools(node_slices(self.st, self.name,
                                                                       driver))

            wait_until(f"a whole ResourceSlice pool of node {self.name} ({who}, {driver})",
                       complete, self.policy, watch=[rec])

    def start_missing(self, bins: NodeBinaries) -> None:
        """Start whatever of it is not running, in order, and wait as bring-up does."""
        if not self.alive(CONTAINERD):
            self.start_containerd(bins)
        if not self.alive(KUBELET):
            self.start_kubelet(bins)
        self.wait_ready()
        env = self.env
        if self.st.external_plugin() is not None and not self.alive(EXTERNAL):
            self.start_external(env)
        if self.st.runs_own_plugin() and not self.alive(PLUGIN):
            self.start_plugin(env, version=self.state.plugin_version,
                              instance=self.state.plugin_instance)
        if self.state.has_gpus:
            self.wait_slices()
        if self.st.runs_own_plugin() and self.state.has_gpus and not self.alive(
                COMPUTE_DOMAINS):
            self.start_compute_domains(env)
        if self.has_nics(env) and not self.alive(NICS):
            self.start_nics(env)
            self.wait_nics()

    def _credentials(self) -> None:
        """The chart's service account with a token bound to this node's Node object (it
        exists once the kubelet registered): the plugin's identity on kind, too."""
        lay = self.layout
        if lay.plugin_kubeconfig.is_file():
            return
        values = install_values(self.st)
        with kubeapi.session(self.st.kubeconfig) as api:
            token = kubeapi.service_account_token(
                api, values.namespace, values.service_account, node=lay.name,
                seconds=install.TOKEN_SECONDS)
        install.write_plugin_credentials(
            token, values, kubeconfig=lay.plugin_kubeconfig, token_file=lay.plugin_token,
            server=self.st.server, ca=self.st.cp_dir / "pki" / "ca.crt", cluster=self.st.name)


def nodes(st: ClusterState, policy: WaitPolicy, topology: Topology | None = None
          ) -> list[EmbeddedNode]:
    """Every real node of the cluster; the topology (its plugin flags) read once for all."""
    topo = topology or load_topology(Path(st.topology))
    return [EmbeddedNode(st, n, policy, plugin_args(topo.node(n.name)),
                         nic_plugin_args(topo.node(n.name))) for n in st.nodes]
