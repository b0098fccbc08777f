"""What the embedded provider records of a cluster: ``<root>/state.json``, one schema.

Everything a bring-up makes is recorded here *before* it is made, so the one cleanup path
(``teardown.py``) removes it whether ``up`` finished, failed or was killed. The file is the
dataclasses below as ``dataclasses.asdict`` writes them (as ``KindState``), plus a version.
Layout (short paths: unix sockets live inside)::

    /var/lib/fakegpu/<cluster>/          $FAKEGPU_CLUSTERS_DIR/<cluster>
      state.json  kubeconfig
      cp/        pki/ etcd/ logs/ *.kubeconfig           control plane
      n<i>/      containerd/ kubelet/ cdi/ nvml/ plugin/ logs/ ...   worker i
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fakegpu import drivers, fsutil
from fakegpu.cluster.embedded.layout import NodeBinaries, NodeLayout
from fakegpu.cluster.external import ExternalPlugin
from fakegpu.cluster.names import validate_name
from fakegpu.cluster.process import ProcessRecord
from fakegpu.errors import FakegpuError, InvalidInput

CLUSTERS_ENV = "FAKEGPU_CLUSTERS_DIR"
DEFAULT_DRIVER = drivers.DEFAULT
STATE_VERSION = 1
MAX_SLOTS = 50  # node IPs are 10.250.<slot>.<10+i>; pod subnets 10.<200+slot>.<i>.0/24


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


def process_key(component: str, node: str | None = None) -> str:
    """The one spelling of a process's key in the state: ``<component>/<node>`` for a node's
    component, ``<component>`` for the control plane's."""
    return f"{component}/{node}" if node else component


@dataclass
class NodeState:
    name: str
    index: int
    has_gpus: bool
    running: bool = True
    plugin_version: str = ""  # set by upgrade_plugin; "" is the stamp the plugin finds itself
    plugin_instance: str = ""  # the serving instance's id ("" for the first one)
    # Its kubelet's Kubernetes version: the cluster's, except while `upgrade-kubernetes`
    # moves the nodes one by one (k8supgrade.py). "" in a state from before: the cluster's.
    k8s_version: str = ""


LATER = {"later": True}


@dataclass
class ClusterState:
    name: str
    root: Path
    k8s_version: str = ""  # the control plane's (each node's kubelet: NodeState.k8s_version)
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
    # Fields added after the first states were written: a state without them loads with the
    # default (LATER); every other field must be there.
    firewall: list[list[str]] = field(default_factory=list, metadata=LATER)  # iptables FORWARD
    plugin: dict[str, Any] | None = field(default=None, metadata=LATER)  # ExternalPlugin.to_json
    simulated: list[str] = field(default_factory=list, metadata=LATER)  # fleet nodes: KWOK
    # The control plane's ports (controlplane.Ports): its upgrade restarts it on the same ones.
    cp_ports: dict[str, int] = field(default_factory=dict, metadata=LATER)
    # The NIC plugin's driver name (drivers.NIC_CHOICES): nic.fakegpu.dev, dra.net; "": none.
    nic_driver: str = field(default=drivers.NIC, metadata=LATER)

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

    def process(self, component: str, node: str | None = None) -> ProcessRecord | None:
        return self.processes.get(process_key(component, node))

    def record(self, rec: ProcessRecord, key: str | None = None) -> ProcessRecord:
        """Record a process (under its own name unless ``key``) and save at once: `down`
        stops it whatever happens next."""
        self.processes[key or rec.name] = rec
        self.save()
        return rec

    def forget(self, component: str, node: str | None = None) -> ProcessRecord | None:
        return self.processes.pop(process_key(component, node), None)

    def external_plugin(self) -> ExternalPlugin | None:
        """The other vendor's plugin this cluster runs, if any."""
        return ExternalPlugin.from_json(self.plugin) if self.plugin else None

    def runs_own_plugin(self) -> bool:
        ext = self.external_plugin()
        return ext is None or ext.beside

    def save(self) -> None:
        doc = {"version": STATE_VERSION, **asdict(self)}
        doc.pop("root")  # where the file is: not part of it
        doc["processes"] = {k: v.to_json() for k, v in self.processes.items()}
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
            if doc.pop("version", None) != STATE_VERSION:
                raise ValueError(f"state version {json.loads(text).get('version')!r}, "
                                 f"expected {STATE_VERSION}")
            schema = [f for f in fields(cls) if f.name != "root"]
            if missing := [f.name for f in schema if f.name not in doc and not f.metadata]:
                raise ValueError(f"missing fields {', '.join(missing)}")
            doc = {f.name: doc[f.name] for f in schema if f.name in doc}  # others: ignored
            doc["nodes"] = [NodeState(**n) for n in doc["nodes"]]
            doc["processes"] = {k: ProcessRecord.from_json(v)
                                for k, v in doc["processes"].items()}
            st = cls(root=root, **doc)
            for n in st.nodes:
                n.k8s_version = n.k8s_version or st.k8s_version
            if not isinstance(st.slot, int):
                raise TypeError(f"slot {st.slot!r}: expected an integer")
            return st
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise StateError(path, err) from err


class StateError(FakegpuError):
    """A cluster's state.json is unreadable (corrupt, truncated, another version)."""

    def __init__(self, path: Path, err: Exception) -> None:
        self.path = path
        what = f"{type(err).__name__}: {err}" if isinstance(err, KeyError) else str(err)
        super().__init__(f"{path}: not a readable fakegpu cluster state ({what}); remove that "
                         f"cluster with `fakegpu cluster down --cluster {path.parent.name}`")


def load_ready(name: str) -> ClusterState:
    """The state of cluster ``name``; InvalidInput naming `cluster up` when there is none."""
    try:
        return ClusterState.load(clusters_dir() / validate_name(name))
    except FileNotFoundError:
        raise InvalidInput(f"no cluster {name!r}: run `fakegpu cluster up --cluster "
                           f"{name}`") from None


def other_slots() -> set[int]:
    """The slots the clusters in ``clusters_dir()`` hold. A corrupt state of another cluster
    must not make its slot look free: that is a StateError naming the file. A directory
    without one holds no slot yet."""
    used: set[int] = set()
    base = clusters_dir()
    if base.is_dir():
        for d in base.iterdir():
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                used.add(ClusterState.load(d).slot)
    return used


def cached_binaries(version: str) -> NodeBinaries | None:
    """The cluster's binaries if still cached; None also for a version this fakegpu no
    longer supports (a state written by another release)."""
    from fakegpu.cluster.artifacts import binaries

    try:
        found: NodeBinaries | None = binaries.cached(version)
    except InvalidInput:
        return None
    return found
