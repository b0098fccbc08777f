"""The plugin image is built once per source state, whatever process asks: a second kind
cluster, another xdist worker or a later ``cluster up`` of an unchanged tree loads the first
one's image instead of running `pip wheel` of the tree again; a changed source builds anew.

The build itself (`pip wheel`, `docker build`) is replaced here: what is tested is only
`image.build`'s choice between reusing and building, and the source digest it keys on (the
real build is tested with Docker in test_plugin_image.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from fakegpu import paths
from fakegpu.cluster.kind import image, rootfs, wheelhouse

DOCKER = Path("/usr/bin/docker")


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[list[str], set[str]]:
    """(bases built on, in order; image references Docker holds), with a cache of its own."""
    built: list[str] = []
    present: set[str] = set()

    def fake_build(docker: Path, console: Console, base: str) -> image.PluginImage:
        ref = f"{image.IMAGE_REPO}:{len(built)}"
        built.append(base)
        present.add(ref)
        return image.PluginImage(ref, base)

    monkeypatch.setenv("FAKEGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(image, "_build", fake_build)
    monkeypatch.setattr(image, "check_inputs", lambda: None)
    monkeypatch.setattr(image, "choose_base", lambda docker, console: "base")
    monkeypatch.setattr(rootfs, "image_present", lambda docker, ref: ref in present)
    return built, present


def test_a_second_cluster_reuses_the_image(builds: tuple[list[str], set[str]]) -> None:
    built, _ = builds
    first = image.build(DOCKER)
    assert image.build(DOCKER) == first
    assert built == ["base"]


def test_another_process_reuses_the_image(builds: tuple[list[str], set[str]]) -> None:
    """The memo is in the cache, not the process: another worker or a later command finds it."""
    built, _ = builds
    first = image.build(DOCKER)
    [memo] = (paths.cache_dir() / "kind" / "plugin-images").iterdir()
    assert memo.read_text().strip() == first.ref
    assert image.build(DOCKER) == first and built == ["base"]


def test_an_image_gone_from_docker_is_built_again(builds: tuple[list[str], set[str]]) -> None:
    built, present = builds
    first = image.build(DOCKER)
    present.clear()  # e.g. removed by hand, or another Docker data root
    again = image.build(DOCKER)
    assert again != first and built == ["base", "base"]


def test_a_changed_source_builds_anew_and_forgets_the_old_memo(
        builds: tuple[list[str], set[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    built, _ = builds
    first = image.build(DOCKER)
    monkeypatch.setattr(wheelhouse, "source_digest", lambda: "another tree")
    second = image.build(DOCKER)
    assert second != first and built == ["base", "base"]
    assert [m.read_text().strip() for m in
            (paths.cache_dir() / "kind" / "plugin-images").iterdir()] == [second.ref]


def _digest_of(root: Path) -> str:
    # A fresh interpreter importing fakegpu from ``root``, so source_checkout() is that tree.
    out = subprocess.run(
        [sys.executable, "-c", "from fakegpu.cluster.kind import wheelhouse; "
         "print(wheelhouse.source_digest())"],
        cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_digest_follows_sources_not_what_a_build_makes(tmp_path: Path) -> None:
    """A copy of the tree: editing a source changes the digest; what a build writes into the
    package directory (the library, byte code, gRPC stubs) does not."""
    repo = Path(wheelhouse.__file__).resolve().parents[3]
    tree = tmp_path / "tree"
    shutil.copytree(repo / "fakegpu", tree / "fakegpu",
                    ignore=shutil.ignore_patterns("__pycache__", "lib", "bin", "*_pb2*.py"))
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copyfile(repo / name, tree / name)
    (tree / ".git").mkdir()  # what marks a source checkout
    before = _digest_of(tree)
    (tree / "fakegpu" / "nvml" / "lib").mkdir()
    (tree / "fakegpu" / "nvml" / "lib" / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    (tree / "fakegpu" / "kubeletplugin" / "proto" / "dra_v1_pb2.py").write_text("# made\n")
    assert _digest_of(tree) == before
    source = tree / "fakegpu" / "nvml" / "csrc" / "store.c"
    source.write_text(source.read_text() + "\n/* edited */\n")
    assert _digest_of(tree) != before
