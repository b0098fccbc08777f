"""Real gRPC over unix sockets, the test playing the kubelet; claims come from a ClaimStore."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu.kubeletplugin.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.sockets import socket_paths
from fakegpu.plugin.driver import Devices, Driver, DriverConfig

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
        # The request's device metadata file rides on its first device (devmetadata.py).
        ("gpu-0", NODE, ["gpus"], [f"{DRIVER}/gpu=u-good-gpu-0",
                                   f"{DRIVER}/gpu=u-good-metadata-gpus"]),
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


def test_a_call_in_flight_finishes_before_the_instance_unregisters(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet closes its connection to an instance once that instance's registration
    socket is gone; a prepare in flight then must already have its answer."""
    servers = node.start("pod-uid-1")
    node.store.add(claim("slow", "u-slow", ["gpu-0"]))
    started = threading.Event()
    real_prepare = Driver.prepare

    def slow_prepare(self: Driver, refs: Any) -> Any:
        started.set()
        threading.Event().wait(1.0)  # a prepare that takes a while (a loaded node)
        return real_prepare(self, refs)

    monkeypatch.setattr(Driver, "prepare", slow_prepare)
    channel = grpc.insecure_channel(f"unix://{servers.paths.dra}")
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    result: dict[str, Any] = {}

    def call() -> None:
        try:
            result["answer"] = _prepare(stub, ("default", "slow", "u-slow"))
        except grpc.RpcError as err:
            result["error"] = err

    def kubelet_watch() -> None:  # what the kubelet's plugin watcher does on removal
        while servers.paths.registration.exists():
            threading.Event().wait(0.01)
        channel.close()

    caller = threading.Thread(target=call)
    caller.start()
    assert started.wait(10)
    watcher = threading.Thread(target=kubelet_watch)
    watcher.start()
    servers.stop(10)
    caller.join(15)
    watcher.join(15)
    assert "error" not in result, result.get("error")
    assert result["answer"].claims["u-slow"].error == ""
    assert not servers.paths.registration.exists() and not servers.paths.dra.exists()


def test_long_instance_ids_are_hashed_to_fit(short_tmp: Path) -> None:
    root = short_tmp / ("k" * 30)
    paths = socket_paths(root, DRIVER, "x" * 120)
    assert all(len(str(p)) <= 107 for p in (paths.registration, paths.dra))
    assert paths == socket_paths(root, DRIVER, "x" * 120)  # deterministic
    assert paths != socket_paths(root, DRIVER, "y" * 120)


def _prepare(stub: Any, *specs: tuple[str, str, str]) -> Any:
    return stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(
        claims=_claims(dra_v1_pb2, *specs)), timeout=10)


def _unprepare(stub: Any, *specs: tuple[str, str, str]) -> Any:
    return stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(
        claims=_claims(dra_v1_pb2, *specs)), timeout=10)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00 not utf-8", b"{\"version\": 1, \"claims\": ",
                                     b'{"version": 42, "claims": {}}'])
