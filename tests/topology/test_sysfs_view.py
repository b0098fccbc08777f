"""The node's sysfs view (fakegpu/nvml/sysfs.py): laid out as /sys is, so that a driver that
resolves ``bus/pci/devices/<bus id>`` finds the topology's root complex and NUMA node."""

from __future__ import annotations

import os
from pathlib import Path

from fakegpu.nvml import env as nvml_env
from fakegpu.nvml import state, sysfs
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES


def _root_of(view: Path, bus: str) -> str:
    link = view / "bus" / "pci" / "devices" / bus
    target = os.path.normpath(os.path.join(link.parent, os.readlink(link)))
    parts = os.path.relpath(target, view).split(os.sep)
    assert parts[0] == "devices" and parts[-1] == bus, parts
    return parts[1]


def test_every_gpu_and_nic_links_into_its_root_with_its_numa_node(tmp_path: Path) -> None:
    topo = load_topology(FIXTURES / "dgx-h100.yaml")
    node = topo.nodes[0]
    tree = node.pcie
    assert tree is not None
    path = state.render(topo, node, tmp_path / "n.state")
    view = sysfs.path_for(path)
    for gpu in node.gpus:
        bus = sysfs.bus_id(gpu.pci)
        root = tree.gpu_root(gpu.index)
        assert root is not None
        assert _root_of(view, bus) == root.name
        device = view / "bus" / "pci" / "devices" / bus
        assert (device / "numa_node").read_text() == f"{root.numa_node}\n"
        assert (device / "vendor").read_text() == "0x10de\n"
        assert (device / "device").read_text() == "0x2330\n"
    for index, nic in enumerate(tree.nics):
        device = view / "bus" / "pci" / "devices" / sysfs.bus_id(nic.pci)
        assert _root_of(view, sysfs.bus_id(nic.pci)) == tree.nic_root(index).name
        assert (device / "vendor").read_text() == "0x15b3\n"
        assert (device / "net" / nic.name).is_dir()
    # A compute NIC and its GPU share the switch: the same upstream port directory.
    gpu0 = os.path.realpath(view / "bus" / "pci" / "devices" / sysfs.bus_id(node.gpus[0].pci))
    nic = tree.nics[tree.switches[tree.gpu_switch(0) or 0].nics[0]]
    nic0 = os.path.realpath(view / "bus" / "pci" / "devices" / sysfs.bus_id(nic.pci))
    assert Path(gpu0).parent.parent == Path(nic0).parent.parent


def test_the_environment_names_the_view_and_a_rerender_replaces_it(tmp_path: Path) -> None:
    topo = load_topology(FIXTURES / "gb200-mini.yaml")
    path = state.render(topo, "gb200-0", tmp_path / "n.state")
    view = sysfs.path_for(path)
    assert nvml_env.env(path)[sysfs.SYSFS_ENV] == str(view)
    (view / "stale").write_text("x")
    state.render(topo, "gb200-0", path)
    assert not (view / "stale").exists()
    assert _root_of(view, "0008:01:00.0") == "pci0008:00"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_node_without_a_tree_has_no_view(tmp_path: Path) -> None:
    from fakegpu.topology.load import parse_topology

    topo = parse_topology("name: t\nnodes:\n- name: n\n  gpus: {product: H100-SXM5-80GB, "
                          "count: 12}\n  nvlink: none\n")
    path = state.render(topo, "n", tmp_path / "n.state")
    assert not sysfs.path_for(path).exists()
    assert sysfs.SYSFS_ENV not in nvml_env.env(path)


def test_ensure_state_adds_the_view_to_a_state_from_before_it(tmp_path: Path) -> None:
    import shutil

    topo = load_topology(FIXTURES / "dgx-a100.yaml")
    path = nvml_env.ensure_state(topo, "dgx-a100-0", tmp_path / "n.state")
    shutil.rmtree(sysfs.path_for(path))
    nvml_env.ensure_state(topo, "dgx-a100-0", path)
    assert _root_of(sysfs.path_for(path), "0000:47:00.0") == "pci0000:40"


def test_renders_of_one_view_at_once_all_succeed_and_leave_one_whole_view(tmp_path: Path) -> None:
    """A kind node's GPU, NIC and compute-domain plugin containers (each PID 1) render the
    same hostPath view as they start; temporary names made from the pid alone collided."""
    from concurrent.futures import ThreadPoolExecutor

    node = load_topology(FIXTURES / "dgx-h100.yaml").nodes[0]
    alone = sysfs.render(node, tmp_path / "alone.sysfs")
    assert alone is not None
    target = tmp_path / "n.state.sysfs"
    with ThreadPoolExecutor(max_workers=6) as pool:  # threads: one pid, as the containers'
        results = list(pool.map(lambda _: sysfs.render(node, target), range(12)))
    assert results == [target] * 12

    def tree(root: Path) -> list[tuple[str, str]]:
        return sorted((str(p.relative_to(root)), os.readlink(p) if p.is_symlink() else
                       p.read_text() if p.is_file() else "")
                      for p in root.rglob("*"))

    assert tree(target) == tree(alone)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.sysfs", "n.state.sysfs"]
