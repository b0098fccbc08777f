"""The bandwidth rules (fakegpu/bandwidth/model.py) from topologies: the figures follow from
the catalog's per-link speed x links and the topology's network field, never from constants."""

from __future__ import annotations

import dataclasses

import pytest

from fakegpu.bandwidth import model
from fakegpu.bandwidth.model import Path
from fakegpu.topology import catalog
from fakegpu.topology.load import load_topology, parse_topology
from fakegpu.topology.model import NicRole, Topology
from fakegpu.topology.packaged import FIXTURES


def _mini() -> Topology:
    return load_topology(FIXTURES / "gb200-mini.yaml")


def _gb200_nvlink() -> float:
    """One direction of a GB200's NVLink, from the catalog: links x per-link (both ways) / 2."""
    spec = catalog.lookup("GB200").nvlink  # type: ignore[union-attr]
    assert spec is not None
    return spec.links_per_gpu * spec.link_bandwidth_gbps / 2


def test_link_table_comes_from_the_catalog() -> None:
    table = model.link_table()
    for product in catalog.products().values():
        if product.nvlink:
            assert table[product.nvlink.generation] == product.nvlink.link_bandwidth_gbps


def test_without_a_domain_nvlink_stays_inside_each_node() -> None:
    topology = _mini()
    views = model.topology_views(topology)
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    for i, a in enumerate(views):
        for j, b in enumerate(views):
            if i == j:
                assert (values[i][j], paths[i][j]) == (None, Path.SELF)
            elif a.node == b.node:
                assert (values[i][j], paths[i][j]) == (_gb200_nvlink(), Path.NVLINK_LOCAL)
            else:
                assert (values[i][j], paths[i][j]) == (topology.network.gbps_per_gpu / 8,
                                                       Path.NETWORK)


def test_with_a_domain_every_pair_gets_nvlink() -> None:
    topology = _mini()
    views = model.topology_views(topology, compute_domain="d1")
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    off = [(values[i][j], paths[i][j]) for i in range(16) for j in range(16) if i != j]
    assert len(off) == 16 * 15
    assert {v for v, _ in off} == {_gb200_nvlink()}
    assert {p for _, p in off} == {Path.NVLINK_LOCAL, Path.NVLINK_FABRIC}


def test_other_domains_channels_or_cliques_fall_back_to_the_network() -> None:
    topology = _mini()
    views = model.topology_views(topology, compute_domain="d1")
    a, b = views[0], views[4]  # two nodes
    table = model.link_table()
    net = topology.network.gbps_per_gpu
    assert model.pair(a, b, table, net)[1] is Path.NVLINK_FABRIC
    for other in (dataclasses.replace(b, compute_domain="d2"),
                  dataclasses.replace(b, has_channel=False),
                  dataclasses.replace(b, clique=(b.clique or "") + "0"),
                  dataclasses.replace(b, fabric_completed=False)):
        assert model.pair(a, other, table, net) == (net / 8, Path.NETWORK)


def test_a_degraded_gpu_keeps_part_of_its_nvlink() -> None:
    topology = _mini()
    views = model.topology_views(topology, compute_domain="d1", degraded=[("gb200-1", 2)])
    values, _ = model.matrix(views, topology.network.gbps_per_gpu)
    sick = 4 + 2
    for j in range(16):
        if j != sick:
            assert values[sick][j] == values[j][sick] == _gb200_nvlink() * model.DEGRADED_SHARE
    assert values[0][1] == _gb200_nvlink()


def test_a_node_whose_imex_daemon_is_silent_reaches_other_nodes_over_the_network() -> None:
    topology = _mini()
    net = topology.network.gbps_per_gpu
    views = model.topology_views(topology, compute_domain="d1", imex_down=["gb200-2"])
    assert {v.imex_daemon for v in views if v.node == "gb200-2"} == {False}
    assert {v.imex_daemon for v in views if v.node != "gb200-2"} == {True}
    values, paths = model.matrix(views, net)
    for i, a in enumerate(views):
        for j, b in enumerate(views):
            if i == j:
                continue
            if a.node == b.node:  # its own node's NVLink needs no IMEX
                assert (values[i][j], paths[i][j]) == (_gb200_nvlink(), Path.NVLINK_LOCAL)
            elif "gb200-2" in (a.node, b.node):
                assert (values[i][j], paths[i][j]) == (net / 8, Path.NETWORK)
            else:
                assert (values[i][j], paths[i][j]) == (_gb200_nvlink(), Path.NVLINK_FABRIC)


