"""The NIC plugin's pure parts: sysfs -> NICs (on the view fakegpu renders for a topology),
NICs -> slice devices, a prepared claim -> its CDI spec and status entries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fakegpu.kubeletplugin.claims import ClaimRef
from fakegpu.kubeletplugin.health import HEALTHY, UNHEALTHY, DeviceStatus
from fakegpu.nic import discovery, netdev, slices
from fakegpu.nic.driver import build_spec, status_entries
from fakegpu.nvml import sysfs
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import resolve_topology


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[discovery.Nic]]:
    node = load_topology(resolve_topology("dgx-h100")).nodes[0]
    view = tmp_path_factory.mktemp("sysfs") / "view"
    sysfs.render(node, view)
    return view, discovery.discover(str(view))


def test_every_nic_of_the_topology_is_found_where_it_sits(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    node = load_topology(resolve_topology("dgx-h100")).nodes[0]
    assert node.pcie is not None
    found = {n.name: n for n in dgx[1]}
    assert set(found) == {n.name for n in node.pcie.nics}
    for index, card in enumerate(node.pcie.nics):
        nic = found[card.name]
        root = node.pcie.nic_root(index)
        assert (nic.model, nic.gbps, nic.rdma, nic.role) == (
            card.model, round(card.gbps), card.rdma, str(card.role))
        assert nic.mac == sysfs.mac(node.name, card.name)
        assert (nic.pcie_root, nic.numa_node) == (root.name, root.numa_node)


def test_each_compute_nic_shares_its_gpus_root(dgx: tuple[Path, list[discovery.Nic]]) -> None:
    """The point of the attribute: GPU i and its compute NIC publish one pcieRoot."""
    from fakegpu.kubeletplugin import pcie

    view, nics = dgx
    node = load_topology(resolve_topology("dgx-h100")).nodes[0]
    gpu_roots = {pcie.pcie_root(sysfs.bus_id(g.pci), sysfs.NVIDIA_VENDOR, str(view))
                 for g in node.gpus}
    compute = {n.pcie_root for n in nics if n.role == "compute"}
    assert len(compute) == 8 and compute == gpu_roots


def test_uverbs_nodes_are_distinct_and_numbered_from_192(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nodes = [n.uverbs_dev for n in dgx[1] if n.rdma]
    assert len(set(nodes)) == len(nodes) and all(d and d[0] == 231 and d[1] >= 192
                                                 for d in nodes)


def test_slice_attributes(dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    attrs = slices.attributes(nic)
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": nic.pcie_root}
    assert attrs["resource.kubernetes.io/numaNode"] == {"int": nic.numa_node}
    assert attrs["interfaceName"] == {"string": "ibp21s0"}
    assert attrs["macAddress"] == {"string": nic.mac}
    assert attrs["rdmaDevice"] == {"string": "mlx5_0"}
    assert attrs["linkSpeedGbps"] == {"int": 400} and attrs["role"] == {"string": "compute"}
    v1beta1 = slices.build_slice("nic.fakegpu.dev", "n", [nic], "v1beta1", 3, None)
    assert v1beta1["spec"]["devices"][0]["basic"]["attributes"] == attrs
    assert v1beta1["spec"]["pool"] == {"name": "n", "generation": 3, "resourceSliceCount": 1}


def test_the_spec_hands_over_the_interface_and_the_verbs_node(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    link = netdev.host_link("/state/n0", "ibp21s0")
    spec = build_spec("nic.fakegpu.dev", ClaimRef("ns", "c", "u1"), [(nic, link)])
    assert spec["cdiVersion"] == "1.1.0" and spec["kind"] == "nic.fakegpu.dev/nic"
    edits = spec["devices"][0]["containerEdits"]
    assert spec["devices"][0]["name"] == "u1-ibp21s0"
    assert edits["netDevices"] == [{"hostInterfaceName": link.port, "name": "ibp21s0"}]
    assert edits["deviceNodes"][0]["path"] == "/dev/infiniband/uverbs0"
    assert (edits["deviceNodes"][0]["major"], edits["deviceNodes"][0]["minor"]) == (231, 192)


def test_host_names_fit_the_kernel_and_differ_per_node() -> None:
    a, b = netdev.host_link("/c1/n0", "ibp21s0"), netdev.host_link("/c1/n1", "ibp21s0")
    assert a != b and a == netdev.host_link("/c1/n0", "ibp21s0")
    assert all(len(n) <= 15 for n in (a.port, a.wire))


def test_status_carries_network_data(dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    claim = {"metadata": {"generation": 2}}
    [entry] = status_entries("nic.fakegpu.dev", "n0", claim, "", [("nic", nic)], now="t")
    # The first NIC of the cluster's first node: host 1 of the fabric's first rail.
    assert nic.ips == ("198.18.0.1/21",)
    assert entry["networkData"] == {"interfaceName": "ibp21s0", "hardwareAddress": nic.mac,
                                    "ips": ["198.18.0.1/21"]}
    assert (entry["driver"], entry["pool"], entry["device"]) == ("nic.fakegpu.dev", "n0",
                                                                 "ibp21s0")
    assert entry["conditions"][0]["type"] == "Ready"
    assert entry["conditions"][0]["observedGeneration"] == 2


def test_no_view_no_nics(tmp_path: Path) -> None:
    assert discovery.discover(str(tmp_path)) == []


def test_the_view_shows_mtu_and_link_type_as_the_kernel_does(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    view, nics = dgx
    ib = next(n for n in nics if n.name == "ibp21s0")
    en = next(n for n in nics if not n.name.startswith("ib"))
    assert (ib.infiniband, ib.mtu) == (True, 4092)
    assert (en.infiniband, en.mtu) == (False, 1500)
    link = next(view.glob(f"bus/pci/devices/{ib.pci_bus_id}")).resolve()
    assert (link / "net" / "ibp21s0" / "type").read_text() == "32\n"


def test_dranet_names_and_attributes(dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    assert slices.device_name(nic, "dra.net") == "pci-" + nic.pci_bus_id.replace(
        ":", "-").replace(".", "-")
    attrs = slices.attributes(nic, "dra.net")
    assert {k for k in attrs if not k.startswith("dra.net/")} == {
        "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"}
    assert attrs["dra.net/ifName"] == {"string": "ibp21s0"}
    assert attrs["dra.net/mac"] == {"string": nic.mac}
    assert attrs["dra.net/pciAddress"] == {"string": nic.pci_bus_id}
    assert attrs["dra.net/pciVendor"] == {"string": "Mellanox Technologies"}
    assert attrs["dra.net/pciDevice"] == {"string": "MT2910 Family [ConnectX-7]"}
    assert attrs["dra.net/rdma"] == {"bool": True}
    assert attrs["dra.net/rdmaDevice"] == {"string": "mlx5_0"}
    assert attrs["dra.net/numaNode"] == attrs["resource.kubernetes.io/numaNode"]
    assert (attrs["dra.net/encapsulation"], attrs["dra.net/type"], attrs["dra.net/mtu"]) == (
        {"string": "infiniband"}, {"string": "ipoib"}, {"int": 4092})
    assert attrs["dra.net/state"] == {"string": "up"}
    assert attrs["dra.net/virtual"] == {"bool": False}
    assert attrs["dra.net/ipv4"] == {"string": ",".join(nic.ips)} and nic.ips
    assert "dra.net/ipv6" not in attrs
    # fakegpu's own vocabulary is not mixed in
    assert not {"interfaceName", "rdma", "macAddress"} & set(attrs)
    down = slices.device_body("dra.net", dataclasses.replace(nic, link_up=False))
    assert down["attributes"]["dra.net/state"] == {"string": "down"}
    assert down["taints"][0]["key"] == "dra.net/link-down"


def test_dranet_publishes_global_unicast_addresses_per_family() -> None:
    # As DRANET's inventory reads netlink: IPNet strings, link-local and loopback left out.
    assert slices.addresses_by_family(
        ("10.0.0.2/8", "fe80::1/64", "2001:db8::7/64", "198.18.0.1/21", "127.0.0.1/8",
         "2001:db8::3/64")) == {4: "10.0.0.2/8,198.18.0.1/21",
                                6: "2001:db8::3/64,2001:db8::7/64"}
    assert slices.addresses_by_family(("169.254.3.1/16",)) == {}


def test_a_nic_without_link_is_unhealthy_naming_its_taint(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    down = dataclasses.replace(nic, link_up=False)
    assert slices.device_health("nic.fakegpu.dev", [nic, down]) == [
        DeviceStatus("ibp21s0", HEALTHY),
        DeviceStatus("ibp21s0", UNHEALTHY, "nic.fakegpu.dev/link-down")]
    [status] = slices.device_health("dra.net", [down])
    assert status.device == slices.device_name(nic, "dra.net")
    assert status.message == "dra.net/link-down"


def test_dranet_claims_are_prepared_under_the_pci_names(
        dgx: tuple[Path, list[discovery.Nic]]) -> None:
    nic = next(n for n in dgx[1] if n.name == "ibp21s0")
    name = slices.device_name(nic, "dra.net")
    spec = build_spec("dra.net", ClaimRef("ns", "c", "u1"),
                      [(nic, netdev.host_link("/state/n0", name))])
    assert spec["kind"] == "dra.net/nic" and spec["devices"][0]["name"] == f"u1-{name}"
    [entry] = status_entries("dra.net", "n0", {"metadata": {}}, "", [("nic", nic)], now="t")
    assert entry["device"] == name
    assert entry["networkData"] == {"interfaceName": "ibp21s0", "hardwareAddress": nic.mac,
                                    "ips": list(nic.ips)}
    built = slices.build_slice("dra.net", "n0", [nic], "v1", 1, None)
    assert [d["name"] for d in built["spec"]["devices"]] == [name]
