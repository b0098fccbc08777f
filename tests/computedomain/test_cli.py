"""``fakegpu computedomain controller/plugin/daemon`` on bad input and without an apiserver:
one line naming what is wrong, the documented exit code (2 input, 1 unreachable), no
traceback. Each runs the real command in a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

DAEMON = ["daemon", "--domain-uid", "u", "--node", "n", "--pod-namespace", "ns",
          "--pod-name", "p"]
CONTROLLER = ["controller", "--daemon-image", "img:1"]
PLUGIN = ["plugin", "--node", "n0"]


def fakegpu(tmp_path: Path, *args: str, prefix: Sequence[str] = ()
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "fakegpu", "computedomain", *args],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "KUBECONFIG": str(tmp_path / "none")})


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def dirs(command: list[str], root: Path) -> list[str]:
    """The plugin's directories under ``root`` (a short one: its sockets go there), never the
    host's /var/lib/kubelet; nothing for the other commands."""
    return ["--kubelet-root", str(root / "kubelet"), "--cdi-root",
            str(root / "cdi")] if command is PLUGIN else []


def down_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of an apiserver that is not there (a port nothing listens on)."""
    path = tmp_path / "down.yaml"
    path.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
""")
    return path


@pytest.mark.parametrize("command", [CONTROLLER, PLUGIN, DAEMON], ids=lambda c: c[0])
def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path: Path, short_tmp: Path,
                                                     command: list[str]) -> None:
    out = fakegpu(tmp_path, *command, *dirs(command, short_tmp), "--kubeconfig",
                  str(tmp_path / "nope.yaml"))
    assert out.returncode == 2, out.stderr
    assert f"--kubeconfig {tmp_path / 'nope.yaml'}: no such file" in one_line(out)


@pytest.mark.parametrize("text", ["{{{", "- a\n- b\n", "apiVersion: v1\nkind: Config\n",
                                  "\xff\xfe"], ids=["yaml", "list", "empty", "binary"])
def test_a_broken_kubeconfig_is_one_line_and_exit_2(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(text.encode("latin-1"))
    out = fakegpu(tmp_path, *CONTROLLER, "--kubeconfig", str(bad))
    assert out.returncode == 2, out.stderr
    assert f"--kubeconfig {bad}: not a usable kubeconfig" in one_line(out)


@pytest.mark.parametrize("command", [CONTROLLER, PLUGIN, DAEMON], ids=lambda c: c[0])
def test_an_apiserver_that_is_down_is_one_line_and_exit_1(tmp_path: Path, short_tmp: Path,
                                                          command: list[str]) -> None:
    config = down_kubeconfig(tmp_path)
    out = fakegpu(tmp_path, *command, *dirs(command, short_tmp), "--kubeconfig", str(config))
    assert out.returncode == 1, out.stderr
    assert f"cannot reach the apiserver of --kubeconfig {config}" in one_line(out)


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0"])
def test_a_resync_that_is_no_positive_number_is_refused(tmp_path: Path, value: str) -> None:
    out = fakegpu(tmp_path, *CONTROLLER, f"--resync={value}")
    assert out.returncode == 2, out.stderr
    assert "--resync" in one_line(out) and "number of seconds" in one_line(out)


@pytest.mark.parametrize(("root", "why"), [
    ("relative/kubelet", "is a relative path, expected an absolute one"),
    ("/proc/fakegpu-kubelet", "cannot create directory /proc/fakegpu-kubelet"),
    ("/dev/null/kubelet", "cannot create directory /dev/null/kubelet/plugins_registry: Not a "
                          "directory"),
])
def test_the_plugin_refuses_a_kubelet_root_it_cannot_use(tmp_path: Path, root: str,
                                                         why: str) -> None:
    """The GPU plugin's check (plugin run), before the apiserver is asked: none runs here."""
    out = fakegpu(tmp_path, *PLUGIN, "--kubelet-root", root, "--cdi-root",
                  str(tmp_path / "cdi"), "--kubeconfig", str(down_kubeconfig(tmp_path)))
    assert out.returncode == 2, out.stderr
    line = one_line(out)
    assert line.startswith("fakegpu: --kubelet-root: ") and why in line, line


def test_the_plugin_needs_only_its_own_directories_of_the_kubelet_root(
        tmp_path: Path, short_tmp: Path) -> None:
    """As in the chart's pod: the kubelet root read-only, only plugins_registry/ and
    plugins/ writable (mounted from the node). The check passes there (the apiserver is
    next); without those two it names the one it cannot make. Run without the capability
    that lets root write anywhere, so a read-only directory is one for this test too."""
    root = short_tmp / "kubelet"
    root.mkdir()
    root.chmod(0o555)
    as_user = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] \
        if os.geteuid() == 0 else []
    args = [*PLUGIN, *dirs(PLUGIN, short_tmp), "--kubeconfig", str(down_kubeconfig(tmp_path))]
    refused = fakegpu(tmp_path, *args, prefix=as_user)
    assert refused.returncode == 2, refused.stderr
    assert one_line(refused) == (f"fakegpu: --kubelet-root: cannot create directory "
                                 f"{root}/plugins_registry: Permission denied")
    root.chmod(0o755)
    for sub in ("plugins_registry", "plugins"):
        (root / sub).mkdir()
    root.chmod(0o555)
    out = fakegpu(tmp_path, *args, prefix=as_user)
    assert out.returncode == 1, out.stderr
    assert "cannot reach the apiserver" in one_line(out)
    root.chmod(0o755)  # short_tmp's cleanup


@pytest.mark.parametrize("namespace", ["", "../x", "a/b"])
def test_the_plugin_refuses_a_namespace_that_is_no_name(tmp_path: Path, short_tmp: Path,
                                                        namespace: str) -> None:
    out = fakegpu(tmp_path, *PLUGIN, *dirs(PLUGIN, short_tmp), "--namespace", namespace,
                  "--kubeconfig", str(down_kubeconfig(tmp_path)))
    assert out.returncode == 2, out.stderr
    assert one_line(out).startswith(f"fakegpu: --namespace {namespace!r} ")


def test_an_apiserver_that_answers_late_is_asked_again_then_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that takes the connection and never answers (a loaded apiserver): probed
    again until LATE_ANSWER_S, then the same one line; one that refuses is not asked twice."""
    import socket
    import threading

    from fakegpu.computedomain import connect
    from fakegpu.errors import FakegpuError

    monkeypatch.setattr(connect, "PROBE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(connect, "LATE_ANSWER_S", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    config = tmp_path / "late.yaml"
    config.write_text(down_kubeconfig(tmp_path).read_text().replace(
        "https://127.0.0.1:1", f"http://127.0.0.1:{server.getsockname()[1]}"))
    try:
        with pytest.raises(FakegpuError, match="cannot reach the apiserver of --kubeconfig"):
            connect.connect(config)
        assert len(accepted) >= 3  # asked again while the deadline had not passed
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    with pytest.raises(FakegpuError, match="cannot reach"):
        connect.connect(down_kubeconfig(tmp_path))  # refused: at once, no second probe
