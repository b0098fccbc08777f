"""The peers fakegpu is benchmarked against, built from their own source OUTSIDE this tree.

A peer's source is a git directory (by default the machine's snapshot under /work/.mirror)
exported to a temporary directory and built there with its own build; the result is cached
under fakegpu's cache directory per source commit (never in the tree, never committed). When a
peer cannot be built, the answer says why, and the benchmark reports it so: no estimate.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu import paths

MIRROR = Path("/work/.mirror")
EXAMPLE_DRIVER_GIT = MIRROR / "kubernetes-sigs+dra-example-driver" / "repo"
NVML_MOCK_GIT = MIRROR / "NVIDIA+k8s-test-infra" / "repo"


@dataclass
class Peer:
    name: str
    path: Path | None  # the built artifact; None: not built, see `reason`
    reason: str = ""
    source: str = ""
    env: dict[str, str] = field(default_factory=dict)


class NotBuilt(Exception):
    """A peer could not be built here; the message says why, in one line."""


def export(git_dir: Path, into: Path, repo: str) -> str:
    """Export HEAD of ``git_dir`` into ``into``; the label ``repo@commit``."""
    if not git_dir.exists():
        raise NotBuilt(f"no source: {git_dir} is missing")
    commit = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return f"{repo}@{commit[:10]}"


def _tail(out: subprocess.CompletedProcess[str]) -> str:
    return (out.stderr.strip().splitlines() or out.stdout.strip().splitlines()
            or ["(no output)"])[-1]


def cached(name: str, git_dir: Path, repo: str, artifact: str,
           build: Callable[[Path, Path], None]) -> Peer:
    """The peer ``name`` from ``git_dir``: ``artifact`` in its cache directory, built there by
    ``build(source tree, cache staging dir)`` when missing."""
    with tempfile.TemporaryDirectory(prefix=f"fg-peer-{name}-") as tmp:
        try:
            label = export(git_dir, Path(tmp) / "src", repo)
        except (NotBuilt, OSError, subprocess.CalledProcessError) as exc:
            return Peer(name, None, reason=str(exc).splitlines()[0])
        slot = paths.cache_dir() / "bench" / (
            f"{name}-{hashlib.sha256(label.encode()).hexdigest()[:12]}")
        if not (slot / artifact).exists():
            if shutil.which("go") is None:
                return Peer(name, None, reason="no Go toolchain on PATH", source=label)
            print(f"building {name} from {label} outside the tree (minutes when cold) ...",
                  flush=True)
            slot.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=slot.parent, prefix=".staging-"))
            try:
                build(Path(tmp) / "src", staging)
            except NotBuilt as exc:
                shutil.rmtree(staging, ignore_errors=True)
                return Peer(name, None, reason=str(exc), source=label)
            shutil.rmtree(slot, ignore_errors=True)
            staging.rename(slot)
        return Peer(name, slot / artifact, source=label)


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise NotBuilt(f"{what} failed: {_tail(out)}")


def nvml_mock(git_dir: Path = NVML_MOCK_GIT) -> Peer:
    """NVIDIA's mock NVML (k8s-test-infra, pkg/gpu/mocknvml: a Go c-shared library) built with
    its own Makefile. NO_PADDING=1: the padding only grows the file to a real driver's size.
    Configured with its own H100 profile (8 GPUs), as fakegpu runs dgx-h100."""
    config = "configs/mock-nvml-config-h100.yaml"

    def build(src: Path, out: Path) -> None:
        mock = src / "pkg" / "gpu" / "mocknvml"
        if not (mock / "Makefile").exists():
            raise NotBuilt(f"{mock.relative_to(src)} has no Makefile")
        _run(["make", "-C", str(mock), "NO_PADDING=1"], src, "make (nvml-mock)")
        built = sorted(mock.glob("libnvidia-ml.so.*.*"))
        if not built:
            raise NotBuilt("make built no libnvidia-ml.so.<version>")
        shutil.copy2(built[0], out / "libnvidia-ml.so.1")
        shutil.copy2(mock / config, out / "config.yaml")

    peer = cached("nvml-mock", git_dir, "NVIDIA/k8s-test-infra", "libnvidia-ml.so.1", build)
    if peer.path is not None:
        peer.env = {"MOCK_NVML_CONFIG": str(peer.path.parent / "config.yaml")}
    return peer


def example_driver(git_dir: Path = EXAMPLE_DRIVER_GIT) -> Peer:
    """The upstream DRA example driver's kubelet plugin (kubernetes-sigs/dra-example-driver,
    cmd/dra-example-kubeletplugin), built with the local Go toolchain."""

    def build(src: Path, out: Path) -> None:
        _run(["go", "build", "-o", str(out / "dra-example-kubeletplugin"),
              "./cmd/dra-example-kubeletplugin"], src, "go build (example driver)")

    return cached("dra-example-driver", git_dir, "kubernetes-sigs/dra-example-driver",
                  "dra-example-kubeletplugin", build)
