"""The embedded provider: a real multi-node Kubernetes of host processes, no containers.

`up` is an ordered list of small steps; whatever they make is recorded in the cluster's
state.json *before* it is made, so one cleanup path (`down`) removes it whether `up` finished,
failed, or was killed. Layout (short paths: unix sockets live inside)::

    /var/lib/fakegpu/<cluster>/          $FAKEGPU_CLUSTERS_DIR/<cluster>
      state.json  kubeconfig
      cp/        pki/ etcd/ logs/ *.kubeconfig           control plane
      n<i>/      containerd/ kubelet/ cdi/ nvml/ plugin/ logs/ ...   worker i
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from fakegpu import fsutil
from fakegpu.cluster import cleanup, computedomains, images, install, pluginupgrade
from fakegpu.cluster import node as nodemod
from fakegpu.cluster.controlplane import ControlPlane, ControlPlaneCerts, port_in_use
from fakegpu.cluster.external import ExternalPlugin
from fakegpu.cluster.external import cluster_objects as external_cluster_objects
from fakegpu.cluster.kubeconfig import write_kubeconfig
from fakegpu.cluster.names import validate_name
from fakegpu.cluster.node import NodeBinaries, NodeLayout
from fakegpu.cluster.process import (
    CommandError,
    ProcessRecord,
    WaitPolicy,
    is_alive,
    kill_pids,
    pids_matching,
    run,
    terminate,
    wait_until,
)
from fakegpu.cluster.provider import Action, ClusterInfo, ClusterSpec, NodeInfo
from fakegpu.deploy.manifests import Install
from fakegpu.errors import FakegpuError, InvalidInput, MissingPrerequisite
from fakegpu.fleet import embedded as fleet
from fakegpu.kube import api as kubeapi
from fakegpu.node.entrypoint import plugin_args
from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state as nvml_state
from fakegpu.plugin import version as plugin_version
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology

CLUSTERS_ENV = "FAKEGPU_CLUSTERS_DIR"
DEFAULT_DRIVER = "gpu.fakegpu.dev"
STATE_VERSION = 1
MAX_NODES = 200  # node IPs are 10.250.<slot>.<10+i>; pod subnets 10.<200+slot>.<i>.0/24
MAX_SLOTS = 50
# Rough resident memory per component, measured on this kind of host; generous on purpose.
MEM_CONTROL_PLANE_MIB = 1200
MEM_PER_NODE_MIB = 400


def clusters_dir() -> Path:
    """Where clusters live; read at call time (tests point it elsewhere)."""
    return Path(os.environ.get(CLUSTERS_ENV) or "/var/lib/fakegpu")


def slot_network(slot: int) -> tuple[str, str]:
    """(node address prefix, pod network prefix) for a cluster slot."""
    return f"10.250.{slot}", f"10.{200 + slot}"


def node_layout(cluster: str, root: Path, slot: int, index: int, name: str) -> NodeLayout:
    node_prefix, pod_prefix = slot_network(slot)
    return NodeLayout(
        cluster=cluster, name=name, index=index, root=root / f"n{index}",
        ip=f"{node_prefix}.{10 + index}", pod_subnet=f"{pod_prefix}.{index}.0/24",
        bridge=f"fg{slot}b{index}",
    )


def address_interface(slot: int) -> str:
    return f"fg{slot}d"


def estimate_memory_mib(nodes: int) -> int:
    return MEM_CONTROL_PLANE_MIB + MEM_PER_NODE_MIB * nodes


def mem_available_mib(meminfo: str) -> int | None:
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return None


# --- state -------------------------------------------------------------------------------------


@dataclass
class NodeState:
    name: str
    index: int
    has_gpus: bool
    running: bool = True
    plugin_version: str = ""  # set by upgrade_plugin; "" is the stamp the plugin finds itself
    plugin_instance: str = ""  # the serving instance's id ("" for the first one)


@dataclass
class ClusterState:
    name: str
    root: Path
    k8s_version: str = ""
    topology: str = ""
    driver: str = DEFAULT_DRIVER
    workload_image: str = ""
    pause_image: str = ""
    slot: int = -1
    phase: str = "creating"  # creating -> ready; anything else is a failed or partial cluster
    server: str = ""
    nodes: list[NodeState] = field(default_factory=list)
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    interfaces: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    firewall: list[list[str]] = field(default_factory=list)  # iptables FORWARD rule specs
    plugin: dict[str, Any] | None = None  # another vendor's plugin (ExternalPlugin.to_json)
    simulated: list[str] = field(default_factory=list)  # fleet nodes: KWOK, no kubelet

    @property
    def path(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def cp_dir(self) -> Path:
        return self.root / "cp"

    def layout(self, n: NodeState) -> NodeLayout:
        return node_layout(self.name, self.root, self.slot, n.index, n.name)

    def node(self, name: str) -> NodeState:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise InvalidInput(f"cluster {self.name!r} has no node {name!r} (nodes: {known})")

    def save(self) -> None:
        doc = {
            "version": STATE_VERSION, "name": self.name, "k8s_version": self.k8s_version,
            "topology": self.topology, "driver": self.driver,
            "workload_image": self.workload_image, "pause_image": self.pause_image,
            "slot": self.slot, "phase": self.phase, "server": self.server,
            "nodes": [n.__dict__ for n in self.nodes],
            "processes": {k: v.to_json() for k, v in self.processes.items()},
            "interfaces": self.interfaces, "cgroups": self.cgroups, "firewall": self.firewall,
            "plugin": self.plugin,
            "simulated": self.simulated,
        }
        # Atomic: `down` or `status` of another process may read it at any moment.
        fsutil.atomic_write(self.path, json.dumps(doc, indent=2))

    @classmethod
    def load(cls, root: Path) -> ClusterState:
        """The state in ``root``; FileNotFoundError when there is none, StateError (naming
        the file) when it cannot be read as a cluster state of this fakegpu."""
        path = root / "state.json"
        text = path.read_text()
        try:
            doc = json.loads(text)
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"state version {doc.get('version')!r}, expected "
                                 f"{STATE_VERSION}")
            return cls(
                name=doc["name"], root=root, k8s_version=doc["k8s_version"],
                topology=doc["topology"], driver=doc["driver"],
                workload_image=doc["workload_image"], pause_image=doc["pause_image"],
                slot=int(doc["slot"]), phase=doc["phase"], server=doc["server"],
                nodes=[NodeState(**n) for n in doc["nodes"]],
                processes={k: ProcessRecord.from_json(v) for k, v in doc["processes"].items()},
                interfaces=list(doc["interfaces"]), cgroups=list(doc["cgroups"]),
                firewall=[list(r) for r in doc.get("firewall", [])],
                plugin=doc.get("plugin"),
                simulated=[str(n) for n in doc.get("simulated", [])],
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise StateError(path, err) from err


class StateError(FakegpuError):
    """A cluster's state.json is unreadable (corrupt, truncated, another version)."""

    def __init__(self, path: Path, err: Exception) -> None:
        self.path = path
        what = f"{type(err).__name__}: {err}" if isinstance(err, KeyError) else str(err)
        super().__init__(f"{path}: not a readable fakegpu cluster state ({what}); remove that "
                         f"cluster with `fakegpu cluster down --name {path.parent.name}`")


