"""What each worker's containerd, CNI and kubelet configs say (rendered without a host)."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

from fakegpu.cluster import embedded
from fakegpu.cluster.node import (
    MAX_SOCKET_PATH,
    longest_socket_path,
    render_cni_config,
    render_containerd_config,
    render_kubelet_config,
)


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


LAYOUT = embedded.node_layout("c1", Path("/var/lib/fakegpu/c1"), 3, 2, "gpu-node-2")


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
    layouts = [embedded.node_layout("c1", root, 0, i, f"n{i}") for i in range(embedded.MAX_NODES)]
    for attr in ("ip", "pod_subnet", "bridge", "root", "cgroup_root", "containerd_socket"):
        values = [getattr(lay, attr) for lay in layouts]
        assert len(set(values)) == len(values), attr
    assert all(len(lay.bridge) <= 15 for lay in layouts)


def test_default_layout_sockets_fit() -> None:
    path, length = longest_socket_path(LAYOUT, "gpu.fakegpu.dev")
    assert length == len(os.fsencode(path)) <= MAX_SOCKET_PATH
    deep = embedded.node_layout("c1", Path("/x" * 40), 0, 0, "n")
    assert longest_socket_path(deep, "gpu.fakegpu.dev")[1] > MAX_SOCKET_PATH


def test_runc_wrapper_strips_seccomp_and_passes_arguments(tmp_path: Path) -> None:
    import subprocess
    import sys

    from fakegpu.cluster.node import write_runc_wrapper

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
