"""`fakegpu cluster up --plugin-bin`: another vendor's kubelet plugin, its command line per node
and the bad input it refuses (external.py; issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cli import build_parser
from fakegpu.cli.cluster import _external
from fakegpu.cluster import external, get_provider
from fakegpu.cluster.lifecycle import load_spec
from fakegpu.errors import InvalidInput
from fakegpu.topology.packaged import FIXTURES

TOPOLOGY = FIXTURES / "dgx-h100.yaml"

VALUES = {"node": "nv-0", "kubeconfig": "/c/n0/plugin.kubeconfig", "kubelet_root": "/c/n0/kubelet",
          "registrar_dir": "/c/n0/kubelet/plugins_registry",
          "plugins_dir": "/c/n0/kubelet/plugins", "cdi_root": "/c/n0/cdi",
          "driver_root": "/c/n0/nvhost/driver", "state_dir": "/c/n0/extplugin",
          "image": "fakegpu-workload:1", "namespace": "fakegpu"}


@pytest.fixture()
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "gpu-kubelet-plugin"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_nvidia_preset_gives_the_host_nvidias_plugin_expects(binary: Path) -> None:
    plugin = external.parse(binary, ["-v=6"], preset="nvidia", driver=None, beside=False,
                            env=["NVIDIA_VISIBLE_DEVICES=void"])
    argv = plugin.argv(VALUES)
    assert argv[0] == str(binary)
    flags = dict(a.split("=", 1) for a in argv[1:])
    # One root for host and container: the CDI specs then name paths containerd resolves.
    assert flags["--nvidia-driver-root"] == flags["--container-driver-root"] == \
        "/c/n0/nvhost/driver"
    assert flags["--nvidia-cdi-hook-path"] == "/c/n0/nvhost/driver/usr/bin/nvidia-cdi-hook"
    assert flags["--image-name"] == "fakegpu-workload:1"
    assert flags["--node-name"] == "nv-0"
    assert flags["--kubelet-plugins-directory-path"] == "/c/n0/kubelet/plugins"
    assert argv[-1] == "-v=6"  # the user's arguments come after the preset's
    assert plugin.driver_name("gpu.fakegpu.dev") == "gpu.nvidia.com"
    assert dict(plugin.env) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert external.ExternalPlugin.from_json(plugin.to_json()) == plugin


def test_without_a_preset_only_the_users_arguments_run(binary: Path) -> None:
    plugin = external.parse(binary, ["--node={node}", "--root={kubelet_root}"], preset=None,
                            driver="gpu.acme.com", beside=True, env=[])
    assert plugin.argv(VALUES)[1:] == ["--node=nv-0", "--root=/c/n0/kubelet"]
    assert plugin.driver_name("gpu.fakegpu.dev") == "gpu.acme.com"
    assert plugin.beside


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--x={nod}"], [], r"--plugin-arg '--x=\{nod\}': unknown placeholder \{nod\}"),
    ([], ["NOEQUALS"], "--plugin-env 'NOEQUALS': expected NAME=VALUE"),
])
def test_bad_plugin_options_name_the_option(binary: Path, args: list[str], env: list[str],
                                            message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        external.parse(binary, args, preset=None, driver=None, beside=False, env=env)


def test_a_missing_binary_is_bad_input(tmp_path: Path) -> None:
    args = build_parser().parse_args(["cluster", "up", "--plugin-bin", str(tmp_path / "nope")])
    with pytest.raises(InvalidInput, match=r"--plugin-bin .*nope: not an executable file"):
        _external(args)


def test_cluster_up_hands_the_plugin_to_the_embedded_provider(binary: Path) -> None:
    args = build_parser().parse_args([
        "cluster", "up", "--driver", "nvidia", "--plugin-bin", str(binary),
        "--plugin-preset", "nvidia", "--plugin-arg=-v=4"])
    plugin = _external(args)
    spec = load_spec("c1", TOPOLOGY, None, driver=args.driver, plugin=plugin)
    assert spec.plugin == plugin
    bringup = get_provider("embedded").provider.provision(spec)
    assert bringup.state.plugin == plugin.to_json()  # type: ignore[attr-defined]
    assert build_parser().parse_args(["cluster", "up"]).plugin_bin is None


def test_kind_refuses_a_host_binary(binary: Path) -> None:
    plugin = external.parse(binary, [], preset=None, driver=None, beside=False, env=[])
    spec = load_spec("c1", TOPOLOGY, None, plugin=plugin)
    with pytest.raises(InvalidInput, match="embedded provider only"):
        get_provider("kind").provider.check_host(spec)


def test_a_plugin_of_another_driver_gets_its_status_right_and_device_class(binary: Path
                                                                          ) -> None:
    plugin = external.parse(binary, [], preset="dra-example", driver=None, beside=False, env=[])
    objs = external.cluster_objects(plugin, "gpu.fakegpu.dev", name="fakegpu",
                                    namespace="fakegpu-system", service_account="fakegpu",
                                    resource_api="resource.k8s.io/v1")
    by_kind = {o["kind"]: o for o in objs}
    # status.devices is authorized per driver name (resourceclaims/driver) from 1.36.
    rule = by_kind["ClusterRole"]["rules"][0]
    assert rule["resources"] == ["resourceclaims/driver"]
    assert rule["resourceNames"] == ["gpu.example.com"]
    assert by_kind["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "fakegpu", "namespace": "fakegpu-system"}]
    assert by_kind["DeviceClass"]["metadata"]["name"] == "gpu.example.com"
    # The cluster's own driver has the chart's objects already; NVIDIA's plugin also runs
    # each MPS claim's control daemon as a Deployment in its namespace, as NVIDIA's chart lets
    # it.
    nvidia = external.parse(binary, [], preset="nvidia", driver=None, beside=False, env=[])
    objs = external.cluster_objects(nvidia, "gpu.nvidia.com", name="fakegpu",
                                    namespace="fakegpu-system", service_account="fakegpu",
                                    resource_api="resource.k8s.io/v1")
    assert [o["kind"] for o in objs] == ["Role", "RoleBinding"]
    assert objs[0]["metadata"]["namespace"] == "fakegpu-system"
    assert {"apiGroups": ["apps"], "resources": ["deployments"],
            "verbs": ["get", "list", "watch", "create", "delete"]} in objs[0]["rules"]
    assert objs[1]["subjects"][0]["name"] == "fakegpu"


def test_plugin_templates_are_a_directory_carried_with_the_plugin(binary: Path,
                                                                  tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "cluster", "up", "--plugin-bin", str(binary), "--plugin-preset", "nvidia",
        "--plugin-templates", str(tmp_path)])
    plugin = _external(args)
    assert plugin.templates == tmp_path.resolve()
    assert external.ExternalPlugin.from_json(plugin.to_json()) == plugin
    with pytest.raises(InvalidInput, match=r"--plugin-templates .*nope: not a directory"):
        external.parse(binary, [], preset="nvidia", driver=None, beside=False, env=[],
                       templates=tmp_path / "nope")


def test_beside_fakegpus_plugin_it_must_be_another_driver(binary: Path) -> None:
    same = external.parse(binary, [], preset="nvidia", driver=None, beside=True, env=[])
    with pytest.raises(InvalidInput, match=r"--plugin-beside: that plugin publishes "
                                           r"gpu\.nvidia\.com"):
        load_spec("c1", TOPOLOGY, None, driver="nvidia", plugin=same)
    assert load_spec("c1", TOPOLOGY, None, driver="fakegpu", plugin=same).plugin == same
