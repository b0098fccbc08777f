"""The Helm chart: what it renders for each supported minor, and a server-side dry-run of an
install on a real kube-apiserver (the cached binaries the embedded cluster runs).

helm is built from the Go module proxy into the binary cache when missing (no skip).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cluster import binaries, bincache, featuregates
from fakegpu.cluster.kind import tools

from .conftest import REPO

CHART = REPO / "deploy" / "helm" / "fakegpu"
TOPOLOGY = REPO / "fixtures" / "gb200-mini.yaml"
MINORS = [int(m.split(".")[1]) for m in binaries.SUPPORTED]


@pytest.fixture(scope="session")
def helm() -> Path:
    return tools.executable(tools.helm())


def render(helm: Path, minor: int, *args: str, api: str = "v1") -> list[dict[str, Any]]:
    cmd = [str(helm), "template", "fg", str(CHART), "-n", "fakegpu",
           "--kube-version", f"1.{minor}.0", "--set-file", f"topology={TOPOLOGY}",
           # `helm template` has no cluster to ask: tell it what 1.<minor> serves.
           "--api-versions", f"resource.k8s.io/{api}/DeviceClass", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("minor", MINORS)
def test_daemonset_upgrades_seamlessly_and_mounts_what_the_kubelet_shares(
        helm: Path, minor: int) -> None:
    (ds,) = by_kind(render(helm, minor), "DaemonSet")
    spec = ds["spec"]
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    (c,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    # The plugin reads $POD_UID as its instance id and $NODE_NAME as its node.
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    vols = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    host = {v["hostPath"]["path"] for v in vols.values() if "hostPath" in v}
    assert host == {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry",
                    "/var/run/cdi"}
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and "privileged" not in sc
    assert "--driver-name=gpu.fakegpu.dev" in c["args"]
    # Ready means "serving its sockets", so a surge never removes the old pod too early.
    probe = c["readinessProbe"]["exec"]["command"]
    assert "fakegpu.cluster.kind.readiness" in probe and "--driver-name=gpu.fakegpu.dev" in probe


def test_rbac_is_least_privilege(helm: Path) -> None:
    docs = render(helm, 37)
    (role,) = by_kind(docs, "ClusterRole")
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert rules == {
        ("resource.k8s.io", "resourceclaims"): {"get"},
        ("resource.k8s.io", "resourceclaims/status"): {"update", "patch"},
        ("resource.k8s.io", "resourceslices"):
            {"get", "list", "watch", "create", "update", "patch", "delete"},
    }
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    (sa,) = by_kind(docs, "ServiceAccount")
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "fakegpu"}]


def test_admission_policy_binds_writes_to_the_plugins_own_node(helm: Path) -> None:
    docs = render(helm, 37)
    (vap,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (vapb,) = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    (sa,) = by_kind(docs, "ServiceAccount")
    assert vapb["spec"]["policyName"] == vap["metadata"]["name"]
    assert vapb["spec"]["validationActions"] == ["Deny"]
    (cond,) = vap["spec"]["matchConditions"]
    assert f"system:serviceaccount:fakegpu:{sa['metadata']['name']}" in cond["expression"]
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}


@pytest.mark.parametrize(("values", "manifests"), [
    ((), ("deviceclass.yaml", "deviceclass-mig.yaml")),
    (("--set", "nvidiaCompatible=true"), ("deviceclass-nvidia.yaml",)),
])
def test_device_classes_match_the_plugins_own(
        helm: Path, values: tuple[str, ...], manifests: tuple[str, ...]) -> None:
    rendered = {d["metadata"]["name"]: d["spec"]
                for d in by_kind(render(helm, 37, *values), "DeviceClass")}
    for name in manifests:
        shipped = yaml.safe_load(
            resources.files("fakegpu.plugin").joinpath("manifests", name).read_text())
        assert rendered[shipped["metadata"]["name"]] == shipped["spec"]


@pytest.mark.parametrize(("api", "want"), [("v1", "resource.k8s.io/v1"),
                                           ("v1beta2", "resource.k8s.io/v1beta2")])
def test_resource_api_version_follows_the_cluster(helm: Path, api: str, want: str) -> None:
    classes = by_kind(render(helm, 37, api=api), "DeviceClass")
    assert classes and {c["apiVersion"] for c in classes} == {want}


def test_topology_is_required(helm: Path) -> None:
    out = subprocess.run([str(helm), "template", "fg", str(CHART), "--kube-version", "1.37.0",
                          "--api-versions", "resource.k8s.io/v1/DeviceClass"],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "topology is required" in out.stderr


def test_topology_configmap_carries_the_file(helm: Path) -> None:
    (cm,) = by_kind(render(helm, 37), "ConfigMap")
    assert yaml.safe_load(cm["data"]["topology.yaml"]) == yaml.safe_load(TOPOLOGY.read_text())


# --- server-side dry-run on a real apiserver -----------------------------------------------------


@dataclass(frozen=True)
class _ApiserverBinaries:
    """What ControlPlane needs without controllers: kube-apiserver and etcd (and kubectl)."""

    k8s_version: str
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path


def _apiserver_binaries() -> Any:
    version = binaries.resolve_version(None)
    kube, etcd = binaries.recipes(version)[:2]
    if bincache.load_manifest(kube.component) and bincache.load_manifest(etcd.component):
        k = bincache.entry_dir(kube.component) / "bin"
        return _ApiserverBinaries(version, k / "kube-apiserver", k / "kube-controller-manager",
                                  k / "kube-scheduler", k / "kubectl",
                                  bincache.entry_dir(etcd.component) / "bin" / "etcd")
    return binaries.ensure(version)  # builds what is missing: the embedded e2e needs it too


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    from fakegpu.cluster.controlplane import ControlPlane

    bins = _apiserver_binaries()
    assert featuregates.parse_minor(bins.k8s_version) in MINORS
    with ControlPlane(tmp_path_factory.mktemp("cp"), bins, controllers=False) as cp:
        yield cp.kubeconfig, bins.kubectl


@pytest.mark.integration
@pytest.mark.parametrize("values", [(), ("--set", "nvidiaCompatible=true")])
def test_server_side_dry_run_install(
        helm: Path, apiserver: tuple[Path, Path], values: tuple[str, ...]) -> None:
    kubeconfig, kubectl = apiserver
    # No --kube-version / --api-versions: helm asks the apiserver (the real capabilities).
    out = subprocess.run(
        [str(helm), "install", "fg", str(CHART), "--kubeconfig", str(kubeconfig),
         "-n", "default", "--dry-run=server", "--set-file", f"topology={TOPOLOGY}", *values],
        capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout.split("MANIFEST:", 1)[1]) if d]
    kinds = {d["kind"] for d in docs}
    assert {"DaemonSet", "ClusterRole", "ValidatingAdmissionPolicy", "DeviceClass"} <= kinds
    # The apiserver serves resource.k8s.io/v1 (1.34+): the chart must have picked it.
    assert {d["apiVersion"] for d in by_kind(docs, "DeviceClass")} == {"resource.k8s.io/v1"}
    # helm's dry-run renders with the cluster's capabilities; the apiserver's own dry-run also
    # validates every object (schemas, CEL of the policy and the classes) without storing it.
    applied = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "--dry-run=server",
         "-o", "name", "-f", "-"],
        input=yaml.safe_dump_all(docs), capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr
    assert len(applied.stdout.split()) == len(docs)
