"""The Helm chart: what it renders for each supported minor, and a server-side dry-run of an
install on a real kube-apiserver (the cached binaries the embedded cluster runs).

helm is built from the Go module proxy into the binary cache when missing (no skip).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu import drivers
from fakegpu.cluster import featuregates
from fakegpu.cluster.artifacts import binaries, bincache
from fakegpu.cluster.kind import tools
from fakegpu.topology.packaged import FIXTURES

from .conftest import REPO

CHART = REPO / "deploy" / "helm" / "fakegpu"
TOPOLOGY = FIXTURES / "gb200-mini.yaml"
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


def by_kind(docs: list[dict[str, Any]], kind: str, *, compute_domain: bool = False
            ) -> list[dict[str, Any]]:
    """The objects of ``kind``: the GPU plugin's, or with ``compute_domain`` the ComputeDomain
    pieces' (named ``*compute-domain*``, files/computedomain.yaml and its templates)."""
    return [d for d in docs if d["kind"] == kind and "nic-plugin" not in d["metadata"]["name"]
            and ("compute-domain" in d["metadata"]["name"]) == compute_domain]


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
    # The node's NVML state too: faults and MIG instances outlive a plugin pod (upgrades).
    assert host == {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry",
                    "/var/run/cdi", "/var/lib/fakegpu/nvml"}
    assert "--keep-slices-on-exit" in c["args"]
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and "privileged" not in sc
    assert "--driver-name=gpu.fakegpu.dev" in c["args"]
    # Ready means "serving its sockets", so a surge never removes the old pod too early; the
    # kubelet asks the plugin over HTTP (no process started per probe).
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probe"}
    assert "exec" not in c["readinessProbe"]
    assert {"name": "probe", "containerPort": 8081, "protocol": "TCP"} in c["ports"]
    assert "--probe-port=8081" in c["args"]


def test_sequential_upgrades_and_extra_env(helm: Path) -> None:
    (ds,) = by_kind(render(helm, 37, "--set", "upgradeStrategy=sequential", "--set",
                           "keepSlicesOnExit=false", "--set-json",
                           'extraEnv=[{"name":"X","value":"1"}]'), "DaemonSet")
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0,
                                                            "maxUnavailable": 1}
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert "--keep-slices-on-exit" not in c["args"]
    assert {"name": "X", "value": "1"} in c["env"]