# --- talking to the apiserver (fakegpu.kube.api, as admin) ---------------------------------------


def node_ready(st: ClusterState, name: str) -> bool:
    with kubeapi.session(st.kubeconfig) as api:
        return kubeapi.node_ready(api, name)


def node_slices(st: ClusterState, name: str, driver: str | None = None
                ) -> list[dict[str, Any]]:
    with kubeapi.session(st.kubeconfig) as api:
        return kubeapi.resource_slices(api, driver=driver or st.driver, node=name)


def external_plugin(st: ClusterState) -> ExternalPlugin | None:
    """The other vendor's plugin this cluster runs, if any."""
    return ExternalPlugin.from_json(st.plugin) if st.plugin else None


def runs_own_plugin(st: ClusterState) -> bool:
    ext = external_plugin(st)
    return ext is None or ext.beside


# --- other concerns, loaded when used ------------------------------------------------------------


def _binaries(version: str | None, console: Console) -> NodeBinaries:
    from fakegpu.cluster import binaries

    result: NodeBinaries = binaries.ensure(version, console=console)
    return result


def _render_nvml(topology: Topology, node: str, path: Path) -> dict[str, str]:
    """Write the node's fake NVML state; return the env a process needs to see it."""
    nvml_state.render(topology, node, path)
    return nvml_env.env(path)


# --- the provider --------------------------------------------------------------------------------