def test_a_corrupt_checkpoint_never_wedges_the_plugin(node: Node, content: bytes,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Issue input: a checkpoint that is not UTF-8 made every later call gRPC UNKNOWN."""
    state = node.root / "state"
    state.mkdir(parents=True)
    (state / "checkpoint.json").write_bytes(content)
    with caplog.at_level("ERROR"):
        stub = node.dra(node.start(), "v1")
    [aside] = state.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == content
    assert any("corrupt checkpoint" in r.getMessage() for r in caplog.records)
    node.store.add(claim("c", "u-c", ["gpu-1"]))
    r = _prepare(stub, ("default", "c", "u-c"))  # the kubelet asks again: prepared afresh
    assert r.claims["u-c"].error == ""
    assert [d.device_name for d in r.claims["u-c"].devices] == ["gpu-1"]
    # A record corrupted while serving costs only that claim its record, not the node.
    (state / "claims" / "u-c.json").write_bytes(b"\xff")
    again = _prepare(stub, ("default", "c", "u-c"))
    assert again.claims["u-c"] == r.claims["u-c"]
    assert _unprepare(stub, ("default", "c", "u-c")).claims["u-c"].error == ""
    assert list(node.cdi.glob("*.json")) == []


@pytest.mark.parametrize("uid", ["u\x00nul", "../../../../escape", "a/b", ".hidden", "x" * 300])
def test_an_unsafe_uid_is_invalid_argument_and_touches_no_file(node: Node, uid: str) -> None:
    """Issue input: a NUL byte in a claim UID answered UNKNOWN ("embedded null byte")."""
    stub = node.dra(node.start(), "v1")
    node.store.add(claim("c", uid, ["gpu-0"]))
    for call in (_prepare, _unprepare):
        with pytest.raises(grpc.RpcError) as err:
            call(stub, ("default", "ok", "u-ok"), ("default", "c", uid))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "claim UID" in (err.value.details() or "")
    written = [p for p in node.root.parent.rglob("*")
               if p.is_file() and p.suffix not in (".sock", ".lock")]
    assert written == []  # no spec, no record, nothing anywhere
    node.store.add(claim("ok", "u-ok", ["gpu-1"]))
    assert _prepare(stub, ("default", "ok", "u-ok")).claims["u-ok"].error == ""  # still serving


def test_an_unsafe_namespace_or_name_is_that_claims_error(node: Node) -> None:
    stub = node.dra(node.start(), "v1")
    node.store.add(claim("ok", "u-ok", ["gpu-1"]))
    r = _prepare(stub, ("default", "ok", "u-ok"), ("a/b", "c", "u-1"), ("default", "../c", "u-2"),
                 ("default", "c\x00", "u-3"))
    assert r.claims["u-ok"].error == ""
    assert "namespace 'a/b'" in r.claims["u-1"].error
    assert "name '../c'" in r.claims["u-2"].error
    assert "name 'c\\x00'" in r.claims["u-3"].error


def test_startup_removes_temp_files_killed_writers_left(short_tmp: Path) -> None:
    """Issue input: a plugin killed mid-write left .checkpoint-*.tmp and cdi/*.tmp forever."""
    node = Node(short_tmp)
    state, cdi_dir = node.root / "state", node.cdi
    state.mkdir(parents=True)
    cdi_dir.mkdir(parents=True)
    ours = [state / ".checkpoint-u3k2l1.tmp",  # the previous release's names
            cdi_dir / ".gpu_fakegpu_dev-claim_u-1.json.a8f2k1.tmp",
            state / "claims" / ".u-1.json.x1y2z3.tmp"]  # this release's record temps
    theirs = [cdi_dir / ".other_vendor-claim_u-1.json.a8f2k1.tmp",  # another driver's files
              cdi_dir / "other_vendor-claim_u-1.json"]
    (state / "claims").mkdir()
    # A spec whose record a crash took (specs are removed after records, and not synced).
    orphan = cdi_dir / "gpu_fakegpu_dev-claim_u-2.json"
    kept = cdi_dir / "gpu_fakegpu_dev-claim_u-3.json"
    (state / "claims" / "u-3.json").write_text("{}")
    for path in [*ours, *theirs, orphan, kept]:
        path.write_text("{")
    try:
        node.start()
        assert [p for p in [*ours, orphan] if p.exists()] == []
        assert all(p.exists() for p in [*theirs, kept])
    finally:
        for s in node.servers:
            s.stop(1)


class RefusingStore(ClaimStore):
    """An apiserver that refuses status writes, as 1.37 does without resourceclaims/driver."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.code = status

    def replace_claim_status(self, obj: dict[str, Any]) -> None:
        err = RuntimeError(f"HTTP {self.code} ResourceClaim.resource.k8s.io is invalid")
        err.status = self.code  # type: ignore[attr-defined]
        raise err


@pytest.mark.parametrize("code", [422, 403, 500])
def test_a_failed_status_write_fails_the_claim_visibly(node: Node, code: int,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Issue input: on 1.37 without resourceclaims/driver the status write failed and prepare
    succeeded with only a warning in the log."""
    node.store = RefusingStore(code)
    stub = node.dra(node.start(), "v1")
    node.store.add(claim("c", "u-c", ["gpu-0"]))
    with caplog.at_level("ERROR"):
        r = _prepare(stub, ("default", "c", "u-c"))
    error = r.claims["u-c"].error
    assert f"cannot write device status on ResourceClaim default/c: HTTP {code}" in error
    assert ("resourceclaims/driver" in error) == (code != 500)  # the fix, when it is RBAC
    assert any(r.levelname == "ERROR" and "u-c" in r.getMessage() for r in caplog.records)
    # Nothing was prepared: no spec, no record, so the kubelet's retry does it all again.
    assert list(node.cdi.glob("*")) == []
    assert list((node.root / "state" / "claims").iterdir()) == []


def test_without_device_status_a_refusing_apiserver_does_not_matter(node: Node) -> None:
    node.store = RefusingStore(422)
    cfg = DriverConfig(driver=DRIVER, node=NODE, state_dir=node.root / "state",
                       cdi_root=node.cdi, write_status=False)
    servers = PluginServers(Driver(cfg, node.store, Devices(inventory)),
                            socket_paths(node.root, DRIVER))
    node.servers.append(servers)
    node.store.add(claim("c", "u-c", ["gpu-0"]))
    assert _prepare(node.dra(servers, "v1"), ("default", "c", "u-c")).claims["u-c"].error == ""


def test_a_prepare_touches_only_its_own_claims_files(node: Node) -> None:
    """Per-claim cost independent of the claims the node holds: the issue saw each prepare
    rewrite one checkpoint holding all 10,000 claims."""
    stub = node.dra(node.start(), "v1")
    for i in range(50):
        node.store.add(claim(f"c{i}", f"u{i}", [f"gpu-{i % 4}"]))
    r = _prepare(stub, *[("default", f"c{i}", f"u{i}") for i in range(49)])
    assert all(c.error == "" for c in r.claims.values())
    records = node.root / "state" / "claims"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in records.iterdir()}
    assert len(before) == 49
    assert _prepare(stub, ("default", "c49", "u49")).claims["u49"].error == ""
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in records.iterdir()}
    assert {k: v for k, v in after.items() if k != "u49.json"} == before
    assert not (node.root / "state" / "checkpoint.json").exists()
    assert _unprepare(stub, ("default", "c3", "u3")).claims["u3"].error == ""
    assert sorted(after.keys() - {p.name for p in records.iterdir()}) == ["u3.json"]


def test_a_failed_record_write_rolls_back_the_spec(node: Node,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from fakegpu.kubeletplugin.checkpoint import Records

    def refuse(self: Records, uid: str, staged: Path) -> None:
        raise OSError(28, "No space left on device")

    stub = node.dra(node.start(), "v1")
    node.store.add(claim("c", "u-c", ["gpu-0"]))
    with monkeypatch.context() as patch:
        patch.setattr(Records, "commit", refuse)
        r = _prepare(stub, ("default", "c", "u-c"))
    assert "cannot record prepared claim" in r.claims["u-c"].error
    assert list(node.cdi.iterdir()) == []  # no spec without a record, and no temp files
    assert [p.name for p in (node.root / "state" / "claims").iterdir()] == []
    assert _prepare(stub, ("default", "c", "u-c")).claims["u-c"].error == ""  # retry works


def test_claims_an_instance_of_the_previous_release_prepares_are_picked_up(node: Node) -> None:
    """Rolling update from the single-file checkpoint: the old instance keeps writing
    checkpoint.json (same lock) while this one serves; its claims are answered here."""
    stub = node.dra(node.start(), "v1")
    ids = [f"{DRIVER}/gpu=u-old-gpu-2"]
    old = {"version": 1, "claims": {"u-old": {
        "uid": "u-old", "namespace": "default", "name": "old", "instance": "pod-0",
        "cdi_spec": "gpu_fakegpu_dev-claim_u-old.json",
        "devices": [{"request_names": ["gpus"], "pool_name": NODE, "device_name": "gpu-2",
                     "cdi_device_ids": ids, "share_id": ""}]}}}
    (node.root / "state" / "checkpoint.json").write_text(json.dumps(old))
    node.cdi.mkdir(exist_ok=True)
    (node.cdi / "gpu_fakegpu_dev-claim_u-old.json").write_text(json.dumps(
        {"cdiVersion": "0.6.0", "kind": f"{DRIVER}/gpu", "devices": [{"name": "u-old-gpu-2"}]}))
    node.store.add(claim("new", "u-new", ["gpu-0"]))
    r = _prepare(stub, ("default", "new", "u-new"), ("default", "old", "u-old"))
    assert r.claims["u-new"].error == ""
    assert [list(d.cdi_device_ids) for d in r.claims["u-old"].devices] == [ids]
    assert not (node.root / "state" / "checkpoint.json").exists()
    assert _unprepare(stub, ("default", "old", "u-old")).claims["u-old"].error == ""
    assert [p.name for p in node.cdi.glob("*.json")] == ["gpu_fakegpu_dev-claim_u-new.json"]


@pytest.mark.parametrize("damage", ["lost", "torn"])
def test_a_record_whose_spec_is_gone_is_prepared_again(node: Node, damage: str) -> None:
    """The CDI dir is usually a tmpfs: after a reboot the records remain, the specs do not
    (and specs are not fsynced: a crash may leave one torn). Answering from the record alone
    would hand the runtime CDI ids it cannot resolve."""
    stub = node.dra(node.start(), "v1")
    node.store.add(claim("c", "u-c", ["gpu-3"]))
    first = _prepare(stub, ("default", "c", "u-c")).claims["u-c"]
    spec = node.cdi / "gpu_fakegpu_dev-claim_u-c.json"
    good = spec.read_text()
    if damage == "lost":
        spec.unlink()
    else:
        spec.write_text("")
    assert _prepare(stub, ("default", "c", "u-c")).claims["u-c"] == first
    assert spec.read_text() == good


def test_a_one_claim_prepare_never_waits_for_a_big_batch(node: Node,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue input: one call with 10,000 claims held the node-wide lock for 40-80 s while a
    one-claim prepare waited. Here a batch is stopped while it writes its files; a one-claim
    prepare and unprepare from another client complete meanwhile."""
    from fakegpu.kubeletplugin.checkpoint import Records

    stage, entered, release = Records.stage, threading.Event(), threading.Event()

    def slow_stage(self: Records, claim: Any) -> Path:
        if claim.uid == "u-b5":  # the batch's sixth claim: five are staged already
            entered.set()
            assert release.wait(30)
        return stage(self, claim)

    monkeypatch.setattr(Records, "stage", slow_stage)
    stub = node.dra(node.start(), "v1")
    for i in range(10):
        node.store.add(claim(f"b{i}", f"u-b{i}", [f"gpu-{i % 4}"]))
    node.store.add(claim("one", "u-one", ["gpu-1"]))
    batch: list[Any] = []
    caller = threading.Thread(target=lambda: batch.append(
        _prepare(stub, *[("default", f"b{i}", f"u-b{i}") for i in range(10)])))
    caller.start()
    try:
        assert entered.wait(10)
        assert _prepare(stub, ("default", "one", "u-one")).claims["u-one"].error == ""
        assert _unprepare(stub, ("default", "one", "u-one")).claims["u-one"].error == ""
    finally:
        release.set()
        caller.join(30)
    assert all(c.error == "" for c in batch[0].claims.values())


def test_readiness_endpoint_answers_what_the_sockets_say(node: Node) -> None:
    """GET /readyz: 503 naming what is not serving, 200 once both sockets serve, 404 elsewhere."""
    import functools
    import urllib.error
    import urllib.request

    from fakegpu.plugin.probe import ReadinessEndpoint, serving

    paths = socket_paths(node.root, DRIVER, "pod-uid-9")
    endpoint = ReadinessEndpoint(functools.partial(serving, paths), 0)

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}",
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    try:
        code, text = get("/readyz")
        assert code == 503 and str(paths.registration) in text
        node.start("pod-uid-9")
        assert get("/readyz") == (200, "serving\n")
        assert get("/healthz")[0] == 404
    finally:
        endpoint.stop()
