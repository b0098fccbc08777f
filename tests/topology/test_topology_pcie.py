"""The PCIe tree: the catalog's systems (who shares a root with whom, NUMA from the root) and
a node's own ``pcie`` section, refused with one line naming the field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakegpu.topology import catalog
from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import load_topology, parse_topology
from fakegpu.topology.model import NicRole, PcieTree
from fakegpu.topology.packaged import FIXTURES
from fakegpu.topology.pcie import nic_addresses


def _tree(name: str, node: int = 0) -> PcieTree:
    tree = load_topology(FIXTURES / f"{name}.yaml").nodes[node].pcie
    assert tree is not None
    return tree


def test_dgx_h100_gives_each_gpu_a_switch_and_root_with_its_own_compute_nic() -> None:
    tree = _tree("dgx-h100")
    roots = [tree.gpu_root(i) for i in range(8)]
    assert len({r.name for r in roots if r}) == 8
    for gpu in range(8):
        switch = tree.switches[tree.gpu_switch(gpu) or 0]
        assert switch.gpus == (gpu,)
        (nic,) = (tree.nics[n] for n in switch.nics)
        assert (nic.model, nic.gbps, nic.role) == ("ConnectX-7", 400.0, NicRole.COMPUTE)
    assert sum(n.role is NicRole.STORAGE for n in tree.nics) == 4


def test_dgx_a100_pairs_gpus_and_nics_under_one_switch() -> None:
    tree = _tree("dgx-a100")
    assert [tree.gpu_root(i).name for i in range(8)] == [  # type: ignore[union-attr]
        "pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40",
        "pci0000:80", "pci0000:80", "pci0000:a0", "pci0000:a0"]
    assert all(len(s.gpus) == 2 and len(s.nics) == 2 for s in tree.switches)
    assert {tree.nics[n].model for s in tree.switches for n in s.nics} == {"ConnectX-6"}


def test_gb200_gpus_sit_alone_in_their_domains() -> None:
    topo = load_topology(FIXTURES / "gb200-mini.yaml")
    tree = topo.nodes[0].pcie
    assert tree is not None
    assert [tree.gpu_root(i).name for i in range(4)] == [  # type: ignore[union-attr]
        "pci0008:00", "pci0009:00", "pci0018:00", "pci0019:00"]
    gpu_roots = {tree.gpu_root(i) for i in range(4)}
    assert not gpu_roots & {tree.nic_root(n) for n in range(len(tree.nics))}
    assert {n.model for n in tree.nics} == {"ConnectX-7", "BlueField-3"}


def test_every_catalog_tree_agrees_with_the_boards_numa_and_is_cited() -> None:
    for product in catalog.products().values():
        board = product.baseboard
        assert board is not None and board.pcie is not None, product.key
        numa = [board.pcie.gpu_root(i).numa_node  # type: ignore[union-attr]
                for i in range(len(board.pci))]
        assert numa == list(board.numa), product.key
        assert any("pcie" in u for u in product.uncertain) or product.key.startswith("H"), \
            product.key
        assert any("network" in s.lower() for s in product.sources), product.key


def test_a_partly_filled_board_keeps_its_first_positions() -> None:
    topo = load_topology(FIXTURES / "mixed.yaml")
    a100 = topo.node("a100-0")  # 4 of the board's 8 positions
    assert a100.pcie is not None
    assert [a100.pcie.gpu_root(i).name for i in range(4)] == [  # type: ignore[union-attr]
        "pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40"]


def test_gpus_beyond_the_board_sit_nowhere_known() -> None:
    topo = parse_topology(yaml.safe_dump({"name": "t", "nodes": [
        {"name": "n", "gpus": {"product": "GB200", "count": 2}}]}))
    assert topo.nodes[0].pcie is not None
    big = parse_topology(yaml.safe_dump({"name": "t", "nodes": [
        {"name": "n", "gpus": {"product": "H100-SXM5-80GB", "count": 12}}]}))
    assert big.nodes[0].pcie is None


OWN: dict[str, Any] = {
    "roots": [
        {"name": "pci0000:00", "numa": 1,
         "switches": [{"gpus": [0, 1], "nics": ["eth0"]}]},
        {"name": "pci0000:3F", "numa": 0, "gpus": [2, 3], "nics": ["eth1"]},
    ],
    "nics": [
        {"name": "eth0", "model": "ConnectX-7", "gbps": 400, "pci": "0000:0C:00.0"},
        {"name": "eth1", "model": "ConnectX-6", "gbps": 200, "pci": "0000:50:00.0",
         "role": "storage", "rdma": "mlx5_1"},
    ],
}


def _node(pcie: Any, gpus: int = 4) -> str:
    return yaml.safe_dump({"name": "t", "nodes": [
        {"name": "n", "gpus": {"product": "A100-SXM4-40GB", "count": gpus},
         "nvlink": "none", "pcie": pcie}]})


def test_a_node_may_declare_its_own_tree_and_numa_follows_it() -> None:
    node = parse_topology(_node(OWN)).nodes[0]
    assert node.pcie is not None
    assert [g.numa_node for g in node.gpus] == [1, 1, 0, 0]
    assert node.pcie.gpu_root(3).name == "pci0000:3f"  # type: ignore[union-attr]
    assert node.pcie.nics[1].role is NicRole.STORAGE
    assert node.pcie.nic_switch(0) == 0 and node.pcie.nic_switch(1) is None


def test_a_nic_has_its_declared_addresses_else_its_rails() -> None:
    """Declared addresses stand; an undeclared port gets host ``node index + 1`` of the /21
    of 198.18.0.0/15 for its position on the node (the same NIC of every node: one rail)."""
    own = _with(lambda d: d["nics"][1].update(ips=["192.168.10.7/24", "fd00::7/64"]))
    node = parse_topology(_node(own)).nodes[0]
    assert node.pcie is not None
    eth0, eth1 = node.pcie.nics
    assert nic_addresses(0, 0, eth0) == ("198.18.0.1/21",)
    assert nic_addresses(3, 2, eth0) == ("198.18.16.4/21",)
    assert nic_addresses(1023, 63, eth0) == ("198.19.252.0/21",)  # in 198.19.248.0/21
    assert nic_addresses(2046, 0, eth0) == ()  # past a rail's last host address
    assert nic_addresses(5, 1, eth1) == ("192.168.10.7/24", "fd00::7/64")


def _with(change: Any) -> dict[str, Any]:
    data = yaml.safe_load(yaml.safe_dump(OWN))
    change(data)
    return data  # type: ignore[no-any-return]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["roots"][0]["switches"][0]["gpus"].append(9),
     "nodes[0].pcie.roots[0].switches[0].gpus[2]: is 9: no such GPU, expected a GPU index 0..3"),
    (lambda d: d["roots"][1]["gpus"].append(0),
     "nodes[0].pcie.roots[1].gpus[2]: GPU 0 is also under nodes[0].pcie.roots[0].switches[0]"),
    (lambda d: d["roots"][1]["gpus"].remove(3),
     "nodes[0].pcie.roots: GPU 3 is under no root or switch"),
    (lambda d: d["roots"][0]["switches"][0]["nics"].append("eth9"),
     "nodes[0].pcie.roots[0].switches[0].nics[1]: unknown NIC 'eth9', expected one of eth0, eth1"),
    (lambda d: d["roots"][1]["nics"].append("eth0"),
     "nodes[0].pcie.roots[1].nics[1]: NIC 'eth0' is also under"),
    (lambda d: d["roots"][1].update(nics=[]),
     "nodes[0].pcie.roots: NIC 'eth1' is under no root or switch"),
    (lambda d: d["roots"][1].update(name="pci0000:00"),
     "nodes[0].pcie.roots[1].name: root 'pci0000:00' is listed twice"),
    (lambda d: d["roots"][1].update(name="rc0"),
     "nodes[0].pcie.roots[1].name: is 'rc0', expected a root complex like 'pci0000:00'"),
    (lambda d: d["roots"][1].update(name="pci0001:80"),
     "GPU 2 (0000:47:00.0) is in PCI domain 0000, not in pci0001:80's"),
    (lambda d: d["roots"][0].update(name="pci0000:20"),
     "GPU 0 (0000:07:00.0) is on bus 07, expected a bus above pci0000:20's"),
    (lambda d: d["roots"][0].update(numa=64),
     "nodes[0].pcie.roots[0].numa: is 64, expected 0..63"),
    (lambda d: d["nics"][0].update(pci="0000:07:00.0"),
     "nodes[0].pcie.nics[0].pci: 0000:07:00.0 is also GPU 0, expected unique bus ids"),
    (lambda d: d["nics"][0].update(pci="18:00.0"),
     "nodes[0].pcie.nics[0].pci: is '18:00.0', expected a PCI bus id like '0000:18:00.0'"),
    (lambda d: d["nics"][1].update(name="eth0"),
     "nodes[0].pcie.nics[1].name: NIC 'eth0' is listed twice"),
    (lambda d: d["nics"][0].update(gbps=0),
     "nodes[0].pcie.nics[0].gbps: is 0, expected a link speed in Gb/s above 0"),
    (lambda d: d["nics"][0].update(role="rdma"),
     "nodes[0].pcie.nics[0].role: is 'rdma', expected one of compute, storage, management"),
    (lambda d: d["nics"][0].update(name="a-very-long-interface"),
     "nodes[0].pcie.nics[0].name: is 'a-very-long-interface', expected an interface name"),
    (lambda d: d["nics"][0].update(speed=1),
     "nodes[0].pcie.nics[0].speed: unknown field, expected one of name, model, gbps, pci"),
    (lambda d: d.update(roots=[]),
     "nodes[0].pcie.roots: is a list, expected a non-empty list of root complexes"),
    (lambda d: d["nics"][0].update(ips=["10.0.0.7"]),
     "nodes[0].pcie.nics[0].ips[0]: is '10.0.0.7', expected a host address with its prefix"),
    (lambda d: d["nics"][0].update(ips=["10.0.0.0/24"]),
     "nodes[0].pcie.nics[0].ips[0]: is '10.0.0.0/24', expected a host address"),
    (lambda d: d["nics"][0].update(ips=["10.0.0.300/24"]),
     "nodes[0].pcie.nics[0].ips[0]: is '10.0.0.300/24', expected a host address"),
    (lambda d: d["nics"][0].update(ips="10.0.0.7/24"),
     "nodes[0].pcie.nics[0].ips: is text, expected a list of 1 to 8 addresses"),
])
def test_a_bad_tree_is_one_line_naming_the_field(change: Any, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        parse_topology(_node(_with(change)))
    lines = str(err.value).splitlines()
    assert any(message in line for line in lines), lines
