"""The plugin image, started with testcontainers: it renders its node's fake NVML from the
topology by NODE_NAME, registers over its unix sockets and serves the DRA API.

The test plays the kubelet from the host through the bind-mounted kubelet directory, as the
real kubelet does on a node. Needs Docker (started by fakegpu when none runs and the host lets
it); see conftest.py for when it skips.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu import drivers
from fakegpu.kubeletplugin.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from fakegpu.kubeletplugin.sockets import socket_paths
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.docker]
DRIVER = drivers.FAKEGPU
TOPOLOGY = FIXTURES / "gb200-mini.yaml"
INSTANCE = "0b1d2c3e-test"


def _container(image: str, root: Path, node: str, *args: str) -> Any:
    # Ryuk (testcontainers' reaper) is an image from a registry: none can be pulled here, and
    # the `with` block already removes the container.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer

    (root / "kubelet").mkdir()
    (root / "cdi").mkdir()
    return (DockerContainer(image)
            .with_env("NODE_NAME", node)
            .with_env("FAKEGPU_TOPOLOGY", "/etc/fakegpu/topology.yaml")
            .with_volume_mapping(str(TOPOLOGY), "/etc/fakegpu/topology.yaml", "ro")
            .with_volume_mapping(str(root / "kubelet"), "/var/lib/kubelet", "rw")
            .with_volume_mapping(str(root / "cdi"), "/var/run/cdi", "rw")
            # As the chart runs it: root for the kubelet's directories, without capabilities.
            .with_kwargs(user="0", cap_drop=["ALL"], read_only=True)
            .with_tmpfs_mount("/run/fakegpu")
            .with_tmpfs_mount("/tmp")
            .with_command(list(args)))


def _wait(cond: Any, what: str, container: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status == "exited":
            out, err = container.get_logs()
            raise AssertionError(f"plugin container exited while waiting for {what}:\n"
                                 f"{(out + err).decode(errors='replace')[-3000:]}")
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def serving(plugin_image: str, short_tmp: Path) -> Iterator[tuple[Any, Path, str]]:
    node = load_topology(TOPOLOGY).nodes[1].name  # not the first: names must really select
    kubeconfig = short_tmp / "kubeconfig"
    # An apiserver nothing listens on: the kubelet-facing side must serve regardless.
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    kubeconfig.chmod(0o644)
    c = _container(plugin_image, short_tmp, node, "--driver-name", DRIVER,
                   "--kubeconfig", "/etc/fakegpu/kubeconfig", "--instance-id", INSTANCE,
                   "--no-slices")
    c.with_volume_mapping(str(kubeconfig), "/etc/fakegpu/kubeconfig", "ro")
    with c:
        yield c, short_tmp / "kubelet", node


def test_image_registers_and_serves_its_node(serving: tuple[Any, Path, str]) -> None:
    container, kubelet, node = serving
    host = socket_paths(kubelet, DRIVER, INSTANCE)
    inside = socket_paths(Path("/var/lib/kubelet"), DRIVER, INSTANCE)
    _wait(lambda: host.registration.exists() and host.dra.exists(), "the plugin's sockets",
          container)

    with grpc.insecure_channel(f"unix://{host.registration}") as ch:
        reg = pluginregistration_pb2_grpc.RegistrationStub(ch)
        info = reg.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=10)
        reg.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=10)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(inside.dra)  # the path as the kubelet on the node sees it
    assert info.supported_versions[0] == "v1.DRAPlugin"

    with grpc.insecure_channel(f"unix://{host.dra}") as ch:
        resp = dra_v1_pb2_grpc.DRAPluginStub(ch).NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(namespace="t", name="never", uid="uid-never")]),
            timeout=30)
    assert resp.claims["uid-never"].error == ""  # unpreparing an unknown claim is a no-op

    out, err = container.get_logs()
    logs = (out + err).decode(errors="replace")
    expected = load_topology(TOPOLOGY).nodes[1]
    assert f"discovered devices node={node} count={len(expected.gpus)}" in logs, logs[-2000:]


def test_image_refuses_a_node_not_in_the_topology(plugin_image: str, short_tmp: Path) -> None:
    c = _container(plugin_image, short_tmp, "no-such-node", "--driver-name", DRIVER)
    with c:
        wrapped = c.get_wrapped_container()
        result = wrapped.wait(timeout=60)
        out, err = c.get_logs()
    logs = (out + err).decode(errors="replace")
    assert result["StatusCode"] == 2, logs  # invalid input
    assert "'no-such-node' is not in topology" in logs


def test_readiness_probe_follows_the_sockets(serving: tuple[Any, Path, str]) -> None:
    container, kubelet, _node = serving

    def probe(instance: str) -> tuple[int, str]:
        code, out = container.get_wrapped_container().exec_run(
            ["/opt/fakegpu/bin/python", "-m", "fakegpu.node.readiness",
             "--driver-name", DRIVER], environment={"POD_UID": instance})
        return code, out.decode(errors="replace")

    host = socket_paths(kubelet, DRIVER, INSTANCE)
    _wait(lambda: host.registration.exists() and host.dra.exists(), "the plugin's sockets",
          container)
    _wait(lambda: probe(INSTANCE)[0] == 0, "the readiness probe to pass", container)
    # Another instance id (a pod whose plugin has not started serving): not ready.
    code, out = probe("not-started-yet")
    assert code == 1 and "not serving yet" in out, out
