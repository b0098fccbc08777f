"""``fakegpu computedomain controller/plugin/daemon`` on bad input and without an apiserver:
one line naming what is wrong, the documented exit code (2 input, 1 unreachable), no
traceback. Each runs the real command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DAEMON = ["daemon", "--domain-uid", "u", "--node", "n", "--pod-namespace", "ns",
          "--pod-name", "p"]
CONTROLLER = ["controller", "--daemon-image", "img:1"]
PLUGIN = ["plugin", "--node", "n0"]


def fakegpu(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "computedomain", *args],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "KUBECONFIG": str(tmp_path / "none")})


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


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
def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path: Path,
                                                     command: list[str]) -> None:
    out = fakegpu(tmp_path, *command, "--kubeconfig", str(tmp_path / "nope.yaml"))
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
def test_an_apiserver_that_is_down_is_one_line_and_exit_1(tmp_path: Path,
                                                          command: list[str]) -> None:
    config = down_kubeconfig(tmp_path)
    extra = ["--kubelet-root", str(tmp_path / "kubelet"), "--cdi-root",
             str(tmp_path / "cdi")] if command is PLUGIN else []
    out = fakegpu(tmp_path, *command, *extra, "--kubeconfig", str(config))
    assert out.returncode == 1, out.stderr
    assert f"cannot reach the apiserver of --kubeconfig {config}" in one_line(out)


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0"])
def test_a_resync_that_is_no_positive_number_is_refused(tmp_path: Path, value: str) -> None:
    out = fakegpu(tmp_path, *CONTROLLER, f"--resync={value}")
    assert out.returncode == 2, out.stderr
    assert "--resync" in one_line(out) and "number of seconds" in one_line(out)
