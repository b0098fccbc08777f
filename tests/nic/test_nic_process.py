"""``fakegpu nic run --driver dra.net`` as a real process on a node's sysfs view, against a real
kube-apiserver; the test plays the scheduler (the claim's allocation) and the kubelet (prepare
and unprepare over the plugin's socket).

Under DRANET's name the plugin publishes DRANET's vocabulary: devices named for their PCI
address, ``dra.net/*`` attributes beside the standard ``pcieRoot``/``numaNode``, and prepares
a claim that names such a device (its interface handed over through CDI, the claim's network
data written), and carries a ``nic-link-down`` fault to the prepared interface. The e2e NIC
suite covers fakegpu's own vocabulary on both providers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu import drivers
from fakegpu import wait as waiting
from fakegpu.kubeletplugin.proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
)
from fakegpu.nic import discovery, netdev
from fakegpu.nvml import sysfs
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import resolve_topology

pytestmark = pytest.mark.integration
DRIVER = drivers.DRANET


def wait_for(cond: Callable[[], Any], what: str, proc: subprocess.Popen[bytes]) -> Any:
    """Until ``cond()`` is truthy; the plugin exiting ends the wait."""
    def once() -> Any:
        if not (value := cond()):
            raise waiting.NotYet(repr(value))
        return value

    def guard() -> None:
        if proc.poll() is not None:
            raise AssertionError(f"the NIC plugin exited ({proc.returncode}) before {what}")

    return waiting.wait_for(once, what=what, timeout=30, interval=0.2, guard=guard)


@pytest.fixture(scope="module")
def apiserver(bare_control_plane: Any) -> Iterator[Path]:
    with bare_control_plane() as cp:
        yield cp.kubeconfig


Plugin = tuple[subprocess.Popen[bytes], str, Path, Path]  # process, node, view, DRA socket


@contextlib.contextmanager
def nic_plugin(short_tmp: Path, apiserver: Path, interval: str) -> Iterator[Plugin]:
    """The plugin as a process on dgx-h100's view, rediscovering every ``interval`` s."""
    node = load_topology(resolve_topology("dgx-h100")).nodes[0]
    view = short_tmp / "sysfs"
    sysfs.render(node, view)
    kubelet = short_tmp / "kubelet"
    dra = kubelet / "plugins" / DRIVER / "dra.sock"
    with (short_tmp / "nic.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "nic", "run", "--node", node.name,
             "--driver", DRIVER, "--kubeconfig", str(apiserver),
             "--kubelet-root", str(kubelet), "--cdi-root", str(short_tmp / "cdi"),
             "--state-dir", str(short_tmp / "state"), "--grace-period", "5",
             "--rediscover-interval", interval],
            env={**os.environ, sysfs.SYSFS_ENV: str(view)}, stdout=log,
            stderr=subprocess.STDOUT)
        try:
            wait_for(dra.exists, "the NIC plugin's DRA socket", proc)
            yield proc, node.name, view, dra
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture
def plugin(short_tmp: Path, apiserver: Path) -> Iterator[Plugin]:
    with nic_plugin(short_tmp, apiserver, "0.5") as found:
        yield found


def _slices(apiserver: Path, node: str) -> Callable[[], list[dict[str, Any]]]:
    from kubernetes import client, config

    objects = client.CustomObjectsApi(config.new_client_from_config(str(apiserver)))

    def slices() -> list[dict[str, Any]]:
        return list(objects.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices",
            field_selector=f"spec.driver={DRIVER},spec.nodeName={node}")["items"])

    return slices


def _health_until(stream: Iterator[Any], device: str, health: str) -> None:
    """Read the kubelet's health stream until a report shows ``device`` as ``health``."""
    for report in stream:
        shown = {d.device.device_name: dra_health_v1_pb2.HealthStatus.Name(d.health)
                 for d in report.devices}
        if shown.get(device) == health:
            return
    raise AssertionError(f"the health stream ended before {device} was {health}")


def test_a_link_fault_reaches_the_slice_long_before_the_next_rediscovery(
        short_tmp: Path, apiserver: Path) -> None:
    # Rediscovery every 10 minutes: only the watch on the view's link files can carry the
    # fault to the slice within the wait's 30 s. The kubelet's health stream (pod status)
    # shows the NIC unhealthy meanwhile.
    with (nic_plugin(short_tmp, apiserver, "600") as (proc, node, view, dra),
          grpc.insecure_channel(f"unix://{dra}") as channel):
        slices = _slices(apiserver, node)
        stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=60)
        storage = next(n for n in discovery.discover(str(view)) if n.name == "enp69s0f0")
        device = "pci-" + storage.pci_bus_id.replace(":", "-").replace(".", "-")
        _health_until(stream, device, "HEALTHY")

        def state(interface: str) -> str | None:
            for s in slices():
                for d in s["spec"].get("devices") or ():
                    if d["attributes"].get("dra.net/ifName") == {"string": interface}:
                        return str(d["attributes"]["dra.net/state"]["string"])
            return None

        wait_for(lambda: state("enp69s0f0") == "up", "the storage NIC published up", proc)
        sysfs.set_link(view, "enp69s0f0", False)
        wait_for(lambda: state("enp69s0f0") == "down", "the link fault in the slice", proc)
        _health_until(stream, device, "UNHEALTHY")
        sysfs.set_link(view, "enp69s0f0", True)
        wait_for(lambda: state("enp69s0f0") == "up", "the link back in the slice", proc)
        _health_until(stream, device, "HEALTHY")
        stream.cancel()


