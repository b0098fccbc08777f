"""kind configs: the committed ones are today's render, and they carry what the suites need."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from fakegpu.cluster import featuregates
from fakegpu.cluster.artifacts import binaries
from fakegpu.cluster.kind import config
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

from .conftest import REPO

MINORS = list(binaries.SUPPORTED)
TOPOLOGY = FIXTURES / "gb200-mini.yaml"


@pytest.mark.parametrize("minor", MINORS)
def test_committed_config_is_the_render(minor: str) -> None:
    out = subprocess.run([sys.executable, "-m", "fakegpu", "kind", "config", "--k8s-version",
                          minor], capture_output=True, text=True, check=True)
    assert (REPO / "clusters" / "kind" / f"{minor}.yaml").read_text() == out.stdout


@pytest.mark.parametrize("minor", MINORS)
def test_config_has_gates_apis_cdi_and_one_worker_per_node(minor: str) -> None:
    cfg = yaml.safe_load((REPO / "clusters" / "kind" / f"{minor}.yaml").read_text())
    m = featuregates.parse_minor(minor)
    assert cfg["featureGates"] == featuregates.dra_gates(m)
    assert {k: v == "true" for k, v in cfg["runtimeConfig"].items()} == \
        featuregates.runtime_config(m)
    assert any("enable_cdi = true" in p for p in cfg["containerdConfigPatches"])
    workers = [n for n in cfg["nodes"] if n["role"] == "worker"]
    names = [yaml.safe_load(n["kubeadmConfigPatches"][0])["nodeRegistration"]["name"]
             for n in workers]
    assert names == [n.name for n in load_topology(TOPOLOGY).nodes]
    assert all(n["labels"] == {config.WORKER_LABEL: "true"} for n in workers)
    cgroup_patch = [yaml.safe_load(p) for p in cfg.get("kubeadmConfigPatches", [])]
    # Kubelet 1.35+ refuses cgroup v1 hosts unless told otherwise.
    assert ({"kind": "KubeletConfiguration", "failCgroupV1": False} in cgroup_patch) == (m >= 35)


def test_render_names_the_node_image_on_every_node() -> None:
    cfg = config.render(37, ["a", "b"], "fakegpu.local/kind-node:v1.37.2-x")
    assert [n.get("image") for n in cfg["nodes"]] == ["fakegpu.local/kind-node:v1.37.2-x"] * 3


def test_the_config_says_it_needs_our_cni_and_default_cni_is_for_plain_kind() -> None:
    def printed(*flags: str) -> str:
        return subprocess.run([sys.executable, "-m", "fakegpu", "kind", "config", *flags],
                              capture_output=True, text=True, check=True).stdout

    ours, plain = printed(), printed("--default-cni")
    assert yaml.safe_load(ours)["networking"]["disableDefaultCNI"] is True
    assert "a plain `kind create cluster` the nodes stay NotReady" in ours
    assert "--default-cni" in ours
    assert "disableDefaultCNI" not in yaml.safe_load(plain)["networking"]
    assert "NotReady" not in plain
    # Everything else is the same config.
    rest = {k: v for k, v in yaml.safe_load(ours).items() if k != "networking"}
    assert rest == {k: v for k, v in yaml.safe_load(plain).items() if k != "networking"}
