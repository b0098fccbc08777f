"""The chart's shared manifests rendered without Helm (fakegpu.deploy.manifests) and what
the embedded provider installs from them (fakegpu.cluster.embedded.install). The comparison
with the chart rendered by Helm is in tests/kind/test_chart.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fakegpu.cluster.embedded import install
from fakegpu.deploy import manifests
from fakegpu.deploy.manifests import Install
from fakegpu.errors import FakegpuError

REPO = Path(__file__).resolve().parents[2]
CHART_FILES = REPO / "deploy" / "helm" / "fakegpu" / "files"


def test_the_package_ships_the_charts_files() -> None:
    """One copy: the package's files are the chart's (a link here, copied into a wheel)."""
    shipped = {f.name: f.read_text() for f in manifests.files()}
    in_chart = {f.name: f.read_text() for f in CHART_FILES.glob("*.yaml")}
    assert shipped == in_chart and len(shipped) >= 4


@pytest.mark.parametrize(("driver", "mig"), [("gpu.fakegpu.dev", "mig.fakegpu.dev"),
                                             ("gpu.nvidia.com", "mig.nvidia.com")])
def test_every_placeholder_is_filled(driver: str, mig: str) -> None:
    objs = manifests.render(Install(driver=driver, resource_api="resource.k8s.io/v1beta2"))
    assert "${" not in yaml.safe_dump_all(objs)
    domain = driver.removeprefix("gpu.")
    compute = {f"compute-domain-default-channel.{domain}", f"compute-domain-daemon.{domain}"}
    classes = {c["metadata"]["name"]: c for c in objs if c["kind"] == "DeviceClass"}
    assert set(classes) == {driver, mig, *compute, "nic.fakegpu.dev"}
    # The NIC driver's (nic.yaml): one name in both GPU driver modes.
    assert classes.pop("nic.fakegpu.dev")["spec"]["selectors"][0]["cel"]["expression"] == \
        "device.driver == 'nic.fakegpu.dev'"
    for name in compute:  # the compute-domain driver's (computedomain.yaml)
        assert f"device.driver == 'compute-domain.{domain}'" in \
            classes.pop(name)["spec"]["selectors"][0]["cel"]["expression"]
    # DRAExtendedResource: limits of <driver domain>/gpu (nvidia.com/gpu) get whole GPUs.
    assert classes[driver]["spec"]["extendedResourceName"] == \
        driver.removeprefix("gpu.") + "/gpu"
    assert "extendedResourceName" not in classes[mig]["spec"]
    assert {c["apiVersion"] for c in classes.values()} == {"resource.k8s.io/v1beta2"}
    (role,) = [o for o in objs if o["kind"] == "ClusterRole"
               and o["metadata"]["name"] == manifests.RELEASE]
    (driver_rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert driver_rule["resourceNames"] == [driver, "nic.fakegpu.dev"]  # the NIC plugin too


def test_the_nic_driver_names_its_device_class_and_rights_or_none_is_made() -> None:
    """--nic-driver dranet: the NIC DeviceClass and the claim-status right under DRANET's name;
    none: no NIC DeviceClass (no plugin publishes NICs)."""
    def classes(install: Install) -> list[str]:
        return [o["metadata"]["name"] for o in manifests.render(install)
                if o["kind"] == "DeviceClass"]

    dranet = Install(driver="gpu.nvidia.com", nic_driver="dra.net")
    assert "dra.net" in classes(dranet) and "nic.fakegpu.dev" not in classes(dranet)
    (role,) = [o for o in manifests.render(dranet) if o["kind"] == "ClusterRole"
               and o["metadata"]["name"] == manifests.RELEASE]
    (rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert rule["resourceNames"] == ["gpu.nvidia.com", "dra.net"]
    none = classes(Install(driver="gpu.fakegpu.dev", nics=False))
    assert not {"nic.fakegpu.dev", "dra.net"} & set(none) and "gpu.fakegpu.dev" in none


@pytest.mark.parametrize(("driver", "group"), [("gpu.fakegpu.dev", "resource.fakegpu.dev"),
                                               ("gpu.nvidia.com", "resource.nvidia.com")])
def test_the_computedomain_crd_is_nvidias_shape_in_the_drivers_group(driver: str,
                                                                      group: str) -> None:
    objs = manifests.render(Install(driver=driver))
    (crd,) = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["name"] == f"computedomains.{group}"
    assert (crd["spec"]["group"], crd["spec"]["scope"]) == (group, "Namespaced")
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta1" and version["subresources"] == {"status": {}}
    props = version["schema"]["openAPIV3Schema"]["properties"]
    spec, status = props["spec"]["properties"], props["status"]["properties"]
    assert set(spec) == {"numNodes", "channel"}
    assert spec["channel"]["properties"]["allocationMode"]["enum"] == ["Single", "All"]
    assert set(status["nodes"]["items"]["properties"]) == {
        "name", "ipAddress", "cliqueID", "index", "status"}
    # The compute-domain plugin runs as the GPU plugin's service account.
    (binding,) = [o for o in objs if o["kind"] == "ClusterRoleBinding"
                  and o["metadata"]["name"] == f"{manifests.RELEASE}-compute-domain-plugin"]
    assert binding["subjects"][0]["name"] == manifests.RELEASE


def test_an_unknown_placeholder_is_an_error() -> None:
    with pytest.raises(FakegpuError, match=r"x.yaml: unknown placeholder \$\{NOPE\}"):
        manifests.fill("name: ${NOPE}\n", Install(driver="d").placeholders(), "x.yaml")


def test_embedded_objects_start_with_the_namespace_the_chart_is_installed_in() -> None:
    objs = install.objects(Install(driver="gpu.fakegpu.dev"))
    assert objs[0] == {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": manifests.NAMESPACE}}
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"
             and o["metadata"]["name"] == manifests.RELEASE]
    assert sa["metadata"] == {"name": manifests.RELEASE, "namespace": manifests.NAMESPACE}
    (binding,) = [o for o in objs if o["kind"] == "ClusterRoleBinding"
                  and o["metadata"]["name"] == manifests.RELEASE]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": manifests.RELEASE,
                                    "namespace": manifests.NAMESPACE}]


def test_plugin_kubeconfig_names_the_token_file(tmp_path: Path) -> None:
    from fakegpu.cluster.kubeconfig import write_kubeconfig

    token = tmp_path / "plugin.token"
    path = write_kubeconfig(tmp_path / "k", server="https://127.0.0.1:6443",
                            ca=tmp_path / "ca.crt", token_file=token, user="sa")
    doc = yaml.safe_load(path.read_text())
    assert doc["users"] == [{"name": "sa", "user": {"tokenFile": str(token)}}]
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match="cert and key, or token_file"):
        write_kubeconfig(tmp_path / "k", server="s", ca=tmp_path / "ca", token_file=token,
                         cert=tmp_path / "c", key=tmp_path / "k")
