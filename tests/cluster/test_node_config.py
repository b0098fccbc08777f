"""What each worker's containerd, CNI and kubelet configs say (rendered without a host)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from fakegpu.cluster import cleanup, inotify
from fakegpu.cluster.embedded import bringup, state
from fakegpu.cluster.embedded import node as nodemod
from fakegpu.cluster.embedded.layout import (
    HOST_DEVICE_PLUGINS,
    MAX_SOCKET_PATH,
    longest_socket_path,
)
from fakegpu.cluster.embedded.node import (
    render_cni_config,
    render_containerd_config,
    render_kubelet_config,
)
from fakegpu.cluster.process import WaitPolicy, spawn, terminate, wait_until
from fakegpu.errors import MissingPrerequisite


@dataclass(frozen=True)
class FakeBins:
    k8s_version: str = "1.37.2"
    kube_apiserver: Path = Path("/b/kube-apiserver")
    kube_controller_manager: Path = Path("/b/kcm")
    kube_scheduler: Path = Path("/b/ks")
    kubectl: Path = Path("/b/kubectl")
    etcd: Path = Path("/b/etcd")
    kubelet: Path = Path("/b/kubelet")
    containerd: Path = Path("/b/containerd")
    containerd_shim_runc_v2: Path = Path("/b/containerd-shim-runc-v2")
    ctr: Path = Path("/b/ctr")
    runc: Path = Path("/b/runc")
    crictl: Path = Path("/b/crictl")
    cni_bin_dir: Path = Path("/b/cni")


LAYOUT = state.node_layout("c1", Path("/var/lib/fakegpu/c1"), 3, 2, "gpu-node-2")


def test_containerd_config_confines_the_node() -> None:
    cfg = tomllib.loads(render_containerd_config(LAYOUT, FakeBins(), "fakegpu.local/pause:1"))
    assert cfg["version"] == 3
    assert cfg["grpc"]["address"] == str(LAYOUT.containerd_socket)
    for key in ("root", "state"):
        assert cfg[key].startswith(str(LAYOUT.root) + "/")
    plugins = cfg["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == [str(LAYOUT.cdi_dir)]
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False
    assert runc["Root"].startswith(str(LAYOUT.root) + "/")
    assert runtime["cni"]["conf_dir"] == str(LAYOUT.cni_conf_dir)
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == \
        "fakegpu.local/pause:1"
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True


def test_cni_config_is_bridge_without_masquerade() -> None:
    conf = json.loads(render_cni_config(LAYOUT))
    (bridge,) = conf["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipMasq"] is False
    assert bridge["bridge"] == LAYOUT.bridge and len(LAYOUT.bridge) <= 15
    assert bridge["ipam"]["ranges"] == [[{"subnet": LAYOUT.pod_subnet}]]
    assert bridge["ipam"]["dataDir"].startswith(str(LAYOUT.root))
    assert bridge["isGateway"] is True
    assert {"dst": "0.0.0.0/0"} in bridge["ipam"]["routes"]


def test_kubelet_config_identity_and_cgroups() -> None:
    gates = {"DRAAdminAccess": True, "DRADeviceTaints": True}
    cfg = yaml.safe_load(render_kubelet_config(
        LAYOUT, ca=Path("/pki/ca.crt"), serving_cert=Path("/s.crt"), serving_key=Path("/s.key"),
        gates=gates))
    assert cfg["address"] == LAYOUT.ip == cfg["healthzBindAddress"]
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["cgroupRoot"] == LAYOUT.cgroup_root
    assert cfg["failCgroupV1"] is False
    assert cfg["featureGates"] == gates
    assert cfg["containerRuntimeEndpoint"] == f"unix://{LAYOUT.containerd_socket}"
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["podLogsDir"].startswith(str(LAYOUT.root))


def test_nodes_of_one_cluster_never_share_addresses_or_names() -> None:
    root = Path("/var/lib/fakegpu/c1")
    layouts = [state.node_layout("c1", root, 0, i, f"n{i}") for i in range(bringup.MAX_NODES)]
    for attr in ("ip", "pod_subnet", "bridge", "root", "cgroup_root", "containerd_socket"):
        values = [getattr(lay, attr) for lay in layouts]
        assert len(set(values)) == len(values), attr
    assert all(len(lay.bridge) <= 15 for lay in layouts)


def test_default_layout_sockets_fit() -> None:
    path, length = longest_socket_path(LAYOUT, "gpu.fakegpu.dev")
    assert length == len(os.fsencode(path)) <= MAX_SOCKET_PATH
    deep = state.node_layout("c1", Path("/x" * 40), 0, 0, "n")
    assert longest_socket_path(deep, "gpu.fakegpu.dev")[1] > MAX_SOCKET_PATH


def test_runc_wrapper_strips_seccomp_and_passes_arguments(tmp_path: Path) -> None:
    import subprocess
    import sys

    from fakegpu.cluster.embedded.node import write_runc_wrapper

    fake_runc = tmp_path / "runc"
    # Stands in for runc: prints its arguments and the bundle's spec as it sees them.
    fake_runc.write_text(f"#!{sys.executable}\nimport json, sys\n"
                         "print(json.dumps({'argv': sys.argv[1:], "
                         "'spec': json.load(open(sys.argv[sys.argv.index('--bundle') + 1]"
                         " + '/config.json'))}))\n")
    fake_runc.chmod(0o755)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(
        {"ociVersion": "1.2.0", "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO"},
                                          "namespaces": [{"type": "pid"}]}}))
    wrapper = write_runc_wrapper(tmp_path / "wrapper", fake_runc)
    args = ["--root", "/r", "create", "--bundle", str(bundle), "--pid-file", "p", "ctr-1"]
    out = json.loads(subprocess.run([str(wrapper), *args], capture_output=True, text=True,
                                    check=True).stdout)
    assert out["argv"] == args
    assert "seccomp" not in out["spec"]["linux"]
    assert out["spec"]["linux"]["namespaces"] == [{"type": "pid"}]


# --- readiness: log lines that mean "will never be ready" ----------------------------------------

CRI_FAILED = ('time="2026-11-30T12:00:00Z" level=warning msg="failed to load plugin" '
              'error="failed to create CRI service: failed to create cni conf monitor for '
              'default: too many open files" id=io.containerd.cri.v1.runtime '
              'type=io.containerd.cri.v1')


@pytest.mark.parametrize("line", [
    CRI_FAILED,
    'level=warning msg="failed to load plugin" error="x" id=io.containerd.grpc.v1.cri type=y',
    'E1130 12:00:00.0 1 kubelet.go:1] "Failed to start cAdvisor" err="inotify_init: too many '
    'open files"',
])
def test_fatal_log_lines_match_known_failures(line: str) -> None:
    assert any(p.search(line) for p in nodemod.FATAL_LOG_LINES)


@pytest.mark.parametrize("line", [
    # containerd logs these on every healthy start.
    'level=info msg="skip loading plugin" error="no scratch file generator: skip plugin" '
    'id=io.containerd.snapshotter.v1.blockfile type=io.containerd.snapshotter.v1',
    'level=warning msg="failed to load plugin" error="devmapper not configured" '
    'id=io.containerd.snapshotter.v1.devmapper type=io.containerd.snapshotter.v1',
    'level=info msg="loading plugin" id=io.containerd.cri.v1.runtime type=io.containerd.cri.v1',
])
def test_fatal_log_lines_ignore_healthy_starts(line: str) -> None:
    assert not any(p.search(line) for p in nodemod.FATAL_LOG_LINES)


# --- inotify limits -------------------------------------------------------------------------------


def test_inotify_need_grows_with_nodes_and_use() -> None:
    none = inotify.InotifyUse(0, 0)
    one, four = inotify.inotify_need(1, none), inotify.inotify_need(4, none)
    assert four["max_user_instances"] > one["max_user_instances"]
    assert four["max_user_watches"] > one["max_user_watches"]
    busy = inotify.inotify_need(4, inotify.InotifyUse(100, 5000))
    assert busy["max_user_instances"] == four["max_user_instances"] + 100
    assert busy["max_user_watches"] == four["max_user_watches"] + 5000
    # The report's case: a 4-node cluster next to ~100 instances already in use needs > 128.
    assert busy["max_user_instances"] > 128


def _sysctls(tmp_path: Path, instances: int, watches: int) -> Path:
    d = tmp_path / "inotify"
    d.mkdir()
    (d / "max_user_instances").write_text(f"{instances}\n")
    (d / "max_user_watches").write_text(f"{watches}\n")
    return d


def test_ensure_inotify_raises_low_limits_to_at_least_kinds(tmp_path: Path) -> None:
    d = _sysctls(tmp_path, 128, 8192)
    lines = inotify.ensure_inotify({"max_user_instances": 200, "max_user_watches": 40000}, d)
    assert (d / "max_user_instances").read_text().strip() == "512"
    assert (d / "max_user_watches").read_text().strip() == "524288"
    assert len(lines) == 2
    assert "fs.inotify.max_user_instances from 128 to 512" in lines[0]


def test_ensure_inotify_raises_beyond_kind_when_needed_and_keeps_high_ones(
        tmp_path: Path) -> None:
    d = _sysctls(tmp_path, 128, 1_000_000)
    lines = inotify.ensure_inotify({"max_user_instances": 3000, "max_user_watches": 40000}, d)
    assert (d / "max_user_instances").read_text().strip() == "3000"
    assert (d / "max_user_watches").read_text().strip() == "1000000"  # never lowered
    assert len(lines) == 1
    assert inotify.ensure_inotify({"max_user_instances": 3000}, d) == []


def test_ensure_inotify_fails_fast_naming_sysctl_and_value(tmp_path: Path) -> None:
    d = tmp_path / "inotify"
    d.mkdir()
    # A sysctl nobody may write, root included (mode 0444), with a number as its first field.
    (d / "max_user_instances").symlink_to("/proc/sys/fs/file-nr")
    with pytest.raises(MissingPrerequisite,
                       match=r"fs\.inotify\.max_user_instances=1000000000"):
        inotify.ensure_inotify({"max_user_instances": 1_000_000_000}, d)


def _fake_proc(root: Path, pid: int, euid: int, fds: dict[int, tuple[str, int]]) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "fdinfo").mkdir()
    (d / "status").write_text(f"Name:\tx\nUid:\t{euid}\t{euid}\t{euid}\t{euid}\n")
    for fd, (target, wds) in fds.items():
        (d / "fd" / str(fd)).symlink_to(target)
        (d / "fdinfo" / str(fd)).write_text(
            "pos:\t0\n" + "".join(f"inotify wd:{i} ino:1 sdev:2 mask:3\n" for i in range(wds)))


def test_inotify_in_use_counts_instances_and_watches_of_one_user(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, 0, {3: ("anon_inode:inotify", 5), 4: ("anon_inode:inotify", 0),
                                 5: ("/dev/null", 0)})
    _fake_proc(tmp_path, 11, 1000, {3: ("anon_inode:inotify", 7)})  # another user's
    (tmp_path / "self").mkdir()
    assert inotify.inotify_in_use(0, tmp_path) == inotify.InotifyUse(2, 5)
    assert inotify.inotify_in_use(1000, tmp_path) == inotify.InotifyUse(1, 7)


def test_inotify_in_use_sees_a_real_instance(tmp_path: Path) -> None:
    # A /proc holding only this process: other processes come and go while the test runs.
    (tmp_path / str(os.getpid())).symlink_to(f"/proc/{os.getpid()}")
    libc = ctypes.CDLL(None, use_errno=True)
    before = inotify.inotify_in_use(os.geteuid(), tmp_path)
    fd = libc.inotify_init()
    if fd < 0:
        pytest.skip(f"inotify_init failed: errno {ctypes.get_errno()}")
    try:
        assert libc.inotify_add_watch(fd, b"/", 0x100) >= 0  # IN_CREATE
        assert libc.inotify_add_watch(fd, b"/tmp", 0x100) >= 0
        during = inotify.inotify_in_use(os.geteuid(), tmp_path)
    finally:
        os.close(fd)
    assert during.instances == before.instances + 1
    assert during.watches == before.watches + 2


# --- the kubelet's own device-plugins directory -------------------------------------------------


def test_kubelet_runs_in_its_own_mount_namespace() -> None:
    argv = nodemod.kubelet_argv(LAYOUT, FakeBins())
    assert Path(argv[0]).name == "unshare"
    assert argv[1:5] == ["--mount", "--propagation", "unchanged", "--"]
    script = argv[argv.index("-c") + 1]
    assert f"mount --bind \"$1\" {HOST_DEVICE_PLUGINS}" in script
    assert script.rstrip().endswith('exec "$@"')
    rest = argv[argv.index("-c") + 3:]
    assert rest[0] == str(LAYOUT.device_plugins_dir)
    assert rest[1] == "/b/kubelet" and f"--root-dir={LAYOUT.kubelet_root}" in rest


_FAKE_KUBELET = """import os, pathlib, subprocess, sys, time
root = pathlib.Path([a.split("=", 1)[1] for a in sys.argv if a.startswith("--root-dir=")][0])
pathlib.Path("/var/lib/kubelet/device-plugins/kubelet.sock.{tag}").write_text("mine")
vol = root / "pods" / "uid" / "volumes"
vol.mkdir(parents=True)
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(vol)], check=True)
(vol / "token").write_text("secret")
print("ready", flush=True)
time.sleep(300)
"""


@pytest.mark.integration
def test_kubelet_namespace_keeps_device_plugins_private_and_shares_volumes(
        tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("SKIPPED LOUDLY: needs root and unshare (mount namespaces)")
    tag = f"fakegpu-test-{os.getpid()}"
    lay = replace(LAYOUT, root=tmp_path / "n0")
    for d in (lay.kubelet_root, lay.device_plugins_dir, lay.log_dir):
        d.mkdir(parents=True)
    fake = tmp_path / "kubelet.py"
    fake.write_text(_FAKE_KUBELET.format(tag=tag))
    wrapper = tmp_path / "kubelet"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    wrapper.chmod(0o755)
    nodemod.share_kubelet_root(lay)
    rec = spawn("kubelet/test", nodemod.kubelet_argv(lay, replace(FakeBins(), kubelet=wrapper)),
                lay.log_dir / "kubelet.log")
    try:
        wait_until("the fake kubelet", lambda: "ready" in rec.log.read_text(),
                   WaitPolicy(60, 0.1), watch=[rec])
        # What it wrote to the fixed path landed in the node's own directory, not the host's.
        assert (lay.device_plugins_dir / f"kubelet.sock.{tag}").read_text() == "mine"
        assert not (HOST_DEVICE_PLUGINS / f"kubelet.sock.{tag}").exists()
        # Its mount under the kubelet root reached this (the host's) namespace.
        vol = lay.kubelet_root / "pods" / "uid" / "volumes"
        assert str(vol) in cleanup.mount_points(Path("/proc/self/mountinfo").read_text())
        assert (vol / "token").read_text() == "secret"
    finally:
        terminate(rec)
        cleanup.unmount_under(tmp_path)
    assert cleanup.mounts_under(Path("/proc/self/mountinfo").read_text(), tmp_path) == []
