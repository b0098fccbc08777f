"""Move a running embedded cluster to another cached Kubernetes minor, as an operator would.

The reference is upstream's DRA version-skew test (test/e2e/dra/versionskew.go): a cluster
on one release, its control plane and then its kubelets moved to another, with a driver and
its pods running throughout. Kubernetes' skew policy lets a kubelet be older than the
apiserver, never newer, so an upgrade replaces the control plane first (apiserver, then
controller-manager and scheduler, on the same ports; etcd and its data stay) and then the
kubelets node by node; a downgrade goes the other way round: kubelets first, control plane
last. One minor at a time, as Kubernetes itself supports.

On a node only the kubelet is replaced (``EmbeddedNode.replace_kubelet``): containerd, the
node's pods and its plugins keep running; the new kubelet adopts the pods it finds in
containerd, and the plugins register again with it. Simulated nodes (KWOK) have no kubelet:
they are left as they are.

Every step is saved as it completes (``ClusterState.k8s_version``: the control plane's;
``NodeState.k8s_version``: each kubelet's), so `status`, `node start` and `down` use the
binaries that really run, and running the command again after a failure finishes the job:
what is already at the version is skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from fakegpu.cluster import featuregates
from fakegpu.cluster.embedded import worker
from fakegpu.cluster.embedded.controlplane import ControlPlane, ControlPlaneCerts, Ports
from fakegpu.cluster.embedded.layout import NodeBinaries
from fakegpu.cluster.embedded.state import ClusterState
from fakegpu.cluster.process import WaitPolicy
from fakegpu.errors import InvalidInput, MissingPrerequisite


def target_binaries(st: ClusterState, version: str) -> NodeBinaries:
    """The cached binaries of ``version`` for cluster ``st``; InvalidInput (exit 2) for a
    version fakegpu does not support or more than one minor away from the control plane's,
    MissingPrerequisite (exit 3) when that version is not cached."""
    from fakegpu.cluster.artifacts import binaries

    if st.phase != "ready":
        raise InvalidInput(f"cluster {st.name!r} is not ready (phase {st.phase!r}): only a "
                           "cluster that came up can be upgraded")
    if not st.cp_ports:
        raise InvalidInput(f"cluster {st.name!r} was made by an earlier fakegpu that did not "
                           "record its control plane's ports: recreate it to upgrade it")
    if stopped := [n.name for n in st.nodes if not n.running]:
        raise InvalidInput(f"cluster {st.name!r}: node {stopped[0]} is stopped: start it "
                           f"(`fakegpu cluster node start {stopped[0]} --cluster {st.name}`), "
                           "then upgrade")
    wanted = binaries.resolve_version(version)  # InvalidInput naming the supported ones
    minor, current = featuregates.parse_minor(wanted), featuregates.parse_minor(st.k8s_version)
    featuregates.dra_gates(minor)  # InvalidInput when no DRA table covers it
    if abs(minor - current) > 1:
        raise InvalidInput(f"--to {version}: cluster {st.name!r} runs Kubernetes "
                           f"{st.k8s_version}; move one minor at a time (1.{current - 1} or "
                           f"1.{current + 1}), as Kubernetes supports")
    bins: NodeBinaries | None = binaries.cached(wanted)
    if bins is None:
        raise MissingPrerequisite(f"Kubernetes {wanted} is not cached: run `fakegpu cluster "
                                  f"binaries --k8s-version 1.{minor}` first (a build of tens "
                                  "of minutes when nothing can be downloaded)")
    return bins


def upgrade(st: ClusterState, version: str, policy: WaitPolicy,
            say: Callable[[str], None]) -> list[str]:
    """Move ``st`` to Kubernetes ``version``; what it changed ("control plane", node names)."""
    bins = target_binaries(st, version)
    newer = featuregates.parse_minor(bins.k8s_version) >= featuregates.parse_minor(
        st.k8s_version)
    steps: list[Callable[[], list[str]]] = [
        lambda: _control_plane(st, bins, policy, say), lambda: _kubelets(st, bins, policy, say)]
    changed: list[str] = []
    for step in steps if newer else reversed(steps):
        changed += step()
    return changed


def _control_plane(st: ClusterState, bins: NodeBinaries, policy: WaitPolicy,
                   say: Callable[[str], None]) -> list[str]:
    if st.k8s_version == bins.k8s_version:
        return []
    say(f"control plane: Kubernetes {st.k8s_version} -> {bins.k8s_version} (kube-apiserver, "
        "kube-controller-manager, kube-scheduler; etcd keeps running)")
    running = [r for name in ("etcd", *ControlPlane.KUBERNETES) if (r := st.process(name))]
    cp = ControlPlane(st.cp_dir, bins, controllers=True, policy=policy, cluster_name=st.name,
                      ports=Ports(**st.cp_ports), processes=running,
                      certs=ControlPlaneCerts.load(st.cp_dir / "pki"))
    try:
        cp.restart_on(bins)
    finally:
        # The new components' records replace the old ones, even when one failed to start.
        for rec in cp.processes:
            st.processes[rec.name] = rec
        st.save()
    st.k8s_version = bins.k8s_version
    st.save()
    say(f"control plane: Kubernetes {bins.k8s_version} serves")
    return ["control plane"]


def _kubelets(st: ClusterState, bins: NodeBinaries, policy: WaitPolicy,
              say: Callable[[str], None]) -> list[str]:
    gates = featuregates.dra_gates(featuregates.parse_minor(bins.k8s_version))
    changed = []
    for node in worker.nodes(st, policy):
        n = node.state
        if n.k8s_version == bins.k8s_version:
            continue
        say(f"node {n.name}: kubelet {n.k8s_version} -> {bins.k8s_version} (its pods and "
            "plugins keep running)")
        node.replace_kubelet(bins, gates)
        n.k8s_version = bins.k8s_version
        st.save()
        changed.append(n.name)
        say(f"node {n.name}: kubelet {bins.k8s_version} Ready, plugin registered, slices "
            "published")
    return changed
