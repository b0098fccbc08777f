"""fakegpu.kube: the one resource.k8s.io rule, and the client against a small HTTP apiserver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fakegpu.kube import api as kubeapi
from fakegpu.kube.resource import NoResourceApi, newest_served


@pytest.mark.parametrize(("served", "chosen"), [
    (["v1beta1", "v1beta2", "v1", "v1alpha3"], "v1"),
    (["v1beta1", "v1beta2"], "v1beta2"),
    (["v1alpha3", "v1beta1"], "v1beta1"),
])
def test_the_newest_served_version_we_speak(served: list[str], chosen: str) -> None:
    assert newest_served(served) == chosen


def test_no_version_we_speak_names_what_is_served() -> None:
    with pytest.raises(NoResourceApi, match=r"served: v1alpha3; need one of v1, v1beta2, "):
        newest_served(["v1alpha3"])


class _Api(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/readyz":
            body, code = b"ok", 200
        elif self.path == "/apis":
            body, code = json.dumps({"groups": [
                {"name": "apps", "versions": [{"version": "v1"}]},
                {"name": "resource.k8s.io", "versions": [{"version": "v1beta1"},
                                                         {"version": "v1beta2"}]}]}).encode(), 200
        elif self.path == "/api/v1/nodes":
            body, code = json.dumps({"items": [
                {"metadata": {"name": "a"}, "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}},
                {"metadata": {"name": "b"}, "status": {
                    "conditions": [{"type": "Ready", "status": "False"}]}}]}).encode(), 200
        else:
            body, code = b'{"kind": "Status", "code": 503}', 503
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    yield path
    server.shutdown()
    server.server_close()


def test_reads_through_the_client(kubeconfig: Path) -> None:
    with kubeapi.session(kubeconfig) as api:
        assert kubeapi.get(api, "/readyz") == b"ok"
        assert kubeapi.resource_version(api) == "v1beta2"
        nodes = kubeapi.nodes(api)
        assert [kubeapi.is_ready(n) for n in nodes] == [True, False]
        assert kubeapi.internal_ip(nodes[0]) == "10.0.0.1"


def test_an_error_status_is_an_api_exception(kubeconfig: Path) -> None:
    with kubeapi.session(kubeconfig) as api, pytest.raises(ApiException) as info:
        kubeapi.get(api, "/livez")
    assert info.value.status == 503


def test_a_refused_connection_fails_at_once_in_a_session(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(  # port 9 (discard): nothing listens there
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    with kubeapi.session(path) as api, pytest.raises(kubeapi.ERRORS):
        kubeapi.get(api, "/readyz")


def _slice(node: str, generation: int, count: int, devices: int = 1) -> dict:
    return {"spec": {"nodeName": node, "driver": "gpu.fakegpu.dev",
                     "pool": {"name": node, "generation": generation,
                              "resourceSliceCount": count},
                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}


def test_complete_pools_counts_slices_of_the_newest_generation() -> None:
    from fakegpu.kube.api import complete_pools

    slices = [
        # MIG-only devices, counters in a slice of their own (dynamic MIG from 1.35): whole.
        _slice("a100-mig", 1, 1), _slice("h100-dyn", 1, 2, devices=0), _slice("h100-dyn", 1, 2),
        # half of a two-slice pool: not yet.
        _slice("half", 3, 2),
        # a republish in flight: generation 2 is not complete although generation 1 was.
        _slice("moving", 1, 1), _slice("moving", 2, 2),
        # a cluster-scoped slice (no node) is nobody's pool.
        {"spec": {"pool": {"name": "x", "generation": 1, "resourceSliceCount": 1}}},
    ]
    assert complete_pools(slices) == {"a100-mig", "h100-dyn"}


@pytest.mark.parametrize(("meta", "field"), [
    ({"name": "../nodes"}, "metadata.name"),
    ({"name": "a/b"}, "metadata.name"),
    ({"name": ".."}, "metadata.name"),
    ({"name": "x%2F"}, "metadata.name"),
    ({"name": "ok", "namespace": "../kube-system"}, "metadata.namespace"),
])
def test_apply_refuses_a_name_that_is_no_path_segment(meta: dict, field: str) -> None:
    """The client puts names into the request URL unescaped: refused before any request (the
    client here points at a closed port, so reaching the network would fail otherwise)."""
    from kubernetes import client

    from fakegpu.errors import InvalidInput

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    with pytest.raises(InvalidInput, match=rf"ConfigMap .*: {field} .* must not"):
        kubeapi.apply(api, [obj], namespace="default")
    assert kubeapi.path_segment_problem("system:controller:x") == ""  # RBAC names stay valid


@pytest.mark.parametrize(("version", "minor"), [
    ("v1.35.4", 35), ("v1.38.0-beta.0", 38), ("v1.34.4+k3s1", 34), ("", None), ("garbage", None)])
def test_a_nodes_kubelet_minor(version: str, minor: int | None) -> None:
    assert kubeapi.kubelet_minor({"status": {"nodeInfo": {"kubeletVersion": version}}}) == minor
