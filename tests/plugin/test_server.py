"""Real gRPC over unix sockets, the test playing the kubelet; claims come from a ClaimStore."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.plugin.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from fakegpu.plugin.server import PluginServers, socket_paths

from .helpers import DRIVER, NODE, ClaimStore, claim, inventory

VERSIONS = {"v1": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}


class Node:
    """One node: kubelet root, CDI dir, shared state dir, and the instances serving it."""

    def __init__(self, root: Path) -> None:
        self.root, self.cdi = root / "kubelet", root / "cdi"
        self.store = ClaimStore()
        self.servers: list[PluginServers] = []

    def start(self, instance: str = "") -> PluginServers:
        cfg = DriverConfig(driver=DRIVER, node=NODE, state_dir=self.root / "state",
                           cdi_root=self.cdi, instance=instance, write_status=True)
        servers = PluginServers(Driver(cfg, self.store, Devices(inventory)),
                                socket_paths(self.root, DRIVER, instance))
        self.servers.append(servers)
        return servers

    def dra(self, servers: PluginServers, version: str) -> Any:
        channel = grpc.insecure_channel(f"unix://{servers.paths.dra}")
        return VERSIONS[version][1].DRAPluginStub(channel)


@pytest.fixture
def node(short_tmp: Path) -> Iterator[Node]:
    n = Node(short_tmp)
    yield n
    for s in n.servers:
        s.stop(1)


def _claims(pb: Any, *specs: tuple[str, str, str]) -> list[Any]:
    return [pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in specs]


def test_registration_advertises_v1_first(node: Node) -> None:
    servers = node.start()
    assert servers.paths.registration == node.root / "plugins_registry" / f"{DRIVER}-reg.sock"
    with grpc.insecure_channel(f"unix://{servers.paths.registration}") as channel:
        stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5)
        assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER,
                                                         str(servers.paths.dra))
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        stub.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    assert servers.registration.registered is True


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_unprepare_with_per_claim_errors(node: Node, version: str) -> None:
    pb, _ = VERSIONS[version]
    servers = node.start()
    stub = node.dra(servers, version)
    node.store.add(claim("good", "u-good", ["gpu-0", "gpu-2"]))
    node.store.add(claim("unalloc", "u-unalloc", [], allocated=False))
    node.store.add(claim("elsewhere", "u-else", ["gpu-1"], pool="node-b"))
    node.store.add(claim("unknown", "u-unknown", ["gpu-7"]))
    request = pb.NodePrepareResourcesRequest(claims=_claims(
        pb, ("default", "good", "u-good"), ("default", "unalloc", "u-unalloc"),
        ("default", "elsewhere", "u-else"), ("default", "unknown", "u-unknown"),
        ("default", "missing", "u-missing")))
    response = stub.NodePrepareResources(request, timeout=10)
    good = response.claims["u-good"]
    assert good.error == ""
    assert [(d.device_name, d.pool_name, list(d.request_names), list(d.cdi_device_ids))
            for d in good.devices] == [
        ("gpu-0", NODE, ["gpus"], [f"{DRIVER}/gpu=u-good-gpu-0"]),
        ("gpu-2", NODE, ["gpus"], [f"{DRIVER}/gpu=u-good-gpu-2"])]
    assert "not allocated" in response.claims["u-unalloc"].error
    assert "another node" in response.claims["u-else"].error
    assert "unknown device" in response.claims["u-unknown"].error
    assert "not found" in response.claims["u-missing"].error
    spec_path = node.cdi / "gpu_fakegpu_dev-claim_u-good.json"
    spec = json.loads(spec_path.read_text())
    assert spec["kind"] == f"{DRIVER}/gpu"
    uuids = ",".join(d.uuid for d in inventory().devices if d.name in ("gpu-0", "gpu-2"))
    assert f"NVIDIA_VISIBLE_DEVICES={uuids}" in spec["containerEdits"]["env"]
    assert sorted(p.name for p in node.cdi.iterdir()) == [spec_path.name]
    # Device status written on the claim for the prepared devices.
    status = node.store.get_claim("default", "good")["status"]["devices"]
    assert [(s["device"], s["data"]["uuid"]) for s in status] == [
        ("gpu-0", inventory().devices[0].uuid), ("gpu-2", inventory().devices[2].uuid)]

    again = stub.NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=_claims(pb, ("default", "good", "u-good"))),
        timeout=10)
    assert again.claims["u-good"] == good  # idempotent

    gone = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(
        claims=_claims(pb, ("default", "good", "u-good"), ("default", "never", "u-never"))),
        timeout=10)
    assert {uid: c.error for uid, c in gone.claims.items()} == {"u-good": "", "u-never": ""}
    assert list(node.cdi.iterdir()) == []


def test_malformed_request_is_invalid_argument_and_server_keeps_serving(node: Node) -> None:
    servers = node.start()
    stub = node.dra(servers, "v1")
    with pytest.raises(grpc.RpcError) as err:
        stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace="default", name="x", uid="")]), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    node.store.add(claim("ok", "u-ok", ["gpu-1"]))
    ok = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(
        claims=_claims(dra_v1_pb2, ("default", "ok", "u-ok"))), timeout=5)
    assert ok.claims["u-ok"].error == ""


def test_two_instances_share_state_and_one_stops_mid_stream(node: Node) -> None:
    first, second = node.start("pod-uid-1"), node.start("pod-uid-2")
    assert first.paths.dra != second.paths.dra
    assert first.paths.registration.name == f"{DRIVER}-pod-uid-1-reg.sock"
    stubs = [node.dra(first, "v1"), node.dra(second, "v1beta1")]
    for i in range(40):
        node.store.add(claim(f"c{i}", f"u{i}", [f"gpu-{i % 4}"]))
    answers: dict[str, object] = {}
    errors: list[BaseException] = []

    def worker(start: int) -> None:
        for i in range(start, 40, 4):
            for k, stub in enumerate(stubs):
                pb = dra_v1_pb2 if k == 0 else dra_v1beta1_pb2
                try:
                    r = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(
                        claims=_claims(pb, ("default", f"c{i}", f"u{i}"))), timeout=10)
                except grpc.RpcError as e:  # the stopped instance refuses: the kubelet retries
                    if k == 0:
                        continue
                    errors.append(e)
                    continue
                assert r.claims[f"u{i}"].error == ""
                ids = [list(d.cdi_device_ids) for d in r.claims[f"u{i}"].devices]
                assert answers.setdefault(f"u{i}", ids) == ids  # both instances agree

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    first.stop(5)  # SIGTERM-like stop of the first instance while calls are in flight
    for t in threads:
        t.join()
    assert not errors
    assert not first.paths.dra.exists() and not first.paths.registration.exists()
    assert second.paths.dra.exists()
    assert len(answers) == 40
    # Every claim is prepared once on disk, and the survivor can unprepare all of them.
    assert len(list(node.cdi.glob("*.json"))) == 40
    r = stubs[1].NodeUnprepareResources(dra_v1beta1_pb2.NodeUnprepareResourcesRequest(
        claims=_claims(dra_v1beta1_pb2, *[("default", f"c{i}", f"u{i}") for i in range(40)])),
        timeout=10)
    assert all(c.error == "" for c in r.claims.values())
    assert list(node.cdi.glob("*.json")) == []


def test_long_instance_ids_are_hashed_to_fit(short_tmp: Path) -> None:
    root = short_tmp / ("k" * 30)
    paths = socket_paths(root, DRIVER, "x" * 120)
    assert all(len(str(p)) <= 107 for p in (paths.registration, paths.dra))
    assert paths == socket_paths(root, DRIVER, "x" * 120)  # deterministic
    assert paths != socket_paths(root, DRIVER, "y" * 120)
