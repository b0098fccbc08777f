"""``fakegpu bandwidth run -f``: the manifest is untrusted input, refused in one line (exit 2)
before any cluster is looked up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cli.bandwidth import _manifest
from fakegpu.testkit import k8s

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gb200-bandwidth.yaml"
# 9 levels of 9 aliases: about 1 KB that PyYAML expands into 9**9 values (MemoryError).
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]\n" for k in range(1, 9))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "bandwidth", "run", "--cluster",
                           "nope", "--out", "/tmp/never.json", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_example_reads_as_before() -> None:
    assert _manifest(EXAMPLE) == k8s.load_manifests(EXAMPLE)


@pytest.mark.parametrize(("content", "message"), [
    (BOMB, "alias bomb"),
    ("apiVersion: v1\nkind: !!python/name:os.system Pod\nmetadata: {name: x}\n", "YAML tag"),
    ("- apiVersion: v1\n", "document 1: expected a Kubernetes object"),
    ("apiVersion: v1\nkind: Pod\nmetadata: [x]\n", "document 1: expected a Kubernetes object"),
    ("---\n---\n", "no Kubernetes object"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n---\n{1: 2}\n", "not a string"),
])
def test_a_bad_manifest_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(content)
    assert len(BOMB) < 1100
    out = _run("-f", str(manifest))
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"fakegpu: {manifest}: ") and message in line


def test_a_fifo_manifest_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    out = _run("-f", str(fifo))
    assert out.returncode == 2 and "not a regular file" in out.stderr
