"""The node image's own files: syntax, and the settings the cluster depends on."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib

import pytest

from fakegpu.cluster.kind import nodefiles


def test_entrypoint_is_valid_bash_and_execs_init() -> None:
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n"], input=nodefiles.ENTRYPOINT, text=True, check=True)
    assert nodefiles.ENTRYPOINT.rstrip().endswith('exec "$@"')
    # kind waits for one of these lines in the node's log before it goes on.
    assert "detected cgroup v1" in nodefiles.ENTRYPOINT


def test_containerd_config_enables_cdi_and_routes_runc_through_the_wrapper() -> None:
    cfg = tomllib.loads(nodefiles.containerd_config("registry.k8s.io/pause:3.10.2"))
    assert cfg["version"] == 3
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True and "/var/run/cdi" in runtime["cdi_spec_dirs"]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["BinaryName"] == nodefiles.WRAPPER_PATH and runc["SystemdCgroup"] is True
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10.2"


@pytest.mark.parametrize("cidr", ["10.244.3.0/24", "10.244.17.0/24"])
def test_cni_config_hands_out_the_nodes_pod_cidr(cidr: str) -> None:
    conf = json.loads(nodefiles.cni_conflist(cidr))
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipam"]["type"] == "host-local"
    assert bridge["ipam"]["ranges"] == [[{"subnet": cidr}]]
    assert {p["type"] for p in conf["plugins"]} == {"bridge", "portmap"}


def test_cgroup_v1_nodes_switch_containerd_to_cgroupfs(tmp_path) -> None:
    """On a v1 host the entrypoint's sed turns SystemdCgroup off in the real config (and nothing
    else): systemd's v1 driver freezes containers to set device rules, which fails under load."""
    start = nodefiles.ENTRYPOINT.index("  sed -i -E 's/^([[:space:]]*SystemdCgroup")
    end = nodefiles.ENTRYPOINT.index("\nfi\n", start)
    step = nodefiles.ENTRYPOINT[start:end]
    config = tmp_path / "config.toml"
    original = nodefiles.containerd_config("registry.k8s.io/pause:3.10.2")
    config.write_text(original)
    subprocess.run(["bash", "-euc", step], env={"FAKEGPU_CONTAINERD_CONFIG": str(config)},
                   check=True)
    cfg = tomllib.loads(config.read_text())
    runc = cfg["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is False
    assert config.read_text() == original.replace("SystemdCgroup = true", "SystemdCgroup = false")
