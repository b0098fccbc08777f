"""The plugin image is built once per process and version: a session's second kind cluster
reuses the first one's image instead of running `pip wheel` of the tree again.

The build itself (`pip wheel`, `docker build`) is replaced here: what is tested is only
`image.build`'s choice between reusing and building (the real build is tested with Docker in
test_plugin_image.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from fakegpu.cluster.kind import image, rootfs

DOCKER = Path("/usr/bin/docker")


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], set[str]]:
    """(versions built, in order; image references Docker holds)."""
    built: list[str] = []
    present: set[str] = set()

    def fake_build(docker: Path, console: Console) -> image.PluginImage:
        ref = f"{image.IMAGE_REPO}:{len(built)}"
        built.append("")
        present.add(ref)
        return image.PluginImage(ref, "base")

    monkeypatch.setattr(image, "_built", {})
    monkeypatch.setattr(image, "_build", fake_build)
    monkeypatch.setattr(rootfs, "image_present", lambda docker, ref: ref in present)
    return built, present


def test_a_second_cluster_reuses_the_image(builds: tuple[list[str], set[str]]) -> None:
    built, _ = builds
    first = image.build(DOCKER)
    assert image.build(DOCKER) == first
    assert built == [""]


def test_an_image_gone_from_docker_is_built_again(builds: tuple[list[str], set[str]]) -> None:
    built, present = builds
    first = image.build(DOCKER)
    present.clear()  # e.g. removed by hand, or another Docker data root
    again = image.build(DOCKER)
    assert again != first and built == ["", ""]
