"""What this host offers the cluster providers, asked without bringing anything up.

Public on purpose: the test kit decides from these answers whether an e2e suite may skip
(``fakegpu.cluster.prereq``), so it must not reach into the providers' internals. Each answer
comes from the code the providers themselves run, so "missing" here means their bring-up
would fail for the same reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def go_toolchain() -> str | None:
    """The ``go`` the cluster binaries would be built with, or None when there is none."""
    from fakegpu.cluster.artifacts.gobuild import Go
    from fakegpu.errors import MissingPrerequisite

    try:
        return str(Go.find().executable)
    except MissingPrerequisite:
        return None


def binaries_need_no_build(k8s_version: str | None) -> bool:
    """Whether the cluster binaries of ``k8s_version`` (None: the default) need no Go build.

    True when the cache holds all of them, or when the user names a directory of prebuilt
    ones (FAKEGPU_BIN_DIR), which the providers copy instead of building.
    """
    from fakegpu.cluster.artifacts import binaries

    if os.environ.get(binaries.BIN_DIR_ENV):
        return True
    return binaries.cached(binaries.resolve_version(k8s_version)) is not None


def docker_problem(timeout: float = 20.0) -> str | None:
    """None when ``docker info`` reaches a daemon (honouring DOCKER_HOST), else the reason."""
    docker = shutil.which("docker")
    if docker is None:
        return "`docker` not found on PATH"
    try:
        out = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"],
                             capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {timeout:.0f}s"
    if out.returncode != 0 or not out.stdout.strip():
        detail = (out.stderr.strip().splitlines() or ["no server version"])[-1]
        return f"`docker info` failed: {detail}"
    return None


def kind_docker_problem() -> str | None:
    """Why the kind provider cannot have Docker here, or None.

    No daemon answering is not yet a reason: as root the provider installs and starts its own
    (fakegpu.cluster.kind.dockerhost). A daemon the user named with DOCKER_HOST is theirs, and
    the provider never starts one in its place, so that one not answering is the reason.
    """
    problem = docker_problem()
    if problem is None or os.environ.get("DOCKER_HOST"):
        return problem
    from fakegpu.cluster.kind import dockerhost

    return dockerhost.unavailable_reason()