class EmbeddedProvider:
    name = "embedded"

    def __init__(
        self,
        console: Console | None = None,
        *,
        policy: WaitPolicy | None = None,
        driver: str = DEFAULT_DRIVER,
        plugin: ExternalPlugin | None = None,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.policy = policy or WaitPolicy(timeout=180.0, interval=0.5)
        self.driver = driver
        self.plugin = plugin  # runs instead of (or beside) fakegpu's plugin

    # --- protocol: exists / check_host / provision ----------------------------------------------

    def exists(self, name: str) -> bool:
        return (clusters_dir() / validate_name(name)).exists()

    def check_host(self, spec: ClusterSpec) -> None:
        # Simulated nodes run no kubelet: only real ones count against the host's limits.
        self._check_host(spec.name, clusters_dir() / spec.name, len(spec.topology.real_nodes))

    def provision(self, spec: ClusterSpec) -> _Bringup:
        return _Bringup(self, spec)

    def _check_host(self, name: str, root: Path, nodes: int) -> None:
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
        longest = max((nodemod.longest_socket_path(node_layout(name, root, MAX_SLOTS - 1, i,
                                                               "n"), self.driver)
                       for i in range(nodes)), key=lambda t: t[1], default=("", 0))
        if longest[1] > nodemod.MAX_SOCKET_PATH:
            raise InvalidInput(f"socket path {longest[0]} would be {longest[1]} bytes (limit "
                               f"{nodemod.MAX_SOCKET_PATH}): use a shorter ${CLUSTERS_ENV} or "
                               "cluster name")
        # The inotify limits are per user, host-wide: at the usual default of 128 instances a
        # few nodes use them up, and containerd's CRI plugin and the kubelets fail obscurely.
        limits = nodemod.inotify_need(nodes, nodemod.inotify_in_use())
        for line in nodemod.ensure_inotify(limits):
            self.console.print(f"[yellow]{line}[/]")

    def _free_slot(self, skip: set[int]) -> int:
        out = run(["ip", "-o", "-4", "addr", "show"], timeout=10).stdout
        used_addrs = {f[3].split("/")[0] for line in out.splitlines()
                      if len(f := line.split()) > 3}
        used_slots: set[int] = set()
        base = clusters_dir()
        if base.is_dir():
            for d in base.iterdir():
                # A corrupt state of another cluster must not make its slot look free: that
                # is a StateError naming the file. A directory without one holds no slot yet.
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    used_slots.add(ClusterState.load(d).slot)
        for slot in range(MAX_SLOTS):
            node_prefix, pod_prefix = slot_network(slot)
            nets = [ipaddress.ip_network(f"{node_prefix}.0/24"),
                    ipaddress.ip_network(f"{pod_prefix}.0.0/16")]
            clash = any(ipaddress.ip_address(a) in n for a in used_addrs for n in nets
                        if ":" not in a)
            if slot not in used_slots | skip and not clash and not cleanup.link_exists(
                    address_interface(slot)):
                return slot
        raise InvalidInput(f"all {MAX_SLOTS} cluster slots are in use: bring a cluster down")

    # --- up: steps ---------------------------------------------------------------------------

    def _network(self, st: ClusterState) -> None:
        # Claim a slot by creating its address interface: `ip link add` fails when another
        # `up` took the same slot a moment ago, and then the next free slot is tried.
        tried: set[int] = set()
        while True:
            st.slot = self._free_slot(tried)
            addr_if = address_interface(st.slot)
            st.interfaces = [addr_if, *(st.layout(n).bridge for n in st.nodes)]
            st.save()
            # A bridge without ports holds the node addresses: this kernel has no dummy
            # driver, and local addresses work on any interface that is up.
            res = run(["ip", "link", "add", addr_if, "type", "bridge"], timeout=10, check=False)
            if res.returncode == 0:
                break
            if not cleanup.link_exists(addr_if):
                raise CommandError(["ip", "link", "add", addr_if, "type", "bridge"],
                                   res.returncode, res.stdout + res.stderr)
            st.interfaces = []
            tried.add(st.slot)
        for n in st.nodes:
            run(["ip", "addr", "add", f"{st.layout(n).ip}/32", "dev", addr_if], timeout=10)
        run(["ip", "link", "set", addr_if, "up"], timeout=10)
        for n in st.nodes:
            ip = st.layout(n).ip
            for port in (nodemod.KUBELET_PORT, nodemod.KUBELET_HEALTHZ_PORT):
                # Fails too when something listens on the port on all addresses.
                if port_in_use(ip, port):
                    raise InvalidInput(f"port {port} on {ip} is in use (a kubelet listening on "
                                       f"all addresses?): node {n.name}'s kubelet needs it")
        # Pods of different nodes talk through the host, which routes between the node
        # bridges: that needs forwarding, and an ACCEPT where a FORWARD policy drops (Docker
        # sets DROP when it runs on the same host).
        with contextlib.suppress(OSError):
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        if shutil.which("iptables"):
            pods = f"{slot_network(st.slot)[1]}.0.0/16"
            st.firewall = [["-s", pods, "-j", "ACCEPT"], ["-d", pods, "-j", "ACCEPT"]]
            st.save()
            for rule in st.firewall:
                run(["iptables", "-w", "5", "-I", "FORWARD", *rule], timeout=30)

    def _control_plane(self, st: ClusterState, bins: NodeBinaries) -> ControlPlane:
        cp = ControlPlane(st.cp_dir, bins, controllers=True, policy=self.policy,
                          cluster_name=st.name)
        try:
            cp.start()
        finally:
            # Recorded even on failure: start() stops its own, this is for a kill mid-way.
            for rec in cp.processes:
                st.processes[rec.name] = rec
            st.server = cp.server
            st.save()
        shutil.copyfile(cp.kubeconfig, st.kubeconfig)
        os.chmod(st.kubeconfig, 0o600)
        return cp

    def _apply_objects(self, st: ClusterState, bins: NodeBinaries) -> None:
        # Exactly the Helm chart's objects (service account, RBAC, admission policy,
        # DeviceClasses), so the plugin has the same rights here as on kind: install.py.
        with kubeapi.session(st.kubeconfig) as api:
            kubeapi.apply(api, install.objects(_install(st, kubeapi.resource_version(api))))
            if (ext := external_plugin(st)) is not None:
                values = _install(st, kubeapi.resource_version(api))
                kubeapi.apply(api, external_cluster_objects(
                    ext, st.driver, name=values.name, namespace=values.namespace,
                    service_account=values.service_account, resource_api=values.resource_api))

    def _node_files(self, st: ClusterState, lay: NodeLayout, bins: NodeBinaries,
                    certs: ControlPlaneCerts, gates: dict[str, bool]) -> None:
        ca = certs.ca
        node_pki = lay.root / "pki"
        client = ca.issue("kubelet-client", f"system:node:{lay.name}",
                               orgs=("system:nodes",), client=True, directory=node_pki)
        serving = ca.issue("kubelet-serving", f"system:node:{lay.name}", server=True,
                                dns=(lay.name,), ips=(lay.ip,), directory=node_pki)
        cfg = nodemod.render_kubelet_config(lay, ca=ca.cert_path, serving_cert=serving.cert,
                                            serving_key=serving.key, gates=gates)
        nodemod.write_node_files(lay, bins, st.pause_image, cfg)
        write_kubeconfig(lay.kubelet_kubeconfig, server=st.server, ca=ca.cert_path,
                         cert=client.cert, key=client.key, cluster=st.name,
                         user=f"system:node:{lay.name}")
        st.cgroups.append(lay.cgroup_root)
        st.save()
        cleanup.create_cgroup(lay.cgroup_root)

    def _start_kubelet(self, st: ClusterState, lay: NodeLayout, bins: NodeBinaries) -> None:
        rec = nodemod.start_kubelet(lay, bins)
        st.processes[rec.name] = rec
        st.save()

    def _wait_ready(self, st: ClusterState, lay: NodeLayout) -> None:
        rec = st.processes[f"kubelet/{lay.name}"]
        wait_until(f"node {lay.name} Ready (kubelet)", lambda: node_ready(st, lay.name),
                   self.policy, watch=[rec, st.processes[f"containerd/{lay.name}"]],
                   fatal=nodemod.FATAL_LOG_LINES)

    def _start_plugin(self, st: ClusterState, lay: NodeLayout, env: dict[str, str], *,
                      version: str = "", instance: str = "", key: str = "plugin",
                      extra_env: dict[str, str] | None = None) -> ProcessRecord:
        (lay.root / "plugin.env").write_text(json.dumps(env))  # start_node needs it again
        self._plugin_credentials(st, lay)
        # The topology's plugin flags for this node (dynamic MIG, shared GPUs), as the kind
        # plugin image's entrypoint adds them.
        args = plugin_args(load_topology(Path(st.topology)).node(lay.name))
        env = {**env, **({plugin_version.VERSION_ENV: version} if version else {}),
               **(extra_env or {})}
        rec = nodemod.start_plugin(lay, st.driver, env, extra_args=args, instance_id=instance)
        st.processes[f"{key}/{lay.name}"] = rec
        st.save()
        return rec

    def _record(self, rec: ProcessRecord, st: ClusterState) -> None:
        st.processes[rec.name] = rec
        st.save()

    def _start_compute_domains(self, st: ClusterState, envs: dict[str, dict[str, str]]) -> None:
        """The compute-domain plugin on every GPU node, then the ComputeDomain controller
        (fakegpu/cluster/computedomains.py)."""
        for n in st.nodes:
            if n.has_gpus:
                lay = st.layout(n)
                self._record(computedomains.start_plugin(lay, st.driver, envs[lay.name]), st)
        with kubeapi.session(st.kubeconfig) as api:
            kubeconfig = computedomains.controller_credentials(
                api, st.cp_dir, server=st.server, ca=st.cp_dir / "pki" / "ca.crt",
                cluster=st.name)
        self._record(computedomains.start_controller(
            kubeconfig, st.driver, st.workload_image, st.cp_dir / "logs"), st)

    # --- upgrade_plugin -------------------------------------------------------------------------

    def upgrade_plugin(self, name: str, target: pluginupgrade.Target,
                       say: Callable[[str], None] = lambda _line: None) -> list[str]:
        """Roll every node's plugin to ``target`` (pluginupgrade.py); the nodes it changed.

        An instance an earlier, stalled upgrade left pending is stopped first: rolling back
        to the serving version is this same call. Nodes already at the version are skipped.
        """
        st = self._load_ready(name)
        for n in st.nodes:
            pending = st.processes.pop(f"plugin-pending/{n.name}", None)
            if pending is not None:
                say(f"node {n.name}: stopping the pending instance of a stalled upgrade")
                terminate(pending, 5.0)
                st.save()
        for wanted in target.nodes:
            st.node(wanted)  # an unknown node is bad input, before anything changes
        changed = []
        for n in st.nodes:
            if target.nodes and n.name not in target.nodes:
                continue
            old = st.processes.get(f"plugin/{n.name}")
            if (n.plugin_version == target.version and not target.broken
                    and not target.prepare_delay_s and old is not None and is_alive(old)):
                continue
            lay = st.layout(n)
            env = json.loads((lay.root / "plugin.env").read_text())

            def start(extra: dict[str, str], iid: str, lay: NodeLayout = lay,
                      env: dict[str, str] = env) -> ProcessRecord:
                # Recorded before it is waited for: `down` stops it whatever happens next.
                return self._start_plugin(st, lay, env, instance=iid, key="plugin-pending",
                                          extra_env=extra)

            say(f"node {n.name}: {target.strategy} upgrade to {target.version}")
            policy = (WaitPolicy(target.ready_timeout_s, self.policy.interval)
                      if target.ready_timeout_s else self.policy)
            roll = pluginupgrade.NodeRoll(lay, start, policy)
            try:
                new = roll.roll(old if old is not None and is_alive(old) else None, target)
            except pluginupgrade.UpgradeStalled:
                st.save()  # the pending instance stays recorded as plugin-pending/<node>
                raise
            st.processes.pop(f"plugin-pending/{n.name}", None)
            st.processes[f"plugin/{n.name}"] = new
            n.plugin_version = target.version
            n.plugin_instance = pluginupgrade.instance_of(new)
            st.save()
            changed.append(n.name)
            say(f"node {n.name}: version {target.version} serves")
        return changed

    def _start_external(self, st: ClusterState, lay: NodeLayout, env: dict[str, str]) -> None:
        """Another vendor's plugin (``--plugin-bin``) on this node, on the NVIDIA host built
        from the node's NVML state (external.py, pluginhost.py)."""
        ext = external_plugin(st)
        assert ext is not None
        (lay.root / "plugin.env").write_text(json.dumps(env))  # start_node needs it again
        self._plugin_credentials(st, lay)
        rec = nodemod.start_external_plugin(lay, ext, env, image=st.workload_image,
                                            namespace=_install(st).namespace)
        st.processes[rec.name] = rec
        st.save()

    def _plugin_credentials(self, st: ClusterState, lay: NodeLayout) -> None:
        """The chart's service account with a token bound to this node's Node object (it
        exists once the kubelet registered): the plugin's identity on kind, too."""
        if lay.plugin_kubeconfig.is_file():
            return
        values = _install(st)
        with kubeapi.session(st.kubeconfig) as api:
            token = kubeapi.service_account_token(
                api, values.namespace, values.service_account, node=lay.name,
                seconds=install.TOKEN_SECONDS)
        install.write_plugin_credentials(
            token, values, kubeconfig=lay.plugin_kubeconfig, token_file=lay.plugin_token,
            server=st.server, ca=st.cp_dir / "pki" / "ca.crt", cluster=st.name)

    def _wait_slices(self, st: ClusterState, lay: NodeLayout) -> None:
        ext = external_plugin(st)
        waits = [] if ext is not None and not ext.beside else [("plugin", st.driver)]
        if ext is not None:
            waits.append(("extplugin", ext.driver_name(st.driver)))
        for key, driver in waits:
            rec = st.processes[f"{key}/{lay.name}"]
            who = "fakegpu plugin" if key == "plugin" else f"plugin {ext and ext.binary.name}"

            def complete(driver: str = driver) -> bool:
                return lay.name in kubeapi.complete_pools(node_slices(st, lay.name, driver))

            wait_until(f"a whole ResourceSlice pool of node {lay.name} ({who}, {driver})",
                       complete, self.policy, watch=[rec])

    # --- protocol: delete ---------------------------------------------------------------------

    def delete(self, name: str) -> None:
        root = clusters_dir() / validate_name(name)
        st: ClusterState | None = None
        try:
            st = ClusterState.load(root)
        except FileNotFoundError:
            pass  # a killed `up` before its first save, or nothing at all
        except StateError as err:
            # Still remove what can be found without it: processes naming the directory,
            # mounts, cgroups by name. Say so: its interfaces and rules are not known.
            self.console.print(f"[yellow]{err}: removing what can be found without it[/]",
                               soft_wrap=True)
        if st is not None:
            self._stop_everything(st)
        # Whatever is left (no state, a killed `up`): anything still running from our dir.
        own = os.getpid()
        stray = pids_matching(lambda argv: any(str(root) + "/" in a or a == str(root)
                                               for a in argv))
        kill_pids([p for p in stray if p != own])
        cleanup.unmount_under(root)
        if st is not None:
            cleanup.delete_links(st.interfaces)
            _delete_forward_rules(st.firewall)
        for rel in self._cgroups(name, st):
            cleanup.remove_cgroup_tree(rel)
        _remove_host_leftovers(root, name)
        cleanup.unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)

    def _cgroups(self, name: str, st: ClusterState | None) -> list[str]:
        found = set(st.cgroups if st else [])
        pattern = re.compile(rf"^fakegpu-{re.escape(name)}-\d+$")
        for h in cleanup.cgroup_hierarchies():
            with contextlib.suppress(OSError):
                found.update(f"/{d.name}" for d in h.iterdir() if pattern.match(d.name))
        return sorted(found)

    def _stop_everything(self, st: ClusterState) -> None:
        bins = cached_binaries(st.k8s_version)
        for comp in ("fleet-publisher", "kwok"):
            rec = st.processes.get(comp)
            if rec:
                terminate(rec)
        for n in st.nodes:
            lay = st.layout(n)
            if ext := st.processes.get(f"extplugin/{n.name}"):
                terminate(ext)
            for comp in ("plugin-pending", "plugin", computedomains.PLUGIN, "kubelet"):
                rec = st.processes.get(f"{comp}/{n.name}")
                if rec:
                    terminate(rec)
            ctr = st.processes.get(f"containerd/{n.name}")
            if bins is not None and ctr is not None and is_alive(ctr):
                # Through CRI so CNI releases addresses and veths; then nothing is left to kill.
                nodemod.stop_pods(lay, bins)
            if ctr:
                terminate(ctr)
            kill_pids(nodemod.shim_pids(lay))
        for comp in (computedomains.CONTROLLER, "kube-scheduler", "kube-controller-manager",
                     "kube-apiserver", "etcd"):
            rec = st.processes.get(comp)
            if rec:
                terminate(rec)

    # --- protocol: status / logs ----------------------------------------------------------------

    def status(self, name: str) -> ClusterInfo | None:
        root = clusters_dir() / validate_name(name)
        try:
            st = ClusterState.load(root)
        except FileNotFoundError:
            return None
        nodes = []
        for n in st.nodes:
            lay = st.layout(n)
            alive = all(is_alive(r) for c in ("containerd", "kubelet", "plugin", "extplugin")
                        if (r := st.processes.get(f"{c}/{n.name}")) is not None)
            nodes.append(NodeInfo(
                name=n.name, role="worker", nvml_state=lay.nvml_state, cdi_dir=lay.cdi_dir,
                plugin_state_dir=lay.plugin_state_dir, kubelet_root=lay.kubelet_root,
                running=n.running and alive,
            ))
        # Plugin instances alive per node: during an upgrade two (the serving one and the new
        # one, "pending" until the kubelet registered it).
        plugins = {n.name: [{"version": n.plugin_version if key == "plugin" else "",
                             "instance": pluginupgrade.instance_of(r), "role": key}
                            for key in ("plugin", "plugin-pending")
                            if (r := st.processes.get(f"{key}/{n.name}")) is not None
                            and is_alive(r)]
                   for n in st.nodes}
        cp_alive = {c: is_alive(r) for c in ("etcd", "kube-apiserver",
                                             "kube-controller-manager", "kube-scheduler")
                    if (r := st.processes.get(c)) is not None}
        # A fleet's KWOK and slice publisher are part of the control plane's health.
        cp_alive.update({c: is_alive(r) for c in ("kwok", "fleet-publisher")
                         if (r := st.processes.get(c)) is not None})
        return ClusterInfo(
            name=st.name, provider=self.name, k8s_version=st.k8s_version,
            kubeconfig=st.kubeconfig, topology=Path(st.topology), driver_name=st.driver,
            workload_image=st.workload_image, nodes=tuple(nodes),
            extra={"phase": st.phase, "server": st.server, "dir": str(root),
                   "control_plane": cp_alive, "plugins": plugins,
                   "node_ips": {n.name: st.layout(n).ip for n in st.nodes},
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
            with kubeapi.session(st.kubeconfig) as api:
                return all(kubeapi.node_ready(api, n.name) for n in st.nodes)
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
            dest = out / names.get(owner, owner) / log.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, dest)
            written.append(dest)
        for pod_log in sorted(root.glob("n*/pods/**/*.log")):
            rel = pod_log.relative_to(root)
            dest = out / names.get(rel.parts[0], rel.parts[0]) / Path(*rel.parts[1:])
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pod_log, dest)
            written.append(dest)
        bins = cached_binaries(st.k8s_version) if st else None
        if st is not None and bins is not None:
            for what, args in (("objects.txt", ["get", "nodes,pods,resourceclaims,"
                                                "resourceslices,deviceclasses", "-A", "-o",
                                                "wide"]),
                               ("events.txt", ["get", "events", "-A"])):
                # What kubectl says, as the user would see it; a dead apiserver is part of it.
                with contextlib.suppress(CommandError):
                    res = kubectl(st, bins, args, check=False, timeout=30)
                    (out / what).write_text(res.stdout + res.stderr)
                    written.append(out / what)
        return written

    # --- protocol: stop_node / start_node -------------------------------------------------------

    def stop_node(self, name: str, node: str) -> None:
        st = self._load_ready(name)
        if node in st.simulated:
            fleet.stop_node(st.kubeconfig, node, st.driver, self.policy)
            return
        n = st.node(node)
        if ext := st.processes.get(f"extplugin/{node}"):
            terminate(ext)
        for comp in ("plugin-pending", "plugin", computedomains.PLUGIN, "kubelet", "containerd"):
            rec = st.processes.get(f"{comp}/{node}")
            if rec:
                terminate(rec)
        n.running = False
        st.save()

    def start_node(self, name: str, node: str) -> None:
        st = self._load_ready(name)
        if node in st.simulated:
            fleet.start_node(st.kubeconfig, node, st.driver, self.policy)
            return
        n = st.node(node)
        lay = st.layout(n)
        bins = cached_binaries(st.k8s_version)
        if bins is None:
            raise MissingPrerequisite(f"Kubernetes {st.k8s_version} binaries are no longer "
                                      "cached: run `fakegpu cluster binaries` or recreate")
        if not is_alive(ctr := st.processes.get(f"containerd/{node}", _DEAD)):
            del ctr
            st.processes[f"containerd/{node}"] = nodemod.start_containerd(lay, bins, self.policy)
            st.save()
        if not is_alive(st.processes.get(f"kubelet/{node}", _DEAD)):
            self._start_kubelet(st, lay, bins)
        self._wait_ready(st, lay)
        env = json.loads((lay.root / "plugin.env").read_text())
        if external_plugin(st) is not None and not is_alive(
                st.processes.get(f"extplugin/{node}", _DEAD)):
            self._start_external(st, lay, env)
        if runs_own_plugin(st) and not is_alive(st.processes.get(f"plugin/{node}", _DEAD)):
            self._start_plugin(st, lay, env, version=n.plugin_version,
                               instance=n.plugin_instance)
        if n.has_gpus:
            self._wait_slices(st, lay)
        if runs_own_plugin(st) and n.has_gpus and not is_alive(
                st.processes.get(f"{computedomains.PLUGIN}/{node}", _DEAD)):
            self._record(computedomains.start_plugin(lay, st.driver, env), st)
        n.running = True
        st.save()

    # --- protocol: node_nvml ---------------------------------------------------------------------

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]:
        # The node's plugin and its pods' runtime use this very file on this host.
        st = self._load_ready(name)
        if node in st.simulated:  # the fleet publisher follows this file
            path = fleet.state_path(st.root, node)
            return subprocess.run([sys.executable, "-m", "fakegpu", *args, "--state", str(path)],
                                  capture_output=True, text=True, timeout=120, check=False)
        n = st.node(node)
        path = st.layout(n).nvml_state
        if not n.has_gpus or not path.is_file():
            raise InvalidInput(f"node {node!r} of cluster {name!r} has no GPUs")
        return subprocess.run([sys.executable, "-m", "fakegpu", *args, "--state", str(path)],
                              capture_output=True, text=True, timeout=120, check=False)

    def _load_ready(self, name: str) -> ClusterState:
        try:
            return ClusterState.load(clusters_dir() / validate_name(name))
        except FileNotFoundError:
            raise InvalidInput(f"no cluster {name!r}: run `fakegpu cluster up --name "
                               f"{name}`") from None


