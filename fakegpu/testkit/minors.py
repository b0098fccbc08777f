"""Skipping a suite on a Kubernetes minor without the feature it shows, saying which minor."""

from __future__ import annotations

import pytest

from fakegpu.cluster import featuregates
from fakegpu.cluster.provider import ClusterInfo


def skip_without(cluster: ClusterInfo, gate: str, what: str) -> None:
    """Skip, naming the minor needed, when ``cluster``'s minor lacks ``gate`` among the DRA
    gates fakegpu turns on (featuregates.py)."""
    first = featuregates.first_minor(gate)
    if featuregates.parse_minor(cluster.k8s_version) < first:
        pytest.skip(f"MISSING PREREQUISITE: {what} need Kubernetes 1.{first} or newer "
                    f"({gate}); this cluster runs {cluster.k8s_version}")


def known_bug_before(request: pytest.FixtureRequest, cluster: ClusterInfo, fixed: int,
                     why: str) -> None:
    """On a minor before ``1.<fixed>``, where Kubernetes itself gets this wrong (``why``
    names the upstream issue), expect the test to fail: it still runs and asserts, and a
    pass there fails the run (strict), so a backport of the fix is noticed."""
    if featuregates.parse_minor(cluster.k8s_version) < fixed:
        request.applymarker(pytest.mark.xfail(
            reason=f"KNOWN KUBERNETES BUG before 1.{fixed}: {why}; this cluster runs "
                   f"{cluster.k8s_version}", strict=True))
