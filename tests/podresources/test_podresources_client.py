"""The ``podresources`` program against a real gRPC server (grpcio) on a unix socket: the
request it sends, the reply it decodes, and its failures. The server answers raw bytes encoded
here by hand with the field numbers of k8s.io/kubelet's podresources/v1 api.proto, so a wrong
field number on either side fails. The kubelet itself is e2e/test_pod_resources.py's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu.podresources import path as program_path

pytestmark = pytest.mark.integration


# --- protobuf by hand (the wire format: key = field << 3 | wire type) ------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode())


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _claim_resource(driver: str, pool: str, device: str, cdi: str) -> bytes:
    return _bytes(1, _str(1, cdi)) + _str(2, driver) + _str(3, pool) + _str(4, device)


def _gpu_pod() -> bytes:
    dynamic = (_str(2, "gpu-claim") + _str(3, "team-a")
               + _bytes(4, _claim_resource("gpu.fakegpu.dev", "node-0", "gpu-1",
                                           "gpu.fakegpu.dev/gpu=uid-gpu-1"))
               + _bytes(4, _claim_resource("gpu.fakegpu.dev", "node-0", "gpu-3",
                                           "gpu.fakegpu.dev/gpu=uid-gpu-3")))
    # Fields out of order and a repeated field interleaved with another: both legal on the wire.
    container = (_bytes(5, dynamic) + _str(1, "main") + _bytes(3, _varint(2) + _varint(3))
                 + _bytes(2, _str(1, "example.com/dev") + _str(2, "d0")))
    return _str(1, "trainer") + _str(2, "team-a") + _bytes(3, container) + _int(99, 7)


Handler = Callable[[bytes, Any], bytes]


@pytest.fixture
def serve(short_tmp: Path) -> Iterator[Callable[[dict[str, Handler]], Path]]:
    servers: list[grpc.Server] = []

    def start(methods: dict[str, Handler]) -> Path:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in methods.items()}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),))
        sock = short_tmp / "kubelet.sock"
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
        return sock

    yield start
    for server in servers:
        server.stop(None)


def _run(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(program_path()), "--socket", str(sock), "--timeout", "20", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_list_decodes_pods_containers_and_dra_devices(serve: Callable[..., Path]) -> None:
    seen: list[bytes] = []

    def list_(request: bytes, _ctx: Any) -> bytes:
        seen.append(request)
        return _bytes(1, _gpu_pod()) + _bytes(1, _str(1, "idle") + _str(2, "team-a"))

    out = _run(serve({"List": list_}), "list")
    assert out.returncode == 0, out.stderr
    assert seen == [b""]  # ListPodResourcesRequest is empty
    assert json.loads(out.stdout) == {"podResources": [
        {"name": "trainer", "namespace": "team-a", "containers": [{
            "name": "main",
            "devices": [{"resourceName": "example.com/dev", "deviceIds": ["d0"]}],
            "cpuIds": [2, 3],
            "dynamicResources": [{
                "claimName": "gpu-claim", "claimNamespace": "team-a", "claimResources": [
                    {"cdiDevices": [{"name": "gpu.fakegpu.dev/gpu=uid-gpu-1"}],
                     "driverName": "gpu.fakegpu.dev", "poolName": "node-0",
                     "deviceName": "gpu-1"},
                    {"cdiDevices": [{"name": "gpu.fakegpu.dev/gpu=uid-gpu-3"}],
                     "driverName": "gpu.fakegpu.dev", "poolName": "node-0",
                     "deviceName": "gpu-3"}]}]}]},
        {"name": "idle", "namespace": "team-a"}]}


def test_get_sends_the_pod_and_namespace(serve: Callable[..., Path]) -> None:
    seen: list[bytes] = []

    def get(request: bytes, _ctx: Any) -> bytes:
        seen.append(request)
        return _bytes(1, _gpu_pod())

    out = _run(serve({"Get": get}), "get", "team-a", "trainer")
    assert out.returncode == 0, out.stderr
    # GetPodResourcesRequest{pod_name = 1; pod_namespace = 2}
    assert seen == [_str(1, "trainer") + _str(2, "team-a")]
    assert json.loads(out.stdout)["podResources"]["name"] == "trainer"


def test_a_reply_larger_than_the_initial_flow_control_window_arrives_whole(
        serve: Callable[..., Path]) -> None:
    # 65,535 bytes is HTTP/2's initial window: past it the server waits for WINDOW_UPDATEs.
    pods = b"".join(_bytes(1, _str(1, f"pod-{i:05d}-" + "x" * 200) + _str(2, "ns"))
                    for i in range(1000))
    out = _run(serve({"List": lambda _r, _c: pods}), "list")
    assert out.returncode == 0, out.stderr
    names = [p["name"] for p in json.loads(out.stdout)["podResources"]]
    assert len(names) == 1000 and names[-1].startswith("pod-00999-")


def test_strings_are_escaped_as_json(serve: Callable[..., Path]) -> None:
    out = _run(serve({"Get": lambda _r, _c: _bytes(1, _str(1, 'a"b\\c\nd'))}), "get", "n", "p")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"podResources": {"name": 'a"b\\c\nd'}}


def test_a_failed_call_is_one_line_and_exit_1(serve: Callable[..., Path]) -> None:
    def missing(_request: bytes, ctx: Any) -> bytes:
        ctx.abort(grpc.StatusCode.NOT_FOUND, "pod team-a/nope not found")

    out = _run(serve({"Get": missing}), "get", "team-a", "nope")
    assert out.returncode == 1 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "call failed" in out.stderr


def test_no_socket_names_it(short_tmp: Path) -> None:
    out = _run(short_tmp / "absent.sock", "list")
    assert out.returncode == 1
    assert out.stderr.strip() == f"podresources: cannot connect to {short_tmp / 'absent.sock'}"


@pytest.mark.parametrize("args", [[], ["get", "only-namespace"], ["list", "extra"], ["nope"]])
def test_bad_usage_exits_2(args: list[str]) -> None:
    out = subprocess.run([str(program_path()), *args], capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 2 and out.stderr.startswith("usage: podresources")