class _Bringup:
    """One embedded bring-up: its state (saved first, by the lifecycle) and its actions."""

    def __init__(self, provider: EmbeddedProvider, spec: ClusterSpec) -> None:
        self.p = provider
        self.spec = spec
        self.topology: Topology = spec.topology
        self.state = ClusterState(
            name=spec.name, root=clusters_dir() / spec.name, k8s_version=spec.k8s_version,
            topology=str(spec.topology_file), driver=provider.driver,
            plugin=provider.plugin.to_json() if provider.plugin else None,
            nodes=[NodeState(n.name, i, bool(n.gpus))
                   for i, n in enumerate(spec.topology.real_nodes)],
            simulated=[n.name for n in spec.topology.simulated_nodes])
        self.bins: NodeBinaries | None = None
        self.imgs: images.Images | None = None
        self.cp: ControlPlane | None = None
        self.kwok: Path | None = None

    def actions(self) -> Sequence[Action]:
        n = len(self.state.nodes)
        return [
            Action("Kubernetes binaries", self._binaries),
            Action("container images", self._images),
            Action("node network", lambda: self.p._network(self.state)),
            Action("control plane (etcd, kube-apiserver, controller-manager, scheduler)",
                   self._control_plane),
            Action("cluster objects (plugin RBAC, DeviceClasses)",
                   lambda: self.p._apply_objects(self.state, self._bins())),
            Action(f"node files and certificates ({n} nodes)", self._node_files),
            Action("containerd on every node", self._containerd),
            Action("import images into every node", self._import_images),
            Action("kubelets", self._kubelets),
            Action("fakegpu plugins and ResourceSlices", self._plugins),
            *([Action(f"simulated nodes ({len(self.state.simulated)}: KWOK and the fleet "
                      "slice publisher)", self._fleet)] if self.state.simulated else []),
        ]

    def _bins(self) -> NodeBinaries:
        assert self.bins is not None, "the binaries action runs first"
        return self.bins

    def _layouts(self) -> list[NodeLayout]:
        return [self.state.layout(n) for n in self.state.nodes]

    def _binaries(self) -> None:
        self.bins = _binaries(self.spec.k8s_version, self.p.console)
        if self.state.simulated:
            self.kwok = fleet.kwok_binary(self.p.console)

    def _images(self) -> None:
        self.imgs = images.ensure_images(console=self.p.console)
        self.state.workload_image = self.imgs.workload_ref
        self.state.pause_image = self.imgs.pause_ref
        self.state.save()

    def _control_plane(self) -> None:
        self.cp = self.p._control_plane(self.state, self._bins())

    def _node_files(self) -> None:
        assert self.cp is not None and self.cp.certs is not None
        for lay in self._layouts():
            self.p._node_files(self.state, lay, self._bins(), self.cp.certs, self.cp.gates or {})

    def _containerd(self) -> None:
        for lay in self._layouts():
            self.state.processes[f"containerd/{lay.name}"] = nodemod.start_containerd(
                lay, self._bins(), self.p.policy)
            self.state.save()

    def _import_images(self) -> None:
        assert self.imgs is not None
        for lay in self._layouts():
            images.import_images(self._bins(), lay.containerd_socket, self.imgs.archives)

    def _kubelets(self) -> None:
        layouts = self._layouts()
        for lay in layouts:
            self.p._start_kubelet(self.state, lay, self._bins())
        for lay in layouts:
            self.p._wait_ready(self.state, lay)

    def _plugins(self) -> None:
        layouts = self._layouts()
        envs = {lay.name: _render_nvml(self.topology, lay.name, lay.nvml_state)
                for lay in layouts}
        for lay in layouts:
            if runs_own_plugin(self.state):
                self.p._start_plugin(self.state, lay, envs[lay.name])
            if external_plugin(self.state) is not None:
                self.p._start_external(self.state, lay, envs[lay.name])
        for n, lay in zip(self.state.nodes, layouts, strict=True):
            if n.has_gpus:
                self.p._wait_slices(self.state, lay)
        if runs_own_plugin(self.state):
            self.p._start_compute_domains(self.state, envs)
        if not self.state.simulated:
            self.state.phase = "ready"
            self.state.save()

    def _fleet(self) -> None:
        st = self.state
        assert self.kwok is not None, "the binaries action found KWOK"
        node_prefix, pod_prefix = slot_network(st.slot)

        def record(rec: ProcessRecord) -> None:
            st.processes[rec.name] = rec
            st.save()

        # Pod addresses above every real node's /24 (those end at .199), one node address.
        fleet.start(st.root, st.kubeconfig, Path(st.topology), self.topology, st.driver,
                    self.kwok, f"{pod_prefix}.240.0/20", f"{node_prefix}.250", record)
        # Every simulated node at once: a bigger fleet gets a longer wait.
        policy = self.p.policy.scaled(max(1.0, len(st.simulated) / 100))
        fleet.wait_ready(st.kubeconfig, st.simulated, st.driver, policy,
                         [st.processes["kwok"], st.processes["fleet-publisher"]])
        st.phase = "ready"
        st.save()


