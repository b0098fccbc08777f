"""Parsers and tree walks behind `fakegpu cluster down`."""

from __future__ import annotations

from pathlib import Path

from fakegpu.cluster import cleanup

TASKS = "/var/lib/fakegpu/c1/n0/containerd/state/io.containerd.runtime.v2.task"
PROJECTED = "/var/lib/fakegpu/c1/n0/kubelet/pods/uid/volumes/kubernetes.io~projected"
MOUNTINFO = f"""\
22 1 8:1 / / rw,relatime - ext4 /dev/vda rw
30 22 0:5 / {TASKS}/k8s.io/abc/rootfs rw - overlay overlay rw
31 22 0:6 / {PROJECTED}/kube\\040api rw - tmpfs tmpfs rw
32 22 0:7 / /var/lib/fakegpu/c1 rw - tmpfs tmpfs rw
33 22 0:8 / /var/lib/fakegpu/c10/n0 rw - tmpfs tmpfs rw
"""


def test_mounts_under_is_deepest_first_and_exact_prefix() -> None:
    found = cleanup.mounts_under(MOUNTINFO, Path("/var/lib/fakegpu/c1"))
    # c10 shares a string prefix with c1 but is another cluster: not ours.
    assert all(not p.startswith("/var/lib/fakegpu/c10") for p in found)
    assert found[-1] == "/var/lib/fakegpu/c1"
    assert len(found) == 3
    depths = [p.count("/") for p in found]
    assert depths == sorted(depths, reverse=True)


def test_mountinfo_octal_escapes_are_decoded() -> None:
    points = cleanup.mount_points(MOUNTINFO)
    assert any(p.endswith("kube api") for p in points)


IP_LINK = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT
5: fg0n0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT
6: veth1a2b@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master fg0n0 state UP
7: veth3c4d@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master fg0n1 state UP
8: veth5e6f@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master fg0n0 state UP
"""


def test_links_with_master_picks_only_that_bridge() -> None:
    assert cleanup.links_with_master(IP_LINK, "fg0n0") == ["veth1a2b", "veth5e6f"]
    assert cleanup.links_with_master(IP_LINK, "fg0n") == []


def test_cgroup_tree_removal_deepest_first(tmp_path: Path) -> None:
    # A fake cgroup mount with two v1 hierarchies: plain directories behave like cgroups for
    # rmdir once empty, which is the property the walk relies on.
    for h in ("cpu", "memory"):
        (tmp_path / h / "fakegpu-c1-0" / "kubepods" / "besteffort").mkdir(parents=True)
        (tmp_path / h / "other").mkdir()
    removed = cleanup.remove_cgroup_tree("/fakegpu-c1-0", root=tmp_path)
    assert len(removed) == 6
    for h in ("cpu", "memory"):
        assert not (tmp_path / h / "fakegpu-c1-0").exists()
        assert (tmp_path / h / "other").is_dir()
    assert cleanup.remove_cgroup_tree("/fakegpu-c1-0", root=tmp_path) == []


def test_create_cgroup_copies_cpuset_from_parent(tmp_path: Path) -> None:
    (tmp_path / "cpuset").mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    (tmp_path / "pids").mkdir()
    made = cleanup.create_cgroup("/fakegpu-c1-0", root=tmp_path)
    assert {p.parent.name for p in made} == {"cpuset", "pids"}
    assert (tmp_path / "cpuset" / "fakegpu-c1-0" / "cpuset.cpus").read_text().strip() == "0-3"
    assert cleanup.create_cgroup("/fakegpu-c1-0", root=tmp_path) == []


def test_unmount_under_nothing_mounted(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert cleanup.unmount_under(tmp_path / "nothing-here", mountinfo_path=info) == []
