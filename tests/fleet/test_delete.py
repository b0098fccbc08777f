"""``fleet delete`` counts what it deleted: against a real kube-apiserver (a refused delete is
no deleted node) and a server that is no Kubernetes (nothing was deleted there)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fakegpu.cli import main
from fakegpu.fleet import nodes
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def admin(bare_control_plane: Any) -> Iterator[client.ApiClient]:
    with bare_control_plane() as cp:
        c = kubeapi.connect(Path(cp.kubeconfig))
        yield c
        c.close()  # type: ignore[no-untyped-call]


def _node(name: str) -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name))


def _unprivileged(admin: client.ApiClient) -> client.ApiClient:
    """A client with a service account's token: RBAC grants it nothing, so deletes are 403."""
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(
        "default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    status = core.create_namespaced_service_account_token(
        "nobody", "default", client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[]))).status
    assert status is not None and status.token
    token = str(status.token)
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = admin.configuration.host, admin.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.retries = False
    return client.ApiClient(cfg)


def test_only_what_was_deleted_is_counted(admin: client.ApiClient) -> None:
    core = client.CoreV1Api(admin)
    for name in ("del-a", "del-b"):
        core.create_node(_node(name))
    assert nodes.delete(admin, ["del-a", "del-b", "del-never"]) == 2
    assert {"del-a", "del-b"}.isdisjoint(n["metadata"]["name"] for n in kubeapi.nodes(admin))
    assert nodes.delete(admin, ["del-a"]) == 0  # not there: nothing deleted, no error


def test_a_refused_delete_fails_and_deletes_nothing(admin: client.ApiClient) -> None:
    client.CoreV1Api(admin).create_node(_node("del-kept"))
    weak = _unprivileged(admin)
    try:
        with pytest.raises(errors.KubeError, match=r"HTTP 403") as got:
            nodes.delete(weak, ["del-kept"])
    finally:
        weak.close()  # type: ignore[no-untyped-call]
    assert got.value.status == 403  # the refusal's own status, for whoever decides on it
    assert "del-kept" in {n["metadata"]["name"] for n in kubeapi.nodes(admin)}


class _NotKubernetes(http.server.BaseHTTPRequestHandler):
    """An ordinary web server: every path is 404, every method answered in plain text."""

    def _answer(self) -> None:
        body = b"404 page not found\n"
        self.send_response(404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_DELETE = _answer

    def log_message(self, *_args: object) -> None:
        pass


def test_fleet_delete_against_a_server_that_is_no_kubernetes_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotKubernetes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"""\
apiVersion: v1
kind: Config
clusters: [{{name: web, cluster: {{server: "http://127.0.0.1:{server.server_port}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: web, context: {{cluster: web, user: u}}}}]
current-context: web
""")
        topology = FIXTURES
        fleet = next(p for p in sorted(topology.glob("*.yaml")) if "simulated: true" in
                     p.read_text())
        code = main(["fleet", "delete", "--kubeconfig", str(kubeconfig), "--topology",
                     str(fleet)])
    finally:
        server.shutdown()
    out, err = capsys.readouterr()
    assert code == 1
    assert "deleted" not in out
    assert "cannot list Nodes: HTTP 404" in err and len(err.splitlines()) == 1