_DEAD = ProcessRecord("none", 0, -1, "", Path("/dev/null"))


def _install(st: ClusterState, api_version: str = "v1") -> Install:
    """The chart's values for this cluster (its driver; DeviceClasses in ``api_version``)."""
    return Install(driver=st.driver, resource_api=f"resource.k8s.io/{api_version}")


def kubectl(st: ClusterState, bins: NodeBinaries, args: list[str], *, check: bool = True,
            timeout: float = 60.0, input_text: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return run([str(bins.kubectl), f"--kubeconfig={st.kubeconfig}", *args], check=check,
               timeout=timeout, input_text=input_text)


def cached_binaries(version: str) -> NodeBinaries | None:
    """The cluster's binaries if still cached; None also for a version this fakegpu no
    longer supports (a state written by another release)."""
    from fakegpu.cluster import binaries

    try:
        found: NodeBinaries | None = binaries.cached(version)
    except InvalidInput:
        return None
    return found


def _delete_forward_rules(rules: list[list[str]]) -> None:
    if not rules or shutil.which("iptables") is None:
        return
    for rule in rules:
        # -D removes one copy per call: repeat until none is left (idempotent down).
        for _ in range(10):
            if run(["iptables", "-w", "5", "-D", "FORWARD", *rule], timeout=30,
                   check=False).returncode != 0:
                break


def _remove_host_leftovers(root: Path, name: str) -> None:
    """Files outside the cluster dir that the kubelets and CNI write on the host's paths."""
    containers = Path("/var/log/containers")
    if containers.is_dir():
        for link in containers.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(root) + "/"):
                    link.unlink()
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        pattern = re.compile(rf"^fakegpu-{re.escape(name)}-\d+-")
        for f in results.iterdir():
            if pattern.match(f.name):
                with contextlib.suppress(OSError):
                    f.unlink()
