"""``fakegpu conformance`` as a tool: its own pytest settings whatever directory it is run
from, a preflight GET /version, and pytest's exit codes mapped to fakegpu's."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cli import main
from fakegpu.cli.conformance import exit_code, suite_env
from fakegpu.testkit import k8s
from fakegpu.testkit.wait import NotYet, wait_for


class _Server(ThreadingHTTPServer):
    body = b""
    content_type = "application/json"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/version":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)


def _serve(body: bytes, content_type: str) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.body, server.content_type = body, content_type
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def kubernetes_like() -> Iterator[str]:
    yield from _serve(json.dumps({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
                                 ).encode(), "application/json")


@pytest.fixture
def web_page() -> Iterator[str]:
    yield from _serve(b"<html><body>hello</body></html>", "text/html")


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_cluster_is_one_line_exit_3(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{_closed_port()}")
    code = main(["conformance", "--kubeconfig", str(kubeconfig), "--driver", "d"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert len(err) == 1 and "is not usable" in err[0] and "/version" in err[0], err


def test_a_server_that_is_not_kubernetes_is_one_line_exit_3(
        tmp_path: Path, web_page: str, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kc", web_page)
    code = main(["conformance", "--kubeconfig", str(kubeconfig), "--driver", "d"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert len(err) == 1 and "is not a Kubernetes apiserver" in err[0], err


def test_a_kubeconfig_the_client_cannot_use_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    code = main(["conformance", "--kubeconfig", str(kubeconfig), "--driver", "d"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("fakegpu: --kubeconfig: "), err


def test_the_callers_ini_conftest_and_pytest_env_are_not_inherited(
        tmp_path: Path, kubernetes_like: str) -> None:
    project = tmp_path / "vendor-repo"
    project.mkdir()
    # What broke the run inside a vendor's repository: exit 4 (no pytest-cov here), or the
    # conftest's error.
    (project / "pytest.ini").write_text("[pytest]\naddopts = --cov=vendor --no-such-option\n")
    (project / "conftest.py").write_text("raise RuntimeError('the caller conftest was loaded')\n")
    kubeconfig = _kubeconfig(project / "kc", kubernetes_like)
    env = {**os.environ, "PYTEST_ADDOPTS": "--cov=vendor", "PYTEST_PLUGINS": "no_such_plugin"}
    # -k matching no check: pytest starts, collects the suite and runs nothing (exit 5 -> 1).
    res = subprocess.run([sys.executable, "-m", "fakegpu", "conformance", "--kubeconfig",
                          str(kubeconfig), "--driver", "d", "-k", "no_check_is_named_this"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "no conformance check ran" in res.stderr
    assert "caller conftest" not in out and "--cov" not in out
    assert "deselected" in res.stdout  # the suite was collected: the checks exist


def test_the_suites_environment_drops_the_callers_pytest_settings() -> None:
    env = suite_env({"PATH": "/bin", "PYTEST_ADDOPTS": "--cov=x", "PYTEST_PLUGINS": "p"})
    assert env == {"PATH": "/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


@pytest.mark.parametrize(("pytest_code", "ours", "says"), [
    (0, 0, None), (1, 1, None),
    (2, 130, "interrupted"),
    (3, 1, "internal error"),
    (4, 2, "usage error"),
    (5, 1, "no conformance check ran"),
    (77, 1, "exit code 77"),
])
def test_pytests_exit_codes_map_to_fakegpus(pytest_code: int, ours: int, says: str | None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(pytest_code) == ours
    err = capsys.readouterr().err
    assert (says in err) if says else err == ""


@pytest.mark.integration
def test_a_stopped_run_still_writes_its_report(tmp_path: Path, bare_control_plane: Any) -> None:
    """SIGTERM (a CI job's timeout or cancel) in the middle of a check: the run ends as
    interrupted (130) and the report says so, with what it reached. A real control plane
    (controller-manager and scheduler too) without kubelets: the check's pod is accepted and
    never runs, so the stop lands while the check waits for it. (Without a controller-manager
    the pod was refused at once, no default ServiceAccount, and the check failed whenever the
    stop came a moment late: a clean-clone run, 2026-12-06.)"""
    with bare_control_plane(controllers=True) as cp:
        api = k8s.new_api_client(Path(cp.kubeconfig))
        core = kclient.CoreV1Api(api)
        before = {n.metadata.name for n in core.list_namespace().items}
        report = tmp_path / "report"
        run = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "conformance", "--kubeconfig", str(cp.kubeconfig),
             "--driver", "gpu.example.com", "--image", "busybox:local", "--report", str(report),
             "-k", "template_claim_prepared"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            # As a CI job started in the background (`cmd &`, nohup) runs it: SIGINT ignored,
            # which its pytest inherited, so the stop it forwards did nothing (two clean-clone
            # runs of 2026-12-07, the check running on for 180 s).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        try:
            def check_began() -> str:
                # The check's own (conf-...): the apiserver may still be making its system
                # namespaces (kube-node-lease) after `before` was read.
                new = {n.metadata.name for n in core.list_namespace().items
                       if n.metadata.name.startswith("conf-")} - before
                if not new:
                    raise NotYet("no namespace of the check yet")
                return new.pop()

            wait_for(check_began, what="the check to make its namespace", timeout=120)
            run.send_signal(signal.SIGTERM)
            # The interrupted check's namespace teardown still runs: its claims go only when
            # the namespace controller's next discovery round deletes them (up to the test
            # kit's 180 s; over 120 s in a clean-clone run at load 10), so 120 s was too short.
            out, _ = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
            api.close()
    assert run.returncode == 130, out
    text = (report / "conformance.md").read_text()
    assert "**The run was stopped before its end**" in text, text
    assert "| `template_claim_prepared`:" in text and "**not run**" in text, text
