"""The e2e skip decision: a pure function of host facts, plus the probe on this real host."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cluster.hostcheck import docker_problem
from fakegpu.cluster.prereq import (
    HostFacts,
    missing_prerequisites,
    probe_host,
)

ALL_THERE = HostFacts(is_root=True, go="/usr/local/go/bin/go", binaries_cached=False, docker=None)


def test_nothing_missing_when_root_with_go() -> None:
    assert missing_prerequisites("embedded", ALL_THERE) == []
    assert missing_prerequisites("kind", ALL_THERE) == []


def test_cached_binaries_stand_in_for_go() -> None:
    facts = HostFacts(is_root=True, go=None, binaries_cached=True, docker=None)
    assert missing_prerequisites("embedded", facts) == []


def test_no_go_and_no_cache_is_missing_for_both_providers() -> None:
    facts = HostFacts(is_root=True, go=None, binaries_cached=False, docker=None)
    for provider in ("embedded", "kind"):
        (only,) = missing_prerequisites(provider, facts)
        assert "no Go toolchain" in only and "cached" in only


def test_embedded_needs_root_kind_does_not() -> None:
    facts = HostFacts(is_root=False, go="/usr/bin/go", binaries_cached=False, docker=None)
    (only,) = missing_prerequisites("embedded", facts)
    assert "root" in only
    assert missing_prerequisites("kind", facts) == []


def test_kind_needs_docker_and_names_why() -> None:
    facts = HostFacts(is_root=True, go="/usr/bin/go", binaries_cached=False,
                      docker="`docker info` failed: cannot connect")
    (only,) = missing_prerequisites("kind", facts)
    assert "Docker daemon" in only and "cannot connect" in only
    # The embedded provider does not use Docker at all.
    assert missing_prerequisites("embedded", facts) == []


def test_every_missing_thing_is_listed() -> None:
    facts = HostFacts(is_root=False, go=None, binaries_cached=False, docker="`docker` not found")
    assert len(missing_prerequisites("embedded", facts)) == 2
    assert len(missing_prerequisites("kind", facts)) == 2


def test_unknown_provider_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        missing_prerequisites("podman", ALL_THERE)


def test_docker_problem_names_an_unreachable_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A socket path nothing listens on: the daemon is truly unreachable for this probe.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    problem = docker_problem()
    assert problem is not None
    assert "docker" in problem


def test_probe_reads_this_host() -> None:
    import os
    import shutil

    facts = probe_host("embedded", None)
    assert facts.is_root == (os.geteuid() == 0)
    assert (facts.go is not None) == (
        shutil.which("go") is not None or os.access("/usr/local/go/bin/go", os.X_OK)
        or os.access("/usr/lib/go/bin/go", os.X_OK))
    # Docker is only asked about for the kind provider.
    assert facts.docker is None
