"""The one cleanup path of the embedded provider (``down``, and a failed ``up``).

Works from the state when there is one, and without it finds what it can: processes naming
the cluster's directory, mounts under it, cgroups by name, host files that name it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from rich.console import Console

from fakegpu.cluster import cleanup
from fakegpu.cluster.embedded import computedomains, fleet, network, worker
from fakegpu.cluster.embedded.state import ClusterState, StateError, cached_binaries
from fakegpu.cluster.process import WaitPolicy, kill_pids, pids_matching, terminate
from fakegpu.kubeletplugin.checkpoint import Records
from fakegpu.nic import netdev

# The control plane's processes, stopped after the nodes, last started first.
CONTROL_PLANE = (computedomains.CONTROLLER, "kube-scheduler", "kube-controller-manager",
                 "kube-apiserver", "etcd")


def delete(root: Path, name: str, console: Console, policy: WaitPolicy) -> None:
    st: ClusterState | None = None
    try:
        st = ClusterState.load(root)
    except FileNotFoundError:
        pass  # a killed `up` before its first save, or nothing at all
    except StateError as err:
        # Still remove what can be found without it: processes naming the directory,
        # mounts, cgroups by name. Say so: its interfaces and rules are not known.
        console.print(f"[yellow]{err}: removing what can be found without it[/]",
                      soft_wrap=True)
    if st is not None:
        stop_everything(st, policy)
    # Whatever is left (no state, a killed `up`): anything still running from our dir.
    own = os.getpid()
    stray = pids_matching(lambda argv: any(str(root) + "/" in a or a == str(root)
                                           for a in argv))
    kill_pids([p for p in stray if p != own])
    cleanup.unmount_under(root)
    if st is not None:
        network.delete(st)
        _remove_nic_links(st)
    for rel in _cgroups(name, st):
        cleanup.remove_cgroup_tree(rel)
    _remove_host_leftovers(root, name)
    cleanup.unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)


def stop_everything(st: ClusterState, policy: WaitPolicy) -> None:
    bins = cached_binaries(st.k8s_version)
    for comp in (fleet.PUBLISHER, fleet.KWOK):
        if rec := st.process(comp):
            terminate(rec)
    for node in (worker.EmbeddedNode(st, n, policy) for n in st.nodes):
        node.stop(bins)
    for comp in CONTROL_PLANE:
        if rec := st.process(comp):
            terminate(rec)


def _remove_nic_links(st: ClusterState) -> None:
    """The node-side interfaces of NIC claims prepared for pods that never took them (a pod
    that did takes them along when its namespace goes): the host's network namespace is
    shared, so they would outlive the cluster."""
    for n in st.nodes:
        state = st.layout(n).nic_state_dir
        if not state.is_dir():
            continue
        links = [netdev.host_link(str(state), d.device_name)
                 for claim in Records(state).all().values() for d in claim.devices]
        cleanup.delete_links(name for link in links for name in (link.wire, link.port))


def _cgroups(name: str, st: ClusterState | None) -> list[str]:
    found = set(st.cgroups if st else [])
    pattern = re.compile(rf"^fakegpu-{re.escape(name)}-\d+$")
    for h in cleanup.cgroup_hierarchies():
        with contextlib.suppress(OSError):
            found.update(f"/{d.name}" for d in h.iterdir() if pattern.match(d.name))
    return sorted(found)


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
