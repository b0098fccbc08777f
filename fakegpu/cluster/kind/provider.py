"""The kind provider: the same protocol as the embedded provider, on Docker containers.

A bring-up is an ordered list of actions (Docker, node image, kind cluster, pod network,
plugin image, fake GPU nodes, the DRA driver, readiness) that ``lifecycle.py`` runs, as it
runs the embedded provider's: validation, progress, logs and cleanup on failure are written
there once. State lives in ``paths.cache_dir()/kind/clusters/<name>/state.json``
(``state.py``).

What runs on the nodes is installed with Helm in ``charts.py`` (fake GPU nodes, then the DRA
driver: fakegpu's or another vendor's chart); work on a node's fake node pod (which one,
fakegpu run in it, its NVML state checked) is in ``hostpod.py``. Slightly over ~400 lines
on purpose: what is left is the protocol and the bring-up steps, which share the provider's
``kind`` wrapper and policy; moving the steps out would have another module call this one's
private methods (what the embedded split removed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from fakegpu.cluster import featuregates, imagealiases, inotify
from fakegpu.cluster.artifacts import images
from fakegpu.cluster.kind import (
    charts,
    config,
    dockerhost,
    hostpod,
    image,
    nodefiles,
    nodeimage,
    tools,
)
from fakegpu.cluster.kind.state import KindState, clusters_dir
from fakegpu.cluster.names import validate_name
from fakegpu.cluster.process import WaitPolicy, run, wait_until
from fakegpu.cluster.provider import Action, ClusterInfo, ClusterSpec, NodeInfo, PluginInstances
from fakegpu.errors import FakegpuError, InvalidInput, MissingPrerequisite
from fakegpu.kube import api as kubeapi
from fakegpu.topology.model import Topology

if TYPE_CHECKING:
    from fakegpu.cluster.upgrade import Target

NODE_IMAGE_ENV = "FAKEGPU_KIND_NODE_IMAGE"
CHART = charts.CHART
RELEASE = charts.RELEASE
NAMESPACE = charts.NAMESPACE
NODE_TOOLS = charts.NODE_TOOLS


def choose_node_image(docker: Path, version: str, console: Console) -> str:
    """$FAKEGPU_KIND_NODE_IMAGE, kindest/node where a registry answers, else our own."""
    if os.environ.get(NODE_IMAGE_ENV):
        return os.environ[NODE_IMAGE_ENV]
    if image.registry_reachable():
        return f"{nodeimage.KINDEST_NODE}:v{version}"
    return nodeimage.assemble(docker, version, console).ref


class KindProvider:
    name = "kind"

    def __init__(self, console: Console | None = None, *,
                 policy: WaitPolicy | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.policy = policy or WaitPolicy(timeout=300.0, interval=1.0)

    # --- tools ----------------------------------------------------------------------------------

    def _kind(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        kind = tools.executable(tools.kind(), self.console)
        env = {**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "docker"}
        return run([str(kind), *args], timeout=timeout, env=env)

    def _exists(self, name: str) -> bool:
        if tools.cached(tools.kind()) is None or dockerhost.unavailable_reason() is not None:
            return False
        docker = dockerhost.docker_client()
        if docker is None or not dockerhost.daemon_answers(docker, 5):
            return False
        return name in self._kind("get", "clusters", timeout=60).stdout.split()

    # --- protocol: exists / check_host / provision ----------------------------------------------

    def exists(self, name: str) -> bool:
        return KindState.load(name) is not None or self._exists(name)

    def check_host(self, spec: ClusterSpec) -> None:
        """Docker and the tools are obtained by the first action (they may need a build); what
        the package must carry (chart, Dockerfile, its own files) is checked before that."""
        if not (CHART / "Chart.yaml").is_file():
            raise MissingPrerequisite(f"the kind provider installs the chart {CHART}, which is "
                                      "missing (reinstall fakegpu)")
        image.check_inputs()
        if spec.plugin is not None:
            raise InvalidInput("--plugin-bin runs a host binary: embedded provider only")
        if spec.topology.simulated_nodes:
            # Each topology node would become a node container (docs/scale.md: what kind
            # needs for fleets).
            raise InvalidInput(f"{spec.topology_file}: simulated nodes (fleets) need the "
                               "embedded provider; the kind provider does not run them")

    def provision(self, spec: ClusterSpec) -> _Bringup:
        return _Bringup(self, spec)

    def _docker(self, st: KindState) -> Path:
        host = dockerhost.ensure(self.console)
        # Every node container runs a kubelet and containerd (and systemd) holding inotify
        # instances; at the usual 128 per user kube-proxy crash-loops with "too many open
        # files" in a five-node kind cluster.
        nodes = len(st.workers) + 1  # the control-plane node runs a kubelet too
        for line in inotify.ensure_inotify(
                inotify.inotify_need(nodes, inotify.inotify_in_use())):
            self.console.print(f"[yellow]{line}[/]")
        return host.docker

    def _node_image(self, st: KindState, docker: Path) -> None:
        st.node_image = choose_node_image(docker, st.k8s_version, self.console)
        st.workload_image = images.workload_ref()
        st.save()

    def _create_cluster(self, st: KindState) -> None:
        minor = featuregates.parse_minor(st.k8s_version)
        cfg = st.root / "kind.yaml"
        cfg.write_text(config.dump(config.render(minor, st.workers, st.node_image)))
        self._kind("create", "cluster", "--name", st.name, "--config", str(cfg),
                   "--kubeconfig", str(st.kubeconfig), "--retain", timeout=1200)

    def _pod_network(self, st: KindState) -> None:
        st.containers = self._containers(st)
        st.save()
        self._network(st)

    def _plugin_image(self, st: KindState, docker: Path) -> None:
        st.plugin_image = image.build(docker, self.console).ref
        self._load_image(st)(st.plugin_image)
        st.save()

    def _wait_slices(self, st: KindState, topo: Topology) -> None:
        want = {n.name for n in topo.nodes}
        # A plugin that started while kube-proxy was still settling backs off up to 60 s.
        # The NIC plugin serves the nodes whose topology has a PCIe tree (docs/nics.md), unless
        # the cluster runs none.
        nics = {n.name for n in topo.nodes if n.pcie is not None and st.nic_driver}
        wait_until("a whole ResourceSlice pool of every worker (and its NICs')",
                   lambda: self._complete_pools(st) >= want
                   and (not nics or self._complete_pools(st, st.nic_driver) >= nics),
                   WaitPolicy(max(self.policy.timeout, 600.0), self.policy.interval))

    def _nvml_copies(self, st: KindState, topo: Topology) -> None:
        """Render each worker's NVML state on the host too (``NodeInfo.nvml_state``), the same
        bytes as its fake node pod's (``hostpod.check_states``)."""
        from fakegpu.nvml import env as nvml_env

        hostpod.check_states(st, {
            node: nvml_env.ensure_state(topo, node, self.nvml_state(st, node), fresh=True)
            for node in st.workers})

    @staticmethod
    def nvml_state(st: KindState, node: str) -> Path:
        return st.root / "nvml" / f"{node}.state"

    def _containers(self, st: KindState) -> dict[str, str]:
        """Kubernetes node name -> kind container, matched by the node's InternalIP."""
        docker = str(dockerhost.docker_client())
        names = self._kind("get", "nodes", "--name", st.name, timeout=60).stdout.split()
        by_ip: dict[str, str] = {}
        for c in names:
            ip = run([docker, "inspect", "-f",
                      "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", c]).stdout
            by_ip[ip.strip()] = c
        with kubeapi.session(st.kubeconfig) as api:
            nodes = kubeapi.nodes(api)
        out: dict[str, str] = {}
        for n in nodes:
            out[n["metadata"]["name"]] = by_ip[kubeapi.internal_ip(n)]
        missing = [w for w in st.workers if w not in out]
        if missing:
            raise FakegpuError(f"kind made no node named {', '.join(missing)} (nodes: {out})")
        return out

    def _network(self, st: KindState) -> None:
        """Bridge CNI per node from its podCIDR, and routes to every other node's pods."""
        docker = str(dockerhost.docker_client())
        with kubeapi.session(st.kubeconfig) as api:
            wait_until("a podCIDR on every node", lambda: all(
                n["spec"].get("podCIDR") for n in kubeapi.nodes(api)), self.policy)
            nodes = kubeapi.nodes(api)
        info = {n["metadata"]["name"]: (n["spec"]["podCIDR"], kubeapi.internal_ip(n))
                for n in nodes}
        for node, (cidr, _ip) in info.items():
            container = st.containers[node]
            run([docker, "exec", "-i", container, "sh", "-c",
                 "cat > /etc/cni/net.d/10-fakegpu.conflist"],
                input_text=nodefiles.cni_conflist(cidr))
            for other, (ocidr, oip) in info.items():
                if other != node:
                    run([docker, "exec", container, "ip", "route", "replace", ocidr, "via", oip])
        # CoreDNS: no image can be had here (see nodeimage.py); nothing may wait for it.
        if not os.environ.get(NODE_IMAGE_ENV, "").startswith(nodeimage.KINDEST_NODE):
            with kubeapi.session(st.kubeconfig) as api:
                kubeapi.scale_deployment(api, "kube-system", "coredns", 0)

    def _node_tools(self, st: KindState) -> None:
        """nvidia-smi (static) and the fake libnvidia-ml.so.1 on every worker, at the node
        paths the chart's nvmlInContainers names: prepared claims' CDI specs mount them."""
        from fakegpu import nvidiasmi
        from fakegpu.nvml.env import library_path

        docker = str(dockerhost.docker_client())
        for worker in st.workers:
            container = st.containers[worker]
            run([docker, "exec", container, "mkdir", "-p", *{str(Path(p).parent)
                                                            for p in NODE_TOOLS.values()}])
            for host, node_path in ((nvidiasmi.path(), NODE_TOOLS["nvidiaSmi"]),
                                    (library_path(), NODE_TOOLS["library"])):
                run([docker, "cp", "-L", str(host), f"{container}:{node_path}"])

    def _install_nodes(self, st: KindState) -> None:
        self._node_tools(st)
        helm = tools.executable(tools.helm(), self.console)
        charts.install(helm, st, charts.nodes_release(st), self._load_image(st))
        charts.wait_hosts(st, self.policy)

    def _install_driver(self, st: KindState) -> None:
        helm = tools.executable(tools.helm(), self.console)
        charts.install(helm, st, charts.driver_release(st), self._load_image(st))

    def _load_image(self, st: KindState) -> Callable[[str], None]:
        def load(ref: str) -> None:
            self._kind("load", "docker-image", ref, "--name", st.name,
                       "--nodes", ",".join(st.containers[w] for w in st.workers))
        return load

    def _all_ready(self, st: KindState) -> bool:
        with kubeapi.session(st.kubeconfig) as api:
            nodes = kubeapi.nodes(api)
        return len(nodes) == len(st.workers) + 1 and all(kubeapi.is_ready(n) for n in nodes)

    def _complete_pools(self, st: KindState, driver: str | None = None) -> set[str]:
        with kubeapi.session(st.kubeconfig) as api:
            return kubeapi.complete_pools(
                kubeapi.resource_slices(api, driver=driver or st.driver))

    def delete(self, name: str) -> None:
        validate_name(name)
        if self._exists(name):
            self._kind("delete", "cluster", "--name", name, timeout=300)
        shutil.rmtree(clusters_dir() / name, ignore_errors=True)

    def status(self, name: str) -> ClusterInfo | None:
        validate_name(name)
        st = KindState.load(name)
        if st is None:
            return None
        pids = self._container_pids(list(st.containers.values()))
        nodes = []
        for w in st.workers:
            pid = pids.get(st.containers.get(w, ""))
            # The node's own files, seen from this host through its init process's root (valid
            # while the container runs): what the plugin and containerd in there really use.
            inside = Path(f"/proc/{pid}/root") if pid else None
            host_state = self.nvml_state(st, w)
            nodes.append(NodeInfo(
                name=w, role="worker",
                nvml_state=host_state if host_state.is_file() else None,
                # /var/run is an absolute link to /run in the node; through /proc/<pid>/root
                # it would resolve on this host, so name the target itself.
                cdi_dir=inside / "run/cdi" if inside else None,
                plugin_state_dir=inside / "var/lib/kubelet/plugins" / st.driver if inside
                else None,
                kubelet_root=inside / "var/lib/kubelet" if inside else None,
                running=pid is not None))
        return ClusterInfo(
            name=st.name, provider=self.name, k8s_version=st.k8s_version,
            kubeconfig=st.kubeconfig, topology=Path(st.topology), driver_name=st.driver,
            workload_image=st.workload_image, nodes=tuple(nodes), nic_driver=st.nic_driver,
            extra={"phase": st.phase, "node_image": st.node_image,
                   "plugin_image": st.plugin_image, "containers": st.containers,
                   "dir": str(st.root), "driver_chart": st.chart})

    def healthy(self, name: str) -> bool:
        info = self.status(name)
        if info is None or info.extra.get("phase") != "ready":
            return False
        st = KindState.load(name)
        try:
            return st is not None and self._all_ready(st)
        except kubeapi.ERRORS:  # refused or unreachable: not healthy
            return False

    def _container_pids(self, names: list[str]) -> dict[str, int]:
        """Running containers among ``names`` -> the host pid of their init process."""
        docker = dockerhost.docker_client()
        if not names or docker is None or not dockerhost.daemon_answers(docker, 5):
            return {}
        res = run([str(docker), "inspect", "-f", "{{.Name}} {{.State.Pid}}", *names],
                  check=False)
        out: dict[str, int] = {}
        for line in res.stdout.splitlines():
            name, _, pid = line.strip().lstrip("/").partition(" ")
            if pid.isdigit() and int(pid) > 0:
                out[name] = int(pid)
        return out

    def logs(self, name: str, out: Path) -> list[Path]:
        validate_name(name)
        out.mkdir(parents=True, exist_ok=True)
        if not self._exists(name):
            return []
        dest = out / f"kind-{name}"
        self._kind("export", "logs", str(dest), "--name", name, timeout=600)
        return sorted(p for p in dest.rglob("*") if p.is_file())

    def stop_node(self, name: str, node: str) -> None:
        st = self._ready_state(name)
        run([str(dockerhost.docker_client()), "stop", st.containers[self._worker(st, node)]],
            timeout=120)

    def start_node(self, name: str, node: str) -> None:
        st = self._ready_state(name)
        container = st.containers[self._worker(st, node)]
        run([str(dockerhost.docker_client()), "start", container], timeout=120)
        # A restarted container keeps its files (CNI config included) but not its routes.
        self._network(st)
        wait_until(f"node {node} Ready", lambda: self._node_ready(st, node), self.policy)

    def restart_plugin(self, name: str, node: str) -> None:
        from fakegpu.cluster.kind import upgrade

        st = self._ready_state(name)
        self._worker(st, node)  # an unknown node is bad input
        chart = st.driver_chart()
        if chart is not None:
            raise InvalidInput(f"cluster {name!r} runs another vendor's chart "
                               f"({chart.chart}): delete its plugin pod on {node} with kubectl "
                               f"(namespace {chart.namespace})")
        upgrade.restart_pod(st, node, self.policy)

    def node_nvml(self, name: str, node: str, args: Sequence[str]
                  ) -> subprocess.CompletedProcess[str]:
        # The node's NVML state lives in its fake node pod: the command runs there.
        st = self._ready_state(name)
        return hostpod.run_fakegpu(st, self._worker(st, node), args)

    def plugin_instances(self, name: str) -> PluginInstances:
        from fakegpu.cluster.kind import upgrade

        return upgrade.plugin_instances(self._ready_state(name))

    def tag_images(self, name: str, names: Sequence[str]) -> None:
        _tag_images(self._ready_state(name), names)

    def upgrade_plugin(self, name: str, target: Target,
                       say: Callable[[str], None] = lambda _line: None) -> list[str]:
        from fakegpu.cluster.kind import upgrade

        st = self._ready_state(name)
        chart = st.driver_chart()
        if chart is not None:
            raise InvalidInput(f"cluster {name!r} runs another vendor's chart "
                               f"({chart.chart}): upgrade it with helm (release "
                               f"{chart.release} in namespace {chart.namespace})")
        return upgrade.upgrade(self, st, target, say)

    def upgrade_kubernetes(self, name: str, version: str,
                           say: Callable[[str], None] = lambda _line: None) -> list[str]:
        # A kind node's Kubernetes is its node image: moving it means new node containers.
        raise InvalidInput(f"cluster {name!r} is a kind cluster: upgrade-kubernetes moves "
                           "embedded clusters only; recreate it with --k8s-version "
                           f"{version}")

    def _node_ready(self, st: KindState, node: str) -> bool:
        with kubeapi.session(st.kubeconfig) as api:
            return kubeapi.node_ready(api, node)

    def _ready_state(self, name: str) -> KindState:
        validate_name(name)
        st = KindState.load(name)
        if st is None or st.phase != "ready":
            raise InvalidInput(f"no ready kind cluster {name!r}")
        return st

    @staticmethod
    def _worker(st: KindState, node: str) -> str:
        if node not in st.workers:
            raise InvalidInput(f"{node!r} is not a worker of {st.name} "
                               f"(workers: {', '.join(st.workers)})")
        return node