def test_a_pod_not_told_of_its_imex_daemon_goes_by_its_channel() -> None:
    # No FAKEGPU_IMEX_DAEMON (imex_daemon None): the channel alone decides, as before.
    topology = _mini()
    table, net = model.link_table(), topology.network.gbps_per_gpu
    views = model.topology_views(topology, compute_domain="d1")
    a, b = views[0], views[4]
    unknown = dataclasses.replace(b, imex_daemon=None)
    assert model.pair(a, unknown, table, net)[1] is Path.NVLINK_FABRIC
    assert model.pair(dataclasses.replace(a, imex_daemon=False), b, table, net) == (
        net / 8, Path.NETWORK)
    # Without a domain nobody is told where a daemon is.
    assert {v.imex_daemon for v in model.topology_views(topology)} == {None}


def test_links_down_lower_the_figure() -> None:
    topology = _mini()
    gpu = topology.nodes[0].gpus[0]
    view = model.view_of(gpu, "gb200-0", links_down=[0, 1, 2])
    spec = gpu.product.nvlink
    assert spec is not None
    assert model.nvlink_speed(view, model.link_table()) == (
        (spec.links_per_gpu - 3) * spec.link_bandwidth_gbps / 2)


@pytest.mark.parametrize("gbps", [100, 800.0, 1600])
def test_without_a_nic_near_it_a_gpu_goes_at_the_topology_network_field(gbps: float) -> None:
    # Nine H100s: more than any board, so no PCIe tree and no NIC is known near a GPU.
    text = (f"name: t\nnetwork: {{gbps_per_gpu: {gbps}}}\n"
            "nodes: [{name: 'n{0..1}', gpus: {product: H100-SXM5-80GB, count: 9}, "
            "nvlink: none}]\n")
    topology = parse_topology(text, "t.yaml")
    assert topology.network.gbps_per_gpu == gbps and model.nic_rates(topology) == {}
    values, paths = model.matrix(model.topology_views(topology), topology.network.gbps_per_gpu)
    assert values[0][9] == gbps / 8 and paths[0][9] is Path.NETWORK


def test_a_gpu_sends_through_its_nearest_compute_nic() -> None:
    """Under its switch (DGX H100: one each), else its root, else its NUMA node (GB200: two
    GPUs and two ConnectX-7 per Grace CPU, shared out in order); storage NICs never."""
    def nics(name: str) -> list[str]:
        node = load_topology(FIXTURES / f"{name}.yaml").nodes[0]
        assert node.pcie is not None
        out = []
        for g, nic in zip(node.gpus, node.pcie.gpu_nics(len(node.gpus)), strict=True):
            assert nic is not None
            card = node.pcie.nics[nic]
            assert card.role is NicRole.COMPUTE
            if node.pcie.gpu_switch(g.index) is not None:
                assert node.pcie.nic_switch(nic) == node.pcie.gpu_switch(g.index)
            out.append(card.name)
        return out

    h100 = nics("dgx-h100")
    assert len(set(h100)) == 8 and h100[0] == "ibp21s0"
    a100 = nics("dgx-a100")
    assert len(set(a100)) == 8  # two GPUs and two NICs per switch: one each
    assert nics("gb200-mini") == ["ibp3s0", "ibP2p3s0", "ibP16p3s0", "ibP18p3s0"]


def test_between_nodes_the_slower_nic_sets_the_figure() -> None:
    topology = load_topology(FIXTURES / "mixed.yaml")
    views = model.topology_views(topology)
    at = {(v.node, v.index): i for i, v in enumerate(views)}
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    a100, h100 = at[("a100-1", 3)], at[("h100-2", 5)]
    assert (values[a100][h100], paths[a100][h100]) == (200 / 8, Path.NETWORK)
    assert values[at[("h100-0", 0)]][h100] == 400 / 8


def test_the_network_defaults_to_400_gbps_per_gpu() -> None:
    # REFERENCE.md section 5: InfiniBand/Ethernet of the order of 400 Gb/s per GPU.
    assert _mini().network.gbps_per_gpu == 400


def test_an_h100_node_is_nv18_inside() -> None:
    topology = load_topology(FIXTURES / "dgx-h100.yaml")
    node = topology.nodes[0]
    views = [model.view_of(g, node.name) for g in node.gpus]
    values, paths = model.matrix(views, topology.network.gbps_per_gpu)
    spec = node.gpus[0].product.nvlink
    assert spec is not None
    assert values[0][7] == spec.links_per_gpu * spec.link_bandwidth_gbps / 2
    assert paths[0][7] is Path.NVLINK_LOCAL
