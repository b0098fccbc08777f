"""What bandwidth the real hardware would give each GPU pair: the rules the ``nvbandwidth``
program (``csrc/nvbandwidth.c``) applies to what NVML shows it, stated once more in Python
from a topology, so tests can compare the program against an independent derivation.

Figures are in GB/s, one direction, at the rated speed (no protocol overhead):

- the same GPU: none (nvbandwidth leaves the diagonal out);
- GPUs of one node with an NVLink path (NVML's P2P NVLink status: a direct link, or both
  reach an NVSwitch or the rack's switch trays): ``nvlink-local``, the smaller of the two
  GPUs' up links x the per-link speed of their NVLink generation (the catalog's figure, both
  directions together, halved);
- GPUs of two nodes, both in one completed fabric clique (same cluster UUID and clique ID),
  both holding a channel of the same ComputeDomain (IMEX), and neither node's IMEX daemon
  silent: ``nvlink-fabric``, the same way. A channel is only usable while its node's daemon
  runs: the compute-domain plugin tells the container where that daemon is
  (``FAKEGPU_IMEX_DAEMON``), and a GPU whose daemon does not accept a connection there when
  the job starts reaches other nodes over the network (its own node's NVLink stays). A pod
  not told where its daemon is (no ``FAKEGPU_IMEX_DAEMON``) is judged by its channel alone;
- any other pair of two nodes: ``network``, GPUDirect RDMA through each GPU's compute NIC
  (``PcieTree.gpu_nics``: the nearest by PCIe distance): the slower of the two NICs' link
  speeds / 8; a GPU without a known NIC counts the topology's ``network.gbps_per_gpu``;
- GPUs of one node without an NVLink path: ``pcie``, not modelled (no figure).

A GPU whose fabric reports degraded bandwidth (NVML's health mask; fault ``fabric-degraded``)
gets half its NVLink speed: NVML says that bandwidth is reduced, not by how much, and half
makes the change plain in a matrix (fakegpu's choice, see docs/gb200.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from fakegpu.topology import catalog
from fakegpu.topology.model import (
    FabricHealth,
    FabricState,
    FaultKind,
    Gpu,
    LinkState,
    RemoteType,
    Topology,
)

DEGRADED_SHARE = 0.5  # the part of its NVLink speed a fabric-degraded GPU keeps


class Path(StrEnum):
    SELF = "self"
    NVLINK_LOCAL = "nvlink-local"
    NVLINK_FABRIC = "nvlink-fabric"
    NETWORK = "network"
    PCIE = "pcie"


@dataclass(frozen=True)
class GpuView:
    """One GPU as the program sees it through NVML and its environment."""

    node: str
    index: int
    uuid: str
    nvlink_version: int  # 0 without NVLink
    links_up: int
    to_switch: bool  # an up link reaches an NVSwitch / switch tray
    direct_peers: frozenset[int] = frozenset()  # indices of GPUs of its node it links to
    clique: str | None = None  # "<clusterUuid>.<cliqueId>", None outside a fabric
    fabric_completed: bool = True  # nvmlGpuFabricState COMPLETED (or no fabric at all)
    degraded: bool = False
    compute_domain: str = ""  # FAKEGPU_COMPUTE_DOMAIN of its pod
    has_channel: bool = False  # the pod holds that domain's IMEX channel device
    # its node's IMEX daemon answered (True), did not (False), was not named (None)
    imex_daemon: bool | None = None
    nic_gbps: float | None = None  # its compute NIC's link speed, Gb/s (None: not known)


def link_table() -> dict[int, float]:
    """NVLink generation -> GB/s per link, both directions, from the hardware catalog (every
    product of one generation must agree)."""
    table: dict[int, float] = {}
    for product in catalog.products().values():
        spec = product.nvlink
        if spec is None:
            continue
        known = table.setdefault(spec.generation, spec.link_bandwidth_gbps)
        if known != spec.link_bandwidth_gbps:
            raise RuntimeError(f"catalog: NVLink {spec.generation} products disagree on the "
                               f"per-link speed ({known} and {spec.link_bandwidth_gbps} GB/s)")
    return table


def nvlink_speed(gpu: GpuView, table: dict[int, float]) -> float:
    """One direction, GB/s: up links x per-link speed / 2, halved again when degraded."""
    speed = gpu.links_up * table.get(gpu.nvlink_version, 0.0) / 2
    return speed * DEGRADED_SHARE if gpu.degraded else speed


def _local_nvlink(a: GpuView, b: GpuView) -> bool:
    # As NVML's P2P NVLink status: a direct up link, or both reach a switch over an up link.
    linked = b.index in a.direct_peers or (a.to_switch and b.to_switch)
    return linked and a.fabric_completed and b.fabric_completed


def _fabric_nvlink(a: GpuView, b: GpuView) -> bool:
    return (a.clique is not None and a.clique == b.clique
            and a.fabric_completed and b.fabric_completed
            and a.links_up > 0 and b.links_up > 0
            and a.compute_domain != "" and a.compute_domain == b.compute_domain
            and a.has_channel and b.has_channel
            and a.imex_daemon is not False and b.imex_daemon is not False)


def pair(a: GpuView, b: GpuView, table: dict[int, float],
         network_gbps: float) -> tuple[float | None, Path]:
    """The figure (GB/s, one direction) and the path from ``a`` to ``b``."""
    if a.node == b.node and a.index == b.index:
        return None, Path.SELF
    if a.node == b.node:
        if _local_nvlink(a, b):
            return min(nvlink_speed(a, table), nvlink_speed(b, table)), Path.NVLINK_LOCAL
        return None, Path.PCIE
    if _fabric_nvlink(a, b):
        return min(nvlink_speed(a, table), nvlink_speed(b, table)), Path.NVLINK_FABRIC
    return min(a.nic_gbps or network_gbps, b.nic_gbps or network_gbps) / 8, Path.NETWORK


def matrix(gpus: Sequence[GpuView], network_gbps: float, table: dict[int, float] | None = None
           ) -> tuple[list[list[float | None]], list[list[Path]]]:
    """Figures and paths for every ordered pair of ``gpus`` (rows: from, columns: to)."""
    table = link_table() if table is None else table
    cells = [[pair(a, b, table, network_gbps) for b in gpus] for a in gpus]
    return ([[v for v, _ in row] for row in cells], [[p for _, p in row] for row in cells])


def view_of(gpu: Gpu, node: str, *, compute_domain: str = "", has_channel: bool = False,
            degraded: bool | None = None, links_down: Sequence[int] = (),
            imex_daemon: bool | None = None, nic_gbps: float | None = None) -> GpuView:
    """``gpu`` of a topology as the program in a pod on ``node`` would see it; ``degraded``
    and ``links_down`` stand for faults injected at run time (the topology's own count too),
    ``imex_daemon`` for the probe of its node's IMEX daemon."""
    down = set(links_down) | {f.value for f in gpu.faults if f.kind is FaultKind.NVLINK_DOWN}
    up = [link for link in gpu.nvlinks if link.state is LinkState.UP and link.link not in down]
    fabric = gpu.fabric
    faulted = any(f.kind is FaultKind.FABRIC_DEGRADED for f in gpu.faults)
    if degraded is None:
        degraded = faulted or (fabric is not None and fabric.health is FabricHealth.DEGRADED)
    return GpuView(
        node=node, index=gpu.index, uuid=gpu.uuid,
        nvlink_version=gpu.product.nvlink.generation if gpu.product.nvlink and up else 0,
        links_up=len(up),
        to_switch=any(link.remote_type is RemoteType.SWITCH for link in up),
        direct_peers=frozenset(link.remote_gpu_index for link in up
                               if link.remote_type is RemoteType.GPU and link.remote_node == node
                               and link.remote_gpu_index is not None),
        clique=fabric.clique if fabric else None,
        fabric_completed=fabric is None or fabric.state is FabricState.COMPLETED,
        degraded=degraded and fabric is not None,
        compute_domain=compute_domain, has_channel=has_channel, imex_daemon=imex_daemon,
        nic_gbps=nic_gbps)


def nic_rates(topology: Topology) -> dict[str, float]:
    """GPU UUID -> the link speed (Gb/s) of the compute NIC it sends RDMA through, for every
    GPU whose node's PCIe tree places one near it (what ``nvbandwidth --nic-gbps`` takes)."""
    rates: dict[str, float] = {}
    for node in topology.nodes:
        if node.pcie is None:
            continue
        for gpu, nic in zip(node.gpus, node.pcie.gpu_nics(len(node.gpus)), strict=True):
            if nic is not None:
                rates[gpu.uuid] = node.pcie.nics[nic].gbps
    return rates


def topology_views(topology: Topology, *, compute_domain: str = "",
                   degraded: Sequence[tuple[str, int]] = (),
                   imex_down: Sequence[str] = ()) -> list[GpuView]:
    """Every GPU of ``topology`` in node then index order, as one job with a pod per node sees
    them: all in ``compute_domain`` (with a channel, and told where their node's IMEX daemon
    is) when given; ``degraded`` lists (node, GPU index) pairs with fault ``fabric-degraded``
    injected; ``imex_down`` the nodes whose IMEX daemon did not answer."""
    sick, down, rates = set(degraded), set(imex_down), nic_rates(topology)
    return [view_of(g, n.name, compute_domain=compute_domain, has_channel=bool(compute_domain),
                    degraded=True if (n.name, g.index) in sick else None,
                    imex_daemon=n.name not in down if compute_domain else None,
                    nic_gbps=rates.get(g.uuid))
            for n in topology.nodes for g in n.gpus]
