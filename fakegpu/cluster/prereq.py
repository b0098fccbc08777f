"""Which host prerequisites of a cluster provider are missing (the providers' knowledge: the
test kit and the pytest plugin ask here rather than know the providers themselves).

Split in two so the decision is testable without changing the host: ``probe_host`` gathers
facts (root? Go? cached binaries? a reachable Docker daemon?) and ``missing_prerequisites`` is
a pure function of those facts. An e2e suite may skip only for what this module reports;
everything else that stops a cluster from coming up is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fakegpu.cluster import PROVIDERS, hostcheck


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


def probe_host(provider: str, k8s_version: str | None) -> HostFacts:
    """The facts ``missing_prerequisites`` needs, read from this host now."""
    return HostFacts(
        is_root=os.geteuid() == 0,
        go=hostcheck.go_toolchain(),
        binaries_cached=hostcheck.binaries_need_no_build(k8s_version),
        # Only ask Docker when it matters: `docker info` can take seconds to time out.
        docker=hostcheck.kind_docker_problem() if provider == "kind" else None,
    )