def test_rbac_is_least_privilege(helm: Path) -> None:
    docs = render(helm, 37)
    (role,) = by_kind(docs, "ClusterRole")
    rules = {(r["apiGroups"][0], r["resources"][0]): (set(r["verbs"]), r.get("resourceNames"))
             for r in role["rules"]}
    assert rules == {
        # list: the attach controller finds the claims holding its node's devices (attach.py)
        ("resource.k8s.io", "resourceclaims"): ({"get", "list"}, None),
        ("resource.k8s.io", "resourceclaims/status"): ({"update", "patch"}, None),
        # 1.36+: device status is also authorized per driver, for claims on the token's node.
        ("resource.k8s.io", "resourceclaims/driver"):
            ({"associated-node:update", "associated-node:patch"},
             ["gpu.fakegpu.dev", "nic.fakegpu.dev"]),  # the NIC plugin's too
        ("resource.k8s.io", "resourceslices"):
            ({"get", "list", "watch", "create", "update", "patch", "delete"}, None),
        ("", "nodes"): ({"get"}, None),  # the owner of the node's slices
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


def _without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": meta}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _as_kind_installs_it(helm: Path, minor: int, driver: str, nic_driver: str
                         ) -> list[dict[str, Any]]:
    """The chart's objects besides the plugin pods, as the kind provider installs it."""
    from fakegpu.cluster.kind.charts import nic_values
    from fakegpu.deploy.manifests import NAMESPACE, RELEASE

    cmd = [str(helm), "template", RELEASE, str(CHART), "-n", NAMESPACE,
           "--kube-version", f"1.{minor}.0", "--set-file", f"topology={TOPOLOGY}",
           "--api-versions", "resource.k8s.io/v1/DeviceClass", "--set", f"driverName={driver}",
           *nic_values(nic_driver)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return sorted((_without_labels(d) for d in yaml.safe_load_all(out.stdout)
                   if d and d["kind"] not in ("DaemonSet", "ConfigMap", "Deployment")),
                  key=_key)


def _embedded_installs(driver: str, nic_driver: str) -> list[dict[str, Any]]:
    from fakegpu.cluster.embedded import install
    from fakegpu.cluster.embedded.state import ClusterState
    from fakegpu.cluster.embedded.worker import install_values

    st = ClusterState(name="c", root=Path("/nonexistent"), driver=driver, nic_driver=nic_driver)
    objs = install.objects(install_values(st))
    return sorted((o for o in objs if o["kind"] != "Namespace"), key=_key)


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("driver", ["gpu.fakegpu.dev", "gpu.nvidia.com"])
@pytest.mark.parametrize("nic_driver", list(drivers.NIC_CHOICES.values()))
def test_both_providers_install_the_same_objects(helm: Path, minor: int, driver: str,
                                                 nic_driver: str) -> None:
    """Service account, RBAC, admission policy, DeviceClasses: what the embedded provider
    applies is what the chart installs on kind (labels aside: those are Helm's), for each
    NIC driver a cluster may run (--nic-driver)."""
    chart = _as_kind_installs_it(helm, minor, driver, nic_driver)
    assert {o["kind"] for o in chart} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "DeviceClass", "CustomResourceDefinition"}
    assert _embedded_installs(driver, nic_driver) == chart
    nic_classes = [o["metadata"]["name"] for o in chart if o["kind"] == "DeviceClass"
                   and o["metadata"]["name"] in (drivers.NIC, drivers.DRANET)]
    assert nic_classes == ([nic_driver] if nic_driver else [])