def _tag_images(st: KindState, names: Sequence[str]) -> None:
    """The workload image under ``names`` too, in every node container's containerd."""
    docker = dockerhost.docker_client()
    if docker is None:
        raise FakegpuError(f"kind cluster {st.name!r}: no docker client")
    imagealiases.tag(st.workload_image, names,
                     [(node, [str(docker), "exec", container, "ctr"])
                      for node, container in sorted(st.containers.items())])


class _Bringup:
    """One kind bring-up: its state (saved first, by the lifecycle) and its actions."""

    def __init__(self, provider: KindProvider, spec: ClusterSpec) -> None:
        self.p = provider
        self.state = KindState(name=spec.name, k8s_version=spec.k8s_version,
                            topology=str(spec.topology_file),
                            driver=spec.chart.driver if spec.chart else spec.driver,
                            workers=[n.name for n in spec.topology.nodes],
                            nic_driver=spec.nic_driver,
                            chart=spec.chart.to_json() if spec.chart else None)
        self.topology = spec.topology
        self.aliases = spec.image_aliases
        self.docker: Path | None = None

    def actions(self) -> Sequence[Action]:
        p, st = self.p, self.state
        chart = st.driver_chart()
        return [
            Action("Docker", self._host),
            Action(f"kind node image (Kubernetes {st.k8s_version})",
                   lambda: p._node_image(st, self._docker())),
            Action(f"kind create cluster ({len(st.workers)} workers)",
                   lambda: p._create_cluster(st)),
            Action("pod network", lambda: p._pod_network(st)),
            Action("plugin image", lambda: p._plugin_image(st, self._docker())),
            Action("fake GPU nodes (fakegpu chart)", lambda: p._install_nodes(st)),
            Action(f"DRA driver {st.driver} "
                   f"({'chart ' + chart.chart if chart else 'fakegpu chart'})",
                   lambda: p._install_driver(st)),
            Action("nodes Ready", lambda: wait_until("every node Ready",
                                                     lambda: p._all_ready(st), p.policy)),
            Action("ResourceSlices of every worker",
                   lambda: p._wait_slices(st, self.topology)),
            *([Action(f"workload image also named {', '.join(self.aliases)}",
                      lambda: _tag_images(st, self.aliases))] if self.aliases else []),
            Action("NVML state copies for the suites", self._finish),
        ]

    def _host(self) -> None:
        self.docker = self.p._docker(self.state)

    def _docker(self) -> Path:
        assert self.docker is not None, "the Docker action runs first"
        return self.docker

    def _finish(self) -> None:
        self.p._nvml_copies(self.state, self.topology)
        self.state.phase = "ready"
        self.state.save()
