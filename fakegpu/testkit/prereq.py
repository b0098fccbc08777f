"""Which host prerequisites of a cluster provider are missing.

Split in two so the decision is testable without changing the host: ``probe_host`` gathers
facts (root? Go? cached binaries? a reachable Docker daemon?) and ``missing_prerequisites`` is
a pure function of those facts. An e2e suite may skip only for what this module reports;
everything else that stops a cluster from coming up is an error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

PROVIDERS = ("embedded", "kind")


@dataclass(frozen=True)
class HostFacts:
    is_root: bool
    go: str | None  # path of the go command, None when absent
    binaries_cached: bool  # the cluster binaries for the wanted version need no build
    docker: str | None  # None when a Docker daemon answers, else why it does not


def missing_prerequisites(provider: str, facts: HostFacts) -> list[str]:
    """One sentence per missing prerequisite of ``provider`` (empty: nothing is missing)."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    missing: list[str] = []
    # Both providers run binaries built from the Go module proxy: Go or a warm cache will do.
    if facts.go is None and not facts.binaries_cached:
        missing.append("no Go toolchain (`go` not found) and no cached Kubernetes binaries "
                       "for this version to run instead")
    if provider == "embedded" and not facts.is_root:
        # Kubelets, container runtimes, mounts and cgroups: nothing of this works unprivileged.
        missing.append("the embedded provider must run as root (it starts kubelets and "
                       "container runtimes on this host)")
    if provider == "kind" and facts.docker is not None:
        missing.append(f"the kind provider needs a reachable Docker daemon: {facts.docker}")
    return missing


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


def find_go() -> str | None:
    # The same search the cluster build uses, so "Go is missing" means the build would fail.
    from fakegpu.cluster.gobuild import Go
    from fakegpu.errors import MissingPrerequisite

    try:
        return str(Go.find().executable)
    except MissingPrerequisite:
        return None


def binaries_cached(k8s_version: str | None) -> bool:
    """Whether the cluster binaries of ``k8s_version`` (None: the default) need no Go build.

    True when the cache holds all of them, or when the user names a directory of prebuilt
    ones (FAKEGPU_BIN_DIR), which the provider copies instead of building.
    """
    from fakegpu.cluster import binaries

    if os.environ.get(binaries.BIN_DIR_ENV):
        return True
    return binaries.cached(binaries.resolve_version(k8s_version)) is not None


def probe_host(provider: str, k8s_version: str | None) -> HostFacts:
    """The facts ``missing_prerequisites`` needs, read from this host now."""
    return HostFacts(
        is_root=os.geteuid() == 0,
        go=find_go(),
        binaries_cached=binaries_cached(k8s_version),
        # Only ask Docker when it matters: `docker info` can take seconds to time out.
        docker=kind_docker_problem() if provider == "kind" else None,
    )


def kind_docker_problem() -> str | None:
    """Why the kind provider cannot have Docker here, or None.

    No daemon answering is not yet a reason: as root the provider installs and starts its own
    (fakegpu.cluster.kind.dockerhost). A daemon the user named with DOCKER_HOST is theirs, and
    we never start one in its place, so that one not answering is the reason.
    """
    problem = docker_problem()
    if problem is None or os.environ.get("DOCKER_HOST"):
        return problem
    from fakegpu.cluster.kind import dockerhost

    return dockerhost.unavailable_reason()