def test_compute_domain_pieces_run_the_computedomain_commands(helm: Path) -> None:
    docs = render(helm, 37, "--set", "nvidiaCompatible=true")
    (plugin,) = by_kind(docs, "DaemonSet", compute_domain=True)
    (c,) = plugin["spec"]["template"]["spec"]["containers"]
    assert "fakegpu.computedomain.entrypoint" in c["command"] and "--domain=nvidia.com" in c["args"]
    # Only daemon claims of the release's namespace (the controller's) start IMEX daemons.
    assert "--namespace=fakegpu" in c["args"]
    (ctl,) = by_kind(docs, "Deployment", compute_domain=True)
    spec = ctl["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "fg-fakegpu-compute-domain-controller"
    assert spec["containers"][0]["command"][1:] == ["computedomain", "controller"]
    # The GPU plugin's DaemonSet must not select the compute-domain plugin's pods.
    (gpu,) = by_kind(docs, "DaemonSet")
    wanted = gpu["spec"]["selector"]["matchLabels"].items()
    assert not wanted <= plugin["spec"]["template"]["metadata"]["labels"].items()
    (crd,) = by_kind(docs, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"


@pytest.mark.parametrize("minor", MINORS)
def test_nic_plugin_runs_on_the_nodes_network_with_what_it_reads_and_writes(
        helm: Path, minor: int) -> None:
    """The NIC plugin (docs/nics.md): the node's network namespace and NET_ADMIN for the veth
    pairs it makes there, the sysfs view in the GPU plugin's NVML hostPath, the CDI dir and
    the kubelet's plugin dirs; the GPU plugin's service account; its own pod labels."""
    docs = render(helm, minor, "--set", "nvidiaCompatible=true")
    [nic] = [d for d in docs if d["kind"] == "DaemonSet" and "nic-plugin" in d["metadata"]["name"]]
    spec = nic["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    (c,) = spec["containers"]
    assert c["command"][1:] == ["-m", "fakegpu.node.nic"]
    assert {"--kubelet-root=/var/lib/kubelet", "--cdi-root=/var/run/cdi"} <= set(c["args"])
    caps = c["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert not c["securityContext"]["allowPrivilegeEscalation"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert {paths[mounts[p]] for p in ("/var/lib/kubelet/plugins_registry",
                                       "/var/lib/kubelet/plugins", "/var/run/cdi")} == {
        "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    (gpu,) = by_kind(docs, "DaemonSet")
    gpu_spec = gpu["spec"]["template"]["spec"]
    gpu_env = {e["name"]: e.get("value") for e in gpu_spec["containers"][0]["env"]}
    # The same NVML hostPath at the same place as the GPU plugin's: one sysfs view per node.
    assert env["FAKEGPU_NVML_STATE_DIR"] == gpu_env["FAKEGPU_NVML_STATE_DIR"]
    gpu_paths = {v["name"]: v["hostPath"]["path"] for v in gpu_spec["volumes"] if "hostPath" in v}
    assert paths[mounts[env["FAKEGPU_NVML_STATE_DIR"]]] == gpu_paths["nvml-state"]
    assert spec["serviceAccountName"] == gpu_spec["serviceAccountName"]
    # Neither DaemonSet selects the other's pods.
    assert not gpu["spec"]["selector"]["matchLabels"].items() <= \
        nic["spec"]["template"]["metadata"]["labels"].items()
    assert not nic["spec"]["selector"]["matchLabels"].items() <= \
        gpu["spec"]["template"]["metadata"]["labels"].items()
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"
            and d["metadata"]["name"].startswith("nic.")] == ["nic.fakegpu.dev"]
    assert render(helm, minor, "--set", "nics.enabled=false").count(nic) == 0
    assert "--driver=nic.fakegpu.dev" in c["args"]
    # DRANET's vocabulary (--nic-driver dranet): the same plugin under DRANET's name.
    dranet = render(helm, minor, "--set", f"nics.driverName={drivers.DRANET}")
    [nic] = [d for d in dranet
             if d["kind"] == "DaemonSet" and "nic-plugin" in d["metadata"]["name"]]
    assert "--driver=dra.net" in nic["spec"]["template"]["spec"]["containers"][0]["args"]


def test_embedded_rbac_is_the_charts(helm: Path) -> None:
    """The embedded cluster once granted every verb on resource.k8s.io, hiding RBAC bugs that
    then failed on kind: its role, binding and service account are now the chart's."""
    chart = {_key(o): o for o in _as_kind_installs_it(helm, 37, "gpu.fakegpu.dev", drivers.NIC)}
    embedded = {_key(o): o for o in _embedded_installs("gpu.fakegpu.dev", drivers.NIC)}
    for kind in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount"):
        (key,) = [k for k in chart if k[0] == kind and "compute-domain" not in k[1]]
        assert embedded[key] == chart[key]
    (role,) = [o for k, o in embedded.items()
               if k[0] == "ClusterRole" and "compute-domain" not in k[1]]
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])


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
    from fakegpu.cluster.embedded.controlplane import ControlPlane

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


# --- the plugin's rights on a real apiserver -----------------------------------------------------


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def _slice(name: str, node: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node",
                                    "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta,
            "spec": {"driver": "gpu.fakegpu.dev", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}}