def test_dranet_names_published_and_a_claim_prepared_under_them(
        plugin: Plugin, apiserver: Path, short_tmp: Path) -> None:
    from kubernetes import client, config

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("preparing a NIC makes a veth pair on this host: needs root and iproute2")
    proc, node, view, dra = plugin
    api = config.new_client_from_config(str(apiserver))
    objects = client.CustomObjectsApi(api)
    slices = _slices(apiserver, node)

    [published] = wait_for(slices, "the dra.net ResourceSlice", proc)
    devices = {d["name"]: d for d in published["spec"]["devices"]}
    nics = discovery.discover(str(view))
    assert sorted(devices) == sorted(
        "pci-" + n.pci_bus_id.replace(":", "-").replace(".", "-") for n in nics)
    ib = next(n for n in nics if n.name == "ibp21s0")
    name = "pci-" + ib.pci_bus_id.replace(":", "-").replace(".", "-")
    attrs = devices[name]["attributes"]
    assert attrs["dra.net/ifName"] == {"string": "ibp21s0"}
    assert attrs["dra.net/rdma"] == {"bool": True}
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": ib.pcie_root}
    assert "interfaceName" not in attrs

    client.CoreV1Api(api).create_namespace({"metadata": {"name": "net"}})
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "rdma"},
            "spec": {"devices": {"requests": [
                {"name": "nic", "exactly": {"deviceClassName": "dranet"}}]}}}
    made = objects.create_namespaced_custom_object("resource.k8s.io", "v1", "net",
                                                   "resourceclaims", body)
    made["status"] = {"allocation": {"devices": {"results": [
        {"request": "nic", "driver": DRIVER, "pool": node, "device": name}]}}}
    objects.replace_namespaced_custom_object_status("resource.k8s.io", "v1", "net",
                                                    "resourceclaims", "rdma", made)
    uid = made["metadata"]["uid"]
    with grpc.insecure_channel(f"unix://{dra}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        ref = dra_v1_pb2.Claim(namespace="net", name="rdma", uid=uid)
        answer = stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=30).claims[uid]
        assert answer.error == ""
        [device] = answer.devices
        assert device.device_name == name
        assert list(device.cdi_device_ids) == [f"{DRIVER}/nic={uid}-{name}"]
        claim = objects.get_namespaced_custom_object("resource.k8s.io", "v1", "net",
                                                     "resourceclaims", "rdma")
        [status] = claim["status"]["devices"]
        assert (status["driver"], status["device"]) == (DRIVER, name)
        assert status["networkData"] == {"interfaceName": "ibp21s0", "hardwareAddress": ib.mac,
                                         "ips": list(ib.ips)} and ib.ips
        # The port the runtime will move: the NIC's MAC, MTU (IPoIB 4092) and addresses.
        port = netdev.host_link(str(dra.parents[3] / "state"), name).port
        shown = subprocess.run(["ip", "-o", "addr", "show", "dev", port], capture_output=True,
                               text=True, check=True).stdout
        link = subprocess.run(["ip", "-o", "link", "show", "dev", port], capture_output=True,
                              text=True, check=True).stdout
        assert ib.mtu == 4092 and f" mtu {ib.mtu} " in link and ib.mac in link, link
        assert f"inet {ib.ips[0]} " in shown, shown
        # A nic-link-down fault reaches the prepared interface: the port (up, as the runtime
        # brings it up in the pod) loses its carrier, and gets it back when it is cleared.
        subprocess.run(["ip", "link", "set", "dev", port, "up"], check=True)
        carrier = Path(f"/sys/class/net/{port}/carrier")
        wait_for(lambda: carrier.read_text().strip() == "1", "the port's carrier", proc)
        sysfs.set_link(view, "ibp21s0", False)
        wait_for(lambda: carrier.read_text().strip() == "0", "the fault to reach the port", proc)
        sysfs.set_link(view, "ibp21s0", True)
        wait_for(lambda: carrier.read_text().strip() == "1", "the port's link back", proc)
        gone = stub.NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=30).claims[uid]
        assert gone.error == ""
    assert list((short_tmp / "cdi").glob("*.json")) == []
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert slices() == []  # the last instance on the node takes its slices along
