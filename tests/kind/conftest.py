"""Fixtures for the kind tests: Docker (ours or the user's) and the plugin image.

Tests needing Docker skip only where Docker truly cannot be had (no daemon, and no root to start
one); that reason is printed in capitals in the summary. Anywhere else, a failure to get Docker
or to build the image is an error of the test, never a skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def docker_host() -> object:
    from fakegpu.cluster.kind import dockerhost

    reason = dockerhost.unavailable_reason()
    if reason is not None:
        pytest.skip(f"DOCKER IS NOT AVAILABLE, KIND IMAGE TESTS DID NOT RUN: {reason}")
    return dockerhost.ensure()


@pytest.fixture(scope="session")
def plugin_image(docker_host: object) -> str:
    from fakegpu.cluster.kind import image
    from fakegpu.cluster.kind.dockerhost import DockerHost

    assert isinstance(docker_host, DockerHost)
    return image.build(docker_host.docker).ref