def _claim_allocated_on(node: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"on-{node}", "namespace": "default"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.fakegpu.dev"}}]}}}


@pytest.mark.integration
def test_the_plugin_writes_only_what_its_node_owns(apiserver: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    """The plugin's identity as the embedded provider gives it (the chart's service account,
    token bound to the Node) with the shared RBAC and admission policy: its own node's slices
    and claims' device status succeed, another node's are refused. On 1.36+ the status write
    needs resourceclaims/driver (the chart lacked it: 422, and claims had no device status)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from fakegpu.cluster.embedded import install
    from fakegpu.deploy.manifests import Install
    from fakegpu.kube import api as kubeapi
    from fakegpu.testkit.wait import until_true, wait_for

    admin_kubeconfig, _ = apiserver
    cfg = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    values = Install(driver="gpu.fakegpu.dev")
    with kubeapi.session(admin_kubeconfig) as admin:
        core = client.CoreV1Api(admin)
        nodes = {n: core.create_node(_node(n)).to_dict() for n in ("n1", "n2")}
        kubeapi.apply(admin, install.objects(values))
        paths = {}
        for n in nodes:
            token = kubeapi.service_account_token(admin, values.namespace,
                                                  values.service_account, node=n, seconds=3600)
            paths[n] = install.write_plugin_credentials(
                token, values, kubeconfig=tmp_path / f"{n}.kubeconfig",
                token_file=tmp_path / f"{n}.token", server=cfg["server"],
                ca=Path(cfg["certificate-authority"]), cluster="t")
        objects = client.CustomObjectsApi(admin)
        claim = objects.create_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", _claim_allocated_on("n1"))
        claim["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.fakegpu.dev",
                                     "pool": "n1", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
        objects.replace_namespaced_custom_object_status(
            "resource.k8s.io", "v1", "default", "resourceclaims", "on-n1", claim)

    def refused(call: Any, *args: Any) -> str:
        with pytest.raises(ApiException) as err:
            call(*args)
        assert err.value.status in (403, 422), err.value
        return str(err.value.body)

    with kubeapi.session(paths["n1"]) as plugin:
        review = client.AuthenticationV1Api(plugin).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        user = review.status.user_info
        assert user.username == "system:serviceaccount:fakegpu-system:fakegpu"
        assert user.extra["authentication.kubernetes.io/node-name"] == ["n1"]
        objects = client.CustomObjectsApi(plugin)
        create = objects.create_cluster_custom_object
        args = ("resource.k8s.io", "v1", "resourceslices")
        own = client.CoreV1Api(plugin).read_node("n1").to_dict()  # get nodes: the owner

        def enforced() -> bool:  # a new policy takes effect once the apiserver has loaded it
            try:
                create(*args, _slice("probe", "n2"), dry_run="All")
            except ApiException:
                return True
            return False

        wait_for(until_true(enforced), what="the admission policy to take effect", timeout=60,
                 interval=0.5)
        create(*args, _slice("n1-a", "n1", owner=own))
        assert "may not write a ResourceSlice" in refused(create, *args, _slice("n2-a", "n2"))
        assert "may not make node" in refused(create, *args,
                                              _slice("n1-b", "n1", owner=nodes["n2"]))
        claim = objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", "on-n1")
        claim["status"]["devices"] = [{"driver": "gpu.fakegpu.dev", "pool": "n1",
                                       "device": "gpu-0", "data": {"uuid": "GPU-x"}}]
        stored = objects.replace_namespaced_custom_object_status(
            "resource.k8s.io", "v1", "default", "resourceclaims", "on-n1", claim)
        assert stored["status"]["devices"][0]["data"] == {"uuid": "GPU-x"}
    with kubeapi.session(paths["n2"]) as other:
        objects = client.CustomObjectsApi(other)
        claim = objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", "on-n1")
        claim["status"]["devices"][0]["data"] = {"uuid": "GPU-forged"}
        if featuregates.parse_minor(_apiserver_binaries().k8s_version) >= 36:
            refused(objects.replace_namespaced_custom_object_status, "resource.k8s.io", "v1",
                    "default", "resourceclaims", "on-n1", claim)


@pytest.mark.parametrize("minor", MINORS)
def test_fake_nodes_only_lay_down_the_nodes_for_another_driver(helm: Path, minor: int) -> None:
    """driver.enabled=false with fakeNodes.enabled (the release kind installs first, and what a
    vendor's chart runs on): the topology and one DaemonSet that builds each node's NVIDIA
    host, with no API access and no capability beyond MKNOD; none of fakegpu's driver."""
    from fakegpu.cluster.kind import charts, hostpod

    docs = render(helm, minor, "--set", "driver.enabled=false", "--set", "fakeNodes.enabled=true")
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "DaemonSet"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    # The container's name is how kind finds these pods (hostpod.is_host).
    assert c["name"] == hostpod.CONTAINER and c["command"][1:] == ["-m", "fakegpu.node.host"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["MKNOD"]}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in c["env"]}
    # The state where fakegpu's own plugin looks for it (nvmlStateHostPath), below the one
    # hostPath mounted at its own path (the state is hard-linked into the driver root).
    (host_root,) = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert host_root == charts.HOST_ROOT
    assert env["FAKEGPU_NVML_STATE_DIR"] == f"{host_root}/nvml"
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {host_root, "/etc/fakegpu"}
    assert f"--host-dir={host_root}/nvhost" in c["args"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The default install has no fake-node pods (fakegpu's plugin renders its own state).
    assert not [d for d in render(helm, minor) if d["metadata"]["name"].endswith("-host")]


def test_fake_nodes_refuse_a_state_path_outside_their_host_root(helm: Path) -> None:
    cmd = [str(helm), "template", "fg", str(CHART), "--kube-version", "1.37.0",
           "--set-file", f"topology={TOPOLOGY}", "--set", "fakeNodes.enabled=true",
           "--set", "nvmlStateHostPath=/opt/state",
           "--api-versions", "resource.k8s.io/v1/DeviceClass"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode != 0
    assert "nvmlStateHostPath /opt/state must lie below fakeNodes.hostRoot" in out.stderr


def test_kind_installs_the_nodes_then_fakegpus_driver_or_the_vendors_the_same_way(
        tmp_path: Path) -> None:
    """charts.py: one release of fake nodes, then the driver: fakegpu's own chart with the
    cluster's settings, or a vendor's chart with its values files and images, unchanged."""
    from fakegpu.cluster import driverchart
    from fakegpu.cluster.kind import charts
    from fakegpu.cluster.kind.state import KindState

    st = KindState(name="c", k8s_version="1.37.2", topology="/t.yaml", driver="gpu.fakegpu.dev",
                   plugin_image="fakegpu.local/fakegpu-plugin:abc", workers=["w"])
    nodes = charts.nodes_release(st)
    assert (nodes.name, nodes.namespace) == ("fakegpu-nodes", "fakegpu-system")
    assert {"driver.enabled=false", "fakeNodes.enabled=true"} <= set(nodes.args)
    own = charts.driver_release(st)
    assert (own.name, own.chart, own.images) == ("fakegpu", str(charts.CHART), ())
    assert "driverName=gpu.fakegpu.dev" in own.args and "fakeNodes.enabled=true" not in own.args
    values = tmp_path / "v.yaml"
    values.write_text("x: 1\n")
    vendor = driverchart.parse(str(CHART), driver="gpu.example.com", values=[values],
                               images=["example.com/driver:v1"])
    st = KindState(**{**st.__dict__, "driver": vendor.driver, "chart": vendor.to_json()})
    theirs = charts.driver_release(st)
    assert (theirs.name, theirs.namespace) == ("dra-driver", "dra-driver")
    assert theirs.args == ("-f", str(values)) and theirs.images == ("example.com/driver:v1",)
    # The fake nodes are the same whoever's driver runs on them.
    assert charts.nodes_release(st) == nodes


def test_the_host_pods_wait_names_the_workers_without_a_ready_one() -> None:
    from fakegpu.cluster.kind import charts, hostpod

    def pod(node: str, ready: bool, container: str = hostpod.CONTAINER) -> dict[str, Any]:
        return {"metadata": {}, "spec": {"nodeName": node, "containers": [{"name": container}]},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}

    pods = [pod("w1", True), pod("w2", False), pod("w3", True, container="plugin")]
    assert charts.hosts_ready(pods, ["w1", "w2", "w3"]) == ["w2", "w3"]
